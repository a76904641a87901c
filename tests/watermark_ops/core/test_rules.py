"""The audit rules over plain batch records (no files): each rule, its severity, its message."""

from __future__ import annotations

from watermark_ops.core.memory import RememberedHead
from watermark_ops.core.rules import (
    RULES,
    BatchRecord,
    commit_offset_mismatch,
    commit_without_offsets,
    conf_changed,
    conf_requested_but_frozen,
    in_flight_batch,
    memory_rules,
    missing_batch,
    uses_async_progress_tracking,
    watermark_regressed,
)


def chain(*pairs, first=0, conf=None):
    """Records ``first + i`` with offsets watermark ``pairs[i][0]`` and commit ``pairs[i][1]`` (None: no commit)."""
    return [BatchRecord(batch_id=first + i, watermark_ms=wm, timestamp_ms=1000 * (first + i), next_watermark_ms=nxt,
                        committed=nxt is not None, conf=conf, offsets_file=f"cp/offsets/{first + i}",
                        commit_file=None if nxt is None else f"cp/commits/{first + i}")
            for i, (wm, nxt) in enumerate(pairs)]


def rules_of(findings):
    return [(f.rule, f.severity, f.batch_id) for f in findings]


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


def test_a_huge_gap_is_one_finding_without_enumerating_it():
    head = 2**63 - 1  # the largest batch id Spark can write; the ids in between are never built
    findings = missing_batch(chain((0, 10), (10, 20)) + chain((20, None), first=head), "/data/cp")
    assert rules_of(findings) == [("missing_batch", "warning", 2), ("restart_impossible", "error", head - 1)]
    assert f"offsets/2..{head - 2} ({head - 3} batches)" in findings[0].message
    findings = missing_batch(chain((0, 10), (10, 20)) + chain((20, None), first=head), "/data/cp",
                             async_progress_tracking=True)
    assert rules_of(findings) == [("missing_batch", "warning", 2)]
    assert f"offsets/2..{head - 1} ({head - 2} batches)" in findings[0].message


def test_a_hole_right_below_the_head_makes_the_restart_impossible_unless_async_progress_tracking():
    # offsets 0..3 and 5: offsets/4 missing below the head 5 (SPARK-38033).
    records = chain((0, 10), (10, 20), (20, 30), (30, 40)) + chain((40, None), first=5)
    (finding,) = missing_batch(records, "/data/cp")
    assert (finding.rule, finding.severity, finding.batch_id, finding.file) == (
        "restart_impossible", "error", 4, "/data/cp/offsets/4")
    assert "cannot restart" in finding.message and "\"batch 4 doesn't exist\"" in finding.message
    assert "SPARK-38033" in finding.message and "asyncProgressTrackingEnabled" in finding.message
    # An older hole is still a warning; a longer hole ending below the head is split.
    records = chain((0, 10)) + chain((10, 20), first=3) + chain((20, 30), first=7)
    assert rules_of(missing_batch(records, "/data/cp")) == [
        ("missing_batch", "warning", 1), ("missing_batch", "warning", 4), ("restart_impossible", "error", 6)]
    # Only the head is left (everything below it deleted): the restart fails the same way.
    assert rules_of(missing_batch(chain((40, 40), first=9), "/data/cp")) == [("restart_impossible", "error", 8)]
    assert missing_batch(chain((0, None)), "/data/cp") == []  # batch 0 has no batch below it
    # Async progress tracking skips to the newest batch on disk: holes are legitimate there.
    option = {"asyncProgressTrackingEnabled": "true"}
    assert uses_async_progress_tracking(chain((0, 1), conf=option))
    assert uses_async_progress_tracking(chain((0, 1)), [{"query_id": "q", "requested_conf": option}], "q")
    assert not uses_async_progress_tracking(chain((0, 1)), [{"query_id": "other", "requested_conf": option}], "q")
    assert not uses_async_progress_tracking(chain((0, 1)), [{"requested_conf": {"asyncProgressTrackingEnabled": "false"}}])
    assert rules_of(missing_batch(chain((40, 40), first=9), "/data/cp", async_progress_tracking=True)) == []


def test_in_flight_head_is_info_with_the_watermark_of_the_rerun():
    (finding,) = in_flight_batch(chain((0, 5000), (5000, None)))
    assert (finding.rule, finding.severity, finding.batch_id, finding.file) == ("in_flight_batch", "info", 1, "cp/offsets/1")
    assert "re-runs it with its own offsets (watermark 5000" in finding.message
    assert in_flight_batch(chain((0, 5000), (5000, None)), has_commit_log=False) == []


def test_a_requested_conf_the_checkpoint_overrode_is_conf_changed():

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


def test_every_rule_name_is_documented():
    import watermark_ops.core.rules as rules

    for rule in RULES:
        assert f"``{rule}``" in rules.__doc__
