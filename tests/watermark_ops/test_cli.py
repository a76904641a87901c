"""The terminal face: ``watermark-ops audit|status|lateness`` on real and hand-made checkpoints, exit codes, JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pendulum
import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops import stall_fixtures as sf
from tests.watermark_ops.lateness_fixtures import HOUR
from watermark_ops.terminal import cli
from watermark_ops.core.times import iso_utc


@pytest.fixture(scope="module")
def history(spark):
    return cf.restart_history(spark)


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_audit_table_of_a_real_checkpoint(capsys, history, tmp_path):
    checkpoint = cf.copy_checkpoint(history.checkpoint, tmp_path / "cp")
    code, out, _ = run(capsys, "audit", checkpoint, "--state", tmp_path / "state.json")
    assert code == 0
    watermark = history.runs[-1]["batches"][-1]["watermark_ms"]
    assert f"query id {history.runs[0]['query_id']}" in out
    for column in ("batch", "watermark (UTC)", "watermark ms", "change", "batch time (UTC)", "commit"):
        assert column in out
    assert iso_utc(watermark) in out and str(watermark) in out
    assert "+54 min" in out  # batch 3: the watermark moved by 54 minutes after run 2's data batch
    assert out.count("committed") == 7
    assert "No findings." in out and "status ok (exit 0)" in out
    # The second audit remembers: nothing was added since.
    code, out, _ = run(capsys, "audit", checkpoint, "--state", tmp_path / "state.json", "--limit", "2")
    assert code == 0 and "no batch added since the audit of" in out
    assert "5 earlier batches not shown" in out


def test_audit_json_shape(capsys, history):
    code, out, _ = run(capsys, "audit", history.checkpoint, "--json")
    document = json.loads(out)
    assert code == 0 and document["status"] == "ok"
    assert document["watermark_ms"] == history.runs[-1]["batches"][-1]["watermark_ms"]
    assert document["in_flight_batch"] is None and document["findings"] == []
    assert document["batches"][4] == {
        "batch_id": 4, "watermark_ms": history.runs[2]["batches"][0]["watermark_ms"],
        "timestamp_ms": document["batches"][4]["timestamp_ms"],
        "next_watermark_ms": history.runs[4]["batches"][0]["watermark_ms"], "committed": True}


def test_violation_exits_1_and_shows_the_finding(capsys, tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000), (2000, 2000)])
    code, out, _ = run(capsys, "audit", root)
    assert code == 1
    assert "watermark_regressed" in out and "commit_offset_mismatch" in out and "status violation (exit 1)" in out
    code, out, _ = run(capsys, "audit", root, "--json")
    document = json.loads(out)
    assert code == 1 and document["status"] == "violation"
    finding = next(f for f in document["findings"] if f["rule"] == "watermark_regressed")
    assert finding == {"rule": "watermark_regressed", "severity": "error", "batch_id": 2,
                       "file": f"{root}/offsets/2", "message": finding["message"]}


def test_unreadable_exits_2(capsys, tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000)])
    cf.put(str(root), "commits/1", b"\x00\x00")
    code, out, _ = run(capsys, "audit", root, "--json")
    document = json.loads(out)
    assert code == 2 and document["status"] == "unreadable"
    assert document["findings"][0]["file"] == f"{root}/commits/1" and "[binary]" in document["findings"][0]["message"]
    code, out, _ = run(capsys, "audit", tmp_path / "missing")
    assert code == 2 and "checkpoint_missing" in out


def test_in_flight_batch_is_shown_and_exits_0(capsys, tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, None)])
    code, out, _ = run(capsys, "audit", root)
    assert code == 0 and "in flight" in out and "in_flight_batch" in out and "in flight: 1" in out


def test_malformed_state_file_exits_2_and_is_kept(capsys, tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000)])
    state = tmp_path / "state.json"
    state.write_text("[]")
    code, out, err = run(capsys, "audit", root, "--state", state)
    assert code == 2 and str(state) in err and out == ""
    assert state.read_text() == "[]"


def test_status(capsys, history, tmp_path):
    code, out, _ = run(capsys, "status", history.checkpoint, "--json")
    document = json.loads(out)
    assert code == 0
    assert document["query_id"] == history.runs[0]["query_id"]
    assert (document["head_batch_id"], document["lowest_batch_id"], document["in_flight_batch"]) == (6, 0, None)
    assert document["watermark_ms"] == history.runs[-1]["batches"][-1]["watermark_ms"]
    assert document["watermark"] == iso_utc(document["watermark_ms"])
    assert document["latest_batch_time"] == iso_utc(document["latest_batch_timestamp_ms"])
    code, out, _ = run(capsys, "status", history.checkpoint)
    assert code == 0 and "next batch watermark" in out and document["watermark"] in out
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, None)])
    code, out, _ = run(capsys, "status", root, "--json")
    assert code == 0 and json.loads(out)["in_flight_batch"] == 1
    cf.put(str(root), "offsets/1", "v1\n{")
    code, out, _ = run(capsys, "status", root, "--json")
    assert code == 2 and json.loads(out)["problems"][0]["kind"] == "not_json"
    code, _, _ = run(capsys, "status", tmp_path / "missing")
    assert code == 2


def test_console_script_and_python_m(history):
    script = Path(sys.executable).parent / "watermark-ops"
    by_script = subprocess.run([str(script), "status", str(history.checkpoint), "--json"],
                               capture_output=True, text=True)
    by_module = subprocess.run([sys.executable, "-m", "watermark_ops", "audit", str(history.checkpoint), "--json"],
                               capture_output=True, text=True)
    assert by_script.returncode == 0 and json.loads(by_script.stdout)["head_batch_id"] == 6
    assert by_module.returncode == 0 and json.loads(by_module.stdout)["status"] == "ok"


def test_the_subcommands_and_their_help(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["nonsense"])
    assert exited.value.code == 2
    assert ("(choose from 'audit', 'status', 'lateness', 'late', 'corrections', 'accept-reset', 'state', 'preflight')"
            in capsys.readouterr().err)
    with pytest.raises(SystemExit) as exited:
        cli.main(["status", "--help"])
    assert exited.value.code == 0 and "--max-lag" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# status: the stall classification (real checkpoints of stall_fixtures)


def test_status_json_adds_state_and_honours_flags(spark, capsys):
    built = sf.backlog_then_future_record(spark)
    at = pendulum.from_timestamp(built.after_run_ms[1] / 1000, tz="UTC").isoformat()
    assert cli.main(["status", built.checkpoints["flights"], "--json", "--at", at]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["state"] == "lagging" and payload["classification"]["alarm"] is True
    assert payload["head_batch_id"] == 5  # the issue-3 fields are still there
    assert payload["classification"]["evaluated_at_ms"] == built.after_run_ms[1]
    assert cli.main(["status", built.checkpoints["flights"], "--json", "--at", at, "--max-lag", "none"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "advancing"
    assert cli.main(["status", built.checkpoints["flights"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "jumped"


def test_status_prints_classification_with_evidence(spark, capsys):
    built = sf.inputs_take_turns(spark)
    at = pendulum.from_timestamp(built.after_run_ms[3] / 1000, tz="UTC").isoformat()
    assert cli.main(["status", built.checkpoints["min"], "--at", at]) == 0
    out = capsys.readouterr().out
    assert "next batch watermark" in out  # the issue-3 table
    assert "watermark state stalled (ALARM)" in out
    assert "SPARK-50046" in out and "data batches since" in out
    assert cli.main(["status", built.checkpoints["min"], "--at", at, "--stall-batches", "4"]) == 0
    assert "watermark state advancing" in capsys.readouterr().out


def test_status_rejects_a_bad_flag(spark, capsys):
    built = sf.inputs_take_turns(spark)
    assert cli.main(["status", built.checkpoints["min"], "--max-lag", "six hours"]) == 2
    assert "max_lag" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------
# lateness


def test_lateness_json_table_and_bad_input(checkpoint_with_log, capsys, tmp_path):
    checkpoint, landing = checkpoint_with_log
    assert cli.main(["lateness", checkpoint, "--json", "--landing", landing]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runs"][1]["late_partial_aggregates_spark"] == 12 and printed["runs"][1]["drop_rate"] is None
    assert printed["inputs"][0]["max_lateness_ms"] == 2 * HOUR
    assert printed["inputs"][0]["event_time_field"] == "observed_at"  # the late rule's own field
    assert cli.main(["lateness", checkpoint, "--json", "--landing", landing, "--arrival-field", "arrived_at",
                     "--event-time-field", "arrived_at"]) == 0
    assert json.loads(capsys.readouterr().out)["inputs"][0]["max_lateness_ms"] == 0
    assert cli.main(["lateness", checkpoint]) == 0
    assert "Late rows per run" in capsys.readouterr().out
    assert cli.main(["lateness", checkpoint, "--landing", str(tmp_path / "nowhere")]) == 2
    assert "no such landing folder" in capsys.readouterr().err
    for argv in (["--help"], ["lateness", "--help"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 0
        assert "lateness" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# late (the late-row ledger), on the hand-written checkpoint of tests/watermark_ops/ledger_fixtures.py


def test_late_table_json_and_sink(capsys, tmp_path):
    from tests.watermark_ops import ledger_fixtures as lf

    checkpoint, _ = lf.build(tmp_path)
    code, out, _ = run(capsys, "late", checkpoint, "--sink", tmp_path / "late")
    assert code == 0
    for column in ("batch", "late rows", "watermark missed (UTC)", "worst lateness", "(watermark − window end)",
                   "late partial", "aggregates (Spark)"):
        assert column in out
    assert "late per" not in out  # the job declared no partition column: none is made up
    assert iso_utc(lf.WATERMARK_1) in out and "1 h" in out
    assert "6 late rows of" in out and "wrote 3 files" in out
    assert "Spark counted 3 late partial aggregates" in " ".join(out.split())
    # A job that declares a partition column: its late rows per value of it, named by the job's column.
    log = tmp_path / "ck.progress.jsonl"
    log.write_text("".join(json.dumps({**json.loads(line), "partition_column": "origin",
                                       "event_time_max_ms_by_partition": {"EWR": lf.T0, "JFK": lf.T0, "LGA": lf.T0}})
                           + "\n" for line in log.read_text().splitlines()))
    code, out, _ = run(capsys, "late", checkpoint)
    assert code == 0 and "late per origin" in out and "EWR 2, JFK 1, LGA 1" in out
    assert "allowMultiple=false: late rows are filtered with the batch's own watermark" in " ".join(out.split())
    assert sorted(p.name for p in (tmp_path / "late").iterdir()) == ["batch=0.jsonl", "batch=1.jsonl", "batch=2.jsonl"]
    code, out, _ = run(capsys, "late", checkpoint, "--json", "--batch", "2")
    document = json.loads(out)
    assert code == 0 and document["complete"] and [r["event"]["id"] for r in document["late_rows"]] == [20, 22]
    assert document["totals"]["late_by_batch"] == {"2": 2}
    assert document["batches"][0]["late_watermark_rule"]["basis"] == "current"


def test_late_exits_2_naming_the_unreadable_file(capsys, tmp_path):
    from tests.watermark_ops import ledger_fixtures as lf

    checkpoint, _ = lf.build(tmp_path)
    corrupt = checkpoint / "sources" / "0" / "1.compact"
    corrupt.write_bytes(b"\x00\x01binary")
    (checkpoint / "sources" / "0" / "0").unlink()
    code, out, err = run(capsys, "late", checkpoint)
    assert code == 2 and f"{corrupt}: binary content" in err and "not replayed" in out
    code, _, err = run(capsys, "late", tmp_path / "nowhere")
    assert code == 2 and "no checkpoint folder" in err


def test_late_exits_2_when_no_batch_has_a_late_rule_and_0_when_some_do(capsys, tmp_path):
    from tests.watermark_ops import ledger_fixtures as lf

    checkpoint, _ = lf.build(tmp_path)
    log = tmp_path / "ck.progress.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]

    def write(rules):
        log.write_text("".join(json.dumps({**r, "late_rule": rule}) + "\n" for r, rule in zip(records, rules)))

    write([None, None, None])  # a job that does not record its late rule
    code, out, err = run(capsys, "late", checkpoint)
    assert code == 2 and "not replayed" in out
    assert ("no batch could be replayed: no progress record with a late_rule (the job does not use the "
            "watermark_ops.spark recorder)") in err
    assert err.count("no progress record with a late_rule for batches 0-2") == 1  # one line, not one per batch
    code, _, err = run(capsys, "late", checkpoint, "--json")
    assert code == 2 and "no batch could be replayed" in err
    log.unlink()  # no progress log at all: the same
    code, _, err = run(capsys, "late", checkpoint)
    assert code == 2 and "no batch could be replayed: no progress record with a late_rule" in err

    write([None, lf.RULE, lf.RULE])  # batch 0 written before the job recorded its rule: left out, not an error
    code, out, err = run(capsys, "late", checkpoint)
    assert code == 0 and "no progress record with a late_rule for batches 0 " in err
    assert "no batch could be replayed" not in err and "late rows of" in out


def test_accept_reset_then_audit_passes_and_reports_it(capsys, tmp_path):
    root, state = tmp_path / "cp", tmp_path / "state.json"
    old_id, new_id = "7d1b2a3c-0000-4000-8000-00000000000a", "7d1b2a3c-0000-4000-8000-00000000000b"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000)], query_id=old_id)
    code, out, err = run(capsys, "accept-reset", root, "--why", "OPS-7", "--state", state)
    assert code == 2 and "no audit is remembered" in err
    assert run(capsys, "audit", root, "--state", state)[0] == 0

    shutil.rmtree(root)  # deleted on purpose; the query started again with a new id
    cf.handmade_checkpoint(str(root), [(0, 3000)], query_id=new_id)
    code, out, err = run(capsys, "accept-reset", root, "--why", "OPS-7: state schema changed", "--by", "ana",
                         "--memory", state)
    assert code == 0, err
    assert f"reset from query id {old_id}" in out and f"to {new_id} accepted by ana at " in out
    assert json.loads(state.read_text())["checkpoints"][str(root)]["accepted_reset"]["why"] == "OPS-7: state schema changed"

    code, out, _ = run(capsys, "audit", root, "--state", state, "--json")
    report = json.loads(out)
    assert code == 0 and report["status"] == "ok"
    assert [(f["rule"], f["severity"]) for f in report["findings"]] == [("reset_accepted", "info")]
    assert "accepted by ana" in report["findings"][0]["message"]
    code, out, err = run(capsys, "accept-reset", root, "--why", "again", "--state", state)
    assert code == 2 and "no reset to accept" in err

    # A reset to yet another query id is not hidden by the acceptance of the previous one.
    shutil.rmtree(root)
    cf.handmade_checkpoint(str(root), [(0, 1000)], query_id="7d1b2a3c-0000-4000-8000-00000000000c")
    code, out, _ = run(capsys, "audit", root, "--state", state)
    assert code == 1 and "checkpoint_reset" in out and "status violation" in out


def test_the_audit_command_prints_its_table_with_the_collector_paused(capsys, tmp_path, monkeypatch):
    # The report's values are acyclic: the table is printed with Python's cyclic collector paused
    # as the read was, and the collector is on again once the command returns.
    import gc

    from watermark_ops import render

    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000)])
    seen = []
    real = render.print_audit_report

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(render, "print_audit_report", spy)
    assert gc.isenabled()
    code, out, _ = run(capsys, "audit", root)
    assert code == 0 and "status ok" in out
    assert seen == [False] and gc.isenabled()
