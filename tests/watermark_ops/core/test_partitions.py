"""Event-time partitions closed by the emitted-through watermark (pure core, no Airflow, no Spark)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from watermark_ops.core.partitions import (
    AnnouncedPartitions,
    PartitionMemoryError,
    closed_partitions,
    newly_closed,
    partition_of,
)

NY = "America/New_York"
HOUR = 3_600_000


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp() * 1000)


START = ms("2013-01-01T00:00:00-05:00")


def test_a_new_york_day_closes_exactly_at_its_end_in_utc():
    end_of_jan_1 = ms("2013-01-02T05:00:00Z")
    assert closed_partitions(end_of_jan_1 - 1, since_ms=START) == []
    (day,) = closed_partitions(end_of_jan_1, since_ms=START)
    assert (day.key, day.start_ms, day.end_ms) == ("2013-01-01", ms("2013-01-01T05:00:00Z"), end_of_jan_1)


@pytest.mark.parametrize("key, hours, start_utc", [
    ("2013-03-10", 23, "2013-03-10T05:00:00Z"),  # spring forward: 02:00 EST → 03:00 EDT
    ("2013-11-03", 25, "2013-11-03T04:00:00Z"),  # fall back: 01:00-02:00 twice
    ("2013-03-11", 24, "2013-03-11T04:00:00Z"),
])
def test_dst_days_last_23_and_25_hours(key, hours, start_utc):
    day = partition_of(ms(start_utc) + HOUR, "day", NY)
    assert (day.key, day.start_ms, (day.end_ms - day.start_ms) // HOUR) == (key, ms(start_utc), hours)
    # Closed one millisecond late, not an hour early or late.
    since = ms("2013-03-01T00:00:00-05:00")
    assert key not in [p.key for p in closed_partitions(day.end_ms - 1, since_ms=since)]
    assert closed_partitions(day.end_ms, since_ms=since)[-1].key == key


def test_newly_closed_skips_the_announced_in_event_time_order():
    through = ms("2013-01-05T04:00:00Z")  # Jan 4 (NY) ends at 05:00Z: not yet
    assert [p.key for p in newly_closed(through, [], since_ms=START)] == ["2013-01-01", "2013-01-02", "2013-01-03"]
    assert [p.key for p in newly_closed(through, {"2013-01-01", "2013-01-02"}, since_ms=START)] == ["2013-01-03"]
    assert newly_closed(through, ["2013-01-01", "2013-01-02", "2013-01-03"], since_ms=START) == []
    assert newly_closed(None, [], since_ms=START) == []  # no committed batch: nothing is written


def test_since_mid_day_starts_with_that_day():
    assert [p.key for p in closed_partitions(ms("2013-01-03T05:00:00Z"), since_ms=ms("2013-01-01T13:00:00Z"))] \
        == ["2013-01-01", "2013-01-02"]


# The watermarks the first three daily runs' data batches computed (README, make run).
W1, W2, W3 = ms("2013-01-02T02:02:00Z"), ms("2013-01-03T01:56:00Z"), ms("2013-01-04T01:58:00Z")


def _announce(emitted_through_per_run):
    announced, per_run = [], []
    for emitted in emitted_through_per_run:
        new = [p.key for p in newly_closed(emitted, announced, since_ms=START)]
        announced += new
        per_run.append(new)
    return per_run


def test_trigger_once_closes_each_day_one_run_later():
    # availableNow: the trailing no-data batch runs with the new watermark in the same run.
    assert _announce([W1, W2, W3]) == [[], ["2013-01-01"], ["2013-01-02"]]
    # Trigger.Once: run k's only batch ran with the watermark of run k-1 (the first with 0), so the
    # windows (and the day) a watermark closes are written, and announced, one run later.
    assert _announce([0, W1, W2, W3]) == [[], [], ["2013-01-01"], ["2013-01-02"]]


def test_hours_are_utc_hours_with_airflow_temporal_keys():
    since = ms("2013-11-03T04:30:00Z")
    hours = closed_partitions(ms("2013-11-03T07:00:00Z"), since_ms=since, grain="hour")
    assert [h.key for h in hours] == ["2013-11-03T04:00:00", "2013-11-03T05:00:00", "2013-11-03T06:00:00"]
    assert all(h.end_ms - h.start_ms == HOUR for h in hours)


def test_bad_grain_and_time_zone_are_named():
    with pytest.raises(ValueError, match="grain"):
        closed_partitions(0, since_ms=0, grain="week")
    with pytest.raises(ValueError, match="Mars/Olympus"):
        partition_of(0, "day", "Mars/Olympus")


def test_a_claim_without_its_event_is_announced_again():
    memory = AnnouncedPartitions("q1", keys=("2013-01-01",))
    claimed = memory.claim(["2013-01-02", "2013-01-03"], "flights_pipeline/run/announce_days/1", 1000)
    assert claimed.keys == ("2013-01-01", "2013-01-02", "2013-01-03") and claimed.pending["keys"] == [
        "2013-01-02", "2013-01-03"]
    with pytest.raises(ValueError, match="pending"):
        claimed.claim(["2013-01-04"], "x", 2000)
    # The try died after the claim: only 01-02's event exists; 01-03 is forgotten and closes again.
    settled = claimed.settle({"2013-01-02"})
    assert settled.keys == ("2013-01-01", "2013-01-02") and settled.pending is None
    assert [p.key for p in newly_closed(ms("2013-01-04T05:00:00Z"), settled.keys, since_ms=START)] == ["2013-01-03"]
    assert claimed.settle({"2013-01-02", "2013-01-03"}).keys == claimed.keys
    assert AnnouncedPartitions.from_dict(claimed.to_dict(), "test") == claimed


@pytest.mark.parametrize("value", [None, [], {"keys": "2013-01-01"}, {"keys": [1]}, {"keys": [], "grain": "week"},
                                   {"keys": [], "pending": []}, {"keys": [], "query_id": 7}])
def test_a_malformed_memory_is_named(value):
    with pytest.raises(PartitionMemoryError, match="store key 'k'"):
        AnnouncedPartitions.from_dict(value, "store key 'k'")
