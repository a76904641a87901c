"""What the watermark dropped, per run of a query: Spark's count from the progress log, and the
late-row ledger's rows beside it.

A run is one start of the query (Spark's ``run_id``, new at each restart). Spark's
``numRowsDroppedByWatermark`` (the progress log's ``rows_dropped_by_watermark``, written by
``watermark_ops.spark.recorder``) is counted at each stateful operator's input: for an aggregation
that input is partially aggregated, so it counts late *partial aggregates*, not rows; it is kept
as ``late_partial_aggregates_spark``. The rows late and the drop rate come from the late-row
ledger (:func:`watermark_ops.core.ledger.late_ledger`), only where it replayed every batch of the run.

Pure core; :mod:`watermark_ops.core.lateness` re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

__all__ = ["RunDrops", "drops_per_run", "with_rows_late"]


@dataclass(frozen=True)
class RunDrops:
    """What the watermark dropped during one run of a query.

    :ivar query_id: the query's id (the checkpoint's ``metadata``).
    :ivar run_id: Spark's run id, new at every (re)start of the query.
    :ivar run_tag: the tag the job was started with (the Airflow run id), or None.
    :ivar batch_ids: the micro-batches the run executed, ascending.
    :ivar started_ms: timestamp of the run's first progress record (epoch ms UTC), or None.
    :ivar input_rows: rows read by the run, all sources together.
    :ivar late_partial_aggregates_spark: Spark's ``numRowsDroppedByWatermark`` summed over the run's
        batches and stateful operators (the progress log's ``rows_dropped_by_watermark``): late
        partial aggregates for an aggregation, raw rows for deduplication and stream-stream joins.
    :ivar late_watermark: which watermark the run's batches filtered late rows with:
        ``"previous"`` (the previous batch's), ``"current"`` (each batch's own), ``"mixed"``, or
        None when no record of the run has a ``late_rule`` (a query without a watermark).
    :ivar late_watermark_assumed: True when a record named neither ``spark_version`` nor
        ``allowMultiple`` and Spark >= 3.4's default was assumed for it.
    :ivar rows_late: the rows the late-row ledger found late in the run's batches, None (unknown,
        never 0) unless every batch of the run was replayed (:func:`with_rows_late`); 0 for a run
        that executed no batch.
    :ivar late_rows_unknown_reason: why :attr:`rows_late` is unknown (the batches not replayed and
        why), None when it is known or the ledger was not read.
    """

    query_id: str | None
    run_id: str
    run_tag: str | None
    batch_ids: tuple[int, ...]
    started_ms: int | None
    input_rows: int
    late_partial_aggregates_spark: int
    late_watermark: str | None = None
    late_watermark_assumed: bool = False
    rows_late: int | None = None
    late_rows_unknown_reason: str | None = None

    @property
    def drop_rate(self) -> float | None:
        """``rows_late / input_rows`` (0..1): rows, from the ledger; None without a ledger of every
        batch of the run, or for a run that read nothing."""
        return self.rows_late / self.input_rows if self.rows_late is not None and self.input_rows else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field plus ``drop_rate`` and ``late_rows_known`` (``rows_late`` is not None)."""
        known = self.rows_late is not None
        return {
            "query_id": self.query_id, "run_id": self.run_id, "run_tag": self.run_tag,
            "batch_ids": list(self.batch_ids), "started_ms": self.started_ms,
            "input_rows": self.input_rows, "rows_late": self.rows_late, "drop_rate": self.drop_rate,
            "late_rows_known": known,
            "late_rows_unknown_reason": None if known else (self.late_rows_unknown_reason
                                                            or "the late-row ledger was not read"),
            "late_partial_aggregates_spark": self.late_partial_aggregates_spark,
            "late_watermark": self.late_watermark, "late_watermark_assumed": self.late_watermark_assumed,
        }


def with_rows_late(runs: Iterable[RunDrops], rows_late_by_batch: dict[int, int],
                   reason_of: Callable[[list[int]], str | None] | None = None) -> list[RunDrops]:
    """The runs with :attr:`RunDrops.rows_late` set from the ledger's rows late per batch id (the
    batches it replayed): the sum over a run's batches when the ledger holds every one of them
    (0 for a run that executed no batch), else None, unknown (a part of the run's rows is not a
    run's figure), with :attr:`RunDrops.late_rows_unknown_reason` from ``reason_of(batch ids not
    replayed)`` (default: those batches named)."""
    from watermark_ops.core.ledger.unknown import batches_text

    out = []
    for run in runs:
        missing = [b for b in run.batch_ids if b not in rows_late_by_batch]
        if not missing:
            out.append(replace(run, rows_late=sum(rows_late_by_batch[b] for b in run.batch_ids),
                               late_rows_unknown_reason=None))
            continue
        why = (reason_of(missing) if reason_of else None) or f"{batches_text(missing)} not replayed"
        out.append(replace(run, rows_late=None, late_rows_unknown_reason=why))
    return out


def drops_per_run(records: Iterable[dict[str, Any]]) -> list[RunDrops]:
    """Group progress-log records (shape in ``watermark_ops.spark.recorder``) by run.

    :param records: progress-log records of one checkpoint, any order.
    :return: one :class:`RunDrops` per ``(query_id, run_id)``, in the order the runs started
        (first ``timestamp_ms``). Records of triggers that ran no batch (``executed`` false)
        count no rows and add no batch id. A record whose ``allowMultiple`` value is corrupt
        adds nothing to ``late_watermark`` (the ledger names it).
    """
    from watermark_ops.core.ledger.rule import LedgerError, late_watermark_rule

    runs: dict[tuple[Any, Any], dict[str, Any]] = {}
    for record in records:
        key = (record.get("query_id"), record.get("run_id"))
        run = runs.setdefault(key, {"run_tag": record.get("run_tag"), "batch_ids": set(), "started_ms": None,
                                    "input_rows": 0, "dropped": 0, "bases": set(), "assumed": False})
        stamp = record.get("timestamp_ms")
        if stamp is not None and (run["started_ms"] is None or stamp < run["started_ms"]):
            run["started_ms"] = stamp
        if record.get("executed", True) is False:
            continue
        run["batch_ids"].add(int(record["batch_id"]))
        run["input_rows"] += int(record.get("input_rows") or 0)
        run["dropped"] += int(record.get("rows_dropped_by_watermark") or 0)
        if record.get("late_rule") is not None:
            try:
                which = late_watermark_rule(record)
            except LedgerError:
                continue
            run["bases"].add(which.basis)
            run["assumed"] = run["assumed"] or which.assumed
    result = [
        RunDrops(query_id=q, run_id=str(r), run_tag=run["run_tag"], batch_ids=tuple(sorted(run["batch_ids"])),
                 started_ms=run["started_ms"], input_rows=run["input_rows"],
                 late_partial_aggregates_spark=run["dropped"],
                 late_watermark=(None if not run["bases"] else next(iter(run["bases"])) if len(run["bases"]) == 1
                                 else "mixed"),
                 late_watermark_assumed=run["assumed"])
        for (q, r), run in runs.items()
    ]
    return sorted(result, key=lambda run: (run.started_ms is None, run.started_ms or 0))
