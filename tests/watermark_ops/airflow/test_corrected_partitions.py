"""Corrections as partitions: a downstream ``PartitionedAssetTimetable`` DAG runs once per closed
day and again for each day a later run corrected (real Airflow: ``dag.test()``, the scheduler's own
partitioned-run creation, the session's SQLite DB).

The run pattern's two announcing tasks run for real (``announce_partitions``,
``announce_corrections``); the tasks before them are marked done, the checkpoint is written in
Spark's own format (offsets and commits, :func:`tests.watermark_ops.checkpoint_fixtures.handmade_checkpoint`)
and the corrections log as the launcher appends it (``<checkpoint>.corrections.jsonl``), as in
``test_run_pattern.py``'s corrections test.
"""

from __future__ import annotations

import json

import pendulum
import pytest
from airflow.sdk import DAG, Asset, PartitionedAssetTimetable, task

from watermark_ops.airflow.run import watermarked_run

NY = "America/New_York"
HOUR = 3_600_000
UPSTREAM, DOWNSTREAM = "wo_corrected_partitions_upstream", "wo_corrected_partitions_downstream"
GROUP = "readings"


def ms(text: str) -> int:
    return pendulum.parse(text).int_timestamp * 1000


def _fix(start: str, station: str, run: str, *, end: str | None = None, late_rows: int = 1, write: int = 1) -> dict:
    """One correction record as the launcher appends it to ``<checkpoint>.corrections.jsonl``."""
    start_ms = ms(start)
    return {"window_start_ms": start_ms, "window_end_ms": ms(end) if end else start_ms + HOUR,
            "keys": {"station": station}, "emitted": {"mean": 1.0}, "corrected": {"mean": 2.0},
            "late_rows": late_rows, "run": run, "batch_id": 1, "write": write}


def _append(path, records: list[dict]) -> None:
    with open(path, "a") as out:
        out.writelines(json.dumps(r) + "\n" for r in records)


def _events(asset_name: str) -> list[tuple[str | None, dict, str]]:
    """Every event on the asset: (partition_key, extra, source_run_id), in order."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return [tuple(r) for r in session.execute(
            select(AssetEvent.partition_key, AssetEvent.extra, AssetEvent.source_run_id)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == asset_name).order_by(AssetEvent.id)).all()]


def _memory(key: str, value: dict | None = None) -> dict:
    """The announcements' memory in the asset state store (written when ``value`` is given)."""
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalar(select(AssetStateStoreModel).where(AssetStateStoreModel.key == key))
        if value is not None:
            row.value = json.dumps(value)  # the execution API stores JSON text
        return json.loads(row.value)


def _run_partitioned_runs(dag) -> list[tuple[str, str]]:
    """The scheduler's own code turns pending partitioned asset events into runs of ``dag``; each
    queued run's tasks then run as ``dag.test()`` runs them (as ``tests/dags/test_day_partitions.py``).

    :return: every run of ``dag`` so far, ``[(partition_key, state)]`` in creation order.
    """
    from airflow import settings
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.dagrun import DagRun
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        SchedulerJobRunner(job=Job())._create_dagruns_for_partitioned_asset_dags(session)
    scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    session = settings.Session()
    ids = session.scalars(select(DagRun.id).where(DagRun.dag_id == dag.dag_id, DagRun.state == DagRunState.QUEUED)
                          .order_by(DagRun.id)).all()
    for run_id in ids:
        dr = session.get(DagRun, run_id)
        dr.state = DagRunState.RUNNING
        session.commit()
        for _ in range(10):
            session.expire_all()
            dr = session.get(DagRun, run_id)
            dr.dag = scheduler_dag
            if dr.state != DagRunState.RUNNING:
                break
            schedulable, _ = dr.update_state(session=session)
            for ti in schedulable:
                ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
            session.commit()
            for ti in [t for t in dr.get_task_instances(session=session) if t.state == TaskInstanceState.SCHEDULED]:
                _run_task(ti=ti, task=dag.task_dict[ti.task_id])
    with create_session() as session:
        return [(dr.partition_key, str(dr.state)) for dr in
                session.scalars(select(DagRun).where(DagRun.dag_id == dag.dag_id).order_by(DagRun.id)).all()]


