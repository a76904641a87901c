"""The run pattern's wiring: for an unmodified job (``attach=True``) and a helpers job, the DAG it
builds (no Spark, no DB); the restart gate before the launch and the state check after the audit;
and the gate for real (``dag.test()``, the session's SQLite DB): a no_go checkpoint fails the
preflight task with the reason, the file and the recipe, and the launch never runs."""

from __future__ import annotations

import json

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
    assert declared == {"--checkpoint": "/ck/readings", "--run-tag": "{{ run_id }}",
                        "--data-interval-start": "{{ data_interval_start }}",
                        "--data-interval-end": "{{ data_interval_end }}", "--window": "1 hour",
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
    assert list(submit.application_args)[-10:] == ["--checkpoint", "/ck/readings", "--trigger", "availableNow",
                                                   "--run-tag", "{{ run_id }}",
                                                   "--data-interval-start", "{{ data_interval_start }}",
                                                   "--data-interval-end", "{{ data_interval_end }}"]


def test_the_launcher_and_a_helpers_job_get_the_runs_data_interval_and_parse_it_into_the_stamp():
    """The rendered command (Airflow renders ``application_args`` with the run's context) gives the
    launcher and a helpers job the data interval the recorder stamps on every progress record; a run
    without one (rendered ``None``) gets no stamp."""
    import argparse

    import jinja2

    from watermark_ops.spark.driver import add_run_arguments
    from watermark_ops.spark.launch import parse_launch_args
    from watermark_ops.spark.recorder import data_interval_of

    start = pendulum.datetime(2010, 6, 1, tz="UTC")
    context = {"run_id": "backfill__2010-06-01", "data_interval_start": start,
               "data_interval_end": start.add(days=1)}
    stamp = {"start_ms": 1_275_350_400_000, "end_ms": 1_275_436_800_000}

    def rendered(dag, **values):
        return [jinja2.Template(a).render(**{**context, **values}) for a in dag.get_task("readings.spark_submit").application_args]

    args, script, _ = parse_launch_args(rendered(_group(attach=True, window="1 hour")))
    assert script == JOB and args.run_tag == "backfill__2010-06-01" and args.data_interval == stamp
    connect = _group(attach=True, launch="connect", window="1 hour").get_task("readings.spark_submit")
    command = connect.command("sc://host:15002", "session")
    assert command.index("--data-interval-end") < command.index("--") and "{{ data_interval_end }}" in command
    parser = argparse.ArgumentParser()
    parser.add_argument("--landing")
    add_run_arguments(parser)
    assert data_interval_of(parser.parse_args(rendered(_group()))) == stamp
    manual = parser.parse_args(rendered(_group(), data_interval_start=None, data_interval_end=None))
    assert data_interval_of(manual) is None


def test_the_preflight_gates_the_launch_and_the_state_is_read_after_the_audit():
    dag = _group(attach=True, accept_changes=["window_duration", "source_path_changed"])
    assert dag.get_task("readings.spark_submit").upstream_task_ids == {"readings.preflight"}
    assert dag.get_task("readings.state_checkpoint").upstream_task_ids == {"readings.audit_checkpoint"}
    args = list(dag.get_task("readings.spark_submit").application_args)
    assert "--accept-changes=window_duration,source_path" in args[:args.index("--")]  # to the launcher
    submit = dag.get_task("readings.spark_submit")
    assert submit.diagnosis_checkpoints == ["/ck/readings", "/ck/readings_quarantine"]
    helpers = _group(accept_changes="{{ params.accept }}")
    assert "--accept-changes={{ params.accept }}" in helpers.get_task("readings.spark_submit").application_args
    off = _group(preflight=False, state_check=False)
    assert "readings.preflight" not in off.task_ids and "readings.state_checkpoint" not in off.task_ids
    with pytest.raises(ValueError, match="Spark itself refuses that restart"):
        _group(accept_changes=["key_schema"])


def test_the_gate_go_warn_and_no_go_and_the_state_check(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    from tests.watermark_ops.checkpoint_fixtures import handmade_checkpoint
    from watermark_ops.airflow.restart import preflight_gate, runtime_spark_version, state_check

    new = preflight_gate(str(tmp_path / "not_yet"), {"spark.sql.shuffle.partitions": "4"})
    assert new["verdict"] == "go" and [f["code"] for f in new["findings"]] == ["new_checkpoint"]
    assert new["spark_version"] == runtime_spark_version() == "4.2.0"
    handmade_checkpoint(str(tmp_path / "ok"), [(0, 10), (10, 20)])
    warned = preflight_gate(str(tmp_path / "ok"), {"spark.sql.shuffle.partitions": "8"})
    assert warned["verdict"] == "warn" and warned["line"].startswith("preflight warn: ")
    assert "conf_overridden" in warned["line"] and "What to do:" in warned["line"]
    handmade_checkpoint(str(tmp_path / "bad"), [(0, 10), (10, 20)], query_id=None)
    with pytest.raises(AirflowFailException, match=r"^preflight no_go: .*metadata_missing.*"
                                                   rf"\[{tmp_path / 'bad' / 'metadata'}\]\. What to do: restore"):
        preflight_gate(str(tmp_path / "bad"))
    document = state_check(str(tmp_path / "ok"))
    assert (document["has_state_folder"], document["operators"], document["findings"]) == (False, [], [])


def test_the_gate_reads_object_storage_through_the_connection(tmp_path, s3_server, aws_conn_id):
    from airflow.sdk.exceptions import AirflowFailException

    from tests.watermark_ops import object_storage_fixtures as osf
    from tests.watermark_ops.checkpoint_fixtures import handmade_checkpoint
    from watermark_ops.airflow.restart import preflight_gate

    fs = s3_server.filesystem()
    handmade_checkpoint(str(tmp_path / "ok"), [(0, 10), (10, 20)])
    handmade_checkpoint(str(tmp_path / "bad"), [(0, 10), (10, 20)], query_id=None)
    ok, bad = osf.uploaded_checkpoint(fs, tmp_path / "ok"), osf.uploaded_checkpoint(fs, tmp_path / "bad")
    warned = preflight_gate(ok, {"spark.sql.shuffle.partitions": "8"}, conn_id=aws_conn_id)
    local = preflight_gate(str(tmp_path / "ok"), {"spark.sql.shuffle.partitions": "8"})
    assert warned["verdict"] == "warn" and warned["line"] == local["line"].replace(str(tmp_path / "ok"), ok)
    with pytest.raises(AirflowFailException, match=rf"metadata_missing.*\[{bad}/metadata\]"):
        preflight_gate(bad, conn_id=aws_conn_id)


def test_a_no_go_checkpoint_fails_the_preflight_task_and_nothing_is_launched(airflow_db, tmp_path):
    from tests.watermark_ops import stall_fixtures as sf
    from tests.watermark_ops.checkpoint_fixtures import handmade_checkpoint

    checkpoint = str(tmp_path / "ck")
    handmade_checkpoint(checkpoint, [(0, 10), (10, 20)], query_id=None)  # metadata missing: Spark refuses
    with DAG("wo_run_pattern_no_go", schedule=None, start_date=pendulum.datetime(2013, 1, 1, tz="UTC")) as dag:
        watermarked_run("readings", application=str(tmp_path / "never.py"), checkpoint=checkpoint,
                        attach=True, window="1 hour", conf={"spark.sql.shuffle.partitions": "2"})
    run = sf.run_dag(dag)
    states = {task: state for (task, _), state in sf.task_states(run).items()}
    assert states["readings.preflight"] == "failed"
    assert states["readings.spark_submit"] == "upstream_failed"  # never launched
    document = sf.xcoms(run)[("readings.preflight", -1, "return_value")]
    assert document["verdict"] == "no_go" and document["findings"][0]["code"] == "metadata_missing"
    assert document["line"].startswith("preflight no_go: ") and f"[{checkpoint}/metadata]" in document["line"]
    assert document["requested_conf"] == {"spark.sql.shuffle.partitions": "2", "spark.log.level": "WARN",
                                          "spark.ui.showConsoleProgress": "false"}


@pytest.mark.parametrize("kwargs, says", [
    ({"window": "1 hour"}, "need attach=True"),
    ({"attach": True, "partition_column": "station"}, "partition_column and partitions go together"),
    ({"max_quarantine_rate": 1.5}, "between 0 and 1"),
])
def test_declarations_are_checked_when_the_dag_is_parsed(kwargs, says):
    with pytest.raises(ValueError, match=says):
        _group(**kwargs)


def test_check_run_warns_about_unknown_late_rows_and_fails_them_with_fail_on_unknown_late(caplog):
    """The task itself (its callable, no DB): a run whose batches were not replayed passes with a
    warning naming the batches and why, or fails with ``fail_on_unknown_late=True``."""
    from airflow.sdk.exceptions import AirflowFailException

    run = {"run_tag": "day-1", "rows_in": 16, "rows_quarantined": 0, "rows_aggregated": None, "rows_late": None,
           "quarantine_rate": 0.0, "complete": False, "late_rows_known": False,
           "late_rows_unknown_reason": "batches 3-5 not replayed: the job declares no pre-watermark function"}
    lenient = _group(attach=True).get_task("readings.check_run").python_callable
    with caplog.at_level("WARNING"):
        result = lenient(run)
    assert result["late_rows_known"] is False and result["rows_late"] is None and result["failure"] is None
    assert "run day-1: late rows unknown: batches 3-5 not replayed: the job declares no pre-watermark function" \
        in caplog.text
    strict = _group(attach=True, fail_on_unknown_late=True).get_task("readings.check_run").python_callable
    with pytest.raises(AirflowFailException, match="late rows unknown: batches 3-5 not replayed"):
        strict(run)
    known = {**run, "rows_aggregated": 16, "rows_late": 0, "complete": True, "late_rows_known": True,
             "late_rows_unknown_reason": None}
    assert strict(known)["late_rows_known"] is True and strict(known)["rows_late"] == 0


def test_an_allowed_lateness_reaches_the_launcher_before_the_job_and_is_checked_when_parsed():
    dag = _group(attach=True, window="1 hour", allowed_lateness="6 hours", corrections_path="/out/hourly_fixes")
    args = list(dag.get_task("readings.spark_submit").application_args)
    split = args.index("--")
    declared = dict(zip(args[:split:2], args[1:split:2]))
    assert declared["--allowed-lateness"] == "6 hours" and declared["--corrections-path"] == "/out/hourly_fixes"
    assert args[split + 1] == JOB  # the job's own arguments stay after "--"
    announce = dag.get_task("readings.announce_corrections")
    assert announce.upstream_task_ids == {"readings.spark_submit"}
    assert [a.uri for a in announce.outlets] == ["file:///ck/readings.corrections.jsonl"]
    assert "readings.announce_corrections" not in _group(attach=True, window="1 hour").task_ids
    # the window comes from the job's plan: an allowed lateness needs no declared window
    assert "readings.announce_corrections" in _group(attach=True, allowed_lateness="6 hours").task_ids
    for kwargs, says in [({"allowed_lateness": "6 hourz"}, "expected an interval such as '6 hours'"),
                         ({"corrections_path": "/x"}, "corrections_path needs allowed_lateness")]:
        with pytest.raises(ValueError, match=says):
            _group(**{"attach": True, "window": "1 hour", **kwargs})
    with pytest.raises(ValueError, match="need attach=True"):
        _group(allowed_lateness="6 hours")


def test_a_run_that_corrected_windows_announces_them_on_the_corrections_asset(airflow_db, tmp_path):
    """``dag.test()`` with every other task marked done: the announce task reads the corrections log
    the launcher wrote, and the asset event's extra names exactly this run's windows (the newest
    write of the run only); a run that corrected nothing is skipped and makes no event."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from tests.watermark_ops import stall_fixtures as sf

    checkpoint = str(tmp_path / "ck")
    day = pendulum.datetime(2013, 1, 2, tz="UTC")
    run_id = f"manual__{day.isoformat()}"
    hour = 3_600_000

    def fix(start, station, run, write, batch=4):
        return {"window_start_ms": start, "window_end_ms": start + hour, "keys": {"station": station},
                "emitted": {"mean": 1.0}, "corrected": {"mean": 2.0}, "late_rows": 1, "run": run,
                "batch_id": batch, "write": write}

    log = [fix(0, "north", "manual__earlier", 1, 2), fix(hour, "north", run_id, 5), fix(hour, "south", run_id, 5),
           fix(9 * hour, "east", run_id, 7), fix(2 * hour, "east", run_id, 7)]  # the run written twice: the 2nd stands
    (tmp_path / "ck.corrections.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    with DAG("wo_run_pattern_corrections", schedule=None, start_date=pendulum.datetime(2013, 1, 1, tz="UTC")) as dag:
        watermarked_run("readings", application=str(tmp_path / "never.py"), checkpoint=checkpoint, attach=True,
                        window="1 hour", allowed_lateness="6 hours")
    others = "|".join(t for t in dag.task_ids if t != "readings.announce_corrections")
    run = sf.run_dag(dag, logical_date=day, run_after=day, mark_success_pattern=f"^({others})$")
    assert run.run_id == run_id
    assert {t: s for (t, _), s in sf.task_states(run).items()}["readings.announce_corrections"] == "success"
    expected = {"corrected_windows": [{"window_start_ms": 9 * hour, "window_end_ms": 10 * hour, "keys": {"station": "east"}},
                                      {"window_start_ms": 2 * hour, "window_end_ms": 3 * hour, "keys": {"station": "east"}}],
                "run": run_id, "checkpoint": checkpoint, "corrections": 2, "late_rows": 2}
    with create_session() as session:
        asset_id = session.scalar(select(AssetModel.id).where(AssetModel.uri == f"file://{checkpoint}.corrections.jsonl"))
        (event,) = session.scalars(select(AssetEvent).where(AssetEvent.asset_id == asset_id))
        assert event.extra == expected
    # A run that corrected nothing: skipped, no second event.
    quiet = sf.run_dag(dag, logical_date=day.add(days=1), run_after=day.add(days=1), mark_success_pattern=f"^({others})$")
    assert {t: s for (t, _), s in sf.task_states(quiet).items()}["readings.announce_corrections"] == "skipped"
    with create_session() as session:
        assert len(list(session.scalars(select(AssetEvent).where(AssetEvent.asset_id == asset_id)))) == 1
