"""watermark_monitor: parses cheaply, reads its config at run time, one mapped sensor per checkpoint,
alerts delivered to a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import runpy
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
    monkeypatch.setenv("WATERMARK_OPS_MONITOR_CONFIG", str(tmp_path / "does-not-exist.json"))
    bag = _bag()
    assert bag.import_errors == {}
    dag = bag.dags["watermark_monitor"]
    assert dag.timetable.expression == "*/5 * * * *"
    assert dag.max_active_runs == 1 and dag.catchup is False
    assert dag.deadline is not None
    watch = dag.get_task("watch")
    assert watch.upstream_task_ids == {"checkpoints"}
    assert watch.partial_kwargs["timeout"] == 0


def test_default_config_watches_the_pipeline_jobs(monkeypatch, tmp_path):
    monkeypatch.setenv("WATERMARK_OPS_HOME", str(tmp_path))
    load = runpy.run_path(str(DAG_FILE))["load_checkpoints"]
    entries = load(REPO / "dags" / "watermark_monitor.json")
    by_location = {e["checkpoint"]: e for e in entries}
    flights = by_location[str(tmp_path / "checkpoints" / "flight_windows")]
    assert flights["missing_ok"] is True and flights["max_lag"] is None and flights["max_idle"] == "PT26H"
    assert flights["stall_batches"] == 3  # from the defaults
    assert str(tmp_path / "checkpoints" / "flight_weather") in by_location
    from watermark_ops.core.thresholds import Thresholds

    assert Thresholds(**{k: v for k, v in flights.items() if k not in ("checkpoint", "missing_ok")}).max_idle == timedelta(hours=26)


@pytest.mark.parametrize("config, match", [
    ({"checkpoints": [{"checkpoint": "/a", "job": "flight_windows"}]}, r"checkpoints\[0\]: give exactly one"),
    ({"checkpoints": [{"checkpoint": "/a", "max_lag": "six hours"}]}, r"checkpoints\[0\] \(/a\): max_lag"),
    ({"checkpoints": [{"checkpoint": "/a", "max_lagg": "PT1H"}]}, r"checkpoints\[0\]: unknown keys \['max_lagg'\]"),
    ({"defaults": {"stall_batch": 3}}, r"defaults: unknown keys"),
    ("not json", r"cannot read the monitor config"),
])
def test_bad_config_names_the_file_and_entry(tmp_path, config, match):
    load = runpy.run_path(str(DAG_FILE))["load_checkpoints"]
    path = tmp_path / "monitor.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    with pytest.raises(ValueError, match=rf"{path}: {match}" if "cannot" not in match else match):
        load(path)


def test_one_run_checks_every_checkpoint_and_alerts_on_alarms(airflow_db, spark, monkeypatch, tmp_path):
    from airflow.utils.session import create_session

    healthy = sf.inputs_take_turns(spark).checkpoints["min"]
    stalled = sf.one_input_without_data(spark).checkpoints["min"]
    missing = str(tmp_path / "not-created-yet")
    # The pipeline's own checkpoint, always watched: here the 2013 backlog (lagging by years).
    home = tmp_path / "home"
    pipeline = sf.copy_with_progress_log(sf.backlog_then_future_record(spark).checkpoints["lagging"],
                                  home / "checkpoints" / "flight_windows")
    config = tmp_path / "monitor.json"
    config.write_text(json.dumps({"defaults": {"max_lag": "PT6H"}, "checkpoints": [
        {"checkpoint": healthy, "max_idle": "P3650D"},
        {"checkpoint": stalled},
        {"checkpoint": missing, "missing_ok": True},
    ]}))
    monkeypatch.setenv("WATERMARK_OPS_MONITOR_CONFIG", str(config))
    monkeypatch.setenv("WATERMARK_OPS_HOME", str(home))
    with sf.AlertServer() as server:
        monkeypatch.setenv("AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK", server.connection("/watermarks"))
        run = _bag().dags["watermark_monitor"].test()
        alerts = sorted((r["body"] for r in server.requests), key=lambda a: a["map_index"])
    with create_session() as session:
        tis = {ti.map_index: ti for ti in run.get_task_instances(session=session) if ti.task_id == "watch"}
        names = {i: ti.rendered_map_index for i, ti in tis.items()}
        states = {i: str(ti.state) for i, ti in tis.items()}
    assert names == {0: healthy, 1: stalled, 2: missing, 3: pipeline}  # one mapped task per checkpoint
    assert states == {0: "success", 1: "failed", 2: "skipped", 3: "failed"}
    assert str(run.state) == "failed"
    assert [(a["map_index"], a["checkpoint"], a["state"], a["event"]) for a in alerts] == [
        (1, stalled, "stalled", "task_failure"), (3, pipeline, "lagging", "task_failure")]
    assert all(a["dag_id"] == "watermark_monitor" and a["task_id"] == "watch" and a["run_id"] == run.run_id
               for a in alerts)
    assert alerts[1]["lag_ms"] > 10 * 365 * 24 * 3600 * 1000
    values = sf.xcoms(run)
    assert values[("watch", 0, "return_value")]["outcome"] == "done"
    assert values[("watch", 1, "return_value")]["hints"][0].startswith("input(s) 1 got no data")
    assert values[("watch", 2, "return_value")]["outcome"] == "skip"
