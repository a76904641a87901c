"""The DAG files parse cleanly and cheaply; flights_pipeline runs end to end on real Airflow and Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pendulum
import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"


def test_dagbag_has_no_import_errors():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert "flights_pipeline" in bag.dag_ids


@pytest.mark.parametrize("dag_file", sorted(p.name for p in DAGS.glob("*.py")))
def test_dag_file_imports_no_pyspark(dag_file):
    """Parsing a DAG file must stay cheap: no pyspark (nor pandas) at module level."""
    code = (
        "import runpy, sys; runpy.run_path(sys.argv[1]); "
        "print(sorted(m for m in ('pyspark', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(DAGS / dag_file)], capture_output=True, text=True,
                         check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO / "plugins")})
    assert out.stdout.strip().splitlines()[-1] == "[]"


def _local_imports(script: Path) -> set[str]:
    """The spark_jobs modules a job script imports, directly or through each other (file names)."""
    import ast

    found, todo = set(), [script]
    while todo:
        tree = ast.parse(todo.pop().read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                module = script.parent / f"{name.split('.')[0]}.py"
                if module.exists() and module.name not in found:
                    found.add(module.name)
                    todo.append(module)
    return found


def test_spark_submit_ships_every_module_the_job_imports():
    """Under spark-submit the job finds its sibling modules only through --py-files."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from watermark_ops.airflow.restart import DiagnosedSparkSubmitOperator  # a SparkSubmitOperator when it runs

    bag = DagBag(dag_folder=str(DAGS))
    submits = [t for dag in bag.dags.values() for t in dag.tasks
               if isinstance(t, (SparkSubmitOperator, DiagnosedSparkSubmitOperator))]
    assert {t.task_id for t in submits} >= {"flight_windows", "flight_weather"}
    for task in submits:
        shipped = {Path(f).name for f in (task.py_files or "").split(",") if f}
        assert shipped == _local_imports(Path(task.application)), task.task_id


def test_pipeline_shape():
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(DAGS / "flights_pipeline.py")).dags["flights_pipeline"]
    assert dag.max_active_runs == 1
    # The restart preflight gates the launch; the state is read after the audit.
    assert dag.get_task("preflight").upstream_task_ids == {"land"}
    assert dag.get_task("flight_windows").upstream_task_ids == {"preflight"}
    assert dag.get_task("state_checkpoint").upstream_task_ids == {"audit_checkpoint"}
    # The example's state stays compacted although each spark-submit lives seconds (docs/state-and-preflight.md).
    assert dag.get_task("flight_windows").conf["spark.sql.streaming.stateStore.maintenanceInterval"] == "1s"
    assert "flight_windows" in dag.get_task("collect_progress").upstream_task_ids
    assert dag.get_task("late_ledger").upstream_task_ids == {"flight_windows"}
    assert dag.get_task("audit_checkpoint").upstream_task_ids == {"flight_windows"}
    assert dag.get_task("windows_complete").upstream_task_ids == {"audit_checkpoint"}  # after a passed audit
    # Day partitions are announced after the gate and after the ledger wrote the run's late rows.
    assert dag.get_task("announce_days").upstream_task_ids == {"late_ledger", "windows_complete"}
    spark = dag.get_task("flight_windows")
    assert spark.retries == 2 and spark.execution_timeout.total_seconds() == 1800
    assert "{{ run_id }}" in spark.application_args
    # The future-time option: a string Param, off (empty) by default, passed through to the job.
    param = dag.params.get_param("max_event_time_ahead")
    assert param.value == "" and param.schema["type"] == "string" and "watermark" in param.description
    assert "--max-event-time-ahead={{ params.max_event_time_ahead }}" in spark.application_args


def test_future_time_option_renders_and_an_empty_value_is_off():
    """The rendered argument reaches the job's parser; the default (empty) turns the check off."""
    from airflow.dag_processing.dagbag import DagBag
    from jinja2 import Environment, StrictUndefined

    import flight_windows as fw

    dag = DagBag(dag_folder=str(DAGS / "flights_pipeline.py")).dags["flights_pipeline"]
    (template,) = [a for a in dag.get_task("flight_windows").application_args if a.startswith("--max-event-time-ahead")]
    for value, expected in (("", None), ("  ", None), ("1 hour", "1 hour")):
        rendered = Environment(undefined=StrictUndefined).from_string(template).render(
            params={**dag.params.dump(), "max_event_time_ahead": value})
        args = fw.parse_args(["--landing", "l", "--checkpoint", "c", "--output", "o", rendered])
        config = fw.JobConfig(landing="l", checkpoint="c", output="o", max_event_time_ahead=args.max_event_time_ahead)
        assert config.max_event_time_ahead == expected
    with pytest.raises(ValueError, match="expected an interval"):
        fw.JobConfig(landing="l", checkpoint="c", output="o", max_event_time_ahead="soon")
    # Daily America/New_York intervals: the spring-forward day lasts 23 hours.
    from airflow.serialization.encoders import coerce_to_core_timetable

    interval = coerce_to_core_timetable(dag.timetable).infer_manual_data_interval(
        run_after=pendulum.datetime(2013, 3, 11, tz="America/New_York")
    )
    assert (interval.end - interval.start).total_seconds() == 23 * 3600


