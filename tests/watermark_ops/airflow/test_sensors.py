"""The watermark sensors in each mode (poke, reschedule, deferrable) through real Airflow.

Every DAG here runs with ``dag.test()`` on the session's SQLite metadata DB: the real Task SDK
runs each task in-process, reschedules go through the DB, and deferral writes a real trigger row
before ``dag.test()`` runs the trigger in line. Checkpoints come from real Spark
(``stall_fixtures``). Where a test needs the watermark to change while a sensor waits, a thread
runs the Spark job once the sensor has deferred (the trigger row is the handshake): the query is
restarted on the shared session while the triggerer's poll goes on.

The sensors evaluate at the real now; the checkpoints are chosen so that the expected state does
not depend on when the suite runs (stalled, lagging and jumped precede idle; the healthy one gets a
``max_idle`` of ten years).
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path

import pendulum
import pytest

from tests.watermark_ops import stall_fixtures as sf
from watermark_ops.core import stall
from watermark_ops.core.checkpoint import read_checkpoint

pytestmark = pytest.mark.timeout(400)

START = pendulum.datetime(2026, 1, 1, tz="UTC")
TRIGGER = "watermark_ops.airflow.triggers.WatermarkTrigger"


def _dag(dag_id: str, **kwargs):
    from airflow.sdk import DAG

    return DAG(dag_id, schedule=None, start_date=START, catchup=False, **kwargs)


def _offsets(checkpoint: str) -> dict[int, dict]:
    """{batch id: offsets metadata line} straight from offsets/N."""
    return {int(p.name): json.loads(p.read_text().splitlines()[1])
            for p in (Path(checkpoint) / "offsets").iterdir() if p.name.isdigit()}


# --------------------------------------------------------------------------------------------
# WatermarkStallSensor


def test_stall_sensor_poke_mode(airflow_db, spark):
    from watermark_ops.airflow.sensors import WatermarkStallSensor

    healthy = sf.inputs_take_turns(spark).checkpoints["min"]
    stalled = sf.one_input_without_data(spark).checkpoints["min"]
    jumped = sf.backlog_then_future_record(spark).checkpoints["flights"]
    with _dag("stall_sensor_poke") as dag:
        WatermarkStallSensor(task_id="healthy", checkpoint=healthy, max_idle="P3650D", poke_interval=1)
        WatermarkStallSensor(task_id="stalled", checkpoint=stalled, poke_interval=1)  # timeout 0: fail at once
        WatermarkStallSensor(task_id="jumped", checkpoint=jumped, poke_interval=1, timeout=600)
    run = sf.run_dag(dag)
    states, values = sf.task_states(run), sf.xcoms(run)
    assert states == {("healthy", -1): "success", ("stalled", -1): "failed", ("jumped", -1): "failed"}

    ok = values[("healthy", -1, "return_value")]
    assert ok["outcome"] == "done" and ok["state"] in ("advancing", "idle") and ok["alarm"] is False
    assert ok["watermark_ms"] == read_checkpoint(healthy).next_watermark_ms
    assert [i["source"] for i in ok["inputs"]] == [0, 1]

    bad = values[("stalled", -1, "return_value")]
    assert bad["outcome"] == "fail" and bad["state"] == "stalled" and bad["alarm"] is True
    assert [b["batch_id"] for b in bad["flat_data_batches"]] == [0, 1, 2]
    assert bad["message"].startswith("unhealthy: alarm: ")
    # jumped fails without waiting out its 600 s grace period: the watermark never goes back.
    assert values[("jumped", -1, "return_value")]["state"] == "jumped"
    assert values[("jumped", -1, "return_value")]["outcome"] == "fail"


def test_stall_sensor_reschedule_mode_waits_then_fails(airflow_db, spark):
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    from watermark_ops.airflow.sensors import WatermarkStallSensor

    stalled = sf.one_input_without_data(spark).checkpoints["min"]
    with _dag("stall_sensor_reschedule") as dag:
        WatermarkStallSensor(task_id="stalled", checkpoint=stalled, mode="reschedule", poke_interval=1,
                             timeout=timedelta(seconds=3))
    run = sf.run_dag(dag)
    assert sf.task_states(run) == {("stalled", -1): "failed"}
    with create_session() as session:
        ti_id = next(ti.id for ti in run.get_task_instances())
        reschedules = session.scalar(select(func.count()).select_from(TaskReschedule).where(TaskReschedule.ti_id == ti_id))
    assert reschedules >= 1  # it gave the worker slot back and was evaluated again
    value = sf.xcoms(run)[("stalled", -1, "return_value")]
    assert value["outcome"] == "fail" and value["state"] == "stalled"
    assert value["message"].startswith("unhealthy after waiting 3 s: alarm: ")


def test_stall_sensor_deferrable_heals_or_times_out(airflow_db, spark, tmp_path):
    from watermark_ops.airflow.sensors import WatermarkStallSensor

    stream = sf.stalled_two_inputs(spark, tmp_path / "turns")
    healing = stream.checkpoint()
    assert stall.evaluate(healing).state == "stalled"  # the stall is real before the sensor starts
    stalled = sf.one_input_without_data(spark).checkpoints["min"]
    with _dag("stall_sensor_deferrable") as dag:
        WatermarkStallSensor(task_id="heals", checkpoint=healing, deferrable=True, poke_interval=0.5,
                             timeout=timedelta(minutes=5))
        WatermarkStallSensor(task_id="times_out", checkpoint=stalled, deferrable=True, poke_interval=0.5,
                             timeout=timedelta(seconds=2))

    deferred = []

    def heal_once_deferred():
        deferred.append(sf.wait_for_trigger_row(TRIGGER, healing))
        sf.heal(spark, stream)  # both inputs in one run: under min the watermark rises

    healer = threading.Thread(target=heal_once_deferred)
    healer.start()
    try:
        run = sf.run_dag(dag)
    finally:
        healer.join(timeout=300)
    assert deferred == [True]
    assert sf.task_states(run) == {("heals", -1): "success", ("times_out", -1): "failed"}
    values = sf.xcoms(run)
    healed = values[("heals", -1, "return_value")]
    assert healed["outcome"] == "done" and healed["state"] == "advancing"
    assert healed["last_move"]["batch_id"] == max(_offsets(healing)) - 1  # the heal's data batch moved it
    timed_out = values[("times_out", -1, "return_value")]
    assert timed_out["outcome"] == "fail" and timed_out["state"] == "stalled"
    assert timed_out["message"].startswith("unhealthy after waiting 2 s: still waiting after 0:00:02")


def test_sensor_arguments_are_validated_when_the_dag_is_parsed():
    from watermark_ops.airflow.sensors import WatermarkReachedSensor, WatermarkStallSensor

    with pytest.raises(ValueError, match="max_lag"):
        WatermarkStallSensor(task_id="bad", checkpoint="/x", max_lag="six hours")
    with pytest.raises(ValueError, match="stall_batches"):
        WatermarkStallSensor(task_id="bad2", checkpoint="/x", stall_batches=0)
    sensor = WatermarkReachedSensor(task_id="ok", checkpoint="/x", target="{{ data_interval_end }}")
    assert sensor.template_fields == ("checkpoint", "target")


# --------------------------------------------------------------------------------------------
# WatermarkReachedSensor


def _once_job(spark, folder: Path) -> tuple[sf.FlightsJob, int]:
    """The flights job under Trigger.Once after one run: the watermark W moved, no batch ran with it yet."""
    job = sf.FlightsJob(folder)
    job.land_day(1)
    job.run(spark, "once")
    commit = json.loads((Path(job.checkpoint) / "commits" / "0").read_text().splitlines()[1])
    return job, commit["nextBatchWatermarkMs"]


def test_reached_sensor_poke_records_the_watermark_on_the_asset(airflow_db, spark):
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.sdk import Asset, DAG
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from watermark_ops.airflow.sensors import WatermarkReachedSensor

    checkpoint = sf.backlog_then_future_record(spark).checkpoints["lagging"]  # availableNow, 2 days of 2013
    emitted = _offsets(checkpoint)[3]["batchWatermarkMs"]  # the trailing batch ran with it
    asset = Asset(name="test_reached_sensor_asset", uri="watermark-ops://test/flight_windows")
    with DAG("consumer_of_completeness", schedule=[asset], start_date=START, catchup=False) as consumer:
        from airflow.providers.standard.operators.empty import EmptyOperator

        EmptyOperator(task_id="use")
    with _dag("reached_sensor_poke", params={"target": pendulum.from_timestamp(emitted / 1000, tz="UTC").isoformat()}) as dag:
        WatermarkReachedSensor(task_id="complete", checkpoint=checkpoint, target="{{ params.target }}", asset=asset,
                               poke_interval=1, timeout=30)
    sf.register_dag(consumer, unpause=True)  # an active consumer: the asset event queues a run of it
    run = sf.run_dag(dag)
    assert sf.task_states(run) == {("complete", -1): "success"}
    with create_session() as session:
        asset_id = session.scalar(select(AssetModel.id).where(AssetModel.uri == asset.uri))
        events = list(session.scalars(select(AssetEvent).where(AssetEvent.asset_id == asset_id)))
        queued = list(session.scalars(select(AssetDagRunQueue.target_dag_id).where(AssetDagRunQueue.asset_id == asset_id)))
    assert len(events) == 1
    extra = events[0].extra
    assert extra["checkpoint"] == checkpoint and extra["target_ms"] == emitted
    assert extra["emitted_through_ms"] == emitted and extra["target"] == pendulum.from_timestamp(emitted / 1000, tz="UTC").format("YYYY-MM-DD[T]HH:mm:ss[Z]")
    assert extra["watermark_ms"] == read_checkpoint(checkpoint).next_watermark_ms
    assert extra["state"] == "lagging" and extra["latest_batch_id"] == 3
    assert queued == ["consumer_of_completeness"]  # downstream scheduled on completeness


def test_with_an_allowed_lateness_a_target_and_a_partition_are_final_only_that_far_behind_the_watermark(
        airflow_db, spark):
    """Corrections of late rows within the allowed lateness may still come until the watermark is
    that far past a window's end: the gate and the partition announcements wait for it."""
    from airflow.sdk import Asset

    from watermark_ops.airflow.partitions import WatermarkPartitionsOperator
    from watermark_ops.airflow.sensors import WatermarkReachedSensor

    checkpoint = sf.backlog_then_future_record(spark).checkpoints["lagging"]
    emitted = _offsets(checkpoint)[3]["batchWatermarkMs"]  # the trailing batch ran with it
    hour = 3_600_000
    asset = Asset(name="test_final_through_asset", uri="watermark-ops://test/final_through")
    hours = Asset(name="test_final_hours", uri="watermark-ops://test/final_hours")
    since = pendulum.from_timestamp((emitted // hour - 4) * hour / 1000, tz="UTC").isoformat()
    with _dag("allowed_lateness_gates") as dag:
        WatermarkReachedSensor(task_id="final", checkpoint=checkpoint, target=emitted - hour, asset=asset,
                               allowed_lateness="1 hour", poke_interval=1, timeout=30)
        WatermarkReachedSensor(task_id="not_yet", checkpoint=checkpoint, target=emitted - hour + 1,
                               allowed_lateness="1 hour", mode="reschedule", poke_interval=1, timeout=3)
        WatermarkPartitionsOperator(task_id="hours", checkpoint=checkpoint, asset=hours, since=since, grain="hour",
                                    allowed_lateness="1 hour")
    run = sf.run_dag(dag)
    states = sf.task_states(run)
    assert (states[("final", -1)], states[("not_yet", -1)], states[("hours", -1)]) == ("success", "failed", "success")
    announced = sf.xcoms(run)[("hours", -1, "return_value")]
    assert announced["final_through_ms"] == emitted - hour and announced["allowed_lateness_ms"] == hour
    # the hours that ended an hour or more before the watermark, not the last hour before it
    last_end = max(p["end_ms"] for p in announced["partitions"].values())
    assert last_end <= emitted - hour < last_end + hour


def test_reached_sensor_reschedule_mode_times_out_under_trigger_once(airflow_db, spark, tmp_path):
    from watermark_ops.airflow.sensors import WatermarkReachedSensor

    job, moved_to = _once_job(spark, tmp_path / "once")
    assert read_checkpoint(job.checkpoint).next_watermark_ms == moved_to > 0  # the watermark is there ...
    with _dag("reached_sensor_reschedule") as dag:
        WatermarkReachedSensor(task_id="complete", checkpoint=job.checkpoint, target=moved_to, mode="reschedule",
                               poke_interval=1, timeout=3)
    run = sf.run_dag(dag)
    assert sf.task_states(run) == {("complete", -1): "failed"}
    value = sf.xcoms(run)[("complete", -1, "return_value")]
    # ... but under Trigger.Once no batch has run with it: its windows are not in the sink yet.
    assert value["outcome"] == "fail" and value["emitted_through_ms"] == 0
    assert value["message"].startswith("target not reached after waiting 3 s: not reached")


def test_reached_sensor_deferrable_completes_when_the_next_run_commits(airflow_db, spark, tmp_path):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.sdk import Asset
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from watermark_ops.airflow.sensors import WatermarkReachedSensor

    job, moved_to = _once_job(spark, tmp_path / "once")
    asset = Asset(name="once_complete", uri="watermark-ops://test/once")
    with _dag("reached_sensor_deferrable") as dag:
        WatermarkReachedSensor(task_id="complete", checkpoint=job.checkpoint, target=moved_to, asset=asset,
                               deferrable=True, poke_interval=0.5, timeout=timedelta(minutes=5))
    deferred = []

    def next_run_once_deferred():
        deferred.append(sf.wait_for_trigger_row(TRIGGER, job.checkpoint))
        job.land_day(2)
        job.run(spark, "once")  # batch 1 runs with the watermark batch 0 computed

    runner = threading.Thread(target=next_run_once_deferred)
    runner.start()
    try:
        run = sf.run_dag(dag)
    finally:
        runner.join(timeout=300)
    assert deferred == [True]
    assert sf.task_states(run) == {("complete", -1): "success"}
    assert _offsets(job.checkpoint)[1]["batchWatermarkMs"] == moved_to
    with create_session() as session:
        asset_id = session.scalar(select(AssetModel.id).where(AssetModel.uri == asset.uri))
        (event,) = session.scalars(select(AssetEvent).where(AssetEvent.asset_id == asset_id))
    assert event.extra["emitted_through_ms"] == moved_to == event.extra["target_ms"]
