"""Which late rows the corrections recovered: every face's split of a run's late rows.

With an allowed lateness the launcher recomputes the windows of a run's recoverable late rows and
logs each changed group as a correction (:mod:`watermark_ops.core.ledger.corrections` has the
record's shape). The faces read the allowed lateness from nowhere (the progress and replay records
do not carry it): they read the corrections log, so what counts is what was actually corrected.

A late row (``LateRow.to_dict()`` shape, or a :class:`~watermark_ops.core.ledger.model.LateRow`) is
**recovered** when a standing correction (:func:`~watermark_ops.core.ledger.corrections.standing`:
the newest of its window and keys) exists for its window and keys, made after the row was dropped:
its ``batch_id`` is at least the row's (a correction recomputes its window over every row of it, so
a later run's correction of the same window holds the row too; one made before it cannot). Keys
are compared on the columns the row's event has (``str`` of both values); a key column the event
does not have matches any value. Every other late row is **dropped for good**. A recoverable row
whose window's result did not change has no correction, and counts as dropped for good.

A checkpoint *declares* an allowed lateness for these figures when its corrections log
(``<checkpoint>.corrections.jsonl``) holds at least one correction, or (for one run's figures) when
the launcher's replay records of the run's batches carry ``allowed_lateness_ms``: without either the
faces show no split (the figures are None).

All instants epoch ms UTC. Pure core: no Airflow, no Spark.
"""

from __future__ import annotations

from typing import Any, Iterable

from watermark_ops.core.ledger.corrections import standing

__all__ = ["PUBLIC_FIELDS", "corrected_windows", "corrections_event", "public_correction", "recovery",
           "split_recovered"]

#: A correction's fields as every face shows them, in this order (the log's internal ``write`` left out).
PUBLIC_FIELDS = ("window_start_ms", "window_end_ms", "keys", "emitted", "corrected", "late_rows", "run", "batch_id",
                 "retracts")


def _plain(row: Any) -> dict[str, Any]:
    return row if isinstance(row, dict) else row.to_dict()


def _index(corrections: list[dict[str, Any]]) -> tuple[dict[tuple[int, int], list[dict[str, Any]]], list[dict]]:
    """The standing corrections per ``(window start ms, window end ms)``, and the standing session
    corrections (``window_kind`` ``"session"``), which hold a row by its event time."""
    by_window: dict[tuple[int, int], list[dict[str, Any]]] = {}
    sessions = []
    for correction in standing(corrections):
        by_window.setdefault((correction["window_start_ms"], correction["window_end_ms"]), []).append(correction)
        if correction.get("window_kind") == "session":
            sessions.append(correction)
    return by_window, sessions


def _covers(correction: dict[str, Any], row: dict[str, Any]) -> bool:
    event = row.get("event") or {}
    if int(correction.get("batch_id") if correction.get("batch_id") is not None else -1) < int(row["batch_id"]):
        return False
    return all(str(event[k]) == str(v) for k, v in (correction.get("keys") or {}).items() if k in event)


def _dropped_windows(row: dict[str, Any]) -> list[tuple[Any, Any]]:
    found = [(w.get("window_start_ms"), w.get("window_end_ms")) for w in row.get("windows_dropped") or ()]
    return found or [(row.get("window_start_ms"), row.get("window_end_ms"))]


