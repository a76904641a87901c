"""The audit over checkpoints: hand-made ones, then real ones: restarts, purges with memory, a rewind,
a reset, and a driver killed with SIGKILL while a batch was in flight. The rules alone: ``test_rules.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.watermark_ops import checkpoint_fixtures as cf
from watermark_ops.core.audit import audit_checkpoint, run_audit
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.memory import StateFileMemory
from watermark_ops.core.times import iso_utc


def test_rerun_of_the_in_flight_batch_is_not_a_regression(tmp_path):
    root = str(tmp_path / "cp")
    cf.handmade_checkpoint(root, [(0, 5000), (5000, 9000), (9000, None)])
    memory = StateFileMemory(tmp_path / "state.json")
    first = run_audit(root, memory)
    assert first.status == "ok" and first.in_flight_batch_id == 2 and first.watermark_ms == 9000
    assert memory.load(root).head_batch_id == 2
    # The restart re-runs batch 2 with its own offsets, commits it and goes on.
    cf.put(root, "commits/2", cf.commit_text(12_000))
    cf.put(root, "offsets/3", cf.offsets_text(12_000, sources=[{"logOffset": 3}]))
    cf.put(root, "commits/3", cf.commit_text(12_000))
    second = run_audit(root, StateFileMemory(tmp_path / "state.json"))
    assert second.status == "ok" and second.findings == ()
    assert second.added_batch_ids == (3,)


def test_unreadable_then_violation_status_and_exit_codes(tmp_path):
    root = str(tmp_path / "cp")
    cf.handmade_checkpoint(root, [(0, 5000), (5000, 5000), (5000, 6000)])
    cf.put(root, "offsets/1", "v9\n{}\n-")
    report = audit_checkpoint(read_checkpoint(root))
    assert (report.status, report.exit_code) == ("unreadable", 2)
    (finding,) = report.findings
    assert finding.rule == "unreadable" and finding.file == f"{root}/offsets/1" and "[unsupported_version]" in finding.message
    cf.put(root, "offsets/2", cf.offsets_text(1000))
    report = audit_checkpoint(read_checkpoint(root))
    assert (report.status, report.exit_code) == ("violation", 1)
    assert {f.rule for f in report.findings} == {"unreadable", "watermark_regressed", "commit_offset_mismatch"}
    assert (audit_checkpoint(read_checkpoint(str(tmp_path / "missing")))).status == "unreadable"


# --------------------------------------------------------------------------------------------
# Real checkpoints


def test_real_restarts_audit_ok_with_the_documented_json(spark):
    history = cf.restart_history(spark)
    report = run_audit(str(history.checkpoint))
    assert (report.status, report.exit_code, report.findings) == ("ok", 0, ())
    document = json.loads(report.to_json())
    assert {"status", "query_id", "watermark_ms", "in_flight_batch", "batches", "findings"} <= set(document)
    assert document["status"] == "ok" and document["in_flight_batch"] is None
    assert document["query_id"] == history.runs[0]["query_id"]
    last_watermark = history.runs[-1]["batches"][-1]["watermark_ms"]
    assert document["watermark_ms"] == last_watermark and document["watermark"] == iso_utc(last_watermark)
    assert [set(b) for b in document["batches"]] == [
        {"batch_id", "watermark_ms", "timestamp_ms", "next_watermark_ms", "committed"}] * 7
    assert [b["batch_id"] for b in document["batches"]] == list(range(7))
    assert document["added_batches"] == {"first": 0, "last": 6, "count": 7}


def _audit_as_found(snapshot: Path, live: Path, memory: StateFileMemory):
    """Audit ``snapshot`` at the one location ``live`` (what an auditor finds there after that run)."""
    if live.exists():
        shutil.rmtree(live)
    shutil.copytree(snapshot, live)
    return run_audit(str(live), memory)


def test_purged_history_audited_after_each_run_then_a_rewind_caught_only_by_memory(spark, tmp_path):
    history = cf.purged_history(spark)
    live, state = tmp_path / "checkpoint", tmp_path / "state.json"
    heads = []
    for index, snapshot in enumerate(history.snapshots[:-1]):
        report = _audit_as_found(snapshot, live, StateFileMemory(state))
        assert report.status == "ok", report.findings
        assert report.findings == ()
        # each run added its data batch and its trailing no-data batch: the restart boundary
        assert report.added_batch_ids == (2 * index, 2 * index + 1)
        heads.append(report.head_batch_id)
    assert heads == [1, 3, 5, 7, 9, 11, 13]
    lowest = [b.batch_id for b in read_checkpoint(str(live)).batches][0]
    assert lowest > 0  # minBatchesToRetain=3 purged the early files
    remembered = StateFileMemory(state).load(str(live))
    assert (remembered.query_id, remembered.head_batch_id) == (history.query_ids[0], 13)

    # Rewind: the newest files deleted. What is left on disk is a healthy-looking log...
    for batch_id in (12, 13):
        (live / "offsets" / str(batch_id)).unlink()
        (live / "commits" / str(batch_id)).unlink()
    assert audit_checkpoint(read_checkpoint(str(live))).status == "ok"
    # ...only the memory catches it.
    report = run_audit(str(live), StateFileMemory(state))
    assert (report.status, report.exit_code) == ("violation", 1)
    assert [(f.rule, f.batch_id) for f in report.findings] == [("rewound", 11)]
    assert report.findings[0].file == f"{live}/offsets/11"

    # Reset: the checkpoint replaced, a new query id.
    report = _audit_as_found(history.snapshots[-1], live, StateFileMemory(state))
    assert history.query_ids[-1] != history.query_ids[0]
    assert [(f.rule, f.severity) for f in report.findings] == [("checkpoint_reset", "error")]
    assert history.query_ids[-1] in report.findings[0].message
    assert report.exit_code == 1
    # The memory moved on: the next audit of the new query is clean.
    assert run_audit(str(live), StateFileMemory(state)).status == "ok"


def test_sigkilled_driver_leaves_an_in_flight_batch_that_the_restart_reruns(spark, tmp_path):
    killed = cf.kill_in_flight(tmp_path / "job", files=6)
    n = killed.in_flight
    state = StateFileMemory(tmp_path / "state.json")
    report = run_audit(str(killed.dirs.checkpoint), state)
    assert (report.status, report.exit_code) == ("ok", 0)
    assert report.in_flight_batch_id == n == report.head_batch_id
    assert [(f.rule, f.severity, f.batch_id) for f in report.findings] == [("in_flight_batch", "info", n)]
    assert report.watermark_ms == report.batches[-1].watermark_ms  # re-run with its own offsets
    offsets_before = (killed.dirs.checkpoint / "offsets" / str(n)).read_bytes()

    restarted = cf.restart_killed(spark, killed)
    assert restarted["batches"][0]["batch_id"] == n and restarted["batches"][0]["watermark_ms"] == report.watermark_ms
    assert (killed.dirs.checkpoint / "offsets" / str(n)).read_bytes() == offsets_before
    report = run_audit(str(killed.dirs.checkpoint), StateFileMemory(tmp_path / "state.json"))
    assert (report.status, report.findings) == ("ok", ())
    assert report.in_flight_batch_id is None and report.head_batch_id > n
    assert report.added_batch_ids[0] == n + 1
    assert next(b for b in report.batches if b.batch_id == n).committed


def test_a_deleted_offsets_file_below_the_head_is_a_restart_spark_refuses(spark, tmp_path):
    import pytest
    from pyspark.errors import StreamingQueryException

    history = cf.restart_history(spark)
    root = cf.copy_checkpoint(history.dirs.root, tmp_path / "job")  # a copy: the package never deletes
    dirs = cf.JobDirs(root)
    head = read_checkpoint(str(dirs.checkpoint)).head_batch_id
    assert head >= 4
    (dirs.checkpoint / "offsets" / str(head - 1)).unlink()
    (dirs.checkpoint / "offsets" / f".{head - 1}.crc").unlink(missing_ok=True)
    report = run_audit(str(dirs.checkpoint))
    errors = {f.rule: f for f in report.findings if f.severity == "error"}
    assert sorted(errors) == ["commit_without_offsets", "restart_impossible"]  # commits/N-1 is still there
    finding = errors["restart_impossible"]
    assert (finding.batch_id, finding.file) == (head - 1, f"{dirs.checkpoint}/offsets/{head - 1}")
    assert f"\"batch {head - 1} doesn't exist\"" in finding.message
    assert not [f for f in report.findings if f.rule == "missing_batch"]
    assert (report.status, report.exit_code) == ("violation", 1)
    # What the finding says is what Spark does: the restart fails, naming the missing batch. (The copy
    # moved the landed files: the driver's start check would refuse that first, so it is accepted here,
    # as a run that says accept_changes=["source_path"] does, and Spark's own refusal is what is seen.)
    # Spark's refusal reaches the task as one line (issue 28), Spark's own exception its cause.
    from watermark_ops.spark.restart import RestartRefused

    spark._watermark_ops_accept = ("source_path",)
    try:
        with pytest.raises(RestartRefused, match=rf"refused by Spark \(offsets_hole\): offsets/{head - 1} is missing") as refused:
            cf.run_job(spark, dirs)
    finally:
        del spark._watermark_ops_accept
    assert isinstance(refused.value.__cause__, StreamingQueryException)
    assert f"batch {head - 1} doesn't exist" in str(refused.value.__cause__)
    assert refused.value.diagnosis.file == f"{dirs.checkpoint}/offsets/{head - 1}"

    # With commits/N-1 gone too (a hole in both logs, as async progress tracking leaves), the one error left.
    (dirs.checkpoint / "commits" / str(head - 1)).unlink()
    report = run_audit(str(dirs.checkpoint))
    assert [(f.rule, f.batch_id) for f in report.findings if f.severity == "error"] == [
        ("restart_impossible", head - 1)]

    # An older hole (in both logs) leaves the restart possible: a warning, status ok.
    older = cf.copy_checkpoint(history.checkpoint, tmp_path / "older")
    (older / "offsets" / str(head - 3)).unlink()
    (older / "commits" / str(head - 3)).unlink()
    report = run_audit(str(older))
    assert [(f.rule, f.severity, f.batch_id) for f in report.findings if f.rule != "in_flight_batch"] == [
        ("missing_batch", "warning", head - 3)]
    assert report.status == "ok"

    # A query that records async progress tracking may leave that hole: a warning again.
    progress = Path(str(dirs.checkpoint) + ".progress.jsonl")
    records = [json.loads(line) for line in progress.read_text().splitlines()]
    progress.write_text("".join(json.dumps({**r, "requested_conf": {**r.get("requested_conf", {}),
                                                                    "asyncProgressTrackingEnabled": "true"}}) + "\n"
                                for r in records))
    report = run_audit(str(dirs.checkpoint))
    assert [(f.rule, f.severity) for f in report.findings if f.batch_id == head - 1] == [("missing_batch", "warning")]
    assert report.status == "ok"
