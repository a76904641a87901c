"""The state findings and the restart preflight: pure functions of what was read, on hand-made
checkpoints (``state_fixtures``); the real restarts are in ``tests/spark_jobs/test_state_corpus.py``."""

from __future__ import annotations

import json

import pytest

from tests.watermark_ops.core.state import state_fixtures as sf
from watermark_ops.terminal.cli import main
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.state.preflight import preflight, spark_version_tuple
from watermark_ops.core.state.reader import read_state
from watermark_ops.core.state.rules import STATE_RULES, state_findings
from watermark_ops.core.thresholds import DEFAULT_STATE_THRESHOLDS, StateThresholds

K = sf.key


def _growing(batches: int, removals: bool = False, watermarks: bool = True) -> dict[str, bytes]:
    """A dedup-like aggregation whose state only grows (or evicts one row per version)."""
    files = {**sf.log_files(batches, watermarks=[i * 1000 if watermarks else 0 for i in range(batches)]),
             **sf.aggregation(partitions=1)}
    for v in range(1, batches + 1):
        changes = [(K(v), b"x")] + ([(K(v - 1), None)] if removals and v > 1 else [])
        files[f"state/0/0/{v}.delta"] = sf.lz4java(sf.records(changes))
    return files


def _codes(path, **thresholds) -> list[str]:
    return [f.rule for f in state_findings(read_state(str(path), progress_records=()), StateThresholds(**thresholds))]


def test_every_state_rule_is_documented():
    import watermark_ops.core.state.rules as rules

    assert all(f"``{rule}``" in rules.__doc__ for rule in STATE_RULES)


def test_state_growing_needs_rising_rows_an_advancing_watermark_and_no_removal(tmp_path):
    sf.write(tmp_path / "grows", _growing(12))
    sf.write(tmp_path / "evicts", _growing(12, removals=True))
    sf.write(tmp_path / "no_watermark", _growing(12, watermarks=False))
    assert _codes(tmp_path / "grows") == ["state_growing"]
    assert _codes(tmp_path / "evicts") == []
    assert _codes(tmp_path / "no_watermark") == []
    assert _codes(tmp_path / "grows", growing_batches=13) == []  # not enough batches yet
    (finding,) = state_findings(read_state(str(tmp_path / "grows"), progress_records=()))
    assert "rose from 3 (batch 2) to 12 (batch 11)" in finding.message


def test_state_never_compacted_and_files_accumulating_say_the_fix(tmp_path):
    sf.write(tmp_path, _growing(25, removals=True))
    state = read_state(str(tmp_path), progress_records=(), min_batches_to_retain=2)
    findings = {f.rule: f for f in state_findings(state, DEFAULT_STATE_THRESHOLDS)}
    assert set(findings) == {"state_never_compacted", "state_files_accumulating"}
    never = findings["state_never_compacted"]
    assert never.file == f"{tmp_path}/state/0/0/1.delta" and "replays 25 delta files" in never.message
    assert "spark.sql.streaming.stateStore.maintenanceInterval" in never.message and "Connect" in never.message
    assert "keeps 25 versions" in findings["state_files_accumulating"].message
    assert _codes(tmp_path, max_chain=None, max_versions_over_retain=None) == []


def _chain(batches: int, conf: dict[str, str] | None = None) -> dict[str, bytes]:
    files = {**sf.log_files(batches, conf=conf), **sf.aggregation(partitions=1)}
    for v in range(1, batches + 1):
        files[f"state/0/0/{v}.delta"] = sf.lz4java(sf.records([(K(v), b"x")]))
    return files


