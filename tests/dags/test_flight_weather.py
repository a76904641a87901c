"""flight_weather runs end to end: both landers → spark-submit of the join → progress + lateness advice."""

from __future__ import annotations

import json
from pathlib import Path

import pendulum

REPO = Path(__file__).resolve().parents[2]


def _xcoms(run_id: str, dag_id: str) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return {
            (x.task_id, x.key): XComModel.deserialize_value(x)
            for x in session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_id))
        }


def test_one_dag_run_end_to_end(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    from watermark_ops.examples.flights.settings import job_locations

    dag = DagBag(dag_folder=str(REPO / "dags" / "flight_weather.py")).dags["flight_weather"]
    assert dag.max_active_runs == 1
    run = dag.test(logical_date=pendulum.datetime(2013, 1, 2, tz="America/New_York"))
    assert run.state == "success"
    xcoms = _xcoms(run.run_id, "flight_weather")
    assert xcoms[("land_flights", "return_value")]["records"] == 761
    assert xcoms[("land_weather", "return_value")]["records"] > 0
    batch_ids = xcoms[("collect_progress", "batch_ids")]
    assert batch_ids[0] == 0 and len(batch_ids) in (1, 2)
    checkpoint = Path(job_locations("flight_weather")["checkpoint"])
    offsets = json.loads((checkpoint / "offsets" / str(batch_ids[-1])).read_text().splitlines()[1])
    assert xcoms[("collect_progress", "last_watermark_ms")] == offsets["batchWatermarkMs"]
    assert offsets["conf"]["spark.sql.streaming.multipleWatermarkPolicy"] == "min"
    # Lateness advice for both inputs, and this run's drop rate, are in the run's XCom.
    lateness = xcoms[("collect_progress", "lateness")]
    assert len(lateness["inputs"]) == 2
    assert xcoms[("collect_progress", "drop_rate")] is not None
    audit = xcoms[("audit_checkpoint", "return_value")]
    assert audit["status"] == "ok" and audit["watermark_ms"] == offsets["batchWatermarkMs"]
