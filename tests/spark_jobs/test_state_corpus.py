"""Proof on real checkpoints (issue 28 point 4): the state reader, the state findings and the
restart preflight against real PySpark 4.2 checkpoints and real restarts (``state_corpus``).

* State rows counted from the files equal Spark's ``numRowsTotal`` in every batch of every run,
  for both providers, RocksDB changelogs, checkpoint format version 2, snapshots, a join and a
  dedup.
* Every restart Spark refused was predicted ``no_go`` by the preflight, or, when only the driver
  can tell (the new query is not in the files: :data:`DRIVER_ONLY`), refused by the driver's start
  check before Spark started it, or diagnosed from Spark's error (a changed value schema); every
  refusal is diagnosed in one line naming the file (the diagnosis the drivers write beside the
  checkpoint). Every silent change is refused at start unless the run accepts it, and accepted it
  runs. Every conf Spark ignored is a ``warn`` naming the value that applies; every restart that
  worked unchanged is a ``go`` and passes the start check.
"""

from __future__ import annotations

import json
import re

import pytest

from state_corpus import build_corpus, files_of, operator_rows
from watermark_ops.terminal.cli import main
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.state.reader import read_state
from watermark_ops.core.state.rules import state_findings
from watermark_ops.core.thresholds import StateThresholds

pytestmark = pytest.mark.timeout(900)

#: Restart cases only the driver can tell (the preflight reads files; the new query is not in them).
DRIVER_ONLY = {"key_schema_changed", "value_schema_changed", "operator_removed", "second_source",
               "window_duration_changed", "watermark_delay_changed", "source_path_changed"}


@pytest.fixture(scope="module")
def corpus(spark, tmp_path_factory):
    built = build_corpus(spark, tmp_path_factory.mktemp("state_corpus"))
    print(f"\nstate corpus: {len(built.builds)} checkpoints, {len(built.cases)} restarts in {built.seconds:.1f} s "
          f"({built.driver_seconds:.1f} s in the start checks and diagnoses)")
    for case in built.cases.values():
        classes = sorted(set(re.findall(r"\b[A-Z][A-Z_]{5,}(?:\.[A-Z_]+)?\b", case.run.error or "")))
        print(f"  {case.name:28} spark {'refused' if case.run.refused else 'ran':8} preflight {case.verdict:6} "
              f"{','.join(case.codes):28} start {case.start.code if case.start else 'go':24} "
              f"diagnosis {case.diagnosis.code if case.diagnosis else '-':26} {' '.join(classes)}")
    return built


def _checkpoints(corpus):
    for name, runs in corpus.runs.items():
        path = corpus.cases[name[5:]].checkpoint if name.startswith("case:") else corpus.builds[name]
        yield name, path, runs


def test_rows_from_the_files_equal_spark_num_rows_total_in_every_batch(corpus):
    compared = 0
    for name, path, runs in _checkpoints(corpus):
        expected = operator_rows(runs)
        state = read_state(str(path), progress_records=())
        assert len(state.operators) == len(expected), name
        for op in state.operators:
            spark_rows = expected[op.operator_id]
            # every batch whose version a restart can still load from the files (all of them here:
            # nothing was deleted; after a snapshot, the batches from the snapshot on)
            first = min(op.file_rows) if op.file_rows else None
            wanted = {b: n for b, n in spark_rows.items() if first is not None and b >= first}
            assert op.file_rows == wanted, (name, op.operator_id, op.count_note)
            assert max(wanted) == max(spark_rows), name  # up to the newest batch
            compared += len(wanted)
    assert compared >= 80


def test_rocksdb_changelog_rows_are_exact_at_every_version_after_a_snapshot_zip(corpus):
    """Issue 36: changelog checkpointing with snapshot zips. The zips' keys are in SST files; the
    changelogs before a zip give them, the changelogs after it are decoded from them, so the rows
    equal Spark's numRowsTotal at every batch, not only at the zips (the newest zip's numKeys is
    not what the store holds after the batches that follow it)."""
    name = "changelog_snapshots_unchanged"
    path = corpus.cases[name].checkpoint
    (op,) = read_state(str(path), progress_records=()).operators
    spark_rows = operator_rows(corpus.runs[f"case:{name}"])[0]
    zips = {int(p.split("/")[-1].split(".")[0]) for p in files_of(path) if p.endswith(".zip")}
    assert op.changelog and zips and max(op.base_versions) > 0, files_of(path)
    assert op.chain_length >= 1, files_of(path)  # changelogs after the newest zip: decoded, not the zip's numKeys
    assert op.file_rows == spark_rows and op.count_note is None, (op.count_note, files_of(path))
    after = [b for b in spark_rows if b + 1 > max(op.base_versions)]
    assert after and op.rows_source == "files"
    # its build, written with minDeltasForSnapshot=1, counts at every version too
    (built,) = read_state(str(corpus.builds["rocksdb_changelog_snapshots"]), progress_records=()).operators
    assert built.file_rows == operator_rows(corpus.runs["rocksdb_changelog_snapshots"])[0]


