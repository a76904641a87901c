"""Freshness: which instant a watermark's lag is measured against.

A scheduled run processes the data of one *data interval* (Airflow's ``data_interval_start`` →
``data_interval_end``). When the run pattern launched the run, the recorder stamps that interval
into every progress record of the run (``"data_interval": {"start_ms", "end_ms"}``, epoch ms UTC;
:mod:`watermark_ops.spark.recorder`). The lag is then judged against the interval the data
belongs to, not against processing time:

* ``data_interval`` basis (the newest progress record of the batches read carries the stamp):
  lag = the interval's end − the current watermark: how far the watermark is behind the end of the
  interval the run was processing. A backfill or catch-up run of 2010 data whose watermark reached
  its interval's end is on time for its interval. The value is negative when the watermark is past
  the interval's end (rows of the next interval had already landed).
* ``wall_clock`` basis (no stamp: a job run without the run pattern, a manual run, a checkpoint
  written before the stamp existed): lag = the latest batch's processing time
  (``batchTimestampMs``) − the current watermark, as before.

Only the newest record decides (the record of the newest executed batch at or below the head):
each run stamps its own interval, so an older run's stamp says nothing of the newest data.

Pure core: imports neither Airflow nor Spark; text is parsed with the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

from watermark_ops.core.times import iso_utc

__all__ = ["DATA_INTERVAL", "LAG_BASES", "WALL_CLOCK", "Lag", "data_interval", "interval_document", "interval_of",
           "judge_lag"]

#: The two bases of a lag: the end of the data interval the run processed, or the latest batch's processing time.
DATA_INTERVAL, WALL_CLOCK = "data_interval", "wall_clock"
LAG_BASES = (DATA_INTERVAL, WALL_CLOCK)
#: What a template renders for an absent interval (a manual run of an unscheduled DAG).
_ABSENT = ("", "none", "null")


def _instant_ms(text: Any, name: str) -> int | None:
    """ISO-8601 text (``2013-01-01T00:00:00+00:00``, ``2013-01-01 00:00:00+00:00``, a trailing
    ``Z``; no offset: UTC) or epoch ms → epoch ms UTC; None for an absent value."""
    if text is None or (isinstance(text, str) and text.strip().lower() in _ABSENT):
        return None
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    try:
        parsed = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}: expected an ISO-8601 instant such as 2013-01-01T00:00:00+00:00, "
                         f"got {text!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return int(round(parsed.timestamp() * 1000))


def data_interval(start: Any, end: Any) -> dict[str, int] | None:
    """The stamp of a run's data interval from what the run pattern passes
    (``--data-interval-start {{ data_interval_start }}``, ``--data-interval-end ...``).

    :param start: / end: ISO-8601 text (an offset, or UTC when none), epoch ms, or empty /
        ``None`` text (a run without a data interval).
    :return: ``{"start_ms": int, "end_ms": int}`` (epoch ms UTC), or None when either is absent.
    :raises ValueError: for text that is not an instant, or an end before the start.
    """
    start_ms = _instant_ms(start, "data interval start")
    end_ms = _instant_ms(end, "data interval end")
    if start_ms is None or end_ms is None:
        return None
    if end_ms < start_ms:
        raise ValueError(f"the data interval ends ({iso_utc(end_ms)}) before it starts ({iso_utc(start_ms)})")
    return {"start_ms": start_ms, "end_ms": end_ms}


def interval_of(record: Mapping[str, Any] | None) -> dict[str, int] | None:
    """A progress record's data-interval stamp (``record["data_interval"]``), None when it has none
    or a malformed one (not two integers, or an end before the start): such a record is judged by
    the wall clock."""
    stamp = (record or {}).get("data_interval")
    if not isinstance(stamp, Mapping):
        return None
    start, end = stamp.get("start_ms"), stamp.get("end_ms")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)) or end < start:
        return None
    return {"start_ms": start, "end_ms": end}


def interval_document(interval: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """JSON-ready stamp: ``interval`` (``{"start_ms", "end_ms", ...}``) plus ``start`` and ``end`` as
    ISO-8601 UTC text; None for None."""
    if interval is None:
        return None
    return {**interval, "start": iso_utc(interval["start_ms"]), "end": iso_utc(interval["end_ms"])}


@dataclass(frozen=True)
class Lag:
    """How far the watermark is behind, and against what (epoch ms UTC).

    :ivar basis: :data:`DATA_INTERVAL` or :data:`WALL_CLOCK`.
    :ivar lag_ms: the reference instant − the watermark (ms); None while the watermark is 0 (never set).
    :ivar reference_ms: the instant the lag is measured to: the interval's end, or the latest batch time.
    :ivar data_interval: ``{"start_ms", "end_ms", "batch_id"}`` of the stamp used (the batch whose
        record carried it); None on the wall-clock basis.
    """

    basis: str
    lag_ms: int | None
    reference_ms: int
    data_interval: dict[str, int] | None = None

    def reference_words(self) -> str:
        """What the lag is measured against, for a sentence: ``"the end of its data interval
        2013-01-01T00:00:00Z -> 2013-01-02T00:00:00Z (stamped on batch 5)"`` or ``"the latest batch time
        <ISO>"``."""
        if self.data_interval is None:
            return f"the latest batch time {iso_utc(self.reference_ms)}"
        d = self.data_interval
        return (f"the end of its data interval {iso_utc(d['start_ms'])} -> {iso_utc(d['end_ms'])} "
                f"(stamped on batch {d['batch_id']})")


def judge_lag(watermark_ms: int, latest_batch_ms: int, records_by_batch: Mapping[int, Mapping[str, Any]],
              head_batch_id: int | None = None) -> Lag:
    """The lag of a watermark and its basis (module docstring).

    :param watermark_ms: the current watermark (epoch ms UTC; 0: never set, the lag is None).
    :param latest_batch_ms: the latest batch's ``batchTimestampMs`` (the wall-clock reference).
    :param records_by_batch: the executed progress records by batch id (the batches read, at or
        before the evaluation instant); the newest at or below ``head_batch_id`` decides the basis.
    :param head_batch_id: the head batch read (None: every record counts).
    :return: a :class:`Lag`.
    """
    ids = [b for b in records_by_batch if head_batch_id is None or b <= head_batch_id]
    newest = max(ids) if ids else None
    stamp = interval_of(records_by_batch[newest]) if newest is not None else None
    if stamp is None:
        return Lag(WALL_CLOCK, latest_batch_ms - watermark_ms if watermark_ms > 0 else None, latest_batch_ms)
    end = stamp["end_ms"]
    return Lag(DATA_INTERVAL, end - watermark_ms if watermark_ms > 0 else None, end, {**stamp, "batch_id": newest})
