"""The start check's pure parts: the comparison of a starting query with what a checkpoint holds,
the accepted changes, a window decoded from an ``UnsafeRow`` key, Spark's refusals mapped to one
line, and the diagnosis file. The real plans, checkpoints and refusals are in
``tests/spark_jobs/test_state_corpus.py`` and ``test_restart_check.py``."""

from __future__ import annotations

import json
import struct

import pytest

from watermark_ops.core.state.diagnosis import Diagnosis, diagnose_spark_error, diagnosis_path, read_diagnosis
from watermark_ops.core.state.held import HeldShape, window_width_us
from watermark_ops.core.state.plan import QueryShape, parse_analyzed_plan, source_folder
from watermark_ops.core.state.restart import compare_start, parse_accepted

HOUR = 3_600_000


def _shape(path="/data/in", windows=(HOUR,), delays=(2 * HOUR,), operators=("stateStoreSave",), keys=2, **kw):
    return QueryShape(sources=({"kind": "file", "path": path, "description": f"FileSource[{path}]"},),
                      operators=tuple({"name": n, "keys": [f"k{i}" for i in range(keys)]} for n in operators),
                      watermarks=tuple({"column": "ts", "delay_ms": d} for d in delays),
                      window_durations_ms=tuple(windows), **kw)


def _held(shape, held_from="progress_log"):
    evidence = {"file": "/ck.progress.jsonl"} if held_from == "progress_log" else dict(shape.evidence)
    return HeldShape(QueryShape(shape.sources, shape.operators, shape.operators_known, shape.watermarks,
                                shape.window_durations_ms, evidence), held_from, "/ck", 7, "q")


def test_the_same_query_starts_and_a_new_checkpoint_is_not_compared():
    assert compare_start(_held(_shape()), _shape()).refused == []
    assert compare_start(None, _shape()).held_from == "new"


@pytest.mark.parametrize("starting, code, spark_refuses", [
    (_shape(windows=(2 * HOUR,)), "window_duration_changed", False),
    (_shape(delays=(HOUR,)), "watermark_delay_changed", False),
    (_shape(path="/data/moved"), "source_path_changed", False),
    (_shape(keys=3), "key_schema_changed", True),
    (_shape(operators=()), "operators_changed", True),
    (_shape(operators=("stateStoreSave", "dedupe")), "operators_changed", True),
])
def test_each_change_from_what_the_last_run_recorded(starting, code, spark_refuses):
    check = compare_start(_held(_shape()), starting)
    (change,) = check.changes
    assert (change.code, change.refused_by_spark, change.file) == (code, spark_refuses, "/ck.progress.jsonl")
    line = check.line()
    assert line.startswith(f"restart of /ck refused ({code}): ") and "What to do: " in line and "\n" not in line
    if not spark_refuses:  # a silent change can be accepted; then it starts
        accepted = compare_start(_held(_shape()), starting, [code.removesuffix("_changed")])
        assert accepted.refused == [] and [c.code for c in accepted.accepted] == [code]


def test_a_second_source_is_a_count_change_not_a_path_change():
    two = QueryShape(sources=_shape().sources + ({"kind": "other", "path": None, "description": "kafka"},),
                     operators=_shape().operators, watermarks=_shape().watermarks, window_durations_ms=(HOUR,))
    assert [c.code for c in compare_start(_held(_shape()), two).changes] == ["source_count_changed"]


def test_from_the_files_a_source_folder_holds_the_files_the_log_names():
    held = _shape(path="/data/in", evidence={"entries": {0: ["/data/in/day=1/a.json", "/data/in/day=2/b.json"]},
                                             "source_paths": {0: "/ck/sources/0/4"}})
    files = _held(held, "files")
    assert compare_start(files, _shape(path="/data/in")).changes == ()
    assert compare_start(files, _shape(path="file:///data/in/")).changes == ()  # a URI of the same folder
    assert compare_start(files, _shape(path="/data/in/*.json")).changes == ()  # a glob in it
    (change,) = compare_start(files, _shape(path="/data/in_v2")).changes  # a sibling with the same prefix
    assert change.code == "source_path_changed" and change.file == "/ck/sources/0/4"


def test_what_a_checkpoint_cannot_tell_is_not_compared():
    unknown = _held(QueryShape(sources=_shape().sources, operators=_shape().operators, operators_known=False), "files")
    assert compare_start(unknown, _shape(operators=(), windows=(5,), delays=(7,))).changes == ()
    stateless = _held(QueryShape(sources=_shape().sources), "files")  # no state: Spark decides
    assert compare_start(stateless, _shape()).changes == ()
    unreadable_plan = _shape(operators_known=False, operators=())
    assert compare_start(_held(_shape()), unreadable_plan).changes == ()


def test_accepted_changes_are_named_and_checked():
    assert parse_accepted("window_duration, source_path_changed,") == ("window_duration", "source_path")
    assert parse_accepted(["watermark_delay"]) == ("watermark_delay",) and parse_accepted(None) == ()
    assert parse_accepted("None") == ()  # an unset template
    with pytest.raises(ValueError, match="Spark itself refuses"):
        parse_accepted("operators")
    with pytest.raises(ValueError, match="can accept are window_duration"):
        parse_accepted("partitions")


