"""watermark_wait parses cheaply and hands its waiting to the triggerer (its real run is in test_deploy)."""

from __future__ import annotations

from pathlib import Path

DAGS = Path(__file__).resolve().parents[2] / "dags"


def test_one_deferrable_reached_sensor_with_a_form():
    from airflow.dag_processing.dagbag import DagBag

    from watermark_ops.airflow.sensors import WatermarkReachedSensor

    dag = DagBag(dag_folder=str(DAGS / "watermark_wait.py")).dags["watermark_wait"]
    (sensor,) = dag.tasks
    assert isinstance(sensor, WatermarkReachedSensor) and sensor.deferrable and not sensor.missing_ok
    assert sensor.timeout == 6 * 3600 and dag.schedule is None  # triggered by hand or through the REST API
    assert set(dag.params) == {"checkpoint", "target"}
    assert (sensor.checkpoint, sensor.target) == ("{{ params.checkpoint }}", "{{ params.target }}")
