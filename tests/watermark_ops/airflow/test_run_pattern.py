"""The run pattern's wiring for an unmodified job (``attach=True``): no Spark, no DB, just the DAG it builds."""

from __future__ import annotations

import pendulum
import pytest
from airflow.sdk import DAG

from watermark_ops.airflow.run import launcher_path, watermarked_run

JOB = "/srv/jobs/readings.py"


def _group(**kwargs):
    with DAG("readings", schedule=None, start_date=pendulum.datetime(2013, 1, 1, tz="UTC")) as dag:
        watermarked_run("readings", application=JOB, checkpoint="/ck/readings", landings=["/landing"],
                        application_args=["--landing", "/landing", "--checkpoint", "/ck/readings"], **kwargs)
    return dag


def test_an_attached_job_runs_under_the_launcher_with_its_own_arguments_after_the_declarations():
    dag = _group(attach=True, window="1 hour", event_time="event_time", pre_watermark="readings:parse",
                 reason_column="reason", partition_column="station", partitions=["north", "south"])
    submit = dag.get_task("readings.spark_submit")
    assert submit.application == launcher_path() and launcher_path().endswith("watermark_ops/spark/launch.py")
    args = list(submit.application_args)
    split = args.index("--")
    assert args[split + 1:] == [JOB, "--landing", "/landing", "--checkpoint", "/ck/readings"]  # the job's, unchanged
    declared = dict(zip(args[:split:2], args[1:split:2]))
    assert declared == {"--checkpoint": "/ck/readings", "--run-tag": "{{ run_id }}", "--window": "1 hour",
                        "--event-time": "event_time", "--pre-watermark": "readings:parse",
                        "--reason-column": "reason", "--partition-column": "station",
                        "--partitions": "north,south", "--landing": "/landing"}
    assert "--trigger" not in args  # the job's trigger stays the job's
    assert submit.conf["spark.log.level"] == "WARN"  # the task log: the job's lines, not every INFO line
    # The check runs on the ledger's result.
    assert dag.get_task("readings.check_run").upstream_task_ids == {"readings.late_ledger"}


def test_the_connect_launch_gives_the_launcher_its_connect_flags_before_the_job():
    dag = _group(attach=True, launch="connect", window="1 hour")
    command = dag.get_task("readings.spark_submit").command("sc://host:15002", "session")
    assert command[1] == launcher_path()
    assert command.index("--remote") < command.index("--") < command.index(JOB)


def test_a_job_written_with_the_helpers_gets_the_shared_flags():
    dag = _group()
    submit = dag.get_task("readings.spark_submit")
    assert submit.application == JOB
    assert list(submit.application_args)[-6:] == ["--checkpoint", "/ck/readings", "--trigger", "availableNow",
                                                  "--run-tag", "{{ run_id }}"]


@pytest.mark.parametrize("kwargs, says", [
    ({"window": "1 hour"}, "need attach=True"),
    ({"attach": True, "partition_column": "station"}, "partition_column and partitions go together"),
    ({"max_quarantine_rate": 1.5}, "between 0 and 1"),
])
def test_declarations_are_checked_when_the_dag_is_parsed(kwargs, says):
    with pytest.raises(ValueError, match=says):
        _group(**kwargs)