def _unsafe_key(start_us: int, end_us: int, prefix: bytes = b"") -> bytes:
    """An UnsafeRow of (struct<start, end>, string "LGA"), as an aggregation's state key holds it."""
    nested = bytes(8) + struct.pack("<qq", start_us, end_us)
    text = b"LGA".ljust(8, b"\0")
    fixed = 8 + 2 * 8
    return prefix + bytes(8) + struct.pack("<Q", fixed << 32 | len(nested)) + struct.pack(
        "<Q", (fixed + len(nested)) << 32 | 3) + nested + text


def test_a_window_decoded_from_a_state_key():
    start = 1_357_027_200_000_000
    assert window_width_us(_unsafe_key(start, start + 1_800_000_000), 2, 0) == 1_800_000_000
    assert window_width_us(_unsafe_key(start, start + HOUR * 1000, b"\0"), 2, 0) == HOUR * 1000  # RocksDB's byte
    assert window_width_us(b"\x01" + bytes(7) + _unsafe_key(start, start + 1)[8:], 2, 0) is None  # a null window
    assert window_width_us(b"not a row", 2, 0) is None


def test_a_file_source_folder_is_normalised_for_comparison():
    assert source_folder("file:///a/b%20c/") == "/a/b c"
    assert source_folder("/a/b/*/x.json") == "/a/b"
    assert source_folder("s3a://bucket/in/") == "s3a://bucket/in"


def test_a_source_that_is_not_a_file_is_counted_with_its_hash_codes_dropped():
    plan = ("== Analyzed Logical Plan ==\nvalue: binary\n~Project [value#8]\n"
            "+- StreamingRelationV2 org.apache.spark.sql.kafka010.KafkaSourceProvider@5b2c9e5d, kafka, "
            "[subscribe=events], [key#7, value#8]\n\n== Optimized Logical Plan ==\n...")
    shape = parse_analyzed_plan(plan)
    (source,) = shape.sources
    assert source["kind"] == "other" and "@" not in source["description"] and "#" not in source["description"]
    assert shape.operators == () and shape.operators_known


SPARK_ERRORS = {
    "INVALID_LOG_VERSION": ("[INVALID_LOG_VERSION.MAX_SUPPORTED_VERSION] The log file was produced by a newer "
                            "version of Spark: v2 SQLSTATE: KD002", "log_version_unsupported"),
    "previous batch": ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Previous batch 4 not "
                       "found in offset log", "offsets_hole"),
    "connect value": ("pyspark.errors.exceptions.connect.StreamingQueryException: [STREAM_FAILED] Query terminated "
                      "with exception: [STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match "
                      "existing state value schema.\nPlease check number and type of fields.\nExisting value_schema="
                      "StructType(StructField(count,LongType,false)) and new value_schema=StructType(StructField("
                      "count,LongType,false),StructField(max,LongType,true)).\nIf you want to force ...",
                      "value_schema_changed"),
    "unloadable": ("[STREAM_FAILED] ... [CANNOT_LOAD_STATE_STORE.UNEXPECTED_VERSION] An error occurred during "
                   "loading state.", "state_store_unloadable"),
}


@pytest.mark.parametrize("name", sorted(SPARK_ERRORS))
def test_spark_refusals_become_one_line(name):
    text, code = SPARK_ERRORS[name]
    diagnosis = diagnose_spark_error(text, "s3://b/ck", run_tag="run-1", timestamp_ms=5)
    assert diagnosis.code == code and diagnosis.refused_by == "spark" and diagnosis.file.startswith("s3://b/ck/")
    assert diagnosis.line.startswith("restart of s3://b/ck refused by Spark ") and "What to do: " in diagnosis.line
    assert "\n" not in diagnosis.line


def test_a_failure_that_is_not_a_refused_restart_is_left_alone():
    assert diagnose_spark_error("[STREAM_FAILED] ... ZeroDivisionError: division by zero", "/ck") is None
    assert diagnose_spark_error("", "/ck") is None


def test_the_diagnosis_file_round_trips_and_a_bad_one_is_reported(tmp_path):
    checkpoint = str(tmp_path / "ck")
    assert read_diagnosis(checkpoint) is None
    diagnosis = diagnose_spark_error(SPARK_ERRORS["previous batch"][0], checkpoint, run_tag="r", timestamp_ms=1)
    with open(diagnosis_path(checkpoint), "w") as handle:
        json.dump(diagnosis.to_dict(), handle)
    assert read_diagnosis(checkpoint) == diagnosis
    with open(diagnosis_path(checkpoint)) as handle:
        assert Diagnosis.from_dict(json.load(handle)).line == diagnosis.line
    with open(diagnosis_path(checkpoint), "w") as handle:
        handle.write('{"code": "x"')
    broken = read_diagnosis(checkpoint)
    assert broken.code == "diagnosis_unreadable" and broken.file == diagnosis_path(checkpoint)