def test_state_never_compacted_fires_on_evidence_of_the_checkpoint_min_deltas_for_snapshot(tmp_path):
    """Spark snapshots once minDeltasForSnapshot (default 10) deltas follow the last snapshot: a chain
    beyond it plus the margin (5) is a maintenance task that never ran; 16 is flagged, 12 and 15 not."""
    from watermark_ops.core.state.rules import compaction_limit

    for n in (12, 15, 16):
        sf.write(tmp_path / str(n), _chain(n))
    assert _codes(tmp_path / "12") == [] and _codes(tmp_path / "15") == []
    assert _codes(tmp_path / "16") == ["state_never_compacted"]
    (finding,) = state_findings(read_state(str(tmp_path / "16"), progress_records=()))
    assert "replays 16 delta files" in finding.message and "more than 15" in finding.message
    assert "minDeltasForSnapshot 10, Spark default" in finding.message
    # a checkpoint that froze its own minDeltasForSnapshot is judged by it
    sf.write(tmp_path / "frozen", _chain(12, conf={"spark.sql.streaming.stateStore.minDeltasForSnapshot": "4"}))
    (finding,) = state_findings(read_state(str(tmp_path / "frozen"), progress_records=()))
    assert "more than 9" in finding.message and "as the checkpoint froze it" in finding.message
    # a number given fixes the limit; none disables the rule
    assert _codes(tmp_path / "12", max_chain=11) == ["state_never_compacted"]
    assert _codes(tmp_path / "16", max_chain="none") == []
    assert compaction_limit({}) == 15 and compaction_limit({}, 30) == 30 and compaction_limit({}, None) is None
    # the preflight's state_chain_long (info) follows the same evidence
    report = preflight(read_checkpoint(str(tmp_path / "16")), read_state(str(tmp_path / "16"), progress_records=()))
    assert "state_chain_long" in [f.code for f in report.findings]
    report = preflight(read_checkpoint(str(tmp_path / "12")), read_state(str(tmp_path / "12"), progress_records=()))
    assert "state_chain_long" not in [f.code for f in report.findings]


def test_an_unbounded_operator_and_an_unreadable_state_file(tmp_path):
    files = {**sf.log_files(2), **sf.aggregation(name="dedupe", watermarked=False)}
    files["state/0/0/1.delta"] = files["state/0/1/1.delta"] = sf.lz4java(sf.records([(K(1), b"x")]))
    files["state/0/0/2.delta"] = files["state/0/1/2.delta"] = b"\x82SNAPPY\x00"
    sf.write(tmp_path, files)
    findings = state_findings(read_state(str(tmp_path), progress_records=()))
    assert [f.rule for f in findings] == ["state_unbounded", "unreadable", "unreadable"]
    assert "dropDuplicates" in findings[0].message and "[unsupported]" in findings[1].message


def test_state_thresholds_round_trip_and_refuse_bad_values():
    t = StateThresholds(growing_batches="4", max_chain="none")
    assert StateThresholds.from_dict(t.to_dict()) == t and t.max_chain is None
    assert StateThresholds().max_chain == "auto" == StateThresholds(max_chain="AUTO").max_chain
    assert StateThresholds.from_dict(StateThresholds().to_dict()) == StateThresholds()
    for bad in ({"growing_batches": 0}, {"max_chain": -1}, {"max_chain": True}):
        with pytest.raises(ValueError):
            StateThresholds(**bad)
    with pytest.raises(ValueError, match="unknown"):
        StateThresholds.from_dict({"max_cain": 3})


def _verdict(path, conf=None, version=None):
    checkpoint = read_checkpoint(str(path))
    report = preflight(checkpoint, read_state(str(path), checkpoint=checkpoint, progress_records=()), conf, version)
    return report.verdict, [f.code for f in report.findings], report


def test_preflight_go_and_the_in_flight_head(tmp_path):
    files = _growing(4, removals=True)
    sf.write(tmp_path / "ok", files)
    assert _verdict(tmp_path / "ok")[:2] == ("go", [])
    del files["commits/3"]
    sf.write(tmp_path / "crashed", files)
    assert _verdict(tmp_path / "crashed")[:2] == ("go", ["in_flight_batch"])
    assert _verdict(tmp_path / "nothing-here")[:2] == ("go", ["new_checkpoint"])


