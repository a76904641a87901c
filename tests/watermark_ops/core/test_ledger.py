"""The late-row ledger's pure reader on a hand-written checkpoint (``ledger_fixtures``): the file
source's log with a compact file, Spark's late rule at its boundary, the job's classification,
and every way the input can be bad. The same reader on real Spark runs: ``tests/spark_jobs/test_late_ledger.py``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import flight_inputs
from tests.watermark_ops import ledger_fixtures as lf
from watermark_ops.core.ledger import (
    InputProfile,
    LateRule,
    LedgerError,
    classify_line,
    late_ledger,
    schema_kinds,
    write_late_rows,
)
from watermark_ops.core.source_log import file_source_log_offset, parse_source_log


def _ids(ledger, batch_id):
    (batch,) = [b for b in ledger.batches if b.batch_id == batch_id]
    return sorted(r.event["id"] for r in batch.late_rows)


def test_late_rows_follow_sparks_window_end_rule_at_the_boundary(tmp_path):
    checkpoint, _ = lf.build(tmp_path)
    ledger = late_ledger(str(checkpoint))
    assert ledger.complete and ledger.problems == ()
    assert [b.batch_id for b in ledger.batches] == [0, 1, 2]
    assert {b: _ids(ledger, b) for b in (0, 1, 2)} == {0: [], **lf.LATE_IDS}
    rows = {r.event["id"]: r for r in ledger.late_rows}
    # A window ending exactly at the watermark is closed (window.end <= watermark): late by 0 ms.
    assert rows[10].late_by_ms == 0 and rows[10].window_end_ms == lf.WATERMARK_1
    assert rows[13].late_by_ms == 0 and rows[11].late_by_ms == lf.HOUR
    assert rows[10].watermark_ms == lf.WATERMARK_1 and rows[20].watermark_ms == lf.WATERMARK_2
    assert rows[17].line == 10  # the array line: its first object
    assert rows[17].source_file.endswith("/landing/flights_1.jsonl")


def test_quarantined_rows_are_counted_as_the_job_does_never_as_late(tmp_path):
    checkpoint, _ = lf.build(tmp_path)
    batch = late_ledger(str(checkpoint), [1]).batches[0]
    assert batch.rows_quarantined == lf.QUARANTINED_1
    assert batch.rows_read == 11  # 10 non-blank lines, one of them an array of two objects
    assert batch.rows_read == batch.rows_aggregated + batch.rows_late + sum(batch.rows_quarantined.values())
    assert batch.rows_aggregated == 2 and batch.late_by("origin") == {"EWR": 2, "JFK": 1, "LGA": 1}


FLIGHTS = InputProfile(schema_kinds(flight_inputs.EVENT_SCHEMA_DDL), {"no_arrival": "arr_time"})


def test_classification_edge_cases():
    profile = FLIGHTS

    def reasons(line: bytes, ahead=None):
        return [r for r, _, _ in classify_line(line, profile, "dep_time", 1_000_000, ahead)]

    good = json.loads(lf.flight(1, lf.T0))
    assert reasons(json.dumps(good).encode()) == [None]
    assert reasons(b"\xff\xfe" + json.dumps(good).encode()) == ["invalid_encoding"]
    assert reasons(b"   ") == [] and reasons(b"[]") == []
    assert reasons(b"{}") == ["malformed_record"] and reasons(b'{"unknown": 1}') == ["malformed_record"]
    assert reasons(b"[1, 2]") == ["malformed_record"] and reasons(b"12") == ["malformed_record"]
    assert reasons(json.dumps({**good, "flight": "abc"}).encode()) == ["malformed_record"]
    assert reasons(json.dumps({**good, "id": 2**63}).encode()) == ["malformed_record"]
    assert reasons(json.dumps({**good, "dep_delay": float("nan")}).encode()) == ["malformed_record"]
    assert reasons(json.dumps({**good, "origin": 5}).encode()) == [None]  # a string field takes any value
    assert reasons(json.dumps({**good, "dep_time": "2013-01-01 10:00:00"}).encode()) == ["unparseable_event_time"]
    assert reasons(json.dumps({**good, "dep_time": "2013-13-01T10:00Z"}).encode()) == ["unparseable_event_time"]
    assert reasons((json.dumps(good) + " trailing").encode()) == [None]  # only the first value is read
    (_, micros, _), = classify_line(json.dumps({**good, "dep_time": "2013-01-01T00:00:00.1234567-05:00"}).encode(),
                                    profile, "dep_time", 0)
    assert micros == lf.T0 * 1000 + 123456
    future = json.dumps({**good, "dep_time": "2099-01-01T00:00:00Z"}).encode()
    assert reasons(future) == [None] and reasons(future, ahead=3_600_000) == ["future_event_time"]


def test_the_recorded_inputs_are_the_jobs_schema():
    (entry,) = lf.RULE["inputs"]
    assert entry["schema"] == FLIGHTS.schema and entry["required"] == {"no_arrival": "arr_time"}
    assert "_corrupt_record" not in entry["schema"] and entry["schema"]["dep_delay"] == "double"


@pytest.mark.parametrize("inputs, says", [
    (None, "cannot be exact: the late rule records no input for this source"),
    ([{"event_time": "dep_time", "schema": {}, "required": {}, "parsing": "job", "format": "csv",
       "schema_ddl": "dep_time BIGINT", "pre_watermark": "jobs:parse"}],
     "cannot be exact in Python: the job parses its csv input with its pre-watermark function jobs:parse"),
    ([{"event_time": "dep_time", "schema": {"dep_time": "string"}, "required": {}, "format": "parquet"}],
     "cannot be exact in Python: the Python replay reads JSON lines only; this source is parquet"),
])
def test_the_python_replay_says_when_it_cannot_be_exact_instead_of_guessing(tmp_path, inputs, says):
    checkpoint, _ = lf.build(tmp_path)
    log = Path(str(checkpoint) + ".progress.jsonl")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for record in records:
        record["late_rule"] = {**record["late_rule"], "inputs": inputs}
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    ledger = late_ledger(str(checkpoint))
    assert not ledger.complete and not any(b.replayed for b in ledger.batches if b.files or b.batch_id)
    assert ledger.late_rows == [] and ledger.totals()["rows_read"] == 0
    assert says in ledger.problems[0].message and ledger.problems[0].file.endswith("flights_0.jsonl")


def test_a_compacted_log_is_read_when_the_plain_files_were_deleted(tmp_path):
    checkpoint, _ = lf.build(tmp_path)
    expected = late_ledger(str(checkpoint)).to_dict()
    (checkpoint / "sources" / "0" / "0").unlink()  # deleted after compaction: 1.compact holds offset 0
    ledger = late_ledger(str(checkpoint))
    assert ledger.complete and ledger.to_dict()["totals"] == expected["totals"]
    assert _ids(ledger, 1) == lf.LATE_IDS[1]


def test_a_corrupt_source_log_file_is_reported_by_name_and_left_alone(tmp_path):
    checkpoint, _ = lf.build(tmp_path)
    corrupt = checkpoint / "sources" / "0" / "2"
    corrupt.write_text('v1\n{"path": "file:///x.jsonl", "timestamp": 1')
    ledger = late_ledger(str(checkpoint))
    assert not ledger.complete
    assert [b.batch_id for b in ledger.batches if not b.replayed] == [2]
    (problem,) = ledger.problems
    assert problem.file == str(corrupt) and problem.kind == "not_json" and problem.batch_id == 2
    assert "line 2 is not JSON" in problem.message and '"path"' in problem.message
    assert corrupt.read_text() == 'v1\n{"path": "file:///x.jsonl", "timestamp": 1'  # never fixed
    corrupt.write_text("v2\n{}")
    (problem,) = late_ledger(str(checkpoint)).problems
    assert problem.kind == "unsupported_version" and problem.file == str(corrupt)
    corrupt.unlink()
    (problem,) = late_ledger(str(checkpoint)).problems
    assert problem.kind == "missing" and "log offset 2" in problem.message


def test_a_source_that_is_not_a_file_source_is_not_replayable(tmp_path):
    kafka = '{"flights":{"0":42,"1":17}}'
    checkpoint, _ = lf.build(tmp_path, sources=[kafka, kafka, kafka])
    ledger = late_ledger(str(checkpoint))
    assert not ledger.complete and not any(b.replayed for b in ledger.batches)
    (source,) = ledger.not_replayable
    assert source["source"] == "0" and source["offset"] == json.loads(kafka) and source["batch_ids"] == [0, 1, 2]
    assert file_source_log_offset({"logOffset": 3}) == 3 == file_source_log_offset(3)
    assert file_source_log_offset(json.loads(kafka)) is None


def test_missing_inputs_are_named(tmp_path):
    checkpoint, landing = lf.build(tmp_path)
    (landing / "flights_1.jsonl").unlink()
    ledger = late_ledger(str(checkpoint))
    assert [b.replayed for b in ledger.batches] == [True, False, True]
    (problem,) = ledger.problems
    assert problem.file.endswith("landing/flights_1.jsonl") and problem.batch_id == 1
    # A progress record without a rule: the batch is not guessed.
    records = [json.loads(line) for line in (tmp_path / "ck.progress.jsonl").read_text().splitlines()]
    records[2]["late_rule"] = None
    (tmp_path / "ck.progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    ledger = late_ledger(str(checkpoint), [2])
    assert not ledger.batches[0].replayed and ledger.problems[0].kind == "no_late_rule"
    missing = late_ledger(str(tmp_path / "nowhere"))
    assert not missing.complete and missing.problems[0].kind == "checkpoint_missing"


def test_late_rules_are_validated_naming_the_record():
    rule = LateRule.from_dict(lf.RULE, "p:1")
    assert rule.late(lf.WATERMARK_1 * 1000 - 1, lf.WATERMARK_1)[0] is True
    event_rule = LateRule.from_dict({"kind": "event_time", "event_time": ["dep_time", "time_hour"]}, "p:1")
    assert event_rule.field_of(1) == "time_hour"
    assert event_rule.late(1000_000, 1000)[:2] == (True, 0) and event_rule.late(1000_001, 1000)[0] is False
    with pytest.raises(LedgerError, match=r"p:7: late_rule of kind window_end needs \"window_ms\""):
        LateRule.from_dict({"kind": "window_end", "event_time": "dep_time"}, "p:7")
    with pytest.raises(LedgerError, match="p:8: late_rule must be an object"):
        LateRule.from_dict({"kind": "guess"}, "p:8")


def test_the_sink_is_atomic_idempotent_and_never_in_the_checkpoint(tmp_path):
    checkpoint, _ = lf.build(tmp_path)
    ledger = late_ledger(str(checkpoint))
    sink = tmp_path / "out_late"
    written = write_late_rows(ledger, str(sink))
    assert [Path(p).name for p in written] == ["batch=0.jsonl", "batch=1.jsonl", "batch=2.jsonl"]
    assert (sink / "batch=0.jsonl").read_bytes() == b""
    rows = [json.loads(line) for line in (sink / "batch=1.jsonl").read_text().splitlines()]
    assert sorted(r["event"]["id"] for r in rows) == lf.LATE_IDS[1]
    assert {r["watermark"] for r in rows} == {lf.iso(lf.WATERMARK_1)}
    before = {p: Path(p).read_bytes() for p in written}
    write_late_rows(late_ledger(str(checkpoint)), str(sink))
    assert {p: Path(p).read_bytes() for p in written} == before
    assert sorted(p.name for p in sink.iterdir()) == sorted(before and [Path(p).name for p in written])
    with pytest.raises(LedgerError, match="must not be inside the checkpoint"):
        write_late_rows(ledger, str(checkpoint / "late"))
    shutil.rmtree(sink)


def test_parse_source_log_names_the_bad_line():
    assert parse_source_log(b'v1\n{"path":"file:///a","timestamp":5,"batchId":3}')[0].log_offset == 3
    from watermark_ops.core.log_formats import LogFileError

    with pytest.raises(LogFileError, match="line 3: expected a file entry"):
        parse_source_log(b'v1\n{"path":"file:///a","timestamp":5,"batchId":3}\n{"path":1}')
    with pytest.raises(LogFileError, match="empty file"):
        parse_source_log(b"")


def test_the_watermark_for_late_rows_follows_the_recorded_spark_version_and_conf(tmp_path):
    # Spark >= 3.4 with allowMultiple true (or a record naming neither: that default is assumed):
    # batch N filters late rows with offsets/N-1's watermark, batch 0 with 0.
    for name, conf, version in (("default", None, None), ("true", "true", "4.2.0"), ("true_no_version", "true", None)):
        checkpoint, _ = lf.build(tmp_path / name, allow_multiple=conf, spark_version=version)
        ledger = late_ledger(str(checkpoint))
        assert ledger.complete, ledger.problems
        assert {b: _ids(ledger, b) for b in (0, 1, 2)} == {0: [], **lf.LATE_IDS_PREVIOUS}, name
        assert [b.late_watermark_ms for b in ledger.batches] == [0, 0, lf.WATERMARK_1]
        assert [b.watermark_ms for b in ledger.batches] == [0, lf.WATERMARK_1, lf.WATERMARK_2]  # what they ran with
        assert {r.watermark_ms for r in ledger.late_rows} == {lf.WATERMARK_1}
        assert {b.late_watermark.basis for b in ledger.batches} == {"previous"}
        assert {b.late_watermark.assumed for b in ledger.batches} == {conf is None}
    summary = late_ledger(str(tmp_path / "default" / "ck")).batches[2].summary()
    assert summary["late_watermark_ms"] == lf.WATERMARK_1 and summary["late_watermark_rule"]["assumed"] is True
    assert "default true assumed" in summary["late_watermark_rule"]["reason"]
    # Before 3.4 (no allowMultiple), or allowMultiple false: the batch's own watermark.
    for name, conf, version in (("old", None, "3.3.2"), ("false", "false", "4.2.0"), ("FALSE", " FALSE ", None)):
        checkpoint, _ = lf.build(tmp_path / name, allow_multiple=conf, spark_version=version)
        ledger = late_ledger(str(checkpoint))
        assert {b: _ids(ledger, b) for b in (0, 1, 2)} == {0: [], **lf.LATE_IDS}, name
        assert [b.late_watermark_ms for b in ledger.batches] == [0, lf.WATERMARK_1, lf.WATERMARK_2]
    # The what-if: one rule forced on every batch, whatever the records say.
    forced = late_ledger(str(tmp_path / "false" / "ck"), late_watermark="previous")
    assert {b: _ids(forced, b) for b in (1, 2)} == lf.LATE_IDS_PREVIOUS
    assert "forced to the previous watermark" in forced.batches[1].late_watermark.reason
    with pytest.raises(LedgerError, match="late_watermark must be"):
        late_ledger(str(tmp_path / "false" / "ck"), late_watermark="newest")


def test_a_corrupt_allow_multiple_value_is_named_and_its_batch_not_guessed(tmp_path):
    checkpoint, _ = lf.build(tmp_path, allow_multiple="maybe")
    ledger = late_ledger(str(checkpoint), [2])
    assert not ledger.complete and not ledger.batches[0].replayed
    (problem,) = ledger.problems
    assert problem.kind == "bad_field" and problem.file == str(tmp_path / "ck.progress.jsonl")
    assert "statefulOperator.allowMultiple" in problem.message and '"maybe"' in problem.message
    assert "(batch 2)" in problem.message


def test_a_corrupt_huge_log_offset_is_named_and_never_expanded(tmp_path):
    import itertools
    import tracemalloc

    from watermark_ops.core.checkpoint import open_storage
    from watermark_ops.core.source_log import MAX_LOG_OFFSETS_PER_READ, read_source_log

    huge = 10**18
    checkpoint, _ = lf.build(tmp_path, sources=['{"logOffset":0}', '{"logOffset":1}', '{"logOffset":%d}' % huge])
    tracemalloc.start()
    try:
        ledger = late_ledger(str(checkpoint))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20  # a set of 10**18 log offsets would not fit anywhere
    assert [b.replayed for b in ledger.batches] == [True, True, False]
    (problem,) = ledger.problems
    assert (problem.kind, problem.file, problem.batch_id) == ("bad_field", str(checkpoint / "offsets" / "2"), 2)
    assert f"logOffset {huge} is {huge - 1} log offsets ahead (offsets/1 ended at 1)" in problem.message
    assert f"expected at most {MAX_LOG_OFFSETS_PER_READ}" in problem.message
    # A log offset below the previous batch's: named too (a file source's log offset never decreases).
    checkpoint, _ = lf.build(tmp_path / "down", sources=['{"logOffset":0}', '{"logOffset":1}', '{"logOffset":0}'])
    (problem,) = late_ledger(str(checkpoint)).problems
    assert problem.file == str(checkpoint / "offsets" / "2") and "below where the batch started" in problem.message
    # The reader itself refuses a huge request without expanding it, a range or any iterable.
    storage, root = open_storage(str(checkpoint))
    for asked in (range(0, huge), itertools.count()):
        log = read_source_log(storage, f"{root}/sources/0", asked)
        assert log.files == {} and [p.kind for p in log.problems] == ["too_many"]
        assert f"expected at most {MAX_LOG_OFFSETS_PER_READ}" in log.problems[0].message
    # Missing log offsets in a row are one problem, not one per offset.
    log = read_source_log(storage, f"{root}/sources/0", range(0, 5000))
    (missing,) = log.problems
    assert log.newest == 2 and "no file holds log offsets 3..4999" in missing.message and "(newest entry: 2)" in missing.message


def test_the_quarantine_check_fails_a_run_that_sets_aside_most_rows_naming_the_reason_and_an_example():
    from watermark_ops.core.ledger import quarantine_check

    example = {"batch_id": 4, "file": "file:///landing/readings_3.csv", "line": 2, "event": {"event_time": "HIGH"}}
    run = {"run_tag": "day-3", "rows_in": 72, "rows_quarantined": 70, "rows_aggregated": 2, "rows_late": 0,
           "quarantined_by_reason": {"bad_event_time": 66, "gust_not_a_number": 4, "null_event_time": 0},
           "set_aside_examples": {"bad_event_time": example}, "complete": True}
    message = quarantine_check(run)
    assert message.startswith("run day-3 set aside 70 of its 72 input rows (97.2%, more than the 50% allowed)")
    assert "top reason bad_event_time (66 rows)" in message
    assert 'e.g. file:///landing/readings_3.csv line 2: {"event_time": "HIGH"}' in message
    assert quarantine_check(run, max_quarantine_rate=0.99) is None
    # Input rows and no aggregated row fails whatever the rate: every row late, or a function that drops all.
    late = {**run, "rows_quarantined": 0, "rows_aggregated": 0, "rows_late": 72, "quarantined_by_reason": {}}
    assert "read 72 rows and aggregated none (0 set aside, 72 late)" in quarantine_check(late)
    assert quarantine_check({**late, "complete": False}) is None  # an incomplete ledger knows no aggregated count
    assert quarantine_check({**run, "rows_in": 0}) is None and quarantine_check({**run, "rows_quarantined": 3}) is None
    with pytest.raises(ValueError, match="between 0 and 1"):
        quarantine_check(run, 2)
