"""The checkpoint reader against real Spark checkpoints and hand-made files (local and memory://)."""

from __future__ import annotations

import json
import uuid

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from tests.watermark_ops import checkpoint_fixtures as cf
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.log_formats import COMMITS_MAX_VERSION, OFFSETS_MAX_VERSION


@pytest.fixture(scope="module")
def history(spark):
    return cf.restart_history(spark)


def test_real_restarts_read_as_spark_wrote_them(history):
    checkpoint = read_checkpoint(str(history.checkpoint))
    assert checkpoint.problems == ()
    assert checkpoint.query_id == history.runs[0]["query_id"]
    assert {run["query_id"] for run in history.runs} == {checkpoint.query_id}

    # Every batch a run executed is in the offset log with the watermark it ran with.
    executed = {b["batch_id"]: b["watermark_ms"] for run in history.runs for b in run["batches"] if b["executed"]}
    assert [b.batch_id for b in checkpoint.batches] == sorted(executed) == list(range(7))
    assert {b.batch_id: b.watermark_ms for b in checkpoint.batches} == executed
    # The availableNow runs left a trailing no-data batch, Trigger.Once (run 3: batch 4) did not,
    # and the run without new input (run 4) wrote no batch.
    assert [len([b for b in run["batches"] if b["executed"]]) for run in history.runs] == [2, 2, 1, 0, 2]

    assert all(b.committed and b.commit.version == 1 and b.offsets.version == 1 for b in checkpoint.batches)
    for batch, following in zip(checkpoint.batches, checkpoint.batches[1:]):
        assert batch.next_watermark_ms == following.watermark_ms  # what populateStartOffsets restores
        assert batch.timestamp_ms <= following.timestamp_ms
    once = checkpoint.batch(4)
    assert once.next_watermark_ms > once.watermark_ms  # no trailing batch ran with it in that run
    assert checkpoint.head_batch_id == 6 and checkpoint.in_flight_batch_id is None
    assert checkpoint.next_watermark_ms == checkpoint.batch(6).next_watermark_ms == history.runs[-1]["batches"][-1]["watermark_ms"]

    first = checkpoint.batch(0)
    assert first.conf["spark.sql.shuffle.partitions"] == "2"
    assert first.conf["spark.sql.streaming.multipleWatermarkPolicy"] == "min"
    assert first.sources == ({"logOffset": 0},) and first.offsets.source_ids == ("0",)
    assert checkpoint.batch(6).sources == ({"logOffset": 3},)  # four files landed, four file-source log entries
    assert first.offsets_file == str(history.checkpoint / "offsets" / "0")
    assert first.commit_file == str(history.checkpoint / "commits" / "0")
    # The local filesystem wrote .N.crc beside each batch file: they are not batches.
    assert (history.checkpoint / "offsets" / ".0.crc").exists()


class CountingFileSystem(LocalFileSystem):
    """The real local filesystem, counting listings and file reads."""

    cachable = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.listed: list[str] = []
        self.read: list[str] = []

    def ls(self, path, detail=False, **kwargs):
        self.listed.append(path)
        return super().ls(path, detail=detail, **kwargs)

    def cat_file(self, path, start=None, end=None, **kwargs):
        self.read.append(path)
        return super().cat_file(path, start=start, end=end, **kwargs)


def test_each_folder_listed_once_and_each_file_read_once(history):
    fs = CountingFileSystem()
    checkpoint = read_checkpoint(str(history.checkpoint), filesystem=fs)
    assert len(checkpoint.batches) == 7
    root = str(history.checkpoint)
    assert sorted(fs.listed) == sorted([root, f"{root}/offsets", f"{root}/commits"])
    assert len(fs.read) == len(set(fs.read)) == 7 + 7 + 1  # offsets, commits, metadata