def test_preflight_no_go_for_each_file_level_refusal(tmp_path):
    files = _growing(5, removals=True)
    damaged = dict(files)
    del damaged["metadata"], damaged["offsets/3"], damaged["state/0/0/2.delta"]
    damaged["state/0/0/5.delta"] = damaged["state/0/0/5.delta"][:30]
    damaged["commits/1"] = b"v1\n{not json"
    sf.write(tmp_path, damaged)
    verdict, codes, report = _verdict(tmp_path)
    assert verdict == "no_go"
    assert codes == ["metadata_missing", "offsets_hole", "state_file_missing", "state_file_truncated",
                     "log_file_unreadable"]
    assert all(f.recipe and f.file for f in report.findings)
    assert report.findings[2].file == f"{tmp_path}/state/0/0/2.delta"


def test_preflight_offsets_hole_is_a_warning_only_with_async_progress_tracking(tmp_path):
    files = _growing(4, removals=True)
    del files["offsets/2"]
    sf.write(tmp_path, files)
    checkpoint = read_checkpoint(str(tmp_path))
    async_records = [{"batch_id": 3, "requested_conf": {"asyncProgressTrackingEnabled": "true"}}]
    assert "offsets_hole" not in [f.code for f in preflight(checkpoint, None, {}, None, async_records).findings]


def test_preflight_warns_for_every_conf_the_checkpoint_overrides(tmp_path):
    sf.write(tmp_path, _growing(3, removals=True))
    verdict, codes, report = _verdict(tmp_path, {"spark.sql.shuffle.partitions": "8",
                                                 "spark.sql.streaming.multipleWatermarkPolicy": "max",
                                                 "spark.sql.streaming.stateStore.providerClass": sf.ROCKSDB,
                                                 "spark.sql.streaming.stateStore.maintenanceInterval": "5s"})
    assert verdict == "warn" and codes == ["conf_overridden"] * 3
    assert "2 applies" in report.findings[0].message and "min applies" in report.findings[1].message
    assert _verdict(tmp_path, {"spark.sql.shuffle.partitions": "2"})[0] == "go"


def test_preflight_runtime_versions_and_format_v2(tmp_path):
    ids = "00000001-aaaa-4bbb-8ccc-000000000001"
    files = {**sf.log_files(1, conf={"spark.sql.streaming.stateStore.providerClass": sf.ROCKSDB}, commit_version=2,
                            offsets_version=2, commit_extra={"stateUniqueIds": {"0": [[ids]]}}),
             **sf.aggregation(partitions=1), f"state/0/0/1_{ids}.changelog": sf.changelog(3, [(K(1), b"x")])}
    sf.write(tmp_path / "v2", files)
    assert _verdict(tmp_path / "v2", version="4.2.0")[:2] == ("go", [])
    verdict, codes, _ = _verdict(tmp_path / "v2", version="4.1.1")
    assert verdict == "no_go" and codes == ["log_version_unsupported"]  # offsets v2 needs 4.2
    assert _verdict(tmp_path / "v2", version="3.5.6")[1] == ["log_version_unsupported", "state_format_unsupported"]
    sf.write(tmp_path / "hdfs", _growing(2))
    verdict, codes, _ = _verdict(tmp_path / "hdfs", {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"})
    assert verdict == "no_go" and codes == ["state_format_v2_with_hdfs"]
    assert spark_version_tuple("4.2.0-preview1") == (4, 2) and spark_version_tuple("x") is None


def test_cli_state_and_preflight(tmp_path, capsys):
    sf.write(tmp_path, _growing(12))
    assert main(["state", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "stateStoreSave" in out and "state_growing" in out
    assert main(["state", str(tmp_path), "--json", "--growing-batches", "none"]) == 0
    document = json.loads(capsys.readouterr().out)
    (op,) = document["operators"]
    assert op["rows"] == list(range(1, 13)) and op["batch_ids"] == list(range(12)) and op["chain_length"] == 12
    assert document["findings"] == []
    assert main(["preflight", str(tmp_path), "--conf", "spark.sql.shuffle.partitions=3"]) == 1
    assert "conf_overridden" in capsys.readouterr().out
    assert main(["preflight", str(tmp_path), "--conf", "no-equals-sign"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
