"""Whether a query has an event-time watermark at all, from its own evidence: never from the
number of batches (see "Queries without a watermark" in :mod:`watermark_ops.core.stall`).

A query without ``withWatermark`` writes ``batchWatermarkMs`` 0 and ``nextBatchWatermarkMs`` 0 like a
watermarked query whose event times are all null; while the watermark is 0 the classification
asks the evidence this module weighs: the offset and commit logs, the progress records (Spark
reports ``eventTime`` only for a plan with an ``EventTimeWatermark``, ``ProgressReporter``), and
the state operators' metadata (``dedupeWithinWatermark``, a state column carrying
``spark.watermarkDelayMs``).

Pure core: imports neither Airflow nor Spark; a pure function of what was read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from watermark_ops.core.times import iso_utc

if TYPE_CHECKING:
    from watermark_ops.core.state.metadata import StateMetadata

__all__ = ["watermark_evidence"]


def watermark_evidence(watermark_ms: int | None, progress: dict[int, dict[str, Any]],
                       state: StateMetadata | None) -> dict[str, Any]:
    """Whether the query has an event-time watermark, from its own evidence (see "Queries without
    a watermark" in the module docstring); never from the number of batches.

    :param watermark_ms: the current watermark (epoch ms UTC); above 0 proves a watermark.
    :param progress: the progress records of the batches read, by batch id (executed batches of
        this query, :func:`watermark_ops.core.facts.progress_by_batch`).
    :param state: the state operators' metadata (:func:`watermark_ops.core.checkpoint.read_state_metadata`),
        None when not read.
    :return: ``{"has_watermark": True | False | None, "source": "checkpoint_logs" | "progress_log" |
        "state_metadata" | None, "evidence": [sentences: what proves it, or why it cannot be told],
        "state_operators": [StateOperator.to_dict()] | None}``.
    """
    operators = None if state is None else [op.to_dict() for op in state.operators]

    def result(has: bool | None, source: str | None, evidence: list[str]) -> dict[str, Any]:
        return {"has_watermark": has, "source": source, "evidence": evidence, "state_operators": operators}

    if watermark_ms is not None and watermark_ms > 0:
        return result(True, "checkpoint_logs", [f"the offset and commit logs hold the watermark {iso_utc(watermark_ms)}"])
    records = [progress[k] for k in sorted(progress)]
    stats = [r for r in records if any(r.get(k) is not None for k in ("watermark_ms", "event_time_min_ms", "event_time_max_ms"))]
    if stats:
        r = stats[-1]
        return result(True, "progress_log", [
            f"Spark reported an event-time watermark ({iso_utc(r.get('watermark_ms')) or 'none'}) and event times "
            f"({iso_utc(r.get('event_time_min_ms')) or 'none'}..{iso_utc(r.get('event_time_max_ms')) or 'none'}) in the "
            f"progress of batch {r['batch_id']}: it reports eventTime only for a plan with withWatermark"])
    if state is not None:
        within = [op for op in state.operators if op.name == "dedupeWithinWatermark"]
        if within:
            return result(True, "state_metadata", [
                f"state operator {within[0].operator_id} is dedupeWithinWatermark ({within[0].metadata_file}), "
                f"which Spark allows only with a watermark"])
        columns = state.watermark_columns
        if columns:
            c = columns[0]
            name = next((op.name for op in state.operators if op.operator_id == c["operator_id"]), None)
            return result(True, "state_metadata", [
                f"state operator {c['operator_id']} ({name or 'unnamed'}) keeps the event-time column {c['column']!r} in "
                f"its state {c['key_or_value']} with spark.watermarkDelayMs {c['delay_ms']} ({c['file']})"])
    recorded = [r for r in records if "watermark_ms" in r]
    if recorded:
        ids = [r["batch_id"] for r in recorded]
        rows = sum(int(r.get("input_rows") or 0) for r in recorded)
        return result(False, "progress_log", [
            f"Spark's progress of the {len(recorded)} batch(es) read ({ids[0]}..{ids[-1]}, {rows} input rows) reports "
            f"no event-time watermark and no event time: it reports eventTime.watermark for every batch of a plan "
            f"with withWatermark (ProgressReporter)"])
    why = ["no progress-log record of the batches read carries Spark's eventTime" if records
           else "no progress-log record of the batches read (no progress log, or not this query's)"]
    if state is None:
        why.append("the state metadata was not read")
    elif not state.has_state_folder:
        why.append("the checkpoint has no state/ folder (a stateless query keeps no state metadata to tell by)")
    elif not any(op.name for op in state.operators):
        why.append("state/ holds no readable operator metadata (Spark writes it since 3.5)")
    else:
        names = ", ".join(f"{op.operator_id}: {op.name}" for op in state.operators if op.name)
        why.append(f"the state operators ({names}) keep no event-time column in their state schema: a query "
                   f"without withWatermark writes the same metadata as one whose watermark column is not a state key")
    return result(None, None, why)