def test_a_long_chain_without_a_snapshot_is_flagged_under_spark_defaults(corpus):
    """Issue 36: a real checkpoint whose maintenance task never ran (one batch per file, 16 files):
    a restart replays 16 or more deltas per partition, more than Spark's minDeltasForSnapshot (10)
    plus the margin (5), so state_never_compacted fires with the default thresholds; the four-delta
    chains of the other checkpoints do not."""
    from state_corpus import LONG_CHAIN_FILES

    state = read_state(str(corpus.builds["hdfs_long_chain"]), progress_records=())
    (op,) = state.operators
    assert op.snapshot_version is None and op.chain_length >= LONG_CHAIN_FILES, files_of(corpus.builds["hdfs_long_chain"])
    (finding,) = [f for f in state_findings(state) if f.rule == "state_never_compacted"]
    assert f"replays {op.chain_length} delta files" in finding.message and "minDeltasForSnapshot 10" in finding.message
    for name in ("hdfs_windows", "rocksdb_changelog", "hdfs_snapshots"):
        fine = read_state(str(corpus.builds[name]), progress_records=())
        assert "state_never_compacted" not in {f.rule for f in state_findings(fine)}, name


def test_the_readers_see_both_providers_changelogs_format_v2_and_snapshots(corpus):
    shapes = {}
    for name in ("hdfs_windows", "rocksdb_windows", "rocksdb_changelog", "rocksdb_format_v2", "hdfs_snapshots"):
        (op,) = read_state(str(corpus.builds[name]), progress_records=()).operators
        shapes[name] = (op.provider, op.changelog, op.format_version, op.chain_length)
        assert op.name == "stateStoreSave" and op.partitions == 2 and op.bounded_by_watermark is True
    assert shapes["hdfs_windows"] == ("hdfs", False, 1, 4)  # four batches, four deltas, no snapshot
    assert shapes["rocksdb_windows"] == ("rocksdb", False, 1, 0)  # a zip per version: nothing to replay
    assert shapes["rocksdb_changelog"] == ("rocksdb", True, 1, 4)
    assert shapes["rocksdb_format_v2"] == ("rocksdb", True, 2, 4)
    snapshots = read_state(str(corpus.builds["hdfs_snapshots"]), progress_records=()).operators[0]
    assert snapshots.snapshot_version is not None and snapshots.chain_length < 4, files_of(corpus.builds["hdfs_snapshots"])


def test_bounded_by_watermark_from_the_state_schema(corpus):
    def bound(name):
        (op,) = read_state(str(corpus.builds[name]), progress_records=()).operators
        return op.name, op.bounded_by_watermark

    assert bound("dedupe_watermark") == ("dedupe", True)
    assert bound("dedupe_no_watermark") == ("dedupe", False)
    assert bound("join_both_watermarks") == ("symmetricHashJoin", True)
    assert bound("join_one_watermark") == ("symmetricHashJoin", False)
    (join,) = read_state(str(corpus.builds["join_both_watermarks"]), progress_records=()).operators
    assert len(join.stores) == 4 and join.partitions == 2


def test_state_findings_on_the_corpus(corpus):
    def codes(name, **thresholds):
        state = read_state(str(corpus.builds[name]))
        return {f.rule for f in state_findings(state, StateThresholds(**thresholds))}

    assert "state_unbounded" in codes("dedupe_no_watermark")
    assert "state_unbounded" in codes("join_one_watermark")
    assert "state_unbounded" not in codes("join_both_watermarks") | codes("dedupe_watermark") | codes("hdfs_windows")
    # a chain of 4 deltas is never compacted past a threshold of 3; the snapshotted one is not
    assert "state_never_compacted" in codes("hdfs_windows", max_chain=3)
    assert "state_never_compacted" not in codes("hdfs_snapshots", max_chain=3)
    # the dedup without a watermark only grows; with a watermark that never advances, not "growing"
    assert "state_growing" not in codes("dedupe_no_watermark", growing_batches=2)