def split_recovered(late_rows: Iterable[Any], corrections: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """``(recovered, dropped for good)`` of late rows, by the corrections (module docstring): a row
    is recovered when each window it was dropped from (``windows_dropped``: a sliding window's row
    may lose several) has a standing correction for its keys, or, for a session window, when a
    standing session correction of its keys (``window_kind`` ``"session"``) holds its event time.

    :param late_rows: ``LateRow`` values or their ``to_dict()`` shapes (``batch_id``,
        ``window_start_ms``, ``window_end_ms``, ``windows_dropped``, ``event_time_ms`` epoch ms UTC, ``event``).
    :param corrections: :func:`~watermark_ops.core.ledger.corrections.read_corrections`' list.
    :return: the rows as dicts, each in one of the two lists, in the order given.
    """
    by_window, sessions = _index(corrections)
    recovered, dropped = [], []
    for item in late_rows:
        row = _plain(item)
        at = row.get("event_time_ms")
        held = any(_covers(c, row) and at is not None and c["window_start_ms"] <= at < c["window_end_ms"]
                   for c in sessions)
        hit = held or all(any(_covers(c, row) for c in by_window.get(window, ())) for window in _dropped_windows(row))
        (recovered if hit else dropped).append(row)
    return recovered, dropped


def recovery(late_rows: Iterable[Any] | None, corrections: list[dict[str, Any]], run_tag: str | None = None,
             declared: bool = False) -> dict[str, int | None]:
    """A run's (or any set of batches') late rows split by the corrections.

    :param late_rows: the late rows, None when they are unknown (a batch not replayed).
    :param corrections: the checkpoint's corrections (:func:`read_corrections`); empty: no allowed
        lateness declared, every figure None.
    :param run_tag: the run whose corrections are counted (``corrections``); None: all of them.
    :param declared: an allowed lateness was declared for these rows (their replay records say so),
        so no correction yet means 0 recovered, not "no split".
    :return: ``{"rows_late_recovered": int | None, "rows_late_dropped": int | None (recovered +
        dropped = the late rows), "corrections": int | None (the run's corrections)}``.
    """
    if not corrections and not declared:
        return {"rows_late_recovered": None, "rows_late_dropped": None, "corrections": None}
    mine = [c for c in corrections if run_tag is None or c.get("run") == run_tag]
    if late_rows is None:
        return {"rows_late_recovered": None, "rows_late_dropped": None, "corrections": len(mine)}
    recovered, dropped = split_recovered(late_rows, corrections)
    return {"rows_late_recovered": len(recovered), "rows_late_dropped": len(dropped), "corrections": len(mine)}


def public_correction(correction: dict[str, Any]) -> dict[str, Any]:
    """A correction as the faces show it: :data:`PUBLIC_FIELDS` only, in that order (``keys`` ``{}``
    when absent, ``emitted`` None when never emitted; ``retracts``: the sessions a session window's
    correction replaces, ``[{"window_start_ms", "window_end_ms", "values"}]``, empty for a time window's)."""
    return {"window_start_ms": correction["window_start_ms"], "window_end_ms": correction["window_end_ms"],
            "keys": dict(correction.get("keys") or {}), "emitted": correction.get("emitted"),
            "corrected": dict(correction["corrected"]), "late_rows": correction.get("late_rows"),
            "run": correction.get("run"), "batch_id": correction.get("batch_id"),
            "retracts": [dict(r) for r in correction.get("retracts") or ()]}


def corrected_windows(corrections: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each window and keys the corrections name once, in the order made:
    ``[{"window_start_ms", "window_end_ms", "keys": {column: value}}]`` (epoch ms UTC)."""
    seen, out = set(), []
    for c in corrections:
        item = {"window_start_ms": c["window_start_ms"], "window_end_ms": c["window_end_ms"],
                "keys": dict(c.get("keys") or {})}
        key = (item["window_start_ms"], item["window_end_ms"],
               tuple(sorted((k, str(v)) for k, v in item["keys"].items())))
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def corrections_event(checkpoint: str, run_tag: str | None, corrections: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``extra`` of the asset event announcing one run's corrections, None when it corrected nothing.

    :param checkpoint: the checkpoint location (as given to the run pattern).
    :param run_tag: the run (the Airflow run id the launcher got as ``--run-tag``).
    :param corrections: the checkpoint's corrections (:func:`read_corrections`).
    :return: ``{"corrected_windows": [{"window_start_ms", "window_end_ms", "keys"}] (the run's, in the
        order made), "run": run_tag, "checkpoint": checkpoint, "corrections": int (groups corrected),
        "late_rows": int (the recoverable late rows they add)}``, or None.
    """
    mine = [c for c in corrections if c.get("run") == run_tag]
    if not mine:
        return None
    return {"corrected_windows": corrected_windows(mine), "run": run_tag, "checkpoint": checkpoint,
            "corrections": len(mine), "late_rows": sum(int(c.get("late_rows") or 0) for c in mine)}
