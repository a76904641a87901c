"""The partition skew on hand-made progress records: the max so far per origin, the leader, the gaps,
the warning threshold, and the skew entering each batch (what the late-row ledger shows)."""

from __future__ import annotations

from datetime import timedelta

from watermark_ops.core.partition_skew import partition_skew, skew_before_each_batch
from watermark_ops.core.thresholds import Thresholds

HOUR = 3_600_000
T0 = 1_357_016_400_000  # 2013-01-01T05:00:00Z


def _record(batch_id: int, times: dict | None, watermark_ms: int = 0, column: str | None = "origin") -> dict:
    return {"batch_id": batch_id, "watermark_ms": watermark_ms, "executed": True,
            "partition_column": column if times is not None else None, "event_time_max_ms_by_partition": times}


RECORDS = [
    _record(0, {"EWR": T0 + 20 * HOUR, "JFK": T0 + 19 * HOUR, "LGA": T0 + 21 * HOUR}),
    _record(1, {"EWR": None, "JFK": None, "LGA": None}, watermark_ms=T0 + 19 * HOUR),  # trailing no-data batch
    # Run 2: LGA's files are held back; EWR and JFK move a day on.
    _record(2, {"EWR": T0 + 44 * HOUR, "JFK": T0 + 45 * HOUR, "LGA": None}, watermark_ms=T0 + 19 * HOUR),
    _record(3, None, watermark_ms=T0 + 43 * HOUR),  # a job that recorded nothing for this batch
    # Run 3: an older EWR row (late data) must not lower EWR's max so far.
    _record(4, {"EWR": T0 + 30 * HOUR, "JFK": None, "LGA": None}, watermark_ms=T0 + 43 * HOUR),
]


def test_the_max_so_far_per_partition_the_leader_and_the_gaps():
    skew = partition_skew(RECORDS, watermark_ms=T0 + 43 * HOUR, max_partition_skew_ms=4 * HOUR)
    assert skew.column == "origin" and skew.leader == "JFK" and skew.leader_event_time_ms == T0 + 45 * HOUR
    assert [p.partition for p in skew.partitions] == ["JFK", "EWR", "LGA"]  # leader first, then by gap
    jfk, ewr, lga = skew.partitions
    assert (ewr.event_time_max_ms, ewr.max_batch_id, ewr.last_data_batch_id) == (T0 + 44 * HOUR, 2, 4)
    assert ewr.behind_leader_ms == HOUR and jfk.behind_leader_ms == 0
    assert (lga.event_time_max_ms, lga.max_batch_id, lga.last_data_batch_id) == (T0 + 21 * HOUR, 0, 0)
    assert lga.behind_leader_ms == 24 * HOUR == skew.skew_ms
    assert lga.behind_watermark_ms == 22 * HOUR and ewr.behind_watermark_ms == 0
    assert [p.partition for p in skew.trailing] == ["LGA"]
    (warning,) = skew.warnings()
    assert "origin LGA trails the leader JFK by 1 d " in warning and "max partition skew 4 h)" in warning
    assert (skew.first_batch_id, skew.last_batch_id) == (0, 4)
    document = skew.to_dict()
    assert document["trailing"] == ["LGA"] and document["partitions"][2]["event_time_max"] == "2013-01-02T02:00:00Z"


def test_no_warning_under_the_threshold_or_without_one_and_none_without_records():
    assert partition_skew(RECORDS, max_partition_skew_ms=25 * HOUR).warnings() == []
    assert partition_skew(RECORDS, max_partition_skew_ms=None).trailing == ()
    assert partition_skew([_record(0, None), _record(1, None)]) is None  # a job that records no partition
    # A partition that never had a row is listed, but neither leads nor trails.
    only_ewr = partition_skew([_record(0, {"EWR": T0, "LGA": None})], max_partition_skew_ms=0)
    assert only_ewr.leader == "EWR" and only_ewr.partition("LGA").behind_leader_ms is None
    assert only_ewr.trailing == ()
    # Records of another partition column than the newest record's are left out.
    mixed = partition_skew([_record(0, {"X": T0 + 99 * HOUR}, column="carrier"), _record(1, {"EWR": T0})])
    assert mixed.column == "origin" and [p.partition for p in mixed.partitions] == ["EWR"]


def test_the_skew_entering_each_batch():
    before = skew_before_each_batch({r["batch_id"]: r for r in RECORDS})
    assert 0 not in before  # nothing observed before the first batch
    assert before[2].partition("LGA").behind_leader_ms == 0  # LGA led after batch 0
    assert before[4].partition("LGA").behind_leader_ms == 24 * HOUR  # entering run 3, LGA a day behind
    assert before[4].watermark_ms == T0 + 43 * HOUR  # the watermark batch 4 ran with


def test_the_threshold_is_a_duration_with_a_json_form_and_can_be_disabled():
    assert Thresholds().max_partition_skew == timedelta(hours=4)
    t = Thresholds(max_partition_skew="PT90M")
    assert t.to_dict()["max_partition_skew_ms"] == 90 * 60_000
    assert Thresholds.from_dict(t.to_dict()) == t
    assert Thresholds(max_partition_skew=None).to_dict()["max_partition_skew_ms"] is None