#: What the driver's start check says of each case only the driver can tell (None: it lets it start).
START_REFUSALS = {"key_schema_changed": "key_schema_changed", "value_schema_changed": None,
                  "operator_removed": "operators_changed", "second_source": "source_count_changed",
                  "window_duration_changed": "window_duration_changed",
                  "watermark_delay_changed": "watermark_delay_changed", "source_path_changed": "source_path_changed"}
#: The diagnosis of each restart Spark refused: its code, and the file it names (relative to the checkpoint).
DIAGNOSES = {
    "metadata_missing": ("metadata_missing", "metadata"),
    "offsets_hole": ("offsets_hole", "offsets/2"),
    "state_file_missing": ("state_file_missing", "state/0/1/2.delta"),
    "state_file_truncated": ("state_file_truncated", "state/0/0/4.delta"),
    "key_schema_changed": ("key_schema_changed", "state/0/0/_metadata/schema"),
    "value_schema_changed": ("value_schema_changed", "state/0/0/_metadata/schema"),
    "operator_removed": ("operators_changed", "state/0/_metadata/metadata"),
    "second_source": ("source_count_changed", "offsets/3"),
    "format_v2_with_hdfs": ("state_format_v2_with_hdfs", "state/0"),
    "rocksdb_zip_missing": ("state_file_missing", None),
    "changelog_truncated": ("state_file_truncated", None),
}


def test_every_refused_restart_was_predicted_or_refused_at_start_or_diagnosed(corpus):
    refused = {name for name, case in corpus.cases.items() if case.run.refused}
    expected = {name for name, case in corpus.cases.items() if case.spark == "refused"}
    assert refused == expected, {n: corpus.cases[n].run.error[:300] for n in refused ^ expected if corpus.cases[n].run.error}
    for name in refused - DRIVER_ONLY:
        assert corpus.cases[name].verdict == "no_go", (name, corpus.cases[name].codes)
    assert refused & DRIVER_ONLY == {"key_schema_changed", "value_schema_changed", "operator_removed", "second_source"}
    # What the files cannot tell, the driver's start check does, before Spark starts the query.
    for name, code in START_REFUSALS.items():
        case = corpus.cases[name]
        assert (case.start.code if case.start else None) == code, (name, case.start and case.start.line)
    # Nothing the preflight or the start check let through was refused without a diagnosis.
    for name in refused:
        case = corpus.cases[name]
        assert case.verdict == "no_go" or case.start is not None or case.diagnosis is not None, name
        assert case.diagnosis is not None, (name, case.run.error[:500])


def test_every_spark_refusal_is_one_line_naming_the_file_and_the_recipe(corpus):
    from watermark_ops.core.state.diagnosis import read_diagnosis

    for name, (code, file) in DIAGNOSES.items():
        case = corpus.cases[name]
        diagnosis = case.diagnosis
        assert diagnosis.code == code and diagnosis.refused_by == "spark", (name, diagnosis.line)
        if file is not None:
            assert diagnosis.file.removeprefix("file:") == str(case.checkpoint / file), (name, diagnosis.file)
        assert "\n" not in diagnosis.line and "What to do: " in diagnosis.line and str(case.checkpoint) in diagnosis.line
        assert "Exception" not in diagnosis.line and "at org.apache" not in diagnosis.line  # no stack trace
        # the same diagnosis beside the checkpoint, for the UI
        assert read_diagnosis(str(case.checkpoint)) == diagnosis
    assert "lz4 end block" in corpus.cases["state_file_truncated"].diagnosis.message  # Spark's own says "EOF"


def test_every_silent_change_is_refused_at_start_unless_accepted_and_then_runs(corpus):
    silent = {name for name, case in corpus.cases.items() if case.spark == "silent"}
    assert silent == {"window_duration_changed", "watermark_delay_changed", "source_path_changed"}
    for name in silent:
        case = corpus.cases[name]
        assert case.start is not None and case.start.refused_by == "watermark-ops", name
        assert case.start.file and "What to do: " in case.start.line and "accept_changes=" in case.start.line
        assert case.start_accepted is None, (name, case.start_accepted and case.start_accepted.line)
        assert not case.run.refused  # accepted, Spark runs it (silently, as the facts say)
    assert corpus.cases["window_duration_changed"].start.file.endswith(".delta")  # the decoded state key
    assert "30 minutes" in corpus.cases["window_duration_changed"].start.message
    assert "20 minutes" in corpus.cases["window_duration_changed"].start.message
    assert corpus.cases["source_path_changed"].start.file.endswith("sources/0/1")


