"""Crash and restart without loss: SIGKILL the DAG task's Spark driver at each point of a run, and
let Airflow's retry restart it.

One checkpoint, four consecutive daily runs of ``flights_pipeline`` through ``dag.test()`` (real
scheduler loop, real spark-submit, real retries): the first runs clean, each later one has its
driver (the spark-submit JVM and the Python driver) killed with SIGKILL at one point of
:data:`crash_points.POINTS`; the task fails, Airflow retries it (the restart through the DAG), the
run succeeds. While the driver is dead the audit reports the in-flight batch (or nothing, when the
kill came before or after a batch); after the restart it passes. At the end the window sink and the
quarantine hold exactly what an independent pandas replay of the four days predicts: nothing
lost, nothing written twice.

``WATERMARK_OPS_CRASH_POINTS`` (comma-separated, default all) picks the points; the points asked and
reached are printed (``-s`` shows them). To repeat, run the test again (each pytest session has its
own metadata DB and runtime folder)::

    for i in 1 2 3 4 5; do .venv/bin/python -m pytest -q -s tests/dags/test_crash_restart.py | grep '→'; done
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pendulum
import pytest

from tests.dags.crash_points import DriverKiller
from tests.spark_jobs.flight_expectations import assert_quarantine_equals, assert_sink_equals, expected_windows

DAGS = Path(__file__).resolve().parents[2] / "dags"
NY = "America/New_York"
POINTS = tuple(os.environ.get("WATERMARK_OPS_CRASH_POINTS", "before_offsets,in_flight,after_commit").split(","))
PLAN = (None, *POINTS)  # day 1 clean, then one kill per run


def _xcoms(run_id: str) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return {
            (x.task_id, x.key): XComModel.deserialize_value(x)
            for x in session.scalars(XComModel.get_many(run_id=run_id, dag_ids="flights_pipeline"))
        }


def _tries(run_id: str, task_id: str) -> int:
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalar(select(TaskInstance.try_number).where(
            TaskInstance.run_id == run_id, TaskInstance.task_id == task_id, TaskInstance.dag_id == "flights_pipeline"))


def _forget(locations: dict) -> None:
    """Remove the pipeline's files and the audit's and the day announcements' memory of its
    checkpoint: the session's other pipeline tests start from a new checkpoint (and one metadata DB
    holds one asset per name, so this test uses the session's runtime folder, not one of its own)."""
    import shutil

    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    from watermark_ops.airflow.memory import AssetStateStoreMemory

    checkpoint, output = locations["checkpoint"], locations["output"]
    for path in (locations["landing"], checkpoint, checkpoint + "_quarantine", output, output + "_quarantine"):
        shutil.rmtree(path, ignore_errors=True)
    for suffix in (".progress.jsonl", ".lock", "_quarantine.progress.jsonl", "_quarantine.lock"):
        Path(checkpoint + suffix).unlink(missing_ok=True)
    with create_session() as session:
        session.query(AssetStateStoreModel).filter(AssetStateStoreModel.key.in_(
            [AssetStateStoreMemory(None).key(checkpoint), "watermark_partitions:day:" + checkpoint])).delete(
            synchronize_session=False)


@pytest.fixture
def pipeline(airflow_db):
    """The flights_pipeline DAG (retries at once) and its job's locations, cleaned before and after."""
    from airflow.dag_processing.dagbag import DagBag

    from watermark_ops.examples.flights.settings import job_locations

    locations = job_locations("flight_windows")
    _forget(locations)
    dag = DagBag(dag_folder=str(DAGS / "flights_pipeline.py")).dags["flights_pipeline"]
    dag.task_dict["flight_windows"].retry_delay = timedelta(seconds=1)  # restart at once, not in 30 s
    gate = dag.task_dict["windows_complete"]
    gate.poke_interval, gate.timeout = 5.0, 240.0  # a gate that never opens fails the test in minutes, not an hour
    yield dag, locations
    _forget(locations)


def test_sigkill_at_each_point_then_restart_through_the_dag(spark, pipeline):
    dag, locations = pipeline
    counts: Counter = Counter()
    landed = []
    for day, point in enumerate(PLAN, start=2):
        killer = DriverKiller(locations["checkpoint"], point) if point else None
        if killer:
            killer.start()
        run = dag.test(logical_date=pendulum.datetime(2013, 1, day, tz=NY))
        if killer:
            killer.stop()
            killer.join()
        xcoms = _xcoms(run.run_id)
        landed.append(xcoms[("land", "return_value")])
        if killer:
            print(f"\n{point}: reached {killer.crash.reached}, killed {killer.crash.killed}, run {run.state}")
        assert run.state == "success", (point, killer and killer.crash)
        assert xcoms[("audit_checkpoint", "return_value")]["status"] == "ok"  # after the restart
        if not killer:
            assert _tries(run.run_id, "flight_windows") == 1
            continue
        crash = killer.crash
        assert crash.killed, f"{point}: the driver was never caught (the run ended first)"
        counts[(point, crash.reached)] += 1
        assert _tries(run.run_id, "flight_windows") == 2  # killed once, restarted once by Airflow
        # While the driver was dead: an in-flight batch is reported as such, never as a regression.
        findings = {f["rule"] for f in crash.audit["findings"]}
        assert crash.audit["status"] == "ok", crash.audit["findings"]
        if crash.reached.startswith("in_flight"):
            assert crash.audit["in_flight_batch"] == max(crash.offsets) and "in_flight_batch" in findings
        else:
            assert crash.audit["in_flight_batch"] is None and "in_flight_batch" not in findings
    emitted, _, _, _ = expected_windows(landed)
    assert_sink_equals(spark.read.parquet(locations["output"]).toPandas(), emitted)
    assert_quarantine_equals(spark.read.parquet(locations["output"] + "_quarantine").toPandas(), landed)
    print("\ncrash points (asked, reached): count")
    for (asked, reached), count in sorted(counts.items()):
        print(f"  {asked:>15} → {reached:<22} {count}")
    assert {asked for asked, _ in counts} == set(POINTS)
