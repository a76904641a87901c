"""Times at the edges: epoch milliseconds UTC inside, pendulum at the borders.

Spark stores every instant of a checkpoint as epoch milliseconds UTC (``batchWatermarkMs``,
``batchTimestampMs``, ``nextBatchWatermarkMs``); the core computes with those ``int`` values and
converts only here: to ISO-8601 text for people and JSON, from ISO-8601 text, datetimes and
durations given by people (CLI flags, DAG arguments, templated fields).

Pure core: standard library and pendulum only. pendulum is imported by the functions that parse
or word durations and instants, not with the module: ``watermark-ops audit`` never needs it.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["duration", "duration_ms", "duration_words", "instant_ms", "iso_utc", "now_ms"]


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


def duration_words(ms: int | None) -> str:
    """A duration in ms for humans: ``2 hours 5 minutes`` (pendulum's words), ``-3 seconds``,
    ``250 ms`` below a second, ``unknown`` for None; beyond what a ``timedelta`` holds (about
    2.7 million years), ``<ms> ms (out of range)``."""
    if ms is None:
        return "unknown"
    if abs(ms) < 1000:
        return f"{ms} ms"
    import pendulum

    try:
        text = pendulum.duration(milliseconds=abs(ms)).in_words()
    except (OverflowError, ValueError):
        return f"{ms} ms (out of range)"
    return ("-" if ms < 0 else "") + text