def test_preflight_names_the_reason_spark_refused(corpus):
    reasons = {
        "metadata_missing": ("metadata_missing", "STREAMING_CHECKPOINT_MISSING_METADATA_FILE"),
        "offsets_hole": ("offsets_hole", "batch 2"),
        "state_file_missing": ("state_file_missing", "CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS"),
        "state_file_truncated": ("state_file_truncated", "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED"),
        "format_v2_with_hdfs": ("state_format_v2_with_hdfs", "STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED"),
        "rocksdb_zip_missing": ("state_file_missing", "CANNOT_LOAD_STATE_STORE.CANNOT_READ_STREAMING_STATE_FILE"),
        "changelog_truncated": ("state_file_truncated", "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED"),
    }
    for name, (code, in_spark_error) in reasons.items():
        case = corpus.cases[name]
        assert code in case.codes, (name, case.codes)
        assert in_spark_error in case.run.error, (name, case.run.error[:500])


def test_every_ignored_conf_is_a_warning_naming_the_value_that_applies(corpus):
    for name, key, frozen in (("shuffle_partitions_changed", "spark.sql.shuffle.partitions", "2"),
                              ("watermark_policy_changed", "spark.sql.streaming.multipleWatermarkPolicy", "min"),
                              ("provider_changed", "spark.sql.streaming.stateStore.providerClass",
                               "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider")):
        case = corpus.cases[name]
        assert not case.run.refused and case.verdict == "warn" and case.codes == ("conf_overridden",), name
        head = read_checkpoint(str(case.checkpoint))
        assert head.batch(head.head_batch_id).conf[key] == frozen  # Spark kept the checkpoint's value
    assert not any(p.endswith(".zip") for p in files_of(corpus.cases["provider_changed"].checkpoint))


def test_every_restart_that_works_unchanged_is_a_go(corpus):
    for name in ("unchanged", "head_commit_missing", "rocksdb_unchanged", "changelog_unchanged",
                 "format_v2_unchanged", "snapshots_unchanged", "changelog_snapshots_unchanged"):
        case = corpus.cases[name]
        assert not case.run.refused and case.verdict == "go", (name, case.codes, case.run.error)
    assert corpus.cases["head_commit_missing"].codes == ("in_flight_batch",)
    # the start check lets every unchanged query start, whatever the files' damage or the confs
    passed = {name for name, case in corpus.cases.items() if case.start is None}
    assert passed == set(corpus.cases) - {n for n, code in START_REFUSALS.items() if code}


def test_the_cli_on_a_corpus_checkpoint_from_the_files_alone(corpus, capsys):
    path = str(corpus.cases["state_file_missing"].checkpoint)
    assert main(["preflight", path, "--json", "--conf", "spark.sql.shuffle.partitions=5"]) == 2
    document = json.loads(capsys.readouterr().out)
    assert document["verdict"] == "no_go"
    assert {(f["code"], f["file"].endswith("state/0/1/2.delta")) for f in document["findings"]} >= {
        ("state_file_missing", True)}
    assert all(f["recipe"] for f in document["findings"])
    assert main(["state", str(corpus.builds["dedupe_no_watermark"]), "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    (op,) = document["operators"]
    assert op["bounded_by_watermark"] is False and op["rows"] == sorted(op["rows"]) and op["chain_length"] == 2
    assert [f["code"] for f in document["findings"]] == ["state_unbounded"]


def test_state_and_preflight_on_s3_equal_the_local_read(corpus, s3_server, capsys):
    """The same checkpoints on the S3 API (the session's moto server, s3fs): the same operators,
    rows, chains and verdicts as the local copies, through a filesystem and through the CLI."""
    from tests.watermark_ops import object_storage_fixtures as osf
    from watermark_ops.core.state.preflight import preflight

    fs = s3_server.filesystem()
    for path in (corpus.builds["rocksdb_format_v2"], corpus.builds["hdfs_snapshots"],
                 corpus.cases["state_file_truncated"].checkpoint, corpus.builds["join_one_watermark"]):
        url = osf.uploaded_checkpoint(fs, path)
        remote = read_state(url, filesystem=fs, progress_records=()).to_dict()
        local = read_state(str(path), progress_records=()).to_dict()
        assert json.loads(json.dumps(remote).replace(url, str(path))) == local
        verdicts = [preflight(read_checkpoint(where, **kw), read_state(where, progress_records=(), **kw)).verdict
                    for where, kw in ((url, {"filesystem": fs}), (str(path), {}))]
        assert verdicts[0] == verdicts[1]
    assert main(["preflight", url, "--json", "--storage-options", json.dumps(s3_server.storage_options())]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "go"
