"""Completeness per New York day as partitioned asset events, on real runs.

Five consecutive daily runs of ``flights_pipeline`` (real ``dag.test()``, real spark-submit, the
session's SQLite metadata DB), a re-run of the fifth and a sixth: ``announce_days`` must announce each New York day once, in order,
only when every window of it is in the sink; a re-run of an interval announces nothing; a claim
whose event never reached Airflow (the try died between claim and success) is announced again,
once. Then the scheduler's own partitioned-run creation turns the events into one
``flights_daily_report`` run per day, and each run's report equals a pandas replay of the landed
files.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pendulum
import pytest

from tests.spark_jobs.flight_expectations import HOUR_MS, expected_windows

DAGS = Path(__file__).resolve().parents[2] / "dags"
NY = "America/New_York"
ASSET = "flight_windows_days"
REPORT_DAG = "flights_daily_report"


def _day_bounds(day: str) -> tuple[int, int]:
    start = pendulum.parse(day, tz=NY)
    return start.int_timestamp * 1000, start.add(days=1).int_timestamp * 1000


def _events(after_id: int = 0) -> list:
    """Events on the day asset newer than ``after_id``: (id, partition_key, extra, source_run_id)."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent.id, AssetEvent.partition_key, AssetEvent.extra, AssetEvent.source_run_id)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == ASSET, AssetEvent.id > after_id).order_by(AssetEvent.id)
        ).all()
    return [tuple(r) for r in rows]


def _ti_state(run_id: str, task_id: str) -> str:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(TaskInstance.state).where(
            TaskInstance.run_id == run_id, TaskInstance.task_id == task_id, TaskInstance.dag_id == "flights_pipeline"))


def _forget(locations: dict, memory_key: str) -> None:
    """Remove the pipeline's files, the reports, the audit's and the announcements' memory, and the
    report DAG's pending partitioned runs (the session's other pipeline tests share them)."""
    import shutil

    from airflow.models.asset import AssetPartitionDagRun, PartitionedAssetKeyLog
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    from watermark_ops.airflow.memory import AssetStateStoreMemory
    from watermark_ops.examples.flights.settings import runtime_home

    checkpoint, output = locations["checkpoint"], locations["output"]
    for path in (locations["landing"], checkpoint, checkpoint + "_quarantine", output, output + "_quarantine",
                 output + "_late", str(runtime_home() / "reports" / "flights_daily")):
        shutil.rmtree(path, ignore_errors=True)
    for suffix in (".progress.jsonl", ".lock", "_quarantine.progress.jsonl", "_quarantine.lock"):
        Path(checkpoint + suffix).unlink(missing_ok=True)
    with create_session() as session:
        session.query(AssetStateStoreModel).filter(AssetStateStoreModel.key.in_(
            [AssetStateStoreMemory(None).key(checkpoint), memory_key])).delete(synchronize_session=False)
        session.query(PartitionedAssetKeyLog).filter(
            PartitionedAssetKeyLog.target_dag_id == REPORT_DAG).delete(synchronize_session=False)
        session.query(AssetPartitionDagRun).filter(
            AssetPartitionDagRun.target_dag_id == REPORT_DAG).delete(synchronize_session=False)


def _set_memory(key: str, value: dict) -> None:
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalar(select(AssetStateStoreModel).where(AssetStateStoreModel.key == key))
        row.value = json.dumps(value)  # the execution API stores JSON text


def _get_memory(key: str) -> dict:
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return json.loads(session.scalar(select(AssetStateStoreModel.value).where(AssetStateStoreModel.key == key)))


