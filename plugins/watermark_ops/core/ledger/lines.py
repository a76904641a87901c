"""The Python replay of landed JSON lines: the rows Spark's file source makes of a line, classified
as :mod:`watermark_ops.spark.inputs` classifies them (the package's opt-in JSON reader).

Exact only for that reader (JSON lines, the schema recorded in the late rule's ``inputs``,
ISO-8601 event times with a zone): :meth:`~watermark_ops.core.ledger.rule.InputProfile.python_replay_problem`
says when a source is not such a one, and the ledger then names the batch as not replayed here
instead of guessing (the launcher's Spark replay, ``watermark_ops.spark.replay``, covers the
job's own parsing of any format). Spark's JSON conversion of each schema type is mirrored in
:func:`_fits`; event times are compared in microseconds, Spark's timestamp precision. Pure core.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from watermark_ops.core.ledger.rule import InputProfile

__all__ = ["classify_line"]

_LONG = (-(2**63), 2**63 - 1)
_INT = (-(2**31), 2**31 - 1)
_JACKSON_MAX_STRING = 20_000_000
# watermark_ops.spark.inputs.ISO_DATE_TIME, with its parts captured (ASCII digits, as Java's \d).
_ISO = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?"
                  r"(Z|[+-][0-9]{2}:?[0-9]{2})$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")  # allowNonNumericNumbers is off in the jobs


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _fits(value: Any, kind: str) -> bool:
    """Whether Spark's JSON reader converts ``value`` to the schema type ``kind`` (else the line is malformed)."""
    if value is None:
        return True
    if kind == "string":  # any JSON value; a non-string one becomes its JSON text
        return not (isinstance(value, str) and len(value) > _JACKSON_MAX_STRING)
    if isinstance(value, bool):
        return False
    if kind in ("long", "int"):
        low, high = _LONG if kind == "long" else _INT
        return isinstance(value, int) and low <= value <= high
    if kind == "double":
        return isinstance(value, (int, float))
    return False


def _event_time_us(value: Any) -> int | None:
    """``watermark_ops.spark.inputs.classify``'s event time: ISO-8601 date-time with a zone → epoch µs, else None."""
    if not isinstance(value, str):
        return None
    match = _ISO.match(value)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        if zone == "Z":
            offset = timedelta(0)
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            offset = sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        instant = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0),
                           int((fraction or "").ljust(6, "0")[:6]), tzinfo=timezone(offset))
    except ValueError:
        return None
    return (instant - _EPOCH) // timedelta(microseconds=1)


def classify_line(raw: bytes, profile: InputProfile, event_time_field: str, batch_timestamp_ms: int,
                  max_event_time_ahead_ms: int | None = None) -> list[tuple[str | None, int | None, dict | None]]:
    """The rows Spark's file source makes of one landed line, classified as the job classifies them.

    Mirrors ``watermark_ops.spark.inputs.json_reader`` + ``classify``: a blank line is no row; only the first
    JSON value of a line is read; an array of objects is one row per object; the first reason that
    applies: ``invalid_encoding`` (not UTF-8), ``malformed_record`` (not a JSON object of the
    schema: wrong-typed field, NaN/Infinity, no schema field at all), ``null_event_time``,
    ``unparseable_event_time``, ``future_event_time`` (event time after ``batch_timestamp_ms +
    max_event_time_ahead_ms``, only when that is given), then ``profile.required``'s reasons.

    :param raw: the line's bytes, without its line break.
    :return: ``[(reason or None for a good row, event time in epoch µs or None, the JSON object or None)]``.
    """
    if not raw.strip():
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return [("invalid_encoding", None, None)]
    try:
        value, _ = _DECODER.raw_decode(text.lstrip())
    except (ValueError, RecursionError):
        return [("malformed_record", None, None)]
    if isinstance(value, list):
        if not value:
            return []
        if not all(isinstance(item, dict) for item in value):
            return [("malformed_record", None, None)]
        objects = value
    elif isinstance(value, dict):
        objects = [value]
    else:
        return [("malformed_record", None, None)]
    rows = []
    for obj in objects:
        fields = {name: obj.get(name) for name in profile.schema}
        if (not all(_fits(fields[name], kind) for name, kind in profile.schema.items())
                or all(v is None for v in fields.values())):
            rows.append(("malformed_record", None, obj))
            continue
        if fields[event_time_field] is None:
            rows.append(("null_event_time", None, obj))
            continue
        event_us = _event_time_us(fields[event_time_field])
        if event_us is None:
            rows.append(("unparseable_event_time", None, obj))
            continue
        if max_event_time_ahead_ms is not None and event_us > (batch_timestamp_ms + max_event_time_ahead_ms) * 1000:
            rows.append(("future_event_time", event_us, obj))
            continue
        reason = next((r for r, name in profile.required.items() if fields.get(name) is None), None)
        rows.append((reason, event_us, obj))
    return rows
