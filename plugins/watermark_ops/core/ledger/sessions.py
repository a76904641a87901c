"""Session windows' corrections: the sessions a late row changes, with the sessions they retract.

Spark drops a session window's late row alone (its one-row session ``[t, t + gap)`` ends at or before
the watermark for late rows) and writes each session once, when its end passes the watermark; a
later row that would have extended a written session starts a new one beside it
(``spark-checkpoint-facts.md``: observed on real runs). With an allowed lateness, the Dataflow
model's answer is a **retraction**: a late row can extend one emitted session or bridge two into
one, so the session over every landed row replaces every session published before that overlaps it.

:func:`session_corrections` takes the sessions over every landed row of the run's window span
(the job's batch twin), the sessions published so far (what the sink holds, with the earlier runs'
corrections applied in order: :func:`published_sessions`) and the run's late rows, and returns the
corrections: each true session that holds a recoverable late row and is not published as it is,
with ``retracts`` listing each published session of its keys that overlaps it. A consumer that
applies the corrections in order (remove the retracted, add the corrected) holds the sessions over
every landed row.

A session is ``{"start": ms, "end": ms, "keys": tuple of key values, "values": {column: value}}``
(epoch ms UTC). Pure core.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

__all__ = ["published_sessions", "session_corrections"]


def _key(session: dict[str, Any]) -> tuple:
    return (session["start"], session["end"], tuple(str(k) for k in session["keys"]))


def published_sessions(emitted: Iterable[dict[str, Any]], earlier: Iterable[dict[str, Any]],
                       key_columns: list[str]) -> list[dict[str, Any]]:
    """What a consumer holds: the sink's sessions with ``earlier`` corrections (the log's shape, in
    the order made) applied: each retracted session removed, each corrected one added."""
    held: dict[tuple, dict[str, Any]] = {_key(s): s for s in emitted}
    for correction in earlier:
        keys = tuple((correction.get("keys") or {}).get(k) for k in key_columns)
        for gone in correction.get("retracts") or ():
            held.pop(_key({"start": gone["window_start_ms"], "end": gone["window_end_ms"], "keys": keys}), None)
        session = {"start": correction["window_start_ms"], "end": correction["window_end_ms"], "keys": keys,
                   "values": dict(correction["corrected"])}
        held[_key(session)] = session
    return list(held.values())


def session_corrections(truth: list[dict[str, Any]], published: list[dict[str, Any]], late_rows: list[dict[str, Any]],
                        key_columns: list[str], run_tag: str | None,
                        same: Callable[[dict[str, Any], dict[str, Any]], bool],
                        closed_ms: int | None = None, last_batch_id: int | None = None
                        ) -> tuple[list[dict[str, Any]], list[str]]:
    """The run's session corrections (module docstring): each true session that holds a recoverable
    late row, and each closed one (its end at or before ``closed_ms``, the run's last watermark: Spark
    has written it) that overlaps published sessions without being one of them (a row kept in time
    for its own one-row session that would have extended a written session: Spark wrote a second
    session beside the first), when it is not published as it is.

    :param truth: the sessions over every landed row (the twin's result over the run's span).
    :param published: :func:`published_sessions`.
    :param late_rows: the run's recoverable late rows (``LateRow.to_dict()`` shapes: ``event``,
        ``event_time_ms``, ``batch_id``).
    :param same: whether two sessions' values are equal (numbers within a tolerance).
    :param closed_ms: the watermark up to which Spark has written sessions (epoch ms UTC), None: only
        sessions with late rows are judged.
    :param last_batch_id: the run's last batch: the ``batch_id`` of a correction without a late row of
        its own (it holds every row the batches up to it read, late ones included).
    :return: ``(corrections in the log's shape without write, by session start then keys; problems)``:
        a true session that a published one of its keys starts before is not corrected (the twin
        read too little before it: its rows are not all known), and is named in ``problems``.
    """
    def keys_of(row: dict[str, Any]) -> tuple:
        return tuple(str(row["event"].get(k)) for k in key_columns)

    made, problems = [], []
    for session in sorted(truth, key=lambda s: (s["start"], tuple(str(k) for k in s["keys"]))):
        keys = tuple(str(k) for k in session["keys"])
        mine = [r for r in late_rows if all(k not in r["event"] for k in key_columns) or keys_of(r) == keys]
        mine = [r for r in mine if session["start"] <= int(r["event_time_ms"]) < session["end"]]
        overlapping = [p for p in published if tuple(str(k) for k in p["keys"]) == keys
                       and p["start"] < session["end"] and session["start"] < p["end"]]
        closed = closed_ms is not None and session["end"] <= closed_ms
        if not mine and not (closed and overlapping):
            continue
        if any(p["start"] == session["start"] and p["end"] == session["end"] and same(session["values"], p["values"])
               for p in overlapping):
            continue  # published as it is: nothing to correct
        if any(p["start"] < session["start"] for p in overlapping):
            problems.append(f"the session of {dict(zip(key_columns, session['keys']))} from {session['start']} to "
                            f"{session['end']} (epoch ms) starts after a published session that overlaps it: the twin "
                            "read too little before it; not corrected")
            continue
        emitted = next((p["values"] for p in overlapping if (p["start"], p["end"]) == (session["start"], session["end"])),
                       None)
        made.append({"window_start_ms": session["start"], "window_end_ms": session["end"],
                     "window_kind": "session", "keys": dict(zip(key_columns, session["keys"])), "emitted": emitted,
                     "corrected": dict(session["values"]), "late_rows": len(mine), "run": run_tag,
                     "batch_id": max((int(r["batch_id"]) for r in mine), default=last_batch_id),
                     "retracts": [{"window_start_ms": p["start"], "window_end_ms": p["end"], "values": dict(p["values"])}
                                  for p in sorted(overlapping, key=lambda p: p["start"])]})
    return made, problems
