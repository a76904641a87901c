"""Event-time partitions closed by the watermark: which days (or hours) are final, and which are new.

An append-mode windowed aggregation writes a window once a committed micro-batch ran with a
watermark at or past the window's end (:attr:`watermark_ops.core.stall.Classification.emitted_through_ms`).
A *partition* of event time (a calendar day in a time zone, or a UTC hour) is therefore final, every
window of it in the sink, once ``emitted_through_ms >= partition end``. This module answers, for
an emitted-through watermark and the set of partitions already announced, which partitions are
newly closed, in event-time order; and it keeps what was announced (:class:`AnnouncedPartitions`)
so that a retry, a restart or a re-run of the same interval announces nothing twice.

Closure is decided on ``emitted_through_ms`` (what is really written), never on the next batch's
watermark (``watermark_ms``): under ``Trigger.Once`` the windows a run's watermark closes are only
written by the next run's batch, so a partition closes one run later than under
``Trigger.AvailableNow`` (whose trailing no-data batch runs with the new watermark at once).

Partitions:

* ``day``: the calendar day in ``tz`` (IANA name, default ``America/New_York``): from local midnight
  to the next local midnight, so a day lasts 23 or 25 hours across a DST change (2013-03-10 and
  2013-11-03 in New York). Key ``YYYY-MM-DD`` (Airflow's ``StartOfDayMapper`` output format).
* ``hour``: the UTC hour (the hourly windows are UTC hours; local hour names repeat when DST ends).
  Key ``YYYY-MM-DDTHH:00:00``, UTC without a suffix (the input format of Airflow's temporal
  partition mappers, ``%Y-%m-%dT%H:%M:%S``).

All instants are epoch milliseconds UTC. Pure core: standard library only (``zoneinfo``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any, Iterable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from watermark_ops.core.times import iso_utc

__all__ = [
    "DEFAULT_TIMEZONE",
    "GRAINS",
    "AnnouncedPartitions",
    "Partition",
    "PartitionMemoryError",
    "closed_partitions",
    "newly_closed",
    "partition_of",
]

GRAINS = ("day", "hour")
DEFAULT_TIMEZONE = "America/New_York"
_HOUR_MS = 3_600_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class PartitionMemoryError(ValueError):
    """A remembered announcement that is not what :meth:`AnnouncedPartitions.to_dict` writes; names its source."""


@dataclass(frozen=True)
class Partition:
    """One partition of event time.

    :ivar key: the partition key (``2013-01-02`` for a day, ``2013-01-02T05:00:00`` for a UTC hour).
    :ivar start_ms: its first instant, epoch ms UTC (inclusive).
    :ivar end_ms: its end, epoch ms UTC (exclusive): the partition is final once ``emitted_through_ms >= end_ms``.
    """

    key: str
    start_ms: int
    end_ms: int

    def to_dict(self) -> dict[str, Any]:
        """``{"key", "start_ms", "end_ms", "start", "end"}`` (ISO-8601 UTC text beside the ms)."""
        return {"key": self.key, "start_ms": self.start_ms, "end_ms": self.end_ms,
                "start": iso_utc(self.start_ms), "end": iso_utc(self.end_ms)}


def _zone(tz: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {tz!r}: expected an IANA name such as 'America/New_York'") from exc


def _ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _day(day: date, zone: ZoneInfo) -> Partition:
    start = datetime(day.year, day.month, day.day, tzinfo=zone)
    following = day + timedelta(days=1)
    end = datetime(following.year, following.month, following.day, tzinfo=zone)
    return Partition(day.isoformat(), _ms(start), _ms(end))


def _hour(start_ms: int) -> Partition:
    start = start_ms // _HOUR_MS * _HOUR_MS
    label = datetime.fromtimestamp(start / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:00:00")
    return Partition(label, start, start + _HOUR_MS)


def _check_grain(grain: str) -> None:
    if grain not in GRAINS:
        raise ValueError(f"grain must be one of {GRAINS}, got {grain!r}")


def partition_of(instant_ms: int, grain: str = "day", tz: str = DEFAULT_TIMEZONE) -> Partition:
    """The partition holding an instant.

    :param instant_ms: epoch ms UTC.
    :param grain: ``day`` (calendar day in ``tz``) or ``hour`` (UTC hour; ``tz`` is not used).
    :raises ValueError: for an unknown grain or time zone.
    """
    _check_grain(grain)
    if grain == "hour":
        return _hour(instant_ms)
    zone = _zone(tz)
    local = datetime.fromtimestamp(instant_ms / 1000, tz=zone)
    return _day(local.date(), zone)


def closed_partitions(emitted_through_ms: int | None, *, since_ms: int, grain: str = "day",
                      tz: str = DEFAULT_TIMEZONE) -> list[Partition]:
    """Every partition from the one holding ``since_ms`` whose end is at or before ``emitted_through_ms``.

    :param emitted_through_ms: the watermark the latest committed micro-batch ran with (epoch ms
        UTC; ``Classification.emitted_through_ms``); None (no committed batch) closes nothing.
    :param since_ms: the first partition is the one holding this instant (e.g. the pipeline's start).
    :return: the closed partitions in event-time order (empty when none).
    :raises ValueError: for an unknown grain or time zone.
    """
    first = partition_of(since_ms, grain, tz)
    if emitted_through_ms is None or emitted_through_ms < first.end_ms:
        return []
    if grain == "hour":
        return [_hour(start) for start in range(first.start_ms, emitted_through_ms - _HOUR_MS + 1, _HOUR_MS)]
    zone = _zone(tz)
    day, closed = date.fromisoformat(first.key), []
    while True:
        partition = _day(day, zone)
        if partition.end_ms > emitted_through_ms:
            return closed
        closed.append(partition)
        day += timedelta(days=1)


def newly_closed(emitted_through_ms: int | None, announced: Iterable[str], *, since_ms: int, grain: str = "day",
                 tz: str = DEFAULT_TIMEZONE) -> list[Partition]:
    """The closed partitions (:func:`closed_partitions`) not yet announced, in event-time order.

    :param announced: keys already announced (e.g. :attr:`AnnouncedPartitions.keys`).
    :raises ValueError: for an unknown grain or time zone.
    """
    done = set(announced)
    return [p for p in closed_partitions(emitted_through_ms, since_ms=since_ms, grain=grain, tz=tz)
            if p.key not in done]


@dataclass(frozen=True)
class AnnouncedPartitions:
    """What was announced for one checkpoint and grain: the memory that makes announcements exactly once.

    An announcement is *claimed* (written to the memory) just before the asset events are
    handed to the scheduler, which registers them only when the announcing task succeeds; the
    two cannot be written in one transaction. The claim therefore stays ``pending`` until a later
    evaluation sees the events (:meth:`settle`): keys whose events exist stay announced; keys whose
    events never appeared (the claiming try died or failed after the claim) are forgotten and
    announced again.

    :ivar query_id: the checkpoint's query id when this was written (a new id: a new query, a new memory).
    :ivar grain: ``day`` or ``hour``. / :ivar tz: the day's time zone.
    :ivar keys: every announced key, in event-time order (pending ones included).
    :ivar pending: the newest claim not yet confirmed, ``{"keys": [...], "claimed_by": str,
        "claimed_at_ms": int}``, or None.
    """

    query_id: str | None
    grain: str = "day"
    tz: str = DEFAULT_TIMEZONE
    keys: tuple[str, ...] = ()
    pending: dict[str, Any] | None = field(default=None)

    def claim(self, keys: Iterable[str], claimed_by: str, claimed_at_ms: int) -> AnnouncedPartitions:
        """Add ``keys`` as a pending claim (a previous pending claim must be settled first).

        :param claimed_by: who announces (e.g. ``dag_id/run_id/task_id/try``), for the record.
        :raises ValueError: when a claim is still pending.
        """
        if self.pending:
            raise ValueError(f"a claim is still pending ({self.pending.get('claimed_by')}): settle it first")
        new = [k for k in keys if k not in self.keys]
        return AnnouncedPartitions(self.query_id, self.grain, self.tz, tuple(self.keys) + tuple(new),
                                   {"keys": new, "claimed_by": claimed_by, "claimed_at_ms": claimed_at_ms})

    def settle(self, confirmed: Iterable[str]) -> AnnouncedPartitions:
        """Resolve the pending claim: its keys in ``confirmed`` (their asset events exist) stay
        announced, the others are forgotten. No pending claim: unchanged."""
        if not self.pending:
            return self
        seen = set(confirmed)
        lost = {k for k in self.pending.get("keys", []) if k not in seen}
        return AnnouncedPartitions(self.query_id, self.grain, self.tz, tuple(k for k in self.keys if k not in lost))

    def to_dict(self) -> dict[str, Any]:
        """``{"query_id", "grain", "tz", "keys": [...], "pending": {...} | None}``, JSON-ready."""
        return {"query_id": self.query_id, "grain": self.grain, "tz": self.tz, "keys": list(self.keys),
                "pending": self.pending}

    @classmethod
    def from_dict(cls, value: Any, source: str) -> AnnouncedPartitions:
        """Parse :meth:`to_dict`'s shape.

        :param source: where the value came from, for the error message.
        :raises PartitionMemoryError: naming ``source`` and the field that is wrong.
        """
        if not isinstance(value, dict) or not isinstance(value.get("keys"), list) \
                or not all(isinstance(k, str) for k in value["keys"]):
            raise PartitionMemoryError(f"{source}: expected an object with keys (a list of partition keys), "
                                       f"got {str(value)[:120]!r}")
        if value.get("grain", "day") not in GRAINS:
            raise PartitionMemoryError(f"{source}: grain must be one of {GRAINS}, got {value.get('grain')!r}")
        pending = value.get("pending")
        if pending is not None and not (isinstance(pending, dict) and isinstance(pending.get("keys"), list)):
            raise PartitionMemoryError(f"{source}: pending must be null or an object with keys, got {pending!r}")
        query_id = value.get("query_id")
        if query_id is not None and not isinstance(query_id, str):
            raise PartitionMemoryError(f"{source}: query_id must be a string or null, got {query_id!r}")
        return cls(query_id, value.get("grain", "day"), value.get("tz", DEFAULT_TIMEZONE), tuple(value["keys"]),
                   pending)