def _consumed(dag_id: str) -> list[tuple[str, list[bool]]]:
    """Per downstream run (creation order): its partition key and the ``corrected`` flag of each
    event it consumed (Airflow links a partitioned run to the events of its key)."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return [(dr.partition_key, sorted(bool((e.extra or {}).get("corrected")) for e in dr.consumed_asset_events))
                for dr in session.scalars(select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id)).all()]


@pytest.fixture(scope="module")
def corrected_days(airflow_db, tmp_path_factory):
    """Run A announces the closed New York days 01-01 and 01-02 and corrects nothing; the scheduler
    runs the downstream DAG for them. Run B closes 01-03 and corrects windows of 01-01 and 01-02
    (one spanning New York midnight) and one of 01-03; the scheduler runs the downstream DAG again."""
    from tests.watermark_ops import stall_fixtures as sf
    from tests.watermark_ops.checkpoint_fixtures import commit_text, handmade_checkpoint, offsets_text, put

    root = tmp_path_factory.mktemp("corrected")
    checkpoint = str(root / "ck")
    days = Asset(name="wo_test_corrected_days", uri=f"file://{root}/days")
    with DAG(UPSTREAM, schedule=None, start_date=pendulum.datetime(2013, 1, 1, tz="UTC")) as up:
        watermarked_run(GROUP, application=str(root / "never.py"), checkpoint=checkpoint, attach=True,
                        window="1 hour", allowed_lateness="6 hours", partition_asset=days,
                        partition_since="2013-01-01T00:00:00-05:00", partition_timezone=NY)
    announcing = (f"{GROUP}.announce_partitions", f"{GROUP}.announce_corrections")
    others = "|".join(t for t in up.task_ids if t not in announcing)
    memory_key = up.task_dict[f"{GROUP}.announce_partitions"].memory_key()

    with DAG(DOWNSTREAM, schedule=PartitionedAssetTimetable(assets=days),
             start_date=pendulum.datetime(2013, 1, 1, tz="UTC")) as down:
        @task
        def rebuild(dag_run=None) -> str:
            return dag_run.partition_key

        rebuild()
    sf.register_dag(down, unpause=True)

    def run(day: int):
        at = pendulum.datetime(2013, 1, day, tz="UTC")
        return sf.run_dag(up, logical_date=at, run_after=at, mark_success_pattern=f"^({others})$")

    log = root / "ck.corrections.jsonl"
    # Run A: its committed batch ran with watermark 2013-01-03T12:00Z; 6 h of allowed lateness make
    # New York days final through 06:00Z: 01-01 and 01-02 (01-02 ends at 2013-01-03T05:00Z).
    handmade_checkpoint(checkpoint, [(ms("2013-01-03T12:00:00Z"), ms("2013-01-03T12:00:00Z"))])
    _append(log, [_fix("2012-12-31T20:00:00Z", "north", "manual__earlier")])  # another run's: not announced
    run_a = run(4)
    events_a = _events(days.name)
    downstream_a = _run_partitioned_runs(down)

    # Run B: batch 1 ran with watermark 2013-01-04T12:00Z (closes 01-03), and corrected windows.
    run_b_id = f"manual__{pendulum.datetime(2013, 1, 5, tz='UTC').isoformat()}"
    put(checkpoint, "offsets/1", offsets_text(ms("2013-01-04T12:00:00Z"), 1_700_000_060_000,
                                              sources=[{"logOffset": 1}]))
    put(checkpoint, "commits/1", commit_text(ms("2013-01-04T12:00:00Z")))
    _append(log, [_fix("2013-01-02T15:00:00Z", "north", run_b_id, late_rows=2),  # 10:00 in New York, 01-02
                  _fix("2013-01-02T04:30:00Z", "east", run_b_id, end="2013-01-02T05:30:00Z"),  # spans NY midnight
                  _fix("2013-01-02T15:00:00Z", "south", run_b_id),
                  _fix("2013-01-03T20:00:00Z", "north", run_b_id)])  # 01-03, announced by this same run
    run_b = run(5)
    events_b = _events(days.name)[len(events_a):]
    downstream_b = _run_partitioned_runs(down)
    return {"up": up, "down": down, "days": days, "checkpoint": checkpoint, "root": root, "log": log, "run": run,
            "run_a": run_a, "run_b": run_b, "events_a": events_a, "events_b": events_b, "memory_key": memory_key,
            "downstream_a": downstream_a, "downstream_b": downstream_b}


def _states(run) -> dict[str, str]:
    from tests.watermark_ops import stall_fixtures as sf

    return {t: s for (t, _), s in sf.task_states(run).items()}


def test_each_corrected_day_is_an_event_on_the_partition_asset_naming_its_windows(corrected_days):
    run_a, run_b = corrected_days["run_a"], corrected_days["run_b"]
    assert _states(run_a)[f"{GROUP}.announce_corrections"] == "skipped"  # run A corrected nothing: no event
    assert [(k, e.get("corrected"), r) for k, e, r in corrected_days["events_a"]] == [
        ("2013-01-01", None, run_a.run_id), ("2013-01-02", None, run_a.run_id)]
    assert _states(run_b)[f"{GROUP}.announce_corrections"] == "success"
    announced = [k for k, e, _ in corrected_days["events_b"] if not e.get("corrected")]
    corrected = {k: e for k, e, _ in corrected_days["events_b"] if e.get("corrected")}
    assert announced == ["2013-01-03"]  # announced days stay exactly once
    assert sorted(corrected) == ["2013-01-01", "2013-01-02", "2013-01-03"]
    assert all(r == run_b.run_id for _, _, r in corrected_days["events_b"])
    extra = corrected["2013-01-02"]
    assert (extra["corrected"], extra["checkpoint"], extra["run"], extra["grain"], extra["timezone"]) == (
        True, corrected_days["checkpoint"], run_b.run_id, "day", NY)
    east = {"window_start_ms": ms("2013-01-02T04:30:00Z"), "window_end_ms": ms("2013-01-02T05:30:00Z"),
            "keys": {"station": "east"}}
    jan_1, jan_2 = extra["partitions"]["2013-01-01"], extra["partitions"]["2013-01-02"]
    assert jan_1["corrected_windows"] == [east]  # the window spanning New York midnight: in both days
    assert (jan_1["start"], jan_1["end"]) == ("2013-01-01T05:00:00Z", "2013-01-02T05:00:00Z")
    assert [(w["window_start_ms"], w["keys"]["station"]) for w in jan_2["corrected_windows"]] == [
        (ms("2013-01-02T15:00:00Z"), "north"), (ms("2013-01-02T04:30:00Z"), "east"),
        (ms("2013-01-02T15:00:00Z"), "south")]
    assert (jan_2["corrections"], jan_2["late_rows"]) == (3, 4)
    assert [w["window_start_ms"] for w in extra["partitions"]["2013-01-03"]["corrected_windows"]] == [
        ms("2013-01-03T20:00:00Z")]
    assert "2012-12-31" not in extra["partitions"]  # another run's correction is not this run's
    # The corrections asset's event is as it was (other consumers rely on it).
    from tests.watermark_ops import stall_fixtures as sf

    returned = sf.xcoms(run_b)[(f"{GROUP}.announce_corrections", -1, "return_value")]
    assert returned["corrections"] == 4 and len(returned["corrected_windows"]) == 4
    assert returned["corrected_partitions"] == ["2013-01-01", "2013-01-02", "2013-01-03"]


def test_the_downstream_dag_runs_once_per_closed_day_and_again_per_corrected_day(corrected_days):
    down_a, down_b = corrected_days["downstream_a"], corrected_days["downstream_b"]
    assert down_a == [("2013-01-01", "success"), ("2013-01-02", "success")]
    new = down_b[len(down_a):]
    print("\ndownstream runs (partition key, state):", down_b)
    # Closed days 01-01, 01-02, 01-03 once each; corrected 01-01 and 01-02 once more. 01-03's
    # correction reached the scheduler with its announcement, before its run was created: Airflow
    # makes one run of both events (one AssetPartitionDagRun per key until its run exists).
    assert sorted(new) == [("2013-01-01", "success"), ("2013-01-02", "success"), ("2013-01-03", "success")]
    consumed = _consumed(DOWNSTREAM)
    assert consumed[:2] == [("2013-01-01", [False]), ("2013-01-02", [False])]  # the announcements
    assert sorted(consumed[2:]) == [("2013-01-01", [True]), ("2013-01-02", [True]), ("2013-01-03", [False, True])]
    # A further scheduler pass creates nothing: each event makes one run.
    assert _run_partitioned_runs(corrected_days["down"]) == down_b


def test_a_correction_event_never_confirms_a_lost_announcement(corrected_days):
    """Run C corrects a window of 01-04, a day not yet announced: its corrected event has key
    2013-01-04. The memory then says a dead try claimed 01-04 (its announcement never reached
    Airflow). Run D closes 01-04: the corrected event must not settle the claim, so 01-04 is
    announced, once, and the downstream DAG gets its final run."""
    from tests.watermark_ops.checkpoint_fixtures import commit_text, offsets_text, put

    run = corrected_days["run"]
    run_c_id = f"manual__{pendulum.datetime(2013, 1, 6, tz='UTC').isoformat()}"
    _append(corrected_days["log"], [_fix("2013-01-04T18:00:00Z", "north", run_c_id)])
    before = len(_events(corrected_days["days"].name))
    run_c = run(6)  # no new batch: nothing closes
    assert _states(run_c)[f"{GROUP}.announce_partitions"] == "skipped"
    events_c = _events(corrected_days["days"].name)[before:]
    assert [(k, e.get("corrected")) for k, e, _ in events_c] == [("2013-01-04", True)]
    after_c = _run_partitioned_runs(corrected_days["down"])
    assert after_c[len(corrected_days["downstream_b"]):] == [("2013-01-04", "success")]  # the correction's run
    memory = _memory(corrected_days["memory_key"])
    assert memory["keys"] == ["2013-01-01", "2013-01-02", "2013-01-03"] and memory["pending"] is None
    _memory(corrected_days["memory_key"], {**memory, "keys": memory["keys"] + ["2013-01-04"], "pending": {
        "keys": ["2013-01-04"], "claimed_by": "a dead try", "claimed_at_ms": pendulum.now("UTC").int_timestamp * 1000}})
    checkpoint = corrected_days["checkpoint"]
    put(checkpoint, "offsets/2", offsets_text(ms("2013-01-05T12:00:00Z"), 1_700_000_120_000,
                                              sources=[{"logOffset": 2}]))
    put(checkpoint, "commits/2", commit_text(ms("2013-01-05T12:00:00Z")))
    run_d = run(7)
    events_d = _events(corrected_days["days"].name)[before + len(events_c):]
    assert [(k, bool(e.get("corrected")), r) for k, e, r in events_d] == [("2013-01-04", False, run_d.run_id)]
    assert _memory(corrected_days["memory_key"])["keys"][-1] == "2013-01-04"
    runs = _run_partitioned_runs(corrected_days["down"])
    assert runs[len(after_c):] == [("2013-01-04", "success")]  # the final run, after the correction's