@pytest.fixture(scope="module")
def five_days(airflow_db):
    """Five daily runs (intervals 2013-01-01 .. 2013-01-05), a re-run of the last one, and a lost claim."""
    from airflow.dag_processing.dagbag import DagBag

    from watermark_ops.examples.flights.settings import job_locations

    locations = job_locations("flight_windows")
    bag = DagBag(dag_folder=str(DAGS))
    dag = bag.dags["flights_pipeline"]
    announce = dag.task_dict["announce_days"]
    memory_key = announce.memory_key()
    announce.retry_delay = timedelta(seconds=1)
    _forget(locations, memory_key)
    dag.task_dict["flight_windows"].retry_delay = timedelta(seconds=1)
    gate = dag.task_dict["windows_complete"]
    gate.poke_interval, gate.timeout = 5.0, 240.0
    first_event = (_events() or [(0,)])[-1][0]
    runs, landed, sink_after_run = [], [], []
    for day in range(2, 7):
        run = dag.test(logical_date=pendulum.datetime(2013, 1, day, tz=NY))
        runs.append(run)
        if day == 2:  # dag.test synced the DAG folder: unpause the report (paused DAGs get no runs queued)
            _pause(REPORT_DAG, False)
        from airflow.models.xcom import XComModel
        from airflow.utils.session import create_session

        with create_session() as session:
            landed.append(XComModel.deserialize_value(session.scalars(XComModel.get_many(
                run_id=run.run_id, dag_ids="flights_pipeline", task_ids="land", key="return_value")).one()))
        output = Path(locations["output"])
        sink_after_run.append(pd.read_parquet(output) if (output / "_spark_metadata").exists() else None)
    events_after_five = _events(first_event)
    # A re-run (clear + run again) of the last interval: Spark finds no new input, nothing closes.
    rerun = dag.test(logical_date=pendulum.datetime(2013, 1, 6, tz=NY))
    events_after_rerun = _events(first_event)
    memory_after_rerun = _get_memory(memory_key)
    # A lost claim: the memory says a try claimed 2013-01-05, but its event never reached Airflow
    # (the try died between the claim and its success). The sixth day's run closes 2013-01-05.
    last = events_after_five[-1][0]
    memory = _get_memory(memory_key)
    _set_memory(memory_key, {**memory, "keys": memory["keys"] + ["2013-01-05"],
                             "pending": {"keys": ["2013-01-05"], "claimed_by": "a dead try", "claimed_at_ms": 0}})
    sixth = dag.test(logical_date=pendulum.datetime(2013, 1, 7, tz=NY))
    events_after_sixth = [(k, r) for _, k, _, r in _events(last)]
    # Only announce_days runs again (the other tasks are marked successful): nothing new.
    again = dag.test(logical_date=pendulum.datetime(2013, 1, 7, tz=NY), mark_success_pattern=r"(?!announce_days$).*")
    events_after_again = [(k, r) for _, k, _, r in _events(last)]
    yield {"dag": dag, "bag": bag, "locations": locations, "runs": runs, "rerun": rerun, "landed": landed,
           "sink_after_run": sink_after_run, "events": events_after_five, "events_after_rerun": events_after_rerun,
           "first_event": first_event, "memory_key": memory_key, "memory_after_rerun": memory_after_rerun,
           "sixth": sixth, "again": again, "events_after_sixth": events_after_sixth,
           "events_after_again": events_after_again}
    _pause(REPORT_DAG, True)
    _forget(locations, memory_key)


def _pause(dag_id: str, paused: bool) -> None:
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(DagModel).filter(DagModel.dag_id == dag_id).update({"is_paused": paused})


def test_each_day_is_announced_once_in_order_when_final(five_days):
    runs, events = five_days["runs"], five_days["events"]
    per_run = [[key for _, key, _, run_id in events if run_id == run.run_id] for run in runs]
    print("\nday partitions announced per run:", per_run)
    assert all(run.state == "success" for run in runs)
    # Each run's watermark stops about three hours short of its interval's end: a New York day closes
    # (all its windows written) in the run after its own.
    assert per_run == [[], ["2013-01-01"], ["2013-01-02"], ["2013-01-03"], ["2013-01-04"]]
    assert _ti_state(runs[0].run_id, "announce_days") == "skipped"  # nothing closed: no event at all
    assert all(key is not None for _, key, _, _ in events)  # never an unpartitioned event
    final, _, _, _ = expected_windows(five_days["landed"])  # everything the five runs will ever write
    for index, keys in enumerate(per_run):
        for key in keys:
            start, end = _day_bounds(key)
            extra = next(e for _, k, e, _ in events if k == key)
            entry = extra["partitions"][key]
            assert (entry["start_ms"], entry["end_ms"]) == (start, end)
            assert extra["emitted_through_ms"] >= end  # closed on what committed batches wrote
            # Final: at announcement the sink already held every window the day will ever have.
            sink = five_days["sink_after_run"][index].copy()
            sink["window_start_ms"] = pd.to_datetime(sink.window_start, utc=True).astype("int64") // 10**6
            in_sink = sink[(sink.window_start_ms >= start) & (sink.window_start_ms < end)]
            expected = final[(final.window_start_ms >= start) & (final.window_start_ms < end)]
            assert len(in_sink) == len(expected) == entry["windows"] > 0
            assert int(in_sink.departures.sum()) == int(expected.departures.sum()) == entry["departures"]
            # ... and the run before did not have them all (the announcement was not late either).
            before = five_days["sink_after_run"][index - 1].copy()
            before["window_start_ms"] = pd.to_datetime(before.window_start, utc=True).astype("int64") // 10**6
            assert ((before.window_start_ms >= start) & (before.window_start_ms < end)).sum() < len(expected)


