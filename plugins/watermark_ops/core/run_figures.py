"""One run's figures, from one source: what the run pattern's ``collect_progress`` pushes.

The progress logs say what Spark saw (batches, watermarks, input rows, Spark's own count of late
partial aggregates); the late-row ledger (:func:`watermark_ops.core.ledger.late_ledger`) knows the
rows: late, and set aside by the job's own reasons when no quarantine query of the package counted
them. :func:`collect_run` reads the ledger of the run's batches once and makes every figure of the
report from it: the run's totals, each batch's, and the lateness report's run (``lateness.runs[]``),
so the per-batch figures sum to the run's and the nested ones equal the top level.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["collect_run"]


def collect_run(checkpoint: str, run_tag: str, quarantine_checkpoint: str | None = None,
                landings: Iterable[str] = (), *, lateness: bool = True, filesystem: Any = None,
                storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What one run (``run_tag``, the DAG's run id) of a checkpoint's query did, every figure from one read.

    :param checkpoint: the main query's checkpoint (local path or fsspec URL).
    :param run_tag: the run's tag in the progress log.
    :param quarantine_checkpoint: the quarantine query's checkpoint (default ``<checkpoint>_quarantine``).
    :param landings: the landing folders, for the delay-threshold advice.
    :param lateness: add ``lateness``: :meth:`watermark_ops.core.lateness.LatenessReport.to_dict`
        of the checkpoint, its runs' rows from the same ledger (the other runs' late rows are not
        read: unknown, saying so).
    :param filesystem: / storage_options: how to reach the checkpoint and its logs.
    :return: :func:`watermark_ops.core.progress.run_report` completed by
        :func:`watermark_ops.core.ledger.with_ledger_rows` (rows, counts of rows; ``drop_rate`` a
        fraction 0..1; instants epoch ms UTC), plus ``lateness`` when asked.
    :raises watermark_ops.core.lateness.LatenessError: as :func:`~watermark_ops.core.lateness.lateness_report`.
    """
    from watermark_ops.core.ledger import late_ledger, with_ledger_rows
    from watermark_ops.core.progress import run_report

    where = {"filesystem": filesystem, "storage_options": storage_options}
    report = run_report(checkpoint, run_tag, quarantine_checkpoint, **where)
    ledger = late_ledger(checkpoint, report["batch_ids"], **where) if report["batch_ids"] else None
    with_ledger_rows(report, ledger)  # rows, from the ledger: Spark's count is of late partial aggregates
    if lateness:
        from watermark_ops.core.lateness import lateness_report

        from watermark_ops.core.ledger.model import LateLedger

        read = ledger if ledger is not None else LateLedger(str(checkpoint), None, ())  # no batch ran: none late
        report["lateness"] = lateness_report(checkpoint, list(landings), ledger=read, **where).to_dict()
    return report
