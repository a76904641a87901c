"""The sentences of the stall classification: why a state applies, and the likely causes of a stall.

Each function builds one reason (``jumped``, ``stalled``, ``idle``, ``advancing``) or the hints of
a stall from the batches' facts (:mod:`watermark_ops.core.facts`), with the values in words and
ISO-8601 UTC; :func:`watermark_ops.core.classification.classify` decides which apply.

Pure core: imports neither Airflow nor Spark. Times are epoch ms UTC.
"""

from __future__ import annotations

from typing import Any, Sequence

from watermark_ops.core.facts import BatchFacts
from watermark_ops.core.thresholds import Thresholds
from watermark_ops.core.times import duration_ms as _ms
from watermark_ops.core.times import duration_words as _words
from watermark_ops.core.times import iso_utc

__all__ = ["advancing_reason", "idle_reason", "jumped_reason", "stall_hints", "stalled_reason"]


def stall_hints(flat: Sequence[BatchFacts], inputs: Sequence[int | str], policy: str | None) -> list[str]:
    """The likely causes of a stall over the flat batches; ``inputs``: the head's source keys
    (:attr:`BatchFacts.keys`: plan positions, or a v2 offset log's names)."""
    n_inputs = len(inputs)
    hints: list[str] = []
    rows = [b for b in flat if b.input_rows]
    if rows and all(b.event_time_max_ms is None for b in rows):
        total = sum(b.input_rows or 0 for b in rows)
        hints.append(
            f"no event time was observed in the {total} input rows of these batches: the event-time column is "
            f"null (or filtered out before withWatermark) for every new row"
        )
    elif rows and all(b.event_time_max_ms is None or b.event_time_max_ms <= 0 for b in rows):
        total = sum(b.input_rows or 0 for b in rows)
        hints.append(
            f"the newest event time Spark observed in the {total} input rows of these batches is "
            f"1970-01-01T00:00:00Z (0), what Spark reports for rows whose event time is null: the event-time "
            f"column is null for every new row"
        )
    known = [b for b in flat if b.inputs_advanced is not None]
    if n_inputs >= 2 and known and (policy or "min") == "min":
        seen = set().union(*(b.inputs_advanced for b in known))
        never = [i for i in inputs if i not in seen]
        if never:
            hints.append(
                f"input(s) {', '.join(map(str, never))} got no data in these batches: under the 'min' "
                f"multiple-watermark policy the global watermark waits for the slowest input"
            )
        else:
            runs: dict[Any, set[int | str]] = {}
            for b in known:
                runs.setdefault(b.run_id or ("batch", b.batch_id), set()).update(b.inputs_advanced)
            if all(len(inputs) < n_inputs for inputs in runs.values()):
                hints.append(
                    "every input got data, but no run (restart) saw data on all inputs: Spark persists only the "
                    "global watermark, so after a restart each input's own watermark starts again from 0 and under "
                    "'min' the global one cannot rise until every input sees data in the same run (SPARK-50046)"
                )
    if known and not hints:
        hints.append("input arrived but the watermark did not move: the new rows' event times may all be older "
                     "than the current watermark plus the delay threshold (late or replayed data)")
    return hints


def jumped_reason(facts: Sequence[BatchFacts], watermark: int, skew: int, t: Thresholds,
            complete: bool = True) -> tuple[str, dict[str, Any] | None]:
    """The ``jumped`` reason and the batch whose watermark first ran ahead of its time by more than
    ``max_skew`` (the first among those read: when that is the oldest batch read and older ones were
    not read, the jump may be earlier, and the reason says so)."""
    jump = None
    for b in facts:
        end = b.end_watermark_ms
        if end is not None and end - b.timestamp_ms > _ms(t.max_skew):
            jump = {"batch_id": b.batch_id, "timestamp_ms": b.timestamp_ms, "from_ms": b.watermark_ms, "to_ms": end}
            break
    where = f" since batch {jump['batch_id']} (from {iso_utc(jump['from_ms'])})" if jump else ""
    if jump and not complete and jump["batch_id"] == facts[0].batch_id:
        where = (f" since batch {jump['batch_id']} or earlier (the oldest batch read; older batches were not read, "
                 f"from {iso_utc(jump['from_ms'])})")
    reason = (
        f"jumped: the watermark {iso_utc(watermark)} is {_words(skew)} ahead of the latest batch time "
        f"{iso_utc(facts[-1].timestamp_ms)} (max skew {_words(_ms(t.max_skew))}){where}: a future-dated record; "
        f"every later on-time row will be dropped as late"
    )
    return reason, jump


def stalled_reason(flat: Sequence[BatchFacts], move: dict[str, Any] | None, watermark: int, t: Thresholds,
             scope: str = "in the retained logs") -> str | None:
    """The ``stalled`` reason when enough data batches (or a long enough span) passed without a move, else None."""
    span = flat[-1].timestamp_ms - flat[0].timestamp_ms if len(flat) >= 2 else 0
    by_count = len(flat) >= t.stall_batches
    by_window = len(flat) >= 2 and t.stall_window is not None and span >= _ms(t.stall_window)
    if not (by_count or by_window):
        return None
    since = (f"since batch {move['batch_id']} ({iso_utc(move['timestamp_ms'])})" if move
             else scope)
    rule = (f"{len(flat)} >= {t.stall_batches} data batches" if by_count
            else f"data batches over {_words(span)} >= stall window {_words(_ms(t.stall_window))}")
    return (f"stalled: input arrived in {len(flat)} data batches ({flat[0].batch_id}..{flat[-1].batch_id}) but the "
            f"watermark stayed at {iso_utc(watermark)} {since} ({rule})")


def idle_reason(facts: Sequence[BatchFacts], latest_data: BatchFacts | None, idle: int, idle_too_long: bool,
          empty_triggers: Sequence[dict[str, Any]], t: Thresholds, scope: str = "in the retained logs") -> str:
    """The ``idle`` reason: since when no input arrived, against ``max_idle``, and the empty triggers since."""
    last = (f"the latest data batch {latest_data.batch_id} at {iso_utc(latest_data.timestamp_ms)}" if latest_data
            else f"no data batch {scope} (first batch {facts[0].batch_id} at {iso_utc(facts[0].timestamp_ms)})")
    limit = (f"longer than max idle {_words(_ms(t.max_idle))}" if idle_too_long
             else f"max idle {_words(_ms(t.max_idle))}" if t.max_idle is not None else "max idle disabled")
    empty = [r for r in empty_triggers if latest_data is None or (r.get("timestamp_ms") or 0) > latest_data.timestamp_ms]
    ran = (f"; the job ran {len(empty)} trigger(s) without input since, the last at {empty[-1].get('timestamp')}"
           if empty else "")
    return f"idle: no new input for {_words(idle)} since {last} ({limit}){ran}"


def advancing_reason(move: dict[str, Any] | None, flat: Sequence[BatchFacts], idle: int, t: Thresholds) -> str:
    """Why ``advancing``: the latest move, or too few data batches to call a stall."""
    if move is not None and not flat:
        why = f"the watermark moved in batch {move['batch_id']} ({iso_utc(move['from_ms'])} -> {iso_utc(move['to_ms'])})"
    else:
        why = (f"the watermark has not moved over {len(flat)} data batch(es), fewer than the "
               f"{t.stall_batches} (or the {_words(_ms(t.stall_window))} window) needed to call a stall")
    return f"advancing: input arrived {_words(idle)} before the evaluation instant and {why}"
