"""The late rule: which rows a query drops as late, and which watermark it judges them by.

A job's progress records carry the rule (``late_rule``, written by the recorder: shape in
:mod:`watermark_ops.spark.recorder`), so a reader of the checkpoint recovers every dropped row
without guessing the plan:

* ``window_end`` (an event-time ``window(...)`` aggregation, tumbling or sliding): each (row,
  window) pair is judged alone (the ``Expand`` of ``TimeWindowing`` makes one row per window before
  the late filter): a row is dropped from each of its windows whose end is ``<=`` the watermark for
  late rows (``WatermarkSupport.watermarkExpression``: ``window.end <= watermark``), and kept in the
  others. A row's windows start at ``offset_ms + k * slide_ms`` and hold it when ``start <= event
  time < start + window_ms`` (``TimeWindowing``: ``lastStart = t - (t - offset) % slide``, then one
  window per ``slide`` back while it holds the row); tumbling: ``slide_ms == window_ms``;
* ``session`` (a ``session_window(...)`` aggregation with a static gap ``gap_ms``): each input row is
  judged alone as its one-row session ``[event time, event time + gap)``, before any merge: dropped
  when ``event time + gap <= `` that watermark (observed on real runs, ``spark-checkpoint-facts.md``;
  ``SessionWindowing`` makes the one-row session, ``UpdatingSessionsExec`` merges after the filter);
* ``event_time`` (deduplication, stream-stream join): late when the event time is ``<=`` that
  watermark. For the join's second input this is an approximation: Spark filters that side with
  a state watermark derived from the join's time-range condition.

**Which watermark filters late rows** depends on the Spark version and a session conf, per batch
(:func:`late_watermark_rule`). Spark >= 3.4 with ``spark.sql.streaming.statefulOperator.allowMultiple``
true (its default; SPARK-40925) evicts state with the batch's own watermark but filters late input
rows with the *previous* batch's: ``IncrementalExecution`` is built with ``prevOffsetSeqMetadata =
offsetLog.offsetSeqMetadataForBatchId(N - 1)`` (``MicroBatchExecution.runBatch``), read from
``offsets/N-1`` on disk, so the first batch after a restart uses ``offsets/N-1`` exactly as a batch
inside a run does, and batch 0 (no ``offsets/-1``) uses 0
(``PropagateWatermarkSimulator.getInputWatermarkForLateEvents``). Before 3.4, or with
``allowMultiple`` false (``UseSingleWatermarkPropagator``), late rows are filtered with the batch's
own ``batchWatermarkMs``. The offset log records neither the version nor that conf: each progress
record carries ``spark_version`` and ``requested_conf[ALLOW_MULTIPLE_CONF]``; a record without them
is read with the Spark >= 3.4 default and says it was assumed.

How a source's rows are made (the rule's ``inputs``, one per source in plan order) decides who
can replay them exactly: ``"parsing": "classified"`` (the package's JSON-lines classification,
``watermark_ops.spark.inputs``) is replayed in Python (:mod:`watermark_ops.core.ledger.lines`);
``"parsing": "job"`` (the job's own pre-watermark function, any file format, recorded by the
launcher) only in Spark (``watermark_ops.spark.replay``): :meth:`LateRule.python_replay_problem`
says why not, instead of guessing. All instants epoch ms UTC. Pure core.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ALLOW_MULTIPLE_CONF",
    "InputProfile",
    "LateRule",
    "LateWatermarkRule",
    "LedgerError",
    "interval_ms",
    "late_rule",
    "late_watermark_rule",
    "schema_kinds",
]

#: Spark's session conf (``SQLConf.STATEFUL_OPERATOR_ALLOW_MULTIPLE``, since 3.4, default true) that
#: decides which watermark filters late rows; recorded per batch in the progress record's ``requested_conf``.
ALLOW_MULTIPLE_CONF = "spark.sql.streaming.statefulOperator.allowMultiple"
#: The Spark release that filters late rows with the previous batch's watermark (SPARK-40925).
PREVIOUS_WATERMARK_SINCE = (3, 4)
_VERSION = re.compile(r"^\s*([0-9]+)\.([0-9]+)")
#: The JSON kinds a landed value is checked against by the Python replay (``schema_kinds`` of a DDL).
KINDS = ("long", "int", "double", "string")
#: The kinds of late rule (module docstring).
KINDS_OF_RULE = ("window_end", "session", "event_time")
#: How a source's rows are made: the package's JSON classification, or the job's own parsing.
PARSINGS = ("classified", "job")


class LedgerError(ValueError):
    """Bad input for the ledger as a whole (e.g. a late rule of an unknown shape): names the file or record."""


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: Any) -> bool:
    return _integer(value) and value > 0


@dataclass(frozen=True)
class LateWatermarkRule:
    """Which watermark a micro-batch filtered its late input rows with.

    :ivar basis: ``"previous"`` (``offsets/N-1``'s ``batchWatermarkMs``; 0 for batch 0) or
        ``"current"`` (``offsets/N``'s).
    :ivar spark_version: the progress record's ``spark_version``, None when it has none.
    :ivar allow_multiple: the record's ``requested_conf[ALLOW_MULTIPLE_CONF]`` as a bool, None when absent.
    :ivar assumed: True when the record names neither: the Spark >= 3.4 default was assumed.
    :ivar reason: why, in words (names the version and conf it followed).
    """

    basis: str
    spark_version: str | None
    allow_multiple: bool | None
    assumed: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields."""
        return {"basis": self.basis, "spark_version": self.spark_version, "allow_multiple": self.allow_multiple,
                "assumed": self.assumed, "reason": self.reason}


def late_watermark_rule(record: dict[str, Any] | None, where: str = "progress record") -> LateWatermarkRule:
    """The watermark a batch filtered late rows with, from its progress record.

    * ``spark_version`` below 3.4: the batch's own (``"current"``): ``allowMultiple`` does not exist there;
    * else ``requested_conf[ALLOW_MULTIPLE_CONF]`` ``"false"``: ``"current"`` (``UseSingleWatermarkPropagator``);
      ``"true"``: ``"previous"`` (``PropagateWatermarkSimulator``);
    * neither recorded, or an unparseable version without the conf: ``"previous"``, Spark >= 3.4's
      default, with ``assumed`` True.

    :param record: the batch's progress record (``spark_version``, ``requested_conf``), or None.
    :raises LedgerError: naming ``where`` when the conf is recorded but is neither ``"true"`` nor
        ``"false"`` (Spark refuses any other value, so the record is corrupt).
    """
    record = record or {}
    version = record.get("spark_version")
    version = version if isinstance(version, str) else None
    conf = record.get("requested_conf")
    raw = conf.get(ALLOW_MULTIPLE_CONF) if isinstance(conf, dict) else None
    allow: bool | None = None
    if raw is not None:
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise LedgerError(f"{where}: requested_conf[{ALLOW_MULTIPLE_CONF!r}] must be \"true\" or \"false\" "
                              f"(a Spark boolean conf), got {json.dumps(raw)[:80]}")
        allow = text == "true"
    match = _VERSION.match(version or "")
    release = (int(match.group(1)), int(match.group(2))) if match else None
    if release is not None and release < PREVIOUS_WATERMARK_SINCE:
        return LateWatermarkRule("current", version, allow, False,
                                 f"Spark {version} (before 3.4) filters late rows with the batch's own watermark")
    if allow is False:
        return LateWatermarkRule("current", version, allow, False,
                                 f"{ALLOW_MULTIPLE_CONF}=false: late rows are filtered with the batch's own watermark")
    if allow is True:
        return LateWatermarkRule("previous", version, allow, False,
                                 f"Spark {version or '>= 3.4'} with {ALLOW_MULTIPLE_CONF}=true filters late rows "
                                 "with the previous batch's watermark")
    known = f"Spark {version}" if release is not None else "Spark >= 3.4 (assumed: the record names no version)"
    return LateWatermarkRule("previous", version, None, True,
                             f"{known}; {ALLOW_MULTIPLE_CONF} not recorded, its default true assumed: late rows "
                             "are filtered with the previous batch's watermark")


@dataclass(frozen=True)
class InputProfile:
    """How one source's rows are made from its landed files (an entry of the rule's ``inputs``).

    :ivar schema: ``{field: "long" | "int" | "double" | "string"}`` (the classified JSON reader's
        DDL without ``_corrupt_record``, :func:`schema_kinds`); empty for the job's own parsing.
    :ivar required: ``{reason: field}``: the row is quarantined with ``reason`` when ``field`` is null.
    :ivar parsing: ``"classified"`` (``watermark_ops.spark.inputs``) or ``"job"`` (the job's own code).
    :ivar format: the file source's format (``json``, ``csv``, ``parquet``, ...).
    :ivar schema_ddl: the schema the job's reader was given (DDL text), None when it gave none.
    :ivar options: the reader's options (``header``, ``mode``, ...).
    :ivar pre_watermark: the job's function from raw rows to the rows entering ``withWatermark``
        (``"module:function"``), None when not declared.
    :ivar reason_column: a column of that function's output naming why a row is set aside (null:
        the row enters the watermark), None when the function filters bad rows out itself.
    :ivar watermark_column: the column ``withWatermark`` is called on, None when unknown.
    """

    schema: dict[str, str]
    required: dict[str, str] = field(default_factory=dict)
    parsing: str = "classified"
    format: str = "json"
    schema_ddl: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    pre_watermark: str | None = None
    reason_column: str | None = None
    watermark_column: str | None = None

    @classmethod
    def from_dict(cls, entry: Any) -> InputProfile | None:
        """An ``inputs`` entry, None when it is not one of a known shape."""
        if not isinstance(entry, dict):
            return None
        schema, required = entry.get("schema") or {}, entry.get("required") or {}
        parsing, fmt = entry.get("parsing", "classified"), entry.get("format", "json")
        texts = ("schema_ddl", "pre_watermark", "reason_column", "watermark_column")
        if (not isinstance(schema, dict) or not isinstance(required, dict) or parsing not in PARSINGS
                or not isinstance(fmt, str) or not isinstance(entry.get("options") or {}, dict)
                or not all(isinstance(k, str) and v in KINDS for k, v in schema.items())
                or not all(isinstance(k, str) and isinstance(v, str) for k, v in required.items())
                or not all(entry.get(name) is None or isinstance(entry.get(name), str) for name in texts)
                or (parsing == "classified" and not schema)):
            return None
        return cls(dict(schema), dict(required), parsing, fmt, entry.get("schema_ddl"),
                   {str(k): str(v) for k, v in (entry.get("options") or {}).items()}, entry.get("pre_watermark"),
                   entry.get("reason_column"), entry.get("watermark_column"))

    def to_dict(self, event_time: str | None) -> dict[str, Any]:
        """JSON-ready, the ``inputs`` entry's shape (fields at their defaults left out)."""
        document: dict[str, Any] = {"event_time": event_time, "schema": dict(self.schema),
                                    "required": dict(self.required)}
        if self.parsing != "classified":
            document.update({"parsing": self.parsing, "format": self.format, "schema_ddl": self.schema_ddl,
                             "options": dict(self.options), "pre_watermark": self.pre_watermark,
                             "reason_column": self.reason_column, "watermark_column": self.watermark_column})
        elif self.format != "json":
            document["format"] = self.format
        return document

    def python_replay_problem(self) -> str | None:
        """Why the pure-Python replay cannot be exact for this source, None when it can (JSON lines
        classified by the package, with the schema recorded)."""
        if self.parsing == "job":
            if not self.pre_watermark:  # only the launcher's batch twin could: it left no record, say what to do
                return (f"the job parses its {self.format} input with its own code and declares no pre-watermark "
                        "function, and no Spark replay record of this batch exists (the launcher's batch twin, "
                        "run after each run, says in its log why it made none); declare "
                        "pre_watermark=\"module:function\" on the run pattern (the function from the raw rows to "
                        "the rows that enter withWatermark) and the launcher replays each batch in Spark after the run")
            return (f"the job parses its {self.format} input with its pre-watermark function {self.pre_watermark}, "
                    "which only Spark can replay: the launcher (watermark_ops.spark.launch, pre_watermark declared "
                    "on the run pattern) replays each batch in Spark after the run")
        if self.format != "json":
            return f"the Python replay reads JSON lines only; this source is {self.format}"
        return None


@dataclass(frozen=True)
class LateRule:
    """Which rows a query drops as late (the ``late_rule`` of its progress records).

    :ivar kind: ``window_end``, ``session`` or ``event_time`` (module docstring).
    :ivar event_time: the landed event-time field per source, in plan order.
    :ivar window_ms: the window's length (``window_end`` only).
    :ivar slide_ms: / offset_ms: the window's slide and start offset (``window_end``; a tumbling
        window's slide is its length, its offset 0).
    :ivar gap_ms: the session window's gap (``session`` only).
    :ivar delay_threshold_ms: the ``withWatermark`` delay threshold per source (informative: the
        watermark itself is read from the offset log), None when unknown.
    :ivar max_event_time_ahead_ms: the job's future-time tolerance, None when off.
    :ivar inputs: how each source's rows are made (:class:`InputProfile`), one per source; empty for
        a rule recorded without them (then no replay can be exact: the batch says so).
    """

    kind: str
    event_time: tuple[str, ...]
    window_ms: int | None = None
    delay_threshold_ms: tuple[int | None, ...] = ()
    max_event_time_ahead_ms: int | None = None
    inputs: tuple[InputProfile, ...] = ()
    slide_ms: int | None = None
    offset_ms: int = 0
    gap_ms: int | None = None

    @classmethod
    def from_dict(cls, value: Any, where: str) -> LateRule:
        """Parse a progress record's ``late_rule``.

        :raises LedgerError: naming ``where`` when it is not a rule of a known kind and shape.
        """
        def bad(why: str) -> LedgerError:
            return LedgerError(f"{where}: late_rule {why}; got {json.dumps(value)[:200]}")

        if not isinstance(value, dict) or value.get("kind") not in KINDS_OF_RULE:
            raise bad('must be an object with "kind" "window_end", "session" or "event_time"')
        fields = value.get("event_time")
        fields = [fields] if isinstance(fields, str) else fields
        if not isinstance(fields, list) or not fields or not all(isinstance(f, str) for f in fields):
            raise bad('needs "event_time": a field name, or one per source')
        window = value.get("window_ms")
        if value["kind"] == "window_end" and not _positive(window):
            raise bad('of kind window_end needs "window_ms" > 0')
        slide, offset, gap = value.get("slide_ms"), value.get("offset_ms") or 0, value.get("gap_ms")
        if value["kind"] == "window_end" and (slide is not None and not _positive(slide) or not _integer(offset)):
            raise bad('"slide_ms" must be > 0 and "offset_ms" an integer')
        if value["kind"] == "session" and not _positive(gap):
            raise bad('of kind session needs "gap_ms" > 0 (a static gap)')
        delays = value.get("delay_threshold_ms")
        delays = delays if isinstance(delays, list) else [delays] * len(fields)
        ahead = value.get("max_event_time_ahead_ms")
        if ahead is not None and (isinstance(ahead, bool) or not isinstance(ahead, int)):
            raise bad('"max_event_time_ahead_ms" must be an integer or null')
        inputs = value.get("inputs") or []
        if not isinstance(inputs, list) or (inputs and len(inputs) != len(fields)):
            raise bad('"inputs" must be a list with one entry per event-time field')
        profiles = [InputProfile.from_dict(entry) for entry in inputs]
        if any(p is None for p in profiles):
            raise bad(f'inputs: expected {{"schema": {{field: one of {sorted(KINDS)}}}, "required": {{reason: field}}}}'
                      f' per source, or {{"parsing": "job", "format": ..., "schema_ddl": ..., "pre_watermark": ...}}')
        windowed = value["kind"] == "window_end"
        return cls(value["kind"], tuple(fields), window if windowed else None,
                   tuple(d if isinstance(d, int) else None for d in delays), ahead, tuple(profiles),
                   (slide or window) if windowed else None, offset if windowed else 0,
                   gap if value["kind"] == "session" else None)

    def profile_of(self, source_index: int) -> InputProfile | None:
        """How the source at ``source_index`` is read (the rule's ``inputs`` entry), None when not recorded."""
        if len(self.inputs) == 1:
            return self.inputs[0]
        return self.inputs[source_index] if source_index < len(self.inputs) else None

    def field_of(self, source_index: int) -> str | None:
        """The event-time field of the source at ``source_index`` (None: the rule names none)."""
        if len(self.event_time) == 1:
            return self.event_time[0]
        return self.event_time[source_index] if source_index < len(self.event_time) else None

    def windows_of(self, event_us: int) -> list[tuple[int, int]]:
        """The windows ``[start, end)`` (epoch µs UTC) a row of this event time falls in, earliest
        first: its time windows (``window_end``), its one-row session (``session``), none otherwise."""
        if self.kind == "session":
            return [(event_us, event_us + self.gap_ms * 1000)]
        if self.kind != "window_end":
            return []
        size, slide, offset = self.window_ms * 1000, (self.slide_ms or self.window_ms) * 1000, self.offset_ms * 1000
        last = event_us - (event_us - offset) % slide  # Python's % is never negative, as Spark's CASE makes it
        found = []
        start = last
        while start + size > event_us:
            found.append((start, start + size))
            start -= slide
        return found[::-1]

    def windows_dropped(self, event_us: int, watermark_ms: int) -> list[tuple[int, int]]:
        """The windows (epoch ms UTC, earliest first) a row is dropped from by ``watermark_ms``: each
        whose end is ``<=`` it (module docstring); for ``event_time``, none (:meth:`late` says)."""
        watermark_us = watermark_ms * 1000
        return [(start // 1000, end // 1000) for start, end in self.windows_of(event_us) if end <= watermark_us]

    def late(self, event_us: int, watermark_ms: int) -> tuple[bool, int, int | None, int | None]:
        """Apply the rule to one good row (event time in epoch µs, Spark's timestamp precision).

        :return: ``(late, late_by_ms, window_start_ms, window_end_ms)``: late when it is dropped from
            at least one window; the window is the earliest it was dropped from (its only one for a
            tumbling window), ``late_by_ms`` how far that window's end (or the event time) lies behind
            the watermark (>= 0 when late); not late: the row's earliest window and a negative figure.
        """
        watermark_us = watermark_ms * 1000
        if self.kind in ("window_end", "session"):
            start, end = self.windows_of(event_us)[0]
            return end <= watermark_us, (watermark_us - end) // 1000, start // 1000, end // 1000
        return event_us <= watermark_us, (watermark_us - event_us) // 1000, None, None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, the progress log's shape."""
        document = {"kind": self.kind, "event_time": list(self.event_time), "window_ms": self.window_ms,
                    "delay_threshold_ms": list(self.delay_threshold_ms),
                    "max_event_time_ahead_ms": self.max_event_time_ahead_ms}
        if self.kind == "window_end" and (self.slide_ms not in (None, self.window_ms) or self.offset_ms):
            document.update({"slide_ms": self.slide_ms, "offset_ms": self.offset_ms})
        if self.kind == "session":
            document["gap_ms"] = self.gap_ms
        if self.inputs:
            document["inputs"] = [p.to_dict(self.field_of(i)) for i, p in enumerate(self.inputs)]
        return document


# --------------------------------------------------------------------------------------------
# Building a rule (the job's side: watermark_ops.spark re-exports these)

_INTERVAL_UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000,
                     "week": 7 * 86_400_000}
_INTERVAL_PART = re.compile(r"\s*(\d+)\s+(millisecond|second|minute|hour|day|week)s?\s*", re.I)


def interval_ms(text: str | None) -> int | None:
    """A Spark interval of whole units (``"2 hours"``, ``"1 hour 30 minutes"``) in ms; None for
    None, an empty string, or any other form (Spark's interval syntax is wider than this)."""
    if not text or not str(text).strip():
        return None
    text = str(text)
    parts = _INTERVAL_PART.findall(text)
    if not parts or _INTERVAL_PART.sub("", text).strip():
        return None
    return sum(int(count) * _INTERVAL_UNIT_MS[unit.lower()] for count, unit in parts)


#: Spark SQL DDL types → the JSON kinds the Python replay checks a landed value against.
_DDL_KINDS = {"BIGINT": "long", "LONG": "long", "INT": "int", "INTEGER": "int", "DOUBLE": "double",
              "STRING": "string"}
_DDL_FIELD = re.compile(r"\s*(`(?:[^`]|``)+`|[^\s,]+)\s+([A-Za-z]+)\s*(?:,|$)")


def schema_kinds(schema_ddl: str) -> dict[str, str]:
    """``"id BIGINT, station STRING, temp DOUBLE, _corrupt_record STRING"`` → ``{"id": "long",
    "station": "string", "temp": "double"}`` (``_corrupt_record`` left out; a backticked name is read
    as its text).

    :raises ValueError: for a type other than BIGINT/LONG, INT/INTEGER, DOUBLE or STRING (the Python
        replay could not replay Spark's JSON conversion of it), naming the field.
    """
    kinds = {}
    position = 0
    text = schema_ddl.strip()
    while position < len(text):
        match = _DDL_FIELD.match(text, position)
        if not match:
            raise ValueError(f"cannot read the schema DDL {schema_ddl!r} at {text[position:][:40]!r}: expected "
                             "'name TYPE, ...'")
        position = match.end()
        name, kind = match.group(1), match.group(2)
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        if name == "_corrupt_record":
            continue
        if kind.upper() not in _DDL_KINDS:
            raise ValueError(f"field {name!r}: type {kind!r} is not one the Python replay of the late-row ledger "
                             f"reads (expected one of {sorted(_DDL_KINDS)})")
        kinds[name] = _DDL_KINDS[kind.upper()]
    return kinds


def late_rule(kind: str, event_time: str | list[str], delay_threshold: str | list[str],
              window: str | None = None, max_event_time_ahead: str | None = None,
              schema: str | list[str] | None = None,
              required_fields: dict[str, str] | list[dict[str, str]] | None = None, *,
              slide: str | None = None, offset_ms: int = 0, gap: str | None = None) -> dict[str, Any]:
    """The ``late_rule`` of a progress record (shape in :mod:`watermark_ops.spark.recorder`).

    :param kind: ``"window_end"`` (time window aggregation, ``window`` required; ``slide`` and
        ``offset_ms`` for a sliding or offset one), ``"session"`` (session window aggregation,
        ``gap`` required) or ``"event_time"`` (deduplication or stream-stream join).
    :param event_time: the landed field the event time comes from (a list: one per source).
    :param delay_threshold: the ``withWatermark`` delay threshold(s), Spark intervals.
    :param window: the tumbling window duration (``"1 hour"``).
    :param max_event_time_ahead: the job's future-time tolerance, None when off.
    :param schema: the DDL each source is read with by ``watermark_ops.spark.inputs.classified_json_stream``
        (a list: one per source); recorded as ``inputs`` so the Python replay reads the job's lines.
    :param required_fields: ``{reason: field}`` quarantine rules of each source (a list: one per source).
    :raises ValueError: for another kind, a window_end rule without a window of whole units, or a
        schema type the Python replay cannot read.
    """
    if kind not in KINDS_OF_RULE:
        raise ValueError(f"late rule kind must be one of {', '.join(KINDS_OF_RULE)}, got {kind!r}")
    rule: dict[str, Any] = {"kind": kind, "event_time": event_time}
    if kind == "window_end":
        rule["window_ms"] = interval_ms(window)
        if rule["window_ms"] is None:
            raise ValueError(f"a window_end late rule needs a window such as '1 hour', got {window!r}")
        if slide is not None or offset_ms:
            rule["slide_ms"] = interval_ms(slide) if slide is not None else rule["window_ms"]
            rule["offset_ms"] = int(offset_ms)
            if rule["slide_ms"] is None:
                raise ValueError(f"a sliding window needs a slide such as '30 minutes', got {slide!r}")
    if kind == "session":
        rule["gap_ms"] = interval_ms(gap)
        if rule["gap_ms"] is None:
            raise ValueError(f"a session late rule needs a static gap such as '2 hours', got {gap!r}")
    rule["delay_threshold_ms"] = ([interval_ms(d) for d in delay_threshold] if isinstance(delay_threshold, list)
                                  else interval_ms(delay_threshold))
    rule["max_event_time_ahead_ms"] = interval_ms(max_event_time_ahead)
    if schema is not None:
        fields = event_time if isinstance(event_time, list) else [event_time]
        schemas = schema if isinstance(schema, list) else [schema]
        required = required_fields if isinstance(required_fields, list) else [required_fields or {}] * len(fields)
        if not (len(fields) == len(schemas) == len(required)):
            raise ValueError(f"one schema and one required_fields per event-time field: {len(fields)} fields, "
                             f"{len(schemas)} schemas, {len(required)} required_fields")
        rule["inputs"] = [{"event_time": f, "schema": schema_kinds(d), "required": dict(r or {})}
                          for f, d, r in zip(fields, schemas, required)]
    return rule