def test_a_rerun_of_an_interval_announces_nothing(five_days):
    rerun = five_days["rerun"]
    assert rerun.state == "success"
    assert five_days["events_after_rerun"] == five_days["events"]
    assert _ti_state(rerun.run_id, "announce_days") == "skipped"
    memory = five_days["memory_after_rerun"]
    assert memory["keys"] == ["2013-01-01", "2013-01-02", "2013-01-03", "2013-01-04"] and memory["pending"] is None


def test_a_claim_whose_event_never_arrived_is_announced_again_once(five_days):
    """The try that claimed 2013-01-05 died before its success registered the event: the next run
    settles the claim against the asset's events and announces the day once; running only
    announce_days again announces nothing."""
    sixth, again = five_days["sixth"], five_days["again"]
    assert sixth.state == "success" and again.state == "success"
    assert five_days["events_after_sixth"] == [("2013-01-05", sixth.run_id)]
    assert five_days["events_after_again"] == five_days["events_after_sixth"]
    assert _get_memory(five_days["memory_key"])["keys"][-1] == "2013-01-05"


def _run_partitioned_runs(bag) -> list:
    """Let the scheduler's own code turn pending partitioned asset events into DAG runs, then run
    each report run's tasks the way ``dag.test()`` does (no executor, no scheduler loop)."""
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
    report = bag.dags[REPORT_DAG]
    scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(report))
    session = settings.Session()  # as dag.test(): _run_task's own sessions close this one, so re-read
    ids = session.scalars(select(DagRun.id).where(DagRun.dag_id == REPORT_DAG, DagRun.state == DagRunState.QUEUED)
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
                _run_task(ti=ti, task=report.task_dict[ti.task_id])
    with create_session() as session:
        return [(dr.partition_key, str(dr.state), str(dr.run_type)) for dr in
                session.scalars(select(DagRun).where(DagRun.dag_id == REPORT_DAG).order_by(DagRun.id)).all()]


def test_one_report_run_per_closed_day_from_the_sink(five_days):
    from airflow.models.asset import AssetPartitionDagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from watermark_ops.examples.flights.settings import runtime_home

    with create_session() as session:
        pending = session.scalars(select(AssetPartitionDagRun.partition_key).where(
            AssetPartitionDagRun.target_dag_id == REPORT_DAG, AssetPartitionDagRun.created_dag_run_id.is_(None))).all()
    assert sorted(pending) == ["2013-01-01", "2013-01-02", "2013-01-03", "2013-01-04", "2013-01-05"]
    runs = _run_partitioned_runs(five_days["bag"])
    assert [(k, s) for k, s, _ in runs] == [(d, "success") for d in sorted(pending)]
    assert all(t == "asset_triggered" for _, _, t in runs)
    # The pandas replay: windows of the day, and rows of the day that arrived after their window closed.
    landed = five_days["landed"]
    final, _, watermarks, _ = expected_windows(landed)
    late_ms = []
    for summary, watermark in zip(landed, watermarks):
        frame = pd.DataFrame([json.loads(line) for line in open(summary["path"])])
        good = frame[frame.dep_time.notna() & frame.arr_time.notna()]
        event_ms = pd.to_datetime(good.dep_time).astype("int64") // 10**6
        late_ms += list(event_ms[event_ms // HOUR_MS * HOUR_MS + HOUR_MS <= watermark])
    for day in ("2013-01-01", "2013-01-02", "2013-01-03", "2013-01-04"):
        start, end = _day_bounds(day)
        report = json.loads((runtime_home() / "reports" / "flights_daily" / f"{day}.json").read_text())
        windows = final[(final.window_start_ms >= start) & (final.window_start_ms < end)]
        late = sum(start <= t < end for t in late_ms)
        assert report["departures"] == int(windows.departures.sum()) and report["windows"] == len(windows)
        assert report["late_rows"] == late
        assert report["late_share"] == pytest.approx(late / (report["departures"] + late))
        for origin, group in windows.groupby("origin"):
            mean = (group.mean_dep_delay * group.departures).sum() / group.departures.sum()
            assert report["airports"][origin]["mean_dep_delay"] == pytest.approx(mean)
        if day == "2013-01-02":
            print(f"\nreport {day}:", json.dumps({k: report[k] for k in ("departures", "late_rows", "late_share",
                                                                           "airports")}))
    # No day twice: a second pass of the scheduler creates nothing more.
    assert len(_run_partitioned_runs(five_days["bag"])) == len(runs)