def test_memory_filesystem_reads_the_same_as_local(history):
    root = f"memory://ckpt-{uuid.uuid4().hex}"
    memory = fsspec.filesystem("memory")
    local = LocalFileSystem()
    for path in local.find(str(history.checkpoint)):
        relative = path[len(str(history.checkpoint)) + 1:]
        if relative.split("/")[0] in ("metadata", "offsets", "commits"):
            memory.pipe_file(f"{root}/{relative}", local.cat_file(path))
    try:
        from_memory = read_checkpoint(root)
        from_disk = read_checkpoint(str(history.checkpoint))
        assert from_memory.problems == ()
        assert from_memory.location == root.replace("memory://", "memory:///")  # fsspec's own spelling
        assert from_memory.query_id == from_disk.query_id
        assert [(b.batch_id, b.watermark_ms, b.timestamp_ms, b.next_watermark_ms, b.sources, b.conf)
                for b in from_memory.batches] == [
            (b.batch_id, b.watermark_ms, b.timestamp_ms, b.next_watermark_ms, b.sources, b.conf)
            for b in from_disk.batches]
        assert from_memory.batch(3).offsets_file.startswith("memory://") and from_memory.batch(3).offsets_file.endswith("/offsets/3")
    finally:
        memory.rm(root, recursive=True)


def test_airflow_object_storage_path(history):
    from airflow.sdk import ObjectStoragePath

    checkpoint = read_checkpoint(ObjectStoragePath(f"file://{history.checkpoint}"))
    assert checkpoint.problems == () and checkpoint.head_batch_id == 6


@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path):
    """A fresh checkpoint location on the local filesystem or in fsspec's in-memory filesystem."""
    if request.param == "local":
        yield str(tmp_path / "checkpoint")
        return
    location = f"memory://handmade-{uuid.uuid4().hex}"
    yield location
    fs = fsspec.filesystem("memory")
    if fs.exists(location):
        fs.rm(location, recursive=True)


def test_handmade_formats_the_installed_spark_cannot_write(root):
    cf.put(root, "metadata", json.dumps({"id": "q-1"}))
    # Spark 2.1: no conf, no batchTimestampMs (defaults to 0); a pre-2.4 "{}" commit.
    cf.put(root, "offsets/0", 'v1\n{"batchWatermarkMs":0}\n{"logOffset":0}')
    cf.put(root, "commits/0", cf.commit_text(None))
    # A bare "v1" commit, as very old files hold.
    cf.put(root, "offsets/1", cf.offsets_text(0, with_conf=False, sources=[{"logOffset": 1}]))
    cf.put(root, "commits/1", cf.commit_text(None, bare=True))
    # 4.0/4.1 v1 commit carrying an empty stateUniqueIds; unknown metadata fields are ignored.
    cf.put(root, "offsets/2", 'v1\n{"batchWatermarkMs":5000,"batchTimestampMs":7,"conf":{},"futureField":1}\n{"logOffset":2}\n-')
    cf.put(root, "commits/2", cf.commit_text(5000, extra={"stateUniqueIds": {}}))
    # The version changes part way: offsets v2 (4.2+, opt-in) with sourceId:offset lines and a commit v2.
    cf.put(root, "offsets/3", cf.offsets_text(5000, 8, version=2, sources=[{"logOffset": 3}, None],
                                              source_ids=["0", "weather"]))
    cf.put(root, "commits/3", cf.commit_text(9000, version=2, extra={"stateUniqueIds": {"0": [["a", "b"]]}}))
    # A commit v3 (4.2+/4.3) with sinkMetadataMap, then back to offsets v1.
    cf.put(root, "offsets/4", cf.offsets_text(9000, 9, sources=[{"logOffset": 4}, {"kafka": {"0": 12}}]))
    cf.put(root, "commits/4", cf.commit_text(9000, version=3, extra={"sinkMetadataMap": {"0": {"x": 1}}}))

    checkpoint = read_checkpoint(root)
    assert checkpoint.problems == ()
    assert checkpoint.query_id == "q-1"
    b0, b1, b2, b3, b4 = checkpoint.batches
    assert (b0.watermark_ms, b0.timestamp_ms, b0.conf, b0.next_watermark_ms) == (0, 0, {}, 0)
    assert not b0.commit.has_next_watermark and not b1.commit.has_next_watermark
    assert (b1.conf, b1.next_watermark_ms, b1.commit.version) == ({}, 0, 1)
    assert b2.sources == ({"logOffset": 2}, None) and b2.commit.has_next_watermark
    assert b2.commit.metadata["stateUniqueIds"] == {}
    assert b3.offsets.version == 2 and b3.offsets.source_ids == ("0", "weather")
    assert b3.sources == ({"logOffset": 3}, None) and b3.offsets.metadata["sourceMetadataInfo"] == {}
    assert (b3.commit.version, b3.next_watermark_ms) == (2, 9000)
    assert b3.commit.metadata["stateUniqueIds"] == {"0": [["a", "b"]]}
    assert b4.offsets.version == 1 and b4.sources == ({"logOffset": 4}, {"kafka": {"0": 12}})
    assert (b4.commit.version, b4.next_watermark_ms) == (3, 9000)
    assert checkpoint.head_batch_id == 4 and checkpoint.next_watermark_ms == 9000


