"""The stall classification over real checkpoints written by real Spark (see ``stall_fixtures``).

Which instant a test evaluates at is deliberate: the scenarios record the real instant right
after each run (``after_run_ms``), and evaluating at those instants reproduces what an evaluation
then gave (batches written later are ignored), independently of how long the suite has run. The
flights of 2013 are processed at 2026 wall-clock time: their batches' ``batchTimestampMs`` are
real, so lag (latest batch time minus watermark) is years whatever instant is chosen; the
instant only decides idleness.

Expected values are read straight from the offset and commit files (``stall_fixtures.log_values``), not through the
code under test.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
import pytest

from tests.watermark_ops import stall_fixtures as sf
from watermark_ops.core import stall
from watermark_ops.core.thresholds import Thresholds

pytestmark = pytest.mark.timeout(300)

MINUTE_MS = 60_000


# --------------------------------------------------------------------------------------------
# Stalled: one input without data under min; advancing under max


def test_one_input_without_data_stalls_under_min(spark):
    built = sf.one_input_without_data(spark)
    log = sf.log_values(built.checkpoints["min"])
    assert [b["sources"][1] for b in log.values()] == ["-", "-", "-"]  # input b never had an offset
    c = stall.evaluate(built.checkpoints["min"], at=built.after_run_ms[-1])
    assert c.state == "stalled" and c.alarm
    assert [b.batch_id for b in c.flat_data_batches] == [0, 1, 2]
    assert [b.inputs_advanced for b in c.flat_data_batches] == [(0,), (0,), (0,)]
    assert c.watermark_ms == 0 and c.lag_ms is None  # under min the slowest input (0) holds it
    assert c.policy == "min"
    assert any("input(s) 1 got no data" in h for h in c.hints)
    assert [i["last_advanced_batch"] for i in c.inputs] == [2, None]
    # Reproducible at an earlier instant: after two runs, two flat data batches are not yet a stall.
    earlier = stall.evaluate(built.checkpoints["min"], at=built.after_run_ms[1])
    assert earlier.state == "advancing" and not earlier.alarm
    assert [b.batch_id for b in earlier.flat_data_batches] == [0, 1]
    assert "fewer than the 3" in earlier.reasons[0]
    # ... and a stall with K = 2.
    assert stall.evaluate(built.checkpoints["min"], Thresholds(stall_batches=2), at=built.after_run_ms[1]).state == "stalled"


def test_one_input_without_data_advances_under_max(spark):
    built = sf.one_input_without_data(spark)
    log = sf.log_values(built.checkpoints["max"])
    c = stall.evaluate(built.checkpoints["max"], at=built.after_run_ms[-1])
    assert c.state == "advancing" and not c.alarm and c.applies == ("advancing",)
    assert c.policy == "max"
    head = max(log)
    assert c.watermark_ms == max(log[head]["watermark_ms"], log[head]["next_ms"]) > 0
    # The last data batch moved it (availableNow then ran a trailing no-data batch).
    assert c.last_move["batch_id"] == c.latest_data_batch.batch_id == head - 1
    assert c.last_move["to_ms"] == log[head - 1]["next_ms"] > log[head - 1]["watermark_ms"]
    assert c.flat_data_batches == ()
    assert 0 < c.lag_ms < 60 * MINUTE_MS  # fresh events: minutes behind, not a backlog


# --------------------------------------------------------------------------------------------
# Stalled: inputs taking turns across restarts (SPARK-50046), then healed


def test_inputs_taking_turns_stall_after_restarts(spark):
    built = sf.inputs_take_turns(spark)
    log = sf.log_values(built.checkpoints["min"])
    c = stall.evaluate(built.checkpoints["min"], at=built.after_run_ms[3])
    assert c.state == "stalled" and c.alarm
    assert [b.batch_id for b in c.flat_data_batches] == [2, 3, 4]
    assert [b.inputs_advanced for b in c.flat_data_batches] == [(0,), (1,), (0,)]
    assert len({b.run_id for b in c.flat_data_batches}) == 3  # three restarts
    assert c.watermark_ms == log[0]["next_ms"] == log[4]["next_ms"]  # set by run 1, never moved since
    assert c.last_move["batch_id"] == 0
    assert any("SPARK-50046" in h for h in c.hints)


def test_turns_heal_when_every_input_sees_data_in_one_run(spark):
    built = sf.inputs_take_turns(spark)
    log = sf.log_values(built.checkpoints["min"])
    c = stall.evaluate(built.checkpoints["min"], at=built.after_run_ms[4])
    assert c.state == "advancing" and not c.alarm
    assert c.last_move["batch_id"] == 5 and c.latest_data_batch.inputs_advanced == (0, 1)
    assert c.watermark_ms == log[5]["next_ms"] > log[4]["next_ms"]


# --------------------------------------------------------------------------------------------
# Idle: restarts without new files


def test_no_new_files_is_idle_then_idle_too_long(spark):
    built = sf.inputs_take_turns(spark)
    log = sf.log_values(built.checkpoints["min"])
    # Runs 6 (availableNow) and 7 (Trigger.Once) found no new file: no batch was written ...
    assert sorted(log) == list(range(7))
    # ... but each reported a trigger that ran no batch (progress events without addBatch).
    assert [r["executed"] for r in built.extra["records"][5]] == [False]
    assert [r["executed"] for r in built.extra["records"][6]] == [False]
    latest_data = log[5]["timestamp_ms"]

    at = latest_data + 20 * MINUTE_MS
    c = stall.evaluate(built.checkpoints["min"], at=at)
    assert c.state == "idle" and not c.alarm
    assert c.idle_ms == 20 * MINUTE_MS and c.latest_data_batch.batch_id == 5
    assert c.latest_batch.batch_id == 6 and c.latest_batch.inputs_advanced == ()  # trailing no-data batch
    assert "ran 2 trigger(s) without input" in c.reasons[0]

    much_later = stall.evaluate(built.checkpoints["min"], at=latest_data + 2 * 24 * 60 * MINUTE_MS)
    assert much_later.state == "idle" and much_later.alarm  # past max_idle (1 day)
    # Lag is measured against the latest batch time, not the evaluation instant: unchanged.
    assert much_later.lag_ms == c.lag_ms == log[6]["timestamp_ms"] - log[6]["watermark_ms"]
    relaxed = stall.evaluate(built.checkpoints["min"], Thresholds(max_idle=None), at=latest_data + 2 * 24 * 60 * MINUTE_MS)
    assert relaxed.state == "idle" and not relaxed.alarm
    # At an instant before the first batch the checkpoint had no batch: idle, nothing to alarm on.
    before = stall.evaluate(built.checkpoints["min"], at=log[0]["timestamp_ms"] - 1)
    assert before.state == "idle" and not before.alarm and before.latest_batch is None


# --------------------------------------------------------------------------------------------
# Stalled: null event times (the flights job); lagging: the 2013 backlog


def test_null_event_times_stall_the_watermark(spark):
    built = sf.null_event_times(spark)
    log = sf.log_values(built.checkpoints["flights"])
    c = stall.evaluate(built.checkpoints["flights"], at=built.after_run_ms[-1])
    assert c.state == "stalled" and c.applies == ("stalled", "lagging")  # stalled wins over lagging
    assert [b.batch_id for b in c.flat_data_batches] == [2, 3, 4]
    assert all(b.input_rows > 0 and b.event_time_max_ms is None for b in c.flat_data_batches)
    assert any("no event time was observed" in h for h in c.hints)
    assert c.watermark_ms == log[1]["watermark_ms"] == log[4]["next_ms"]
    # Two flat data batches: not yet a stall; the 2013 backlog is what shows.
    assert stall.evaluate(built.checkpoints["flights"], at=built.after_run_ms[2]).state == "lagging"


def test_stall_window_over_processing_time(spark):
    built = sf.null_event_times(spark)
    log = sf.log_values(built.checkpoints["flights"])
    span = log[4]["timestamp_ms"] - log[2]["timestamp_ms"]  # the flat data batches 2..4
    at = built.after_run_ms[-1]
    by_time = Thresholds(stall_batches=100, stall_window=timedelta(milliseconds=span))
    assert stall.evaluate(built.checkpoints["flights"], by_time, at=at).state == "stalled"
    too_short = Thresholds(stall_batches=100, stall_window=timedelta(milliseconds=span + 1))
    assert stall.evaluate(built.checkpoints["flights"], too_short, at=at).state == "lagging"


def test_old_backlog_is_lagging(spark):
    built = sf.backlog_then_future_record(spark)
    log = sf.log_values(built.checkpoints["lagging"])
    c = stall.evaluate(built.checkpoints["lagging"], at=built.after_run_ms[1])
    assert c.state == "lagging" and c.alarm
    assert c.lag_ms == log[3]["timestamp_ms"] - log[3]["watermark_ms"] > 10 * 365 * 24 * 60 * MINUTE_MS
    assert c.watermark_ms == log[3]["watermark_ms"] < pendulum.datetime(2013, 1, 4, tz="UTC").timestamp() * 1000
    # The replay still advances: with the lag check off (a deliberate replay) it is healthy.
    replay = stall.evaluate(built.checkpoints["lagging"], Thresholds(max_lag=None), at=built.after_run_ms[1])
    assert replay.state == "advancing" and replay.last_move["batch_id"] == 2
    # Evaluated at a 2013 instant, nothing existed yet: the batches carry 2026 processing times.
    in_2013 = stall.evaluate(built.checkpoints["lagging"], at="2013-01-03T00:00:00Z")
    assert in_2013.state == "idle" and in_2013.latest_batch is None and "no batch at or before" in in_2013.reasons[0]


# --------------------------------------------------------------------------------------------
# Jumped: a future-dated record


def test_future_dated_record_jumps_the_watermark(spark):
    built = sf.backlog_then_future_record(spark)
    log = sf.log_values(built.checkpoints["flights"])
    c = stall.evaluate(built.checkpoints["flights"], at=built.after_run_ms[-1])
    assert c.state == "jumped" and c.alarm
    # The job's delay threshold is 2 hours: watermark = the future departure - 2 h.
    assert c.watermark_ms == built.extra["future_ms"] - 2 * 60 * MINUTE_MS == log[4]["next_ms"]
    assert c.jump == {"batch_id": 4, "timestamp_ms": log[4]["timestamp_ms"], "from_ms": log[4]["watermark_ms"],
                      "to_ms": log[4]["next_ms"]}
    assert c.skew_ms == c.watermark_ms - log[5]["timestamp_ms"] > 6 * 24 * 60 * MINUTE_MS
    # Before the record landed, the same checkpoint was lagging (reproduced at that instant).
    assert stall.evaluate(built.checkpoints["flights"], at=built.after_run_ms[1]).state == "lagging"
    # A skew allowance above the jump hides it (and the watermark is ahead: no lag).
    lenient = stall.evaluate(built.checkpoints["flights"], Thresholds(max_skew=timedelta(days=30)), at=built.after_run_ms[-1])
    assert lenient.state == "advancing" and lenient.lag_ms < 0


# --------------------------------------------------------------------------------------------
# The shared sensor evaluation


# --------------------------------------------------------------------------------------------
# Bad input


def test_unreadable_head_is_an_error_naming_the_file(spark, tmp_path):
    source = sf.one_input_without_data(spark).checkpoints["max"]
    copy = sf.copy_with_progress_log(source, tmp_path / "ck")
    head = max(sf.log_values(copy))
    (Path(copy) / "offsets" / str(head)).write_text("v1\n{not json\n")
    with pytest.raises(stall.StallInputError, match=rf"offsets/{head}.*cannot be read.*not JSON"):
        stall.evaluate(copy)
    assert (Path(copy) / "offsets" / str(head)).read_text() == "v1\n{not json\n"  # reported, never fixed


def test_older_unreadable_files_are_reported_and_the_rest_classified(spark, tmp_path):
    source = sf.inputs_take_turns(spark).checkpoints["min"]
    copy = sf.copy_with_progress_log(source, tmp_path / "ck")
    (Path(copy) / "commits" / "1").write_bytes(b"\x00\x01binary")
    with open(Path(copy).with_name("ck.progress.jsonl"), "a") as handle:
        handle.write("{truncated\n")
    c = stall.evaluate(copy)
    assert c.state in ("advancing", "idle")
    assert any("commits/1" in p and p.startswith("binary") for p in c.problems)
    assert any("ck.progress.jsonl" in p and "expected one JSON object per line" in p for p in c.problems)


def test_not_a_checkpoint_and_missing(tmp_path):
    (tmp_path / "some_folder").mkdir()
    with pytest.raises(stall.StallInputError, match="not_a_checkpoint"):
        stall.evaluate(str(tmp_path / "some_folder"))
    with pytest.raises(stall.CheckpointMissing, match="no checkpoint folder"):
        stall.evaluate(str(tmp_path / "absent"))


def test_second_filesystem_backend(spark):
    """The same classification through fsspec's in-memory filesystem (checkpoint and progress log)."""
    import fsspec

    source = sf.inputs_take_turns(spark).checkpoints["min"]
    memory = fsspec.filesystem("memory")
    memory.put(source, "/stall-copy/ck", recursive=True)
    memory.put(source + ".progress.jsonl", "/stall-copy/ck.progress.jsonl")
    at = sf.inputs_take_turns(spark).after_run_ms[3]
    try:
        remote = stall.evaluate("memory://stall-copy/ck", at=at)
    finally:
        memory.rm("/stall-copy", recursive=True)
    local = stall.evaluate(source, at=at)
    assert remote.state == local.state == "stalled"
    assert remote.flat_data_batches == local.flat_data_batches
    assert remote.hints == local.hints


# --------------------------------------------------------------------------------------------
# Thresholds, durations and instants


# --------------------------------------------------------------------------------------------
# Terminal: watermark-ops status


