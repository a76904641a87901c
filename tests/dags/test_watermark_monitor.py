"""watermark_monitor: parses cheaply, lists its checkpoints at run time (the registry plus the
configuration), evaluates them all in one task, maps only the alarms, alerts delivered to a real
HTTP server on 127.0.0.1. The same over 200 checkpoints: tests/dags/test_watermark_monitor_many.py."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from tests.watermark_ops import stall_fixtures as sf

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = REPO / "dags" / "watermark_monitor.py"


def _bag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAG_FILE))


def test_parses_without_reading_the_config(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(tmp_path / "does-not-exist.json"))
    bag = _bag()
    assert bag.import_errors == {}
    dag = bag.dags["watermark_monitor"]
    assert dag.timetable.expression == "*/5 * * * *"
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert dag.deadline is not None
    assert set(dag.task_dict) == {"watch", "alarm"}  # two tasks, whatever the number of checkpoints
    watch, alarm = dag.get_task("watch"), dag.get_task("alarm")
    assert watch.upstream_task_ids == set() and alarm.upstream_task_ids == {"watch"}
    assert alarm.partial_kwargs["map_index_template"] == "{{ checkpoint }}"
    assert watch.on_failure_callback and alarm.partial_kwargs["on_failure_callback"]
    from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY

    assert watch.inlets == [CHECKPOINT_REGISTRY]


def test_the_examples_config_gives_its_jobs_thresholds_and_landings(monkeypatch, tmp_path):
    from watermark_ops.airflow.config import configured_checkpoints
    from watermark_ops.examples.flights.settings import MONITOR_CONFIG

    monkeypatch.setenv("WATERMARK_OPS_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(MONITOR_CONFIG))
    monkeypatch.delenv("AIRFLOW__WATERMARK_OPS__CHECKPOINTS", raising=False)
    by_location = {e["checkpoint"]: e for e in configured_checkpoints()}
    flights = by_location[str(tmp_path / "checkpoints" / "flight_windows")]
    assert flights["missing_ok"] is True and flights["name"] == "flight_windows"
    assert flights["thresholds"]["max_lag"] is None and flights["thresholds"]["max_idle"] == "PT26H"
    assert flights["thresholds"]["stall_batches"] == 3  # from the defaults
    assert flights["dag_ids"] == ["flights_pipeline"] and flights["landings"] == [str(tmp_path / "landing" / "flights")]
    weather = by_location[str(tmp_path / "checkpoints" / "flight_weather")]
    assert weather["landings"] == [str(tmp_path / "landing" / "flights"), str(tmp_path / "landing" / "weather")]
    from watermark_ops.core.thresholds import Thresholds

    assert Thresholds(**flights["thresholds"]).max_idle == timedelta(hours=26)


@pytest.mark.parametrize("config, match", [
    ({"checkpoints": [{"checkpoint": "/a", "job": "flight_windows"}]}, r"checkpoints\[0\]: unknown keys \['job'\]"),
    ({"checkpoints": [{"checkpoint": "/a", "max_lag": "six hours"}]}, r"checkpoints\[0\] \(/a\): max_lag"),
    ({"checkpoints": [{"checkpoint": "/a", "max_lagg": "PT1H"}]}, r"checkpoints\[0\]: unknown keys \['max_lagg'\]"),
    ({"defaults": {"stall_batch": 3}}, r"defaults: unknown keys"),
    ("not json", r"cannot read the monitor config"),
])
def test_bad_config_names_the_file_and_entry(monkeypatch, tmp_path, config, match):
    from watermark_ops.airflow.config import configured_checkpoints

    path = tmp_path / "monitor.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(path))
    with pytest.raises(ValueError, match=rf"{path}: {match}"):
        configured_checkpoints()


def test_one_run_checks_every_checkpoint_and_alerts_on_alarms(airflow_db, spark, monkeypatch, tmp_path):
    from airflow.utils.session import create_session

    healthy = sf.inputs_take_turns(spark).checkpoints["min"]
    stalled = sf.one_input_without_data(spark).checkpoints["min"]
    missing = str(tmp_path / "not-created-yet")
    # A pipeline's checkpoint no configuration names: its audit task registered it (the 2013
    # backlog, lagging by years against the default max_lag of 6 hours).
    from tests.watermark_ops.airflow.registry_fixtures import audit_dag, clear_registry

    clear_registry()
    pipeline = sf.copy_with_progress_log(sf.backlog_then_future_record(spark).checkpoints["lagging"],
                                         tmp_path / "home" / "checkpoints" / "zz_pipeline")
    assert sf.task_states(sf.run_dag(audit_dag("wo_monitor_pipeline"), run_conf={"checkpoint": pipeline})) == {
        ("audit_checkpoint", -1): "success"}
    config = tmp_path / "monitor.json"
    config.write_text(json.dumps({"defaults": {"max_lag": "PT6H"}, "checkpoints": [
        {"checkpoint": healthy, "max_idle": "P3650D"},
        {"checkpoint": stalled},
        {"checkpoint": missing, "missing_ok": True},
    ]}))
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(config))
    with sf.AlertServer() as server:
        monkeypatch.setenv("AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK", server.connection("/watermarks"))
        run = _bag().dags["watermark_monitor"].test()
        alerts = sorted((r["body"] for r in server.requests), key=lambda a: a["map_index"])
    with create_session() as session:
        tis = {(ti.task_id, ti.map_index): ti for ti in run.get_task_instances(session=session)}
        names = {k: ti.rendered_map_index for k, ti in tis.items() if k[0] == "alarm"}
        states = {k: str(ti.state) for k, ti in tis.items()}
    # One task for the four checkpoints, one mapped task per alarm, named by its checkpoint: a
    # configured one without a name by its location, a registered one by its DAG and query.
    assert states == {("watch", -1): "success", ("alarm", 0): "failed", ("alarm", 1): "failed"}
    assert names == {("alarm", 0): stalled, ("alarm", 1): "wo_monitor_pipeline / zz_pipeline"}
    assert alerts[1]["name"] == "wo_monitor_pipeline / zz_pipeline" and alerts[0]["name"] == stalled
    assert alerts[1]["message"].startswith("wo_monitor_pipeline / zz_pipeline: ")
    assert str(run.state) == "failed"
    assert [(a["map_index"], a["checkpoint"], a["state"], a["event"]) for a in alerts] == [
        (0, stalled, "stalled", "task_failure"), (1, pipeline, "lagging", "task_failure")]
    assert all(a["dag_id"] == "watermark_monitor" and a["task_id"] == "alarm" and a["run_id"] == run.run_id
               for a in alerts)
    assert alerts[1]["lag_ms"] > 10 * 365 * 24 * 3600 * 1000
    assert alerts[0]["hints"][0].startswith("input(s) 1 got no data")
    values = sf.xcoms(run)
    alarms = values[("watch", -1, "return_value")]
    assert [(a["location"], a["state"], a["outcome"]) for a in alarms] == [
        (stalled, "stalled", "fail"), (pipeline, "lagging", "fail")]
    summary = values[("watch", -1, "summary")]
    assert summary["checkpoints"] == 4 and summary["alarm_count"] == 2 and summary["alarms"] == [stalled, pipeline]
    counts = dict(summary["counts"])
    assert (counts.pop("stalled"), counts.pop("lagging"), counts.pop("missing")) == (1, 1, 1)
    assert list(counts.values()) == [1] and set(counts) <= {"advancing", "idle"}  # the healthy one