def test_no_commit_log_and_no_metadata_are_not_errors(root):
    # Before Spark 2.2 there was no commit log; some test checkpoints have no metadata file.
    cf.put(root, "offsets/0", cf.offsets_text(0, with_conf=False))
    cf.put(root, "offsets/1", cf.offsets_text(3000, with_conf=False))
    checkpoint = read_checkpoint(root)
    assert checkpoint.problems == ()
    assert checkpoint.query_id is None and not checkpoint.has_commit_log
    assert [b.committed for b in checkpoint.batches] == [False, False]
    assert checkpoint.in_flight_batch_id is None  # nothing to tell an in-flight batch by
    assert checkpoint.next_watermark_ms == 3000


def test_in_flight_head_and_restore_rule(root):
    cf.handmade_checkpoint(root, [(0, 1000), (1000, 4000), (4000, None)])
    checkpoint = read_checkpoint(root)
    assert checkpoint.in_flight_batch_id == 2
    assert checkpoint.next_watermark_ms == 4000  # batch 2 is re-run with its own offsets
    cf.put(root, "commits/2", cf.commit_text(6000))
    checkpoint = read_checkpoint(root)
    assert checkpoint.in_flight_batch_id is None and checkpoint.next_watermark_ms == 6000


def test_noise_files_are_ignored(root):
    cf.handmade_checkpoint(root, [(0, 1000), (1000, 1000)])
    cf.add_noise(root, [0, 1])
    checkpoint = read_checkpoint(root)
    assert checkpoint.problems == ()
    assert [b.batch_id for b in checkpoint.batches] == [0, 1]


