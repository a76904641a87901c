"""Audit rules over plain records, then over real checkpoints: restarts, purges with memory, a rewind,
a reset, and a driver killed with SIGKILL while a batch was in flight."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.watermark_ops import checkpoint_fixtures as cf
from watermark_ops.audit import (
    RULES,
    BatchRecord,
    audit_checkpoint,
    commit_offset_mismatch,
    commit_without_offsets,
    conf_changed,
    in_flight_batch,
    iso_utc,
    memory_rules,
    missing_batch,
    run_audit,
    watermark_regressed,
)
from watermark_ops.checkpoint import read_checkpoint
from watermark_ops.memory import RememberedHead, StateFileMemory


def chain(*pairs, first=0, conf=None):
    """Records ``first + i`` with offsets watermark ``pairs[i][0]`` and commit ``pairs[i][1]`` (None: no commit)."""
    return [BatchRecord(batch_id=first + i, watermark_ms=wm, timestamp_ms=1000 * (first + i), next_watermark_ms=nxt,
                        committed=nxt is not None, conf=conf, offsets_file=f"cp/offsets/{first + i}",
                        commit_file=None if nxt is None else f"cp/commits/{first + i}")
            for i, (wm, nxt) in enumerate(pairs)]


def rules_of(findings):
    return [(f.rule, f.severity, f.batch_id) for f in findings]


# --------------------------------------------------------------------------------------------
# Rules over records


def test_a_healthy_chain_has_no_finding():
    records = chain((0, 5000), (5000, 5000), (5000, 15000), (15000, 15000), (15000, 30000), (30000, 31000))
    assert watermark_regressed(records) == []
    assert commit_offset_mismatch(records) == []
    assert missing_batch(records, "cp") == []
    assert in_flight_batch(records) == []


def test_watermark_regressed_in_offsets_and_in_commits():
    records = chain((0, 5000), (5000, 9000), (9000, 4000), (4000, 4000))
    findings = watermark_regressed(records)
    assert rules_of(findings) == [("watermark_regressed", "error", 2)]
    assert findings[0].file == "cp/commits/2"
    assert "4000" in findings[0].message and "9000" in findings[0].message
    records = chain((0, 5000), (3000, 8000))
    (finding,) = watermark_regressed(records)
    assert (finding.batch_id, finding.file) == (1, "cp/offsets/1")
    assert "moved backwards by 2000 ms" in finding.message


def test_unknown_values_are_skipped_and_pre_2_4_commits_not_compared():
    records = chain((0, None), (5000, None), (7000, None))
    records[0] = BatchRecord(0, 0, 0, None, committed=True)  # a "{}" commit: next watermark unknown
    assert watermark_regressed(records) == [] and commit_offset_mismatch(records) == []
    records = [BatchRecord(0, 1000, 0, 2000, True), BatchRecord(1, None, None, None, True),
               BatchRecord(2, 2000, 0, 2000, True)]
    assert watermark_regressed(records) == []


def test_commit_offset_mismatch():
    records = chain((0, 5000), (6000, 6000), (6000, 7000))
    (finding,) = commit_offset_mismatch(records)
    assert (finding.rule, finding.severity, finding.batch_id, finding.file) == (
        "commit_offset_mismatch", "error", 1, "cp/offsets/1")
    assert "commits/0" in finding.message and "5000" in finding.message and "6000" in finding.message


def test_commit_without_offsets_is_an_error_inside_and_a_warning_below_the_purge_line():
    records = [BatchRecord(3, None, None, 100, committed=True, has_offsets=False, commit_file="cp/commits/3"),
               *chain((100, 100), (100, 200), first=4),
               BatchRecord(6, None, None, 300, committed=True, has_offsets=False, commit_file="cp/commits/6")]
    assert rules_of(commit_without_offsets(records)) == [
        ("commit_without_offsets", "warning", 3), ("commit_without_offsets", "error", 6)]


def test_missing_batches_are_grouped_and_a_warning():
    records = chain((0, 10), (10, 20), first=0) + chain((20, 30), first=5) + chain((30, 40), (40, None), first=9)
    records[1] = BatchRecord(1, 10, 0, None, committed=False, offsets_file="cp/offsets/1")
    findings = missing_batch(records, "/data/cp")
    assert rules_of(findings) == [("missing_batch", "warning", 2), ("missing_batch", "warning", 6),
                                  ("missing_batch", "warning", 1)]
    assert findings[0].file == "/data/cp/offsets/2" and "offsets/2..4 (3 batches)" in findings[0].message
    assert findings[1].file == "/data/cp/offsets/6" and "offsets/6..8" in findings[1].message
    assert findings[2].file == "/data/cp/commits/1"
    # the head without its commit is in flight, not a hole
    assert all(f.batch_id != 10 for f in findings)
    assert missing_batch(records, "/data/cp", has_commit_log=False)[-1].batch_id == 6


def test_in_flight_head_is_info_with_the_watermark_of_the_rerun():
    (finding,) = in_flight_batch(chain((0, 5000), (5000, None)))
    assert (finding.rule, finding.severity, finding.batch_id, finding.file) == ("in_flight_batch", "info", 1, "cp/offsets/1")
    assert "re-runs it with its own offsets (watermark 5000" in finding.message
    assert in_flight_batch(chain((0, 5000), (5000, None)), has_commit_log=False) == []


def test_a_requested_conf_the_checkpoint_overrode_is_conf_changed():
    from watermark_ops.audit import conf_requested_but_frozen

    policy = "spark.sql.streaming.multipleWatermarkPolicy"
    records = [BatchRecord(batch_id=b, watermark_ms=0, timestamp_ms=0, next_watermark_ms=0, committed=True,
                           has_offsets=True, conf={policy: "min"}, offsets_file=f"cp/offsets/{b}") for b in (4, 5)]
    progress = [
        {"batch_id": 4, "run_id": "r2", "query_id": "q", "requested_conf": {policy: "max"}},
        {"batch_id": 5, "run_id": "r2", "query_id": "q", "requested_conf": {policy: "max"}},
        {"batch_id": 5, "run_id": "r3", "query_id": "other", "requested_conf": {policy: "max"}},
        {"batch_id": 5, "run_id": "r4", "query_id": "q", "requested_conf": {policy: "min"}},
    ]
    (finding,) = conf_requested_but_frozen(records, progress, "cp.progress.jsonl", "q")
    assert (finding.rule, finding.severity, finding.batch_id, finding.file) == (
        "conf_changed", "warning", 4, "cp.progress.jsonl")


def test_conf_changed_is_a_warning_per_change():
    records = chain((0, 1), (1, 2), (2, 3), conf={"spark.sql.shuffle.partitions": "2", "a": "1"})
    records[1] = BatchRecord(1, 1, 0, 2, True, conf={"spark.sql.shuffle.partitions": "2", "a": "1"})
    records[2] = BatchRecord(2, 2, 0, 3, True, offsets_file="cp/offsets/2",
                             conf={"spark.sql.shuffle.partitions": "4", "a": "1", "new.key": "x"})
    (finding,) = conf_changed(records)
    assert (finding.rule, finding.severity, finding.batch_id, finding.file) == ("conf_changed", "warning", 2, "cp/offsets/2")
    assert "spark.sql.shuffle.partitions" in finding.message and "'4'" in finding.message and "'2'" in finding.message
    # A batch without conf (Spark 2.1) is no change.
    records[1] = BatchRecord(1, 1, 0, 2, True, conf={})
    assert len(conf_changed(records)) == 1


def test_memory_rules():
    remembered = RememberedHead("q", head_batch_id=9, watermark_ms=50_000, audited_at_ms=1_700_000_000_000)
    records = chain((40_000, 50_000), (50_000, 60_000), first=8)
    assert memory_rules(records, remembered, query_id="q", head_batch_id=9, location="cp") == []
    assert memory_rules(records, None, query_id="q", head_batch_id=9, location="cp") == []

    (reset,) = memory_rules(records, remembered, query_id="other", head_batch_id=9, location="cp")
    assert (reset.rule, reset.severity, reset.file) == ("checkpoint_reset", "error", "cp/metadata")
    assert "other" in reset.message and "q" in reset.message

    (rewound,) = memory_rules(chain((0, 1), first=7), remembered, query_id="q", head_batch_id=7, location="cp")
    assert (rewound.rule, rewound.batch_id, rewound.file) == ("rewound", 7, "cp/offsets/7")
    assert "head batch 9" in rewound.message
    (gone,) = memory_rules([], remembered, query_id="q", head_batch_id=None, location="cp")
    assert gone.rule == "rewound" and "no batch" in gone.message

    # After the remembered head, below the remembered watermark: only memory can tell once purged.
    later = chain((30_000, 35_000), (35_000, 60_000), first=10)
    (regressed,) = memory_rules(later, remembered, query_id="q", head_batch_id=11, location="cp")
    assert (regressed.rule, regressed.batch_id, regressed.file) == ("watermark_regressed", 10, "cp/offsets/10")
    assert "and 1 later batches" in regressed.message
    assert watermark_regressed(later) == []  # the files alone look healthy


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


def test_every_rule_name_is_documented():
    import watermark_ops.audit as audit

    for rule in RULES:
        assert f"``{rule}``" in audit.__doc__


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
