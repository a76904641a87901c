"""Times at the edges: epoch milliseconds UTC inside, pendulum at the borders.

Spark stores every instant of a checkpoint as epoch milliseconds UTC (``batchWatermarkMs``,
``batchTimestampMs``, ``nextBatchWatermarkMs``); the core computes with those ``int`` values and
converts only here: to ISO-8601 text for people and JSON, from ISO-8601 text, datetimes and
durations given by people (CLI flags, DAG arguments, templated fields).

Pure core: standard library and pendulum only. pendulum is imported by the functions that parse
durations and instants, not with the module: ``watermark-ops audit`` never needs it.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["duration", "duration_ms", "duration_text", "duration_words", "instant_ms", "iso_utc", "now_ms", "watermark_text"]


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso_utc(ms: int | None) -> str | None:
    """Epoch milliseconds -> ISO-8601 UTC text (``2013-01-01T09:39:00Z``, milliseconds kept when not 0).

    Any integer is rendered: an instant outside the years 1 to 9999 (a corrupt or hostile file
    can hold ``-99999999999999`` or ``2**70``) becomes ``out of range (<ms> ms)`` instead of an error.

    :param ms: epoch milliseconds UTC, or None.
    :return: the text, None for None.
    """
    if ms is None:
        return None
    try:
        instant = _EPOCH + timedelta(milliseconds=ms)
    except (OverflowError, ValueError):
        return f"out of range ({ms} ms)"
    text = instant.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0")
    return text + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def watermark_text(ms: int | None, missing: str = "?") -> str:
    """A watermark (epoch ms UTC) for people: :func:`iso_utc`, except 0, Spark's value before the
    first data batch set one (``WatermarkTracker``; ``batchWatermarkMs`` defaults to 0 in
    ``OffsetSeqMetadata``), which is ``not set yet`` (as the UI chart says), not 1970.

    :param missing: the text for None (an unreadable batch).
    """
    if ms is None:
        return missing
    return "not set yet" if ms == 0 else iso_utc(ms)


def now_ms() -> int:
    """The current instant, epoch milliseconds UTC."""
    return time.time_ns() // 1_000_000


def duration(value: Any, name: str = "duration") -> timedelta | None:
    """A threshold as a plain ``datetime.timedelta`` (or None: the check is disabled).

    :param value: a ``timedelta`` (a pendulum ``Duration`` is converted to a plain one: pendulum
        durations break Airflow's serialization under the real executor), a number of seconds
        (int/float or decimal text), an ISO-8601 duration text (``PT6H``, ``P1DT2H``, parsed by
        pendulum), or None / ``"none"`` / ``"off"`` (disabled).
    :param name: the parameter's name, for the error message.
    :raises ValueError: for anything else, or a negative duration.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "off", "null")):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a duration, got {value!r}")
    if isinstance(value, timedelta):
        result = timedelta(seconds=value.total_seconds())
    elif isinstance(value, (int, float)):
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            result = timedelta(seconds=float(text))
        except ValueError:
            import pendulum

            try:
                parsed = pendulum.parse(text)
            except Exception:
                parsed = None
            if not isinstance(parsed, timedelta):
                raise ValueError(
                    f"{name}: expected seconds or an ISO-8601 duration such as 'PT6H' or 'P1DT2H', got {value!r}"
                ) from None
            result = timedelta(seconds=parsed.total_seconds())
    else:
        raise ValueError(f"{name}: expected a timedelta, seconds or an ISO-8601 duration, got {value!r}")
    if result < timedelta(0):
        raise ValueError(f"{name}: a duration must not be negative, got {value!r}")
    return result


def duration_ms(delta: timedelta | None) -> int | None:
    """A ``timedelta`` in whole milliseconds (rounded), None for None."""
    return None if delta is None else int(round(delta.total_seconds() * 1000))


def instant_ms(value: Any) -> int:
    """An instant as epoch milliseconds UTC.

    :param value: an aware ``datetime`` (pendulum or stdlib), an ISO-8601 text (a text without an
        offset is read as UTC, pendulum's rule), or epoch milliseconds (``int``).
    :raises ValueError: for a naive ``datetime`` (ambiguous), unparseable text, or another type.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected an instant, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: give a time zone (the instant would be ambiguous)")
        return int(round(value.timestamp() * 1000))
    if isinstance(value, str):
        import pendulum

        try:
            parsed = pendulum.parse(value.strip())
        except Exception as exc:
            raise ValueError(f"expected an ISO-8601 instant such as 2013-01-02T00:00:00Z, got {value!r}: {exc}") from None
        if not isinstance(parsed, datetime):
            raise ValueError(f"expected an ISO-8601 instant (date and time), got {value!r}")
        return int(round(parsed.timestamp() * 1000))
    raise ValueError(f"expected an instant (datetime, ISO-8601 text or epoch ms), got {value!r}")


_UNITS_MS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000), ("ms", 1))
# A year for the decimal form: the Gregorian mean year, 365.2425 days.
_YEAR_MS = 365.2425 * 86_400_000
# What a ``timedelta`` holds (999,999,999 days): past it a value is a corrupt or hostile number.
_MAX_MS = 999_999_999 * 86_400_000


def duration_text(ms: int | None, signed: bool = False) -> str:
    """A duration in ms, compact, as on-call reads it: the two most significant units, the second
    dropped when 0 (``5 h 32 min``, ``3 d 17 h``, ``1 min 5 s``, ``45 s``, ``250 ms``, ``0 s``);
    from a year on, years with one decimal (``13.9 years``, mean Gregorian year); ``-3 s``.

    Every duration the renderers and the core's messages show goes through this one function.

    :param ms: milliseconds (int or float, rounded), or None (``unknown``).
    :param signed: prefix ``+`` for a positive value and show 0 as ``0`` (a change column).
    :return: the text; past what a ``timedelta`` holds (about 2.7 million years),
        ``<ms> ms (out of range)``.
    """
    if ms is None:
        return "unknown"
    ms = int(round(ms))
    if ms == 0:
        return "0" if signed else "0 s"
    if abs(ms) > _MAX_MS:
        return f"{ms} ms (out of range)"
    sign = "-" if ms < 0 else ("+" if signed else "")
    rest = abs(ms)
    if rest >= _YEAR_MS:
        years = rest / _YEAR_MS
        return f"{sign}{years:.1f} years"
    parts = []
    for unit, size in _UNITS_MS:
        count, rest = divmod(rest, size)
        if count or parts:
            parts.append((count, unit))
        if len(parts) == 2:
            break
    return sign + " ".join(f"{count} {unit}" for count, unit in parts if count)


def duration_words(ms: int | None) -> str:
    """A duration in ms for humans: :func:`duration_text` (kept under this name for its callers)."""
    return duration_text(ms)