def test_one_dag_run_end_to_end(airflow_db):
    """land → spark-submit (a real driver) → collect_progress, through dag.test()."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from watermark_ops.examples.flights.settings import job_locations

    dag = DagBag(dag_folder=str(DAGS / "flights_pipeline.py")).dags["flights_pipeline"]
    # A manual run of logical date D covers the daily interval that ends at D.
    run = dag.test(logical_date=pendulum.datetime(2013, 1, 2, tz="America/New_York"))
    assert run.state == "success"
    with create_session() as session:
        xcoms = {
            (x.task_id, x.key): XComModel.deserialize_value(x)
            for x in session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids="flights_pipeline"))
        }
    landed = xcoms[("land", "return_value")]
    assert landed["start"] == "2013-01-01T05:00:00Z" and landed["records"] == 761
    assert xcoms[("collect_progress", "batch_ids")] == [0, 1]  # data batch + trailing no-data batch
    assert xcoms[("collect_progress", "quarantined_rows")] == 4  # the day's cancelled flights
    by_reason = xcoms[("collect_progress", "quarantined_by_reason")]
    assert by_reason["null_event_time"] == 4 and sum(by_reason.values()) == 4
    assert by_reason["future_event_time"] == 0  # the default (empty) Param reached the job as "off"
    checkpoint = Path(job_locations("flight_windows")["checkpoint"])
    offsets_1 = json.loads((checkpoint / "offsets" / "1").read_text().splitlines()[1])
    assert xcoms[("collect_progress", "last_watermark_ms")] == offsets_1["batchWatermarkMs"] > 0
    assert xcoms[("collect_progress", "last_watermark")] == pendulum.from_timestamp(
        offsets_1["batchWatermarkMs"] / 1000).format("YYYY-MM-DDTHH:mm:ss[Z]")
    assert xcoms[("collect_progress", "windows_emitted")] > 0
    # The late-row ledger: nothing is late on the first day (its batch ran with watermark 0), and the
    # run balances: the 761 rows read = aggregated + late + the 4 quarantined.
    assert xcoms[("late_ledger", "balanced")] is True and xcoms[("late_ledger", "complete")] is True
    assert (xcoms[("late_ledger", "rows_in")], xcoms[("late_ledger", "rows_late")],
            xcoms[("late_ledger", "rows_quarantined")], xcoms[("late_ledger", "rows_aggregated")]) == (761, 0, 4, 757)
    assert xcoms[("late_ledger", "late_by_batch")] == {"0": 0, "1": 0}
    (sink_file,) = xcoms[("late_ledger", "sink_files")]
    assert sink_file.endswith("flight_windows_late/batch=0.jsonl") and Path(sink_file).read_bytes() == b""
    # The restart gate said go (a new checkpoint); the state after the audit: one windowed aggregation,
    # bounded by the watermark, its rows the progress log's numRowsTotal.
    assert xcoms[("preflight", "return_value")]["verdict"] == "go"
    (operator,) = xcoms[("state_checkpoint", "return_value")]["operators"]
    assert operator["name"] == "stateStoreSave" and operator["bounded_by_watermark"] is True
    assert operator["batch_ids"] == [0, 1] and operator["rows"][-1] > 0
    audit = xcoms[("audit_checkpoint", "return_value")]
    assert audit["status"] == "ok" and audit["watermark_ms"] == offsets_1["batchWatermarkMs"]
    assert [b["batch_id"] for b in audit["batches"]] == [0, 1]
    # The completeness gate passed: the watermark is past the interval start, and the asset
    # event tells downstream DAGs through which instant the windows are final.
    from airflow.models.asset import AssetEvent, AssetModel
    from sqlalchemy import select

    with create_session() as session:
        events = session.scalars(
            select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.name == "flight_windows_complete")
        ).all()
        extras = [e.extra for e in events]
    assert extras and extras[-1]["watermark_ms"] == offsets_1["batchWatermarkMs"]
    assert extras[-1]["emitted_through_ms"] >= pendulum.datetime(2013, 1, 1, tz="America/New_York").int_timestamp * 1000


def test_killing_the_spark_task_kills_the_driver(tmp_path):
    """The provider operator's on_kill (what Airflow calls when the task is killed) ends the
    spark-submit JVM and the Python driver; the batch it was running stays in flight."""
    import threading
    import time

    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from watermark_ops.examples.flights.lander import land_interval
    from watermark_ops.examples.flights.settings import SPARK_JOBS_DIR, spark_submit_env

    start = pendulum.datetime(2013, 1, 1, tz="America/New_York")
    for day in range(6):
        land_interval(start.add(days=day), start.add(days=day + 1), str(tmp_path / "landing"))
    checkpoint = tmp_path / "ck"
    operator = SparkSubmitOperator(
        task_id="flight_windows", application=str(SPARK_JOBS_DIR / "flight_windows.py"),
        py_files=str(SPARK_JOBS_DIR / "flight_inputs.py"),
        conf={"spark.sql.shuffle.partitions": "2"},
        application_args=["--landing", str(tmp_path / "landing"), "--checkpoint", str(checkpoint),
                          "--output", str(tmp_path / "out"), "--max-files-per-trigger", "1"],
        env_vars=spark_submit_env(),
    )
    errors: list[Exception] = []

    def execute():
        try:
            operator.execute({})
        except Exception as exc:  # the killed spark-submit makes execute raise
            errors.append(exc)

    def drivers() -> list[str]:
        out = subprocess.run(["pgrep", "-af", str(checkpoint)], capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if "pgrep" not in line]

    thread = threading.Thread(target=execute)
    thread.start()
    deadline = time.monotonic() + 240
    while not (checkpoint / "offsets" / "1").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (checkpoint / "offsets" / "1").exists(), "the job never reached batch 1"
    assert any("flight_windows.py" in line and "java" not in line for line in drivers())  # the Python driver
    operator.on_kill()
    thread.join(120)
    deadline = time.monotonic() + 30
    while drivers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert drivers() == [] and not thread.is_alive()
    assert errors, "execute must fail when its driver is killed"
    batches = {p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()}
    commits = {p.name for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    assert commits < batches  # the newest batch is in flight: Spark re-runs it on restart
