"""The run pattern's two launches over the same two days give the same outputs.

One DAG per launch (``watermarked_run(..., launch="submit")`` through spark-submit, and
``launch="connect"`` on the session's Spark Connect server), each with its own runtime folder and
assets, the same flights landed for 2013-01-01 and 2013-01-02, two daily runs each through
``dag.test()``. Compared: the windows in the sink, the progress logs (what the recorder wrote,
without ids, times and durations), the late-row ledger's XCom and rows, the audit's findings, the
completeness gate's and the day announcements' asset events.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pendulum
import pytest

NY = "America/New_York"
START = pendulum.datetime(2013, 1, 1, tz=NY)
DAYS = (START.add(days=1), START.add(days=2))  # logical dates: the intervals of Jan 1 and Jan 2
#: Fields that differ between any two runs whatever the launch (ids, wall-clock times, durations).
VOLATILE = {"query_id", "run_id", "timestamp", "timestamp_ms", "duration_ms", "run_tag", "late_ledger.run_tag",
            "sink_files", "audited_at_ms", "evaluated_at", "evaluated_at_ms", "first_batch_ms", "first_batch_time",
            "idle_ms", "last_advanced_ms", "lag_ms", "skew_ms", "time", "latest_batch_time", "reasons"}


def _normal(value, home: str):
    """``value`` without :data:`VOLATILE` keys, the runtime folder spelled ``HOME``."""
    if isinstance(value, dict):
        return {k: _normal(v, home) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, (list, tuple)):
        return [_normal(v, home) for v in value]
    if isinstance(value, str):
        return value.replace(home, "HOME")
    return value


def _pipeline(launch: str, home: Path):
    """The flights run pattern as a DAG of its own (dag id, assets and folders per launch)."""
    from airflow.sdk import DAG, Asset, CronDataIntervalTimetable, task

    from watermark_ops.airflow.run import watermarked_run
    from watermark_ops.examples.flights.daily import day_asset_uri, day_facts
    from watermark_ops.examples.flights.settings import SPARK_JOBS_DIR, job_locations, spark_submit_env

    loc = job_locations("flight_windows", home)
    with DAG(dag_id=f"flights_{launch}", schedule=CronDataIntervalTimetable("0 0 * * *", timezone=NY),
             start_date=START, catchup=False, max_active_runs=1, default_args={"retries": 0}) as dag:
        @task
        def land(data_interval_start=None, data_interval_end=None) -> dict:
            from watermark_ops.examples.flights.lander import land_interval

            return land_interval(data_interval_start, data_interval_end, loc["landing"])

        run = watermarked_run(
            "flight_windows_run", launch=launch,
            application=str(SPARK_JOBS_DIR / "flight_windows.py"),
            py_files=",".join(str(SPARK_JOBS_DIR / f) for f in ("flight_inputs.py", "upsert_sink.py")),
            checkpoint=loc["checkpoint"], landings=[loc["landing"]],
            application_args=["--landing", loc["landing"], "--output", loc["output"], "--delay-threshold", "2 hours"],
            conf={"spark.sql.shuffle.partitions": "2"}, env_vars=spark_submit_env(),
            late_sink=loc["output"] + "_late", lateness=False,
            complete_target="{{ data_interval_start }}",
            complete_asset=Asset(name=f"flights_{launch}_complete", uri="file://" + loc["output"]),
            complete_kwargs={"max_lag": None, "mode": "poke", "poke_interval": 2.0, "timeout": 60.0},
            partition_asset=Asset(name=f"flights_{launch}_days", uri=day_asset_uri(loc["output"])),
            partition_since=START.isoformat(), partition_timezone=NY, partition_facts=day_facts(loc["output"]),
            task_ids={"submit": "flight_windows"}, prefix_group_id=False,
            spark_submit_kwargs={"execution_timeout": timedelta(minutes=10)},
        )
        land() >> run
    return dag, loc


def _xcoms(dag_id: str, run_id: str) -> dict:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return {(x.task_id, x.key): XComModel.deserialize_value(x)
                for x in session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_id))}


def _events(asset_name: str) -> list:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetEvent.partition_key, AssetEvent.extra).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == asset_name).order_by(AssetEvent.id)).all()
    return [(key, extra) for key, extra in rows]


def _outputs(launch: str, home: Path) -> dict:
    """Run both days through ``dag.test()`` and gather every output of the launch."""
    from watermark_ops.examples.flights.daily import sink_windows

    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    dag, loc = _pipeline(launch, home)
    # dag.test() runs a DAG that is serialized in the metadata DB: write this one there first.
    (home / "dags").mkdir(parents=True, exist_ok=True)
    bag = DagBag(dag_folder=str(home / "dags"))
    bag.bag_dag(dag)
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, "dags-folder", None)
    runs = []
    for day in DAYS:
        run = dag.test(logical_date=day)
        assert run.state == "success", (launch, day)
        runs.append(_xcoms(dag.dag_id, run.run_id))
    windows = sink_windows(loc["output"], 0, 2**62).sort_values(["origin", "window_start_ms"]).reset_index(drop=True)
    late = {p.name: [json.loads(line) for line in p.read_text().splitlines()]
            for p in sorted(Path(loc["output"] + "_late").glob("batch=*.jsonl"))}
    progress = [json.loads(line) for suffix in ("", "_quarantine")
                for line in Path(loc["checkpoint"] + suffix + ".progress.jsonl").read_text().splitlines()]
    home_text = str(home)
    return {
        "windows": windows.to_dict("records"),
        "late_rows": _normal(late, home_text),
        "progress": _normal(progress, home_text),
        "xcom": [_normal({f"{t}.{k}": v for (t, k), v in sorted(x.items()) if t != "flight_windows"}, home_text)
                 for x in runs],
        "complete_events": _normal(_events(f"flights_{launch}_complete"), home_text),
        "day_events": _normal(_events(f"flights_{launch}_days"), home_text),
    }


def test_submit_and_connect_launches_give_the_same_outputs(airflow_db, connect_server, tmp_path):
    connect = _outputs("connect", tmp_path / "connect")
    submit = _outputs("submit", tmp_path / "submit")
    assert len(submit["windows"]) > 100 and submit["windows"] == connect["windows"]
    assert submit["late_rows"] and submit["late_rows"] == connect["late_rows"]
    assert any(line for line in submit["late_rows"].values())  # day 2 drops some of day 1's flights as late
    assert [r["batch_id"] for r in connect["progress"]] == [0, 1, 2, 3, 0, 1]  # data + trailing batch per day
    assert all(r["event_time_max_ms_by_partition"] for r in connect["progress"] if r["name"] == "flight_windows")
    assert submit["progress"] == connect["progress"]
    for day, (sub, con) in enumerate(zip(submit["xcom"], connect["xcom"])):
        assert sub["late_ledger.balanced"] is True, day
        assert sub == con, day
    assert submit["complete_events"] and submit["complete_events"] == connect["complete_events"]
    assert [key for key, _ in submit["day_events"]] == ["2013-01-01"]
    assert submit["day_events"] == connect["day_events"]