DEEP = "[" * 100_000 + "]" * 100_000
MALFORMED = {
    # name: (relative file, content, expected kind, words the message must contain)
    "header_not_a_version": ("offsets/1", 'x1\n{"batchWatermarkMs":1}\n{"logOffset":1}', "bad_header", "'x1'"),
    "header_version_zero": ("commits/1", 'v0\n{"nextBatchWatermarkMs":1}', "bad_header", "v<positive int>"),
    "header_negative": ("offsets/1", 'v-2\n{}\n-', "bad_header", "'v-2'"),
    "header_blank": ("commits/1", '\n{"nextBatchWatermarkMs":1}', "bad_header", "''"),
    "offsets_version_too_new": ("offsets/1", f'v{OFFSETS_MAX_VERSION + 1}\n{{}}\n-', "unsupported_version",
                                f"v{OFFSETS_MAX_VERSION + 1}"),
    "commits_version_too_new": ("commits/1", f'v{COMMITS_MAX_VERSION + 1}\n{{}}', "unsupported_version",
                                f"v{COMMITS_MAX_VERSION}"),
    "offsets_header_only": ("offsets/1", "v1\n", "truncated", "metadata"),
    "offsets_without_sources": ("offsets/1", 'v1\n{"batchWatermarkMs":1000}', "truncated", "one offset line per source"),
    "offsets_v2_without_metadata": ("offsets/1", "v2\n\n0:-", "truncated", "v2"),
    "offsets_cut_json": ("offsets/1", 'v1\n{"batchWatermarkMs":10', "not_json", "line 2"),
    "commits_cut_json": ("commits/1", 'v1\n{"nextBatchWatermarkMs":10', "not_json", "line 2"),
    "commits_not_an_object": ("commits/1", "v1\n[1000]", "bad_field", "not an object"),
    "offsets_watermark_not_integer": ("offsets/1", 'v1\n{"batchWatermarkMs":"10"}\n-', "bad_field", "batchWatermarkMs"),
    "commits_watermark_not_integer": ("commits/1", 'v1\n{"nextBatchWatermarkMs":1.5}', "bad_field", "nextBatchWatermarkMs"),
    "offsets_v2_line_without_id": ("offsets/1", 'v2\n{"batchWatermarkMs":1,"sourceMetadataInfo":{}}\n{"logOffset":1}',
                                   "bad_field", "<sourceId>:<offset>"),
    "offsets_empty": ("offsets/1", b"", "empty", "empty file"),
    "commits_empty": ("commits/1", b"", "empty", "empty file"),
    "offsets_binary": ("offsets/1", b"\x00\x01\x02\xff\xfe", "binary", "binary"),
    "commits_not_utf8": ("commits/1", b"v1\n\xff\xfe\xfd", "binary", "UTF-8"),
    "metadata_not_json": ("metadata", "{id: q}", "not_json", "query uuid"),
    "metadata_empty": ("metadata", b"", "empty", "query uuid"),
    "metadata_without_id": ("metadata", '{"name": "q"}', "bad_field", "query uuid"),
    # json raises RecursionError, not ValueError, on deep nesting: reported like any bad JSON.
    "offsets_deeply_nested": ("offsets/1", "v1\n" + DEEP + "\n-", "not_json", "nested too deeply"),
    "commits_deeply_nested": ("commits/1", "v1\n" + DEEP, "not_json", "nested too deeply"),
    "metadata_deeply_nested": ("metadata", DEEP, "not_json", "nested too deeply"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_is_a_clear_problem_and_the_rest_is_read(root, case):
    relative, content, kind, words = MALFORMED[case]
    cf.handmade_checkpoint(root, [(0, 1000), (1000, 2000), (2000, 3000)])
    cf.put(root, relative, content)
    checkpoint = read_checkpoint(root)
    assert len(checkpoint.problems) == 1, checkpoint.problems
    problem = checkpoint.problems[0]
    assert problem.kind == kind
    assert problem.file.endswith("/" + relative)
    assert words in problem.message
    assert problem.batch_id == (None if relative == "metadata" else 1)
    # Everything else is still read.
    assert [b.batch_id for b in checkpoint.batches] == [0, 1, 2]
    assert checkpoint.batch(0).watermark_ms == 0 and checkpoint.batch(2).watermark_ms == 2000
    assert checkpoint.batch(2).next_watermark_ms == 3000
    broken = checkpoint.batch(1)
    if relative.startswith("offsets"):
        assert broken.offsets is None and broken.offsets_file.endswith("/offsets/1") and broken.committed
    elif relative.startswith("commits"):
        assert broken.commit is None and broken.committed and broken.watermark_ms == 1000
    else:
        assert checkpoint.query_id is None


def test_a_name_beyond_a_long_is_no_batch_file(root):
    # Spark's HDFSMetadataLog.isBatchFile is Try(name.toLong): a 23-digit name is noise, not the head.
    cf.handmade_checkpoint(root, [(0, 1000), (1000, 2000)])
    cf.put(root, "offsets/" + "9" * 23, cf.offsets_text(5000))
    cf.put(root, f"offsets/{2**63 - 1}", cf.offsets_text(7000))
    checkpoint = read_checkpoint(root)
    assert checkpoint.head_batch_id == 2**63 - 1 and checkpoint.problems == ()
    assert [b.batch_id for b in checkpoint.batches] == [0, 1, 2**63 - 1]


def test_source_line_not_json_keeps_the_batch(root):
    cf.handmade_checkpoint(root, [(0, 1000), (1000, 2000)])
    cf.put(root, "offsets/1", 'v1\n{"batchWatermarkMs":1000}\n{"logOffset":1}\n{broken')
    checkpoint = read_checkpoint(root)
    (problem,) = checkpoint.problems
    assert problem.kind == "not_json" and "line 4" in problem.message and problem.file.endswith("/offsets/1")
    assert checkpoint.batch(1).watermark_ms == 1000
    assert checkpoint.batch(1).sources == ({"logOffset": 1}, "{broken")


def test_missing_location_and_folder_that_is_no_checkpoint(tmp_path):
    missing = read_checkpoint(str(tmp_path / "nope"))
    assert [p.kind for p in missing.problems] == ["checkpoint_missing"]
    assert missing.problems[0].file == str(tmp_path / "nope") and missing.batches == ()
    assert read_checkpoint(f"file://{tmp_path}/nope/").location == str(tmp_path / "nope")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("hello")
    other = read_checkpoint(str(tmp_path / "other"))
    assert [p.kind for p in other.problems] == ["not_a_checkpoint"]


@pytest.mark.parametrize("text", [
    'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795263323292,"conf":{"a":"1","b":"x"}}\n{"logOffset":0}',
    'v1\n{"batchWatermarkMs":280000,"batchTimestampMs":1,"conf":{"a":"é"}}\n{"logOffset":12}\n-\n',
    'v1\n{"batchWatermarkMs":5,"batchTimestampMs":6,"conf":{}}\n-\n{"logOffset":7}\n',
    'v1\n{"batchWatermarkMs":5,"batchTimestampMs":6,"conf":{"a":1}}\n{"topic":{"0":12}}',  # not a file source
    'v1\n{"batchWatermarkMs":5,"batchTimestampMs":6,"conf":{"a":"1"}}\n{"logOffset":01}',  # not JSON
    'v1\n{"batchWatermarkMs":5,"batchTimestampMs":6,"conf":{"a":"1"}}\n\n{"logOffset":1}',  # an empty line
    'v01\n{"batchWatermarkMs":5,"batchTimestampMs":6,"conf":{"a":"1"}}\n{"logOffset":1}',
    'v1\n{"batchWatermarkMs":5,"batchTimestampMs":6,"conf":{"a":"1\u0000"}}\n{"logOffset":1}',
])
def test_the_offsets_fast_path_reads_exactly_what_the_general_path_reads(text):
    """An audit parses every offsets file with a fast path for Spark's exact text (one match on the
    bytes, each distinct conf parsed once): the same entry and problems as the general path, or the
    same error."""
    from watermark_ops.core.log_formats import LogFileError, parse_offsets

    def parsed(**kwargs):
        try:
            return parse_offsets(text.encode(), 3, "/cp/offsets/3", **kwargs)
        except LogFileError as err:
            return err.kind, err.message

    cache: dict = {}
    assert parsed(conf_cache=cache) == parsed() == parsed(conf_cache=cache)


def test_the_audit_pauses_the_collector_and_leaves_it_as_it_found_it(tmp_path, monkeypatch):
    # run_audit builds acyclic values only, so Python's cyclic collector is paused while it reads
    # and judges; afterwards it is on again, or still off when the caller had turned it off.
    import gc

    from watermark_ops.core import checkpoint
    from watermark_ops.core.audit import run_audit

    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000)])
    seen = []
    real = checkpoint.read_log_files

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint, "read_log_files", spy)
    assert gc.isenabled()
    assert run_audit(str(root)).status == "ok"
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        run_audit(str(root))
        assert not gc.isenabled()
    finally:
        gc.enable()
