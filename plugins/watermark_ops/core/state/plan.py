"""What a streaming query is about to run, read from Spark's analyzed logical plan: its sources,
its stateful operators and their keys, its watermarks and its event-time windows.

The driver captures the plan's text before the query starts (classic:
``queryExecution().analyzed()``; Spark Connect: ``DataFrame._explain_string(mode="extended")``,
whose ``== Analyzed Logical Plan ==`` section the server's analyzer wrote: the same text on both).
:func:`parse_analyzed_plan` turns it into a :class:`QueryShape`, which
:mod:`watermark_ops.core.state.restart` compares with what the checkpoint holds. The plan nodes it
reads (Spark 4.x ``treeString``, ``~`` marking a streaming node):

* ``StreamingRelation FileSource[<path>], [...]`` (a file source, the path as the job gave it),
  other ``StreamingRelation``/``StreamingRelationV2`` lines (Kafka, rate, ...): one source each;
  two identical lines are one relation read twice (a self-join), one source for Spark
  (``MicroBatchExecution`` maps each distinct relation to one source id);
* ``EventTimeWatermark [<uuid>, ]<column>#<id>: timestamp, <delay>``: a watermark; its delay in
  ms is the ``-T<ms>ms`` Spark appends to the column's attribute downstream
  (``EventTimeWatermark.delayKey``), else the interval text;
* the stateful operators, named as Spark names them in ``state/<op>/_metadata/metadata``:
  ``Aggregate`` (``stateStoreSave``, ``sessionWindowStateStoreSaveExec`` over a ``session_window``
  key), ``Deduplicate`` (``dedupe``, also what ``distinct()`` becomes), ``DeduplicateWithinWatermark``
  (``dedupeWithinWatermark``), a ``Join`` whose two sides both read a stream
  (``symmetricHashJoin``), ``FlatMapGroupsWithState``; each with its grouping keys where the node
  lists them. A node over a stream that is none of these and not known to be stateless makes the
  operator list unknown (``operators_known`` False): the comparison then leaves operators to Spark;
* a tumbling or sliding ``window(...)``: the ``TimeWindowing`` rule's ``named_struct(start, ...,
  end, ... + <duration µs>), LongType, TimestampType)))`` (a ``Project`` for a tumbling window, an
  ``Expand`` of one projection per overlapping window for a sliding one), whose
  ``((precisetimestampconversion(<time>, TimestampType, LongType) - <start offset µs>) % <slide µs>)``
  gives the slide and the start offset;
* a ``session_window(...)``: the ``SessionWindowing`` rule's ``named_struct(start, <time>, end,
  cast(<time> + cast(<gap> as interval) as timestamp))``; a gap that is not an interval literal
  (a ``CASE`` or a column) is a dynamic gap;
* the columns a result derives from the window: ``<window>#id.start AS <name>`` and ``.end AS <name>``
  in a ``Project`` above the aggregation (:attr:`QueryShape.window_columns`).

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["QueryShape", "parse_analyzed_plan", "source_folder"]

_ANALYZED = "== Analyzed Logical Plan =="
_NODE = re.compile(r"^([ :+\-]*)([~']?)([A-Za-z]\w*)(.*)$")
_SOURCE_NODES = ("StreamingRelation", "StreamingRelationV2", "StreamingExecutionRelation")
_FILE_SOURCE = re.compile(r"FileSource\[(.*?)\](?:, \[|$)")
_WATERMARK = re.compile(r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}, )?(.+?)#(\d+): \w+, (.+)$")
_WINDOW_END = re.compile(r"\+ (\d+)\), LongType, TimestampType\)\)\)")
#: ``((t - offset) % slide)`` (Spark 4.x, under a CASE for negative remainders), or ``(((t - offset) + slide) % slide)``.
_SLIDE = re.compile(r"\(\(precisetimestampconversion\(([^\s(),#]+)#\d+\S*, TimestampType, LongType\) - (-?\d+)\)"
                    r"(?: \+ \d+\))? % (\d+)\)")
_SESSION_END = re.compile(r"cast\(([^\s(),#]+)#\d+\S* \+ cast\((.+?) as interval\) as timestamp\)")
_STRUCT = "named_struct(start, "
_ATTRIBUTE = re.compile(r"^(.*?)#\d+")
_HASH = re.compile(r"@[0-9a-f]{4,}")
_IDS = re.compile(r"#\d+L?(?:-T\d+ms)?")
#: Nodes over a stream that hold no state (anything else unknown makes ``operators_known`` False).
STATELESS_NODES = frozenset({
    "Project", "Filter", "EventTimeWatermark", "CollectMetrics", "Union", "SubqueryAlias", "Expand", "Generate",
    "Sample", "Repartition", "RepartitionByExpression", "RebalancePartitions", "Sort", "View", "WithWatermark",
    "SerializeFromObject", "DeserializeToObject", "MapElements", "MapPartitions", "MapPartitionsInPandas",
    "MapInPandas", "MapInArrow", "PythonMapInArrow", "AppendColumns", "TypedFilter", "LocalLimit", "Window",
    "ResolvedHint", "Distinct", "WriteToMicroBatchDataSource", "WriteToStream", "Join", "Aggregate",
} | set(_SOURCE_NODES))
_STATEFUL = {"Deduplicate": "dedupe", "DeduplicateWithinWatermark": "dedupeWithinWatermark",
             "FlatMapGroupsWithState": "flatMapGroupsWithState"}


@dataclass(frozen=True)
class QueryShape:
    """What a query reads, keeps in state and how its watermark and windows are set: from the
    analyzed plan of a query about to start (:func:`parse_analyzed_plan`), from a progress record
    of an earlier start, or from a checkpoint's files
    (:func:`watermark_ops.core.state.restart.read_held_shape`). None / empty where unknown.

    :ivar sources: ``{"kind": "file" | "other", "path": str | None, "description": str}`` per
        source, in plan order (a file source's ``path`` as the job gave it, made absolute by the driver).
    :ivar operators: ``{"name": Spark's operator name, "keys": [key field names] | None}`` per
        stateful operator, in plan order.
    :ivar operators_known: False when the plan has a node this reader cannot classify (the
        operator list may be incomplete: not compared).
    :ivar watermarks: ``{"column", "delay_ms"}`` per ``withWatermark``.
    :ivar window_durations_ms: the durations (ms) of the query's time windows.
    :ivar windows: each event-time window of the query, in plan order: ``{"kind": "time", "column":
        the window's output column, "time_column", "duration_ms", "slide_ms", "offset_ms"}`` (tumbling:
        slide equal to the duration) or ``{"kind": "session", "column", "time_column", "gap_ms":
        int | None (None: a dynamic gap), "gap": the gap's text}``.
    :ivar window_columns: ``{"start": name | None, "end": name | None}``: the result's columns derived
        from the window's start and end (``window.start AS window_start``), empty when none.
    """

    sources: tuple[dict[str, Any], ...] = ()
    operators: tuple[dict[str, Any], ...] = ()
    operators_known: bool = True
    watermarks: tuple[dict[str, Any], ...] = ()
    window_durations_ms: tuple[int, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict, compare=False)
    windows: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    window_columns: dict[str, str | None] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (the progress log's ``started_with``): every attribute but ``evidence``."""
        return {"sources": [dict(s) for s in self.sources], "operators": [dict(o) for o in self.operators],
                "operators_known": self.operators_known, "watermarks": [dict(w) for w in self.watermarks],
                "window_durations_ms": list(self.window_durations_ms), "windows": [dict(w) for w in self.windows],
                "window_columns": dict(self.window_columns)}

    @classmethod
    def from_dict(cls, document: dict[str, Any], evidence: dict[str, Any] | None = None) -> QueryShape:
        """The inverse of :meth:`to_dict`.

        :raises ValueError: when ``document`` is not that shape.
        """
        try:
            return cls(sources=tuple(dict(s) for s in document.get("sources") or ()),
                       operators=tuple(dict(o) for o in document.get("operators") or ()),
                       operators_known=bool(document.get("operators_known", True)),
                       watermarks=tuple(dict(w) for w in document.get("watermarks") or ()),
                       window_durations_ms=tuple(int(d) for d in document.get("window_durations_ms") or ()),
                       evidence=dict(evidence or {}), windows=tuple(dict(w) for w in document.get("windows") or ()),
                       window_columns=dict(document.get("window_columns") or {}))
        except (AttributeError, TypeError, ValueError) as exc:
            raise ValueError(f"not a query shape ({exc}): {str(document)[:200]}") from None

    @property
    def delays_ms(self) -> set[int]:
        """The watermarks' delay thresholds (ms)."""
        return {int(w["delay_ms"]) for w in self.watermarks if w.get("delay_ms") is not None}


def _plan_lines(text: str) -> list[str]:
    if _ANALYZED in text:
        section = text.split(_ANALYZED, 1)[1].split("\n== ", 1)[0].strip("\n").splitlines()
        return section[1:]  # the first line is the plan's output schema
    return text.strip("\n").splitlines()


@dataclass
class _Node:
    depth: int
    name: str
    marker: str
    text: str
    children: list[_Node] = field(default_factory=list)
    streaming: bool = False


def _tree(lines: list[str]) -> list[_Node]:
    """The plan's nodes in text order (pre-order), with children and ``streaming`` (reads a stream)."""
    nodes: list[_Node] = []
    stack: list[_Node] = []
    for line in lines:
        match = _NODE.match(line)
        if match is None:
            continue
        prefix, marker, name, rest = match.groups()
        node = _Node(len(prefix) // 3, name, marker, rest.strip())
        while stack and stack[-1].depth >= node.depth:
            stack.pop()
        if stack:
            stack[-1].children.append(node)
        stack.append(node)
        nodes.append(node)
    for node in reversed(nodes):  # children come after their parent: bottom-up
        node.streaming = node.name in _SOURCE_NODES or any(c.streaming for c in node.children)
    return nodes


def _top_level_items(text: str) -> list[str]:
    """``"[a#1, f(b#2, c#3)], [...]"`` → ``["a#1", "f(b#2, c#3)"]``: the first bracketed list."""
    if not text.startswith("["):
        return []
    items, depth, current = [], 0, ""
    for char in text[1:]:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        if char == "," and depth == 0:
            items.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        items.append(current.strip())
    return items


def _key_name(item: str) -> str:
    match = _ATTRIBUTE.match(item)
    return match.group(1) if match else item


def _operator(node: _Node) -> dict[str, Any] | None | bool:
    """The stateful operator a node is (a dict), None for a stateless node, False for an unknown one."""
    if not node.streaming or node.name in _SOURCE_NODES:
        return None
    if node.name == "Aggregate":
        keys = [_key_name(k) for k in _top_level_items(node.text)]
        name = "sessionWindowStateStoreSaveExec" if any(k == "session_window" for k in keys) else "stateStoreSave"
        return {"name": name, "keys": keys}
    if node.name in ("Deduplicate", "DeduplicateWithinWatermark"):
        return {"name": _STATEFUL[node.name], "keys": [_key_name(k) for k in _top_level_items(node.text)]}
    if node.name == "FlatMapGroupsWithState":
        return {"name": _STATEFUL[node.name], "keys": None}
    if node.name == "Join":
        if len(node.children) == 2 and all(c.streaming for c in node.children):
            return {"name": "symmetricHashJoin", "keys": None}
        return None
    if node.name == "Distinct":
        return {"name": "stateStoreSave", "keys": None}
    return None if node.name in STATELESS_NODES else False


def _source(node: _Node) -> dict[str, Any]:
    match = _FILE_SOURCE.search(node.text)
    description = _IDS.sub("", _HASH.sub("", node.text))[:300]
    if match:
        return {"kind": "file", "path": match.group(1), "description": f"FileSource[{match.group(1)}]"}
    return {"kind": "other", "path": None, "description": f"{node.name} {description}".strip()}


def parse_analyzed_plan(text: str) -> QueryShape:
    """The :class:`QueryShape` of a streaming query's analyzed logical plan (module docstring).

    :param text: ``queryExecution().analyzed().toString()``, or a whole ``explain`` text in
        ``extended`` mode (its ``== Analyzed Logical Plan ==`` section is read).
    :return: the shape; a text without plan nodes gives an empty shape (no source, no operator).
    """
    lines = _plan_lines(text)
    nodes = _tree(lines)
    plan = "\n".join(lines)
    sources, seen = [], set()
    operators: list[dict[str, Any]] = []
    known = True
    watermarks = []
    for node in nodes:
        if node.name in _SOURCE_NODES:
            if node.text not in seen:  # the same relation read twice is one source
                seen.add(node.text)
                sources.append(_source(node))
            continue
        if node.name == "EventTimeWatermark":
            match = _WATERMARK.match(node.text)
            if match:
                column, attr, delay_text = match.groups()
                suffix = re.search(rf"{re.escape(column)}#{attr}-T(\d+)ms", plan)
                delay = int(suffix.group(1)) if suffix else _interval_ms(delay_text)
                watermarks.append({"column": column, "delay_ms": delay})
            continue
        operator = _operator(node)
        if operator is False:
            known = False
        elif operator is not None:
            operators.append(operator)
    durations = sorted({int(d) // 1000 for d in _WINDOW_END.findall(plan)})
    windows = _windows(nodes)
    return QueryShape(tuple(sources), tuple(operators), known, tuple(watermarks), tuple(durations),
                      windows=tuple(windows), window_columns=_window_columns(nodes, windows))


def _struct_items(node: _Node) -> list[tuple[str, str]]:
    """``(window expression, output column)`` of each ``named_struct(start, ...)`` a ``Project`` or
    ``Expand`` node makes (an ``Expand``: its first projection's item, named by its output list)."""
    if _STRUCT not in node.text:
        return []
    if node.name == "Project":
        found = []
        for item in _top_level_items(node.text):
            if item.startswith(_STRUCT) and " AS " in item:
                expression, _, name = item.rpartition(" AS ")
                found.append((expression, _key_name(name)))
        return found
    if node.name == "Expand":
        projections = _top_level_items(node.text)
        outputs = _top_level_items(node.text[node.text.rfind("], [") + 3:]) if "], [" in node.text else []
        first = _top_level_items(projections[0]) if projections else []
        return [(item, _key_name(outputs[i])) for i, item in enumerate(first)
                if item.startswith(_STRUCT) and i < len(outputs)]
    return []


def _windows(nodes: list[_Node]) -> list[dict[str, Any]]:
    """The event-time windows the plan's ``TimeWindowing`` / ``SessionWindowing`` made (module docstring)."""
    found: list[dict[str, Any]] = []
    for node in nodes:
        for expression, column in _struct_items(node):
            slide, end, session = _SLIDE.search(expression), _WINDOW_END.search(expression), _SESSION_END.search(expression)
            if slide and end:
                found.append({"kind": "time", "column": column, "time_column": slide.group(1),
                              "duration_ms": int(end.group(1)) // 1000, "slide_ms": int(slide.group(3)) // 1000,
                              "offset_ms": int(slide.group(2)) // 1000})
            elif session:
                gap = session.group(2).strip()
                found.append({"kind": "session", "column": column, "time_column": session.group(1),
                              "gap_ms": _interval_ms(gap), "gap": gap})
    return found


def _window_columns(nodes: list[_Node], windows: list[dict[str, Any]]) -> dict[str, str | None]:
    """The result's columns derived from the window's start and end (the top-most ``Project`` naming them)."""
    names = {w["column"] for w in windows}
    for node in nodes:  # pre-order: the top-most projection first
        if node.name != "Project":
            continue
        found: dict[str, str | None] = {}
        for item in _top_level_items(node.text):
            match = re.match(r"^(\w+)#\d+\S*?\.(start|end) AS (.+)$", item)
            if match and match.group(1) in names:
                found.setdefault(match.group(2), _key_name(match.group(3)))
        if found:
            return {"start": found.get("start"), "end": found.get("end")}
    return {}


def _interval_ms(text: str) -> int | None:
    from watermark_ops.core.ledger.rule import interval_ms

    return interval_ms(text.strip())


def source_folder(path: str) -> str:
    """The folder a file source reads, normalised for comparison: a local path or ``file:`` URI
    becomes an absolute path without a trailing slash; a glob keeps its part before the first
    wildcard's folder; another URI is kept with its scheme (``s3a://bucket/landing``)."""
    import os
    from urllib.parse import unquote, urlsplit

    text = str(path).strip()
    glob = re.search(r"[*?\[{]", text)
    if glob:
        text = text[:glob.start()].rsplit("/", 1)[0] or "/"
    parts = urlsplit(text)
    if parts.scheme in ("", "file"):
        return os.path.normpath(unquote(parts.path if parts.scheme else text)).rstrip("/") or "/"
    return text.rstrip("/")
