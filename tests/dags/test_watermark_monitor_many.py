"""watermark_monitor over 200 checkpoints in one run: copies of real Spark-written checkpoints (195
healthy, 4 stalled, 1 with a corrupt head offsets file), evaluated by one task; exactly the bad ones
alarm, each in its own mapped task named by its checkpoint and in its own webhook alert; the run
holds at most 2 task instances plus one per alarm (counted in the metadata DB)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.watermark_ops import stall_fixtures as sf

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = REPO / "dags" / "watermark_monitor.py"
WATCHED, STALLED = 200, (17, 60, 123, 199)
UNREADABLE = 88


def _copies(spark, folder: Path) -> tuple[list[str], dict[int, str]]:
    """200 checkpoint folders: copies of a healthy and a stalled real checkpoint (with their progress
    logs), one of the healthy copies with its head offsets file cut in the middle of its JSON."""
    healthy = sf.inputs_take_turns(spark).checkpoints["min"]
    stalled = sf.one_input_without_data(spark).checkpoints["min"]
    locations = [sf.copy_with_progress_log(stalled if i in STALLED else healthy, folder / f"query_{i:03d}")
                 for i in range(WATCHED)]
    offsets = Path(locations[UNREADABLE]) / "offsets"
    head = max(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    text = (offsets / str(head)).read_text()
    (offsets / str(head)).write_text(text[: len(text) // 2])
    return locations, {UNREADABLE: f"offsets/{head}"}


def test_one_run_over_200_checkpoints_alarms_exactly_the_bad_ones(airflow_db, spark, monkeypatch, tmp_path):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    from tests.watermark_ops.airflow.registry_fixtures import clear_registry

    clear_registry()  # other tests' registered checkpoints are not part of this platform
    locations, corrupt = _copies(spark, tmp_path / "checkpoints")
    bad = {locations[i] for i in (*STALLED, UNREADABLE)}
    config = tmp_path / "monitor.json"
    config.write_text(json.dumps({"defaults": {"max_lag": "PT6H", "max_idle": "P3650D"},
                                  "checkpoints": [{"checkpoint": c} for c in locations]}))
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(config))
    with sf.AlertServer() as server:
        monkeypatch.setenv("AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK", server.connection("/watermarks"))
        run = DagBag(dag_folder=str(DAG_FILE)).dags["watermark_monitor"].test()
        alerts = [r["body"] for r in server.requests]

    with create_session() as session:
        rows = session.scalar(select(func.count()).select_from(TaskInstance).where(
            TaskInstance.dag_id == "watermark_monitor", TaskInstance.run_id == run.run_id))
        tis = {(ti.task_id, ti.map_index): (str(ti.state), ti.rendered_map_index)
               for ti in run.get_task_instances(session=session)}
    alarms = {k: v for k, v in tis.items() if k[0] == "alarm"}
    assert rows == len(tis) == 1 + len(bad) <= 2 + len(bad)
    assert tis[("watch", -1)][0] == "success"
    assert {state for state, _ in alarms.values()} == {"failed"}
    assert {name for _, name in alarms.values()} == bad  # each alarm task named by its checkpoint
    assert str(run.state) == "failed"

    assert sorted(a["checkpoint"] for a in alerts) == sorted(bad)  # one alert per bad checkpoint, none else
    by_checkpoint = {a["checkpoint"]: a for a in alerts}
    for i in STALLED:
        alert = by_checkpoint[locations[i]]
        assert (alert["state"], alert["task_id"], alert["event"]) == ("stalled", "alarm", "task_failure")
        assert alarms[("alarm", alert["map_index"])][1] == locations[i]
    unreadable = by_checkpoint[locations[UNREADABLE]]
    assert unreadable["state"] is None and unreadable["event"] == "task_failure"
    assert locations[UNREADABLE] in unreadable["message"] and corrupt[UNREADABLE] in unreadable["message"]

    values = sf.xcoms(run)
    summary = values[("watch", -1, "summary")]
    assert summary["checkpoints"] == WATCHED and summary["alarm_count"] == len(bad)
    assert summary["counts"]["stalled"] == len(STALLED) and summary["counts"]["unreadable"] == 1
    assert sum(summary["counts"].values()) == WATCHED
    assert sum(n for state, n in summary["counts"].items() if state in ("advancing", "idle")) == WATCHED - len(bad)
    assert len(json.dumps(summary)) < 4096  # small whatever the number of healthy checkpoints
    assert {a["location"] for a in values[("watch", -1, "return_value")]} == bad
    shutil.rmtree(tmp_path / "checkpoints")
