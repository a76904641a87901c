"""The late rule's window, read from the query's plan: no declaration needed, a declared one checked.

Before a query starts, the launcher reads its analyzed plan (:func:`watermark_ops.core.state.plan.parse_analyzed_plan`:
the ``TimeWindowing`` rule's duration, slide and start offset, or the ``SessionWindowing`` rule's
gap) and records it as the query's ``started_with`` (``"windows"``). :func:`window_of` turns that
into the late rule's window (``kind`` and its lengths) and checks a window the run declared
(``--window``, the run pattern's ``window=``) against it: a declaration that disagrees with the plan
stops the run with one line naming both (:class:`WindowMismatch`), since the late rows and
corrections of a rule that is not the plan's would be wrong.

All lengths in ms. Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from watermark_ops.core.ledger.rule import interval_ms

__all__ = ["PlanWindow", "WindowMismatch", "window_of", "window_text"]


class WindowMismatch(ValueError):
    """A declared window disagrees with the query's plan (one line naming both)."""


@dataclass(frozen=True)
class PlanWindow:
    """The window the late rule judges rows by.

    :ivar kind: ``"window_end"`` (a time window: tumbling or sliding), ``"session"`` (a session
        window with a static gap) or ``"event_time"`` (no window: late when the event time is behind
        the watermark).
    :ivar duration_ms: / slide_ms: / offset_ms: a time window's (tumbling: slide = duration).
    :ivar gap_ms: a session window's gap.
    :ivar source: ``"plan"`` (read from the query's plan), ``"declared"`` (no window in the plan
        read, the declaration taken) or ``"none"``.
    :ivar column: the window's column in the plan (``window``, ``session_window``), None when declared.
    """

    kind: str
    duration_ms: int | None = None
    slide_ms: int | None = None
    offset_ms: int = 0
    gap_ms: int | None = None
    source: str = "none"
    column: str | None = None

    def late_rule_arguments(self) -> dict[str, Any]:
        """Keyword arguments of :func:`watermark_ops.core.ledger.rule.late_rule` for this window."""
        if self.kind == "window_end":
            arguments: dict[str, Any] = {"window": f"{self.duration_ms} milliseconds"}
            if self.slide_ms != self.duration_ms or self.offset_ms:
                arguments.update({"slide": f"{self.slide_ms} milliseconds", "offset_ms": self.offset_ms})
            return arguments
        if self.kind == "session":
            return {"gap": f"{self.gap_ms} milliseconds"}
        return {}

    @property
    def extent_ms(self) -> int | None:
        """How far a window reaches from a row's event time: the duration, or the gap; None without one."""
        return self.duration_ms if self.kind == "window_end" else self.gap_ms if self.kind == "session" else None


def window_text(ms: int | None) -> str:
    """``7200000`` → ``"2 hours"``, ``5400000`` → ``"90 minutes"`` (the largest whole unit)."""
    if ms is None:
        return "none"
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000)):
        if ms % size == 0:
            count = ms // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{ms} milliseconds"


def _describe(window: dict[str, Any]) -> str:
    if window.get("kind") == "session":
        return f"session_window(gap {window.get('gap')})"
    duration, slide = window.get("duration_ms"), window.get("slide_ms")
    text = f"window({window_text(duration)}"
    text += f", slide {window_text(slide)}" if slide != duration else ""
    text += f", start offset {window_text(window.get('offset_ms'))}" if window.get("offset_ms") else ""
    return text + ")"


def window_of(started_with: dict[str, Any] | None, declared: str | None = None,
              where: str = "the query") -> PlanWindow:
    """The late rule's window of a query from what it started with (its plan's ``windows``).

    :param started_with: the query's ``started_with`` (``QueryShape.to_dict()``), None when not read.
    :param declared: a declared window duration (``"1 hour"``), None when none.
    :param where: names the query in the error.
    :return: the plan's first window; the declared one when the plan read none; else ``event_time``.
    :raises WindowMismatch: the declared duration is not the plan's time window duration, or a
        window is declared for a query whose plan has a session window, or the plan's session gap is
        dynamic (an expression per row: the late rows cannot be replayed exactly), naming both.
    """
    windows = [w for w in (started_with or {}).get("windows") or () if isinstance(w, dict)]
    declared_ms = interval_ms(declared) if declared else None
    if declared and declared_ms is None:
        raise WindowMismatch(f"{where}: the declared window {declared!r} is not an interval such as '1 hour'")
    if not windows:
        if declared_ms is not None:
            return PlanWindow("window_end", declared_ms, declared_ms, 0, source="declared")
        return PlanWindow("event_time")
    window = windows[0]
    if window.get("kind") == "session":
        if declared_ms is not None:
            raise WindowMismatch(f"{where}: the declared window {declared!r} disagrees with the query's plan, which "
                                 f"has {_describe(window)}: declare no window (the plan's is read)")
        if window.get("gap_ms") is None:
            raise WindowMismatch(f"{where}: the query's {_describe(window)} has a dynamic gap: its late rows cannot be "
                                 "replayed exactly (only a static gap such as '2 hours' can)")
        return PlanWindow("session", gap_ms=int(window["gap_ms"]), source="plan", column=window.get("column"))
    duration = int(window["duration_ms"])
    if declared_ms is not None and declared_ms != duration:
        raise WindowMismatch(f"{where}: the declared window {declared!r} disagrees with the query's plan, which has "
                             f"{_describe(window)}: declare {window_text(duration)!r} or nothing (the plan's is read)")
    return PlanWindow("window_end", duration, int(window.get("slide_ms") or duration), int(window.get("offset_ms") or 0),
                      source="plan", column=window.get("column"))
