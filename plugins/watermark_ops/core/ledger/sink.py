"""The ledger's outputs: the late-row sink, one run's balance, and the run's quarantine check.

* :func:`write_late_rows`: the late rows to a sink folder of the ledger's own (never the checkpoint);
* :func:`reconcile_run`: what one DAG run's batches did with their rows: ``rows_in`` (Spark's input
  rows) = aggregated + late + set aside, every figure in rows (Spark's own
  ``numRowsDroppedByWatermark`` is kept apart and named for what it is: late partial aggregates);
* :func:`with_ledger_rows`: a run's progress report with its figures in rows, from the ledger;
* :func:`quarantine_check`: a run that sets aside most of its rows, or aggregates none of them, is a
  failed run: the check names the top reason and one example record (file, line);
* :func:`judge_run`: the run pattern's ``check_run``: the quarantine check, and a run whose late rows
  cannot be known (a batch not replayed) warned about, or failed with ``fail_on_unknown_late``.

Pure core: plain data in, plain data out.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

from watermark_ops.core.checkpoint import filesystem_for
from watermark_ops.core.ledger.corrections import read_corrections
from watermark_ops.core.ledger.model import LateLedger
from watermark_ops.core.ledger.recovered import recovery
from watermark_ops.core.ledger.replay import late_ledger
from watermark_ops.core.ledger.rule import LedgerError
from watermark_ops.core.ledger.unknown import problem_lines
from watermark_ops.core.progress import run_report

__all__ = ["DEFAULT_MAX_QUARANTINE_RATE", "balance_line", "judge_run", "quarantine_check", "reconcile_run",
           "unknown_late_warning", "with_ledger_rows", "write_late_rows"]

#: The share of a run's input rows that may be set aside before the run fails its check.
DEFAULT_MAX_QUARANTINE_RATE = 0.5


def write_late_rows(ledger: LateLedger, sink: Any, *, storage_options: dict[str, Any] | None = None,
                    filesystem: Any = None) -> list[str]:
    """Write the late rows to ``<sink>/batch=<N>.jsonl``, one JSON object per line (:meth:`LateRow.to_dict`).

    One file per replayed batch that read at least one landed file (an empty file when none of
    its rows was late), written atomically (a hidden ``.batch=<N>.jsonl.<uuid>.tmp`` in the same
    folder, then renamed over the old one) and idempotent: the content depends only on the
    checkpoint and the landed files, so a re-run rewrites the same bytes.

    :param sink: a folder (local path or fsspec URL), e.g. ``<output>_late``; never the checkpoint.
    :param filesystem: an fsspec filesystem to write with (``sink`` a path or URL on it);
        default: ``fsspec.core.url_to_fs(sink, **storage_options)``.
    :return: the files written, in batch order.
    :raises LedgerError: when ``sink`` lies inside the ledger's checkpoint.
    :raises OSError: when the sink cannot be written.
    """
    import fsspec

    if filesystem is not None:
        fs, folder = filesystem, filesystem._strip_protocol(os.fspath(sink))
    else:
        fs, folder = fsspec.core.url_to_fs(os.fspath(sink), **(storage_options or {}))
    folder = folder.rstrip("/")
    checkpoint = fs._strip_protocol(str(ledger.checkpoint)).rstrip("/")
    if folder == checkpoint or folder.startswith(checkpoint + "/"):
        raise LedgerError(f"{sink}: the late-rows sink must not be inside the checkpoint {ledger.checkpoint}")
    fs.makedirs(folder, exist_ok=True)
    written = []
    for batch in ledger.batches:
        if not batch.replayed or not batch.files:
            continue
        rows = sorted(batch.late_rows, key=lambda r: (r.source_file, r.line, r.event_time_ms))
        data = "".join(json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in rows).encode("utf-8")
        target = f"{folder}/batch={batch.batch_id}.jsonl"
        temp = f"{folder}/.batch={batch.batch_id}.jsonl.{uuid.uuid4().hex}.tmp"
        with fs.open(temp, "wb") as handle:
            handle.write(data)
        try:
            fs.mv(temp, target)
        except Exception:
            fs.rm(temp)
            raise
        written.append(fs.unstrip_protocol(target) if "://" in os.fspath(sink) else target)
    return written


def reconcile_run(checkpoint: str, run_tag: str, quarantine_checkpoint: str | None = None,
                  sink: str | None = None, *, filesystem: Any = None,
                  storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The late rows of one run (the DAG's run id as ``--run-tag``) and its balance.

    ``rows_in`` (Spark's input rows of the run's batches, progress log) must equal
    ``rows_aggregated`` (the ledger's rows that entered the watermark and were not late) +
    ``rows_late`` (the ledger) + ``rows_quarantined``: the job's quarantine query's count (its
    ``observed_metrics["quarantine"]``, ``watermark_ops.spark.quarantined``) where it reports one,
    else the ledger's own count of the rows the job set aside (the Spark replay of a job's own
    parsing). ``quarantine_source`` says which.

    When a batch of the run was not replayed (the ledger is not ``complete``: e.g. a job whose
    parsing is its own and that declares no pre-watermark function has no Spark replay records), the
    run's late rows are unknown: ``rows_late``, ``rows_aggregated``, ``drop_rate``,
    ``late_by_partition`` and ``worst_late_by_ms`` are None, never 0, ``late_rows_known`` is false
    and ``late_rows_unknown_reason`` says which batches and why.

    With an allowed lateness (the checkpoint's corrections log holds a correction,
    :mod:`watermark_ops.core.ledger.recovered`), the late rows split: ``rows_late`` =
    ``rows_late_recovered`` (a standing correction holds them) + ``rows_late_dropped`` (dropped for
    good), and ``corrections`` counts the run's corrections; without a corrections log the three are None.

    :param sink: when given, the late rows are written there (:func:`write_late_rows`).
    :param filesystem: / storage_options: how to reach the checkpoint, its logs and landed files.
    :return: ``{"run_tag", "batch_ids", "rows_in", "rows_aggregated", "rows_late", "window_drops" ((row,
        window) drops), "rows_late_partly" (late rows kept in some of their windows), "rows_quarantined",
        "quarantined_by_reason", "quarantine_source": "quarantine_query" | "ledger", "quarantine_rate",
        "set_aside_examples", "balanced": bool, "drop_rate" (rows late / rows in, None without a
        complete ledger), "late_partial_aggregates_spark" (Spark's numRowsDroppedByWatermark),
        "late_by_batch", "late_by_partition" (by the job's partition column), "worst_late_by_ms", "replayed_by",
        "ledger_rows_read", "ledger_quarantined", "complete", "late_rows_known" (= complete),
        "late_rows_unknown_reason": str | None, "batches_not_replayed": [id], "problems": [str] (a
        problem repeated per batch once, with its batch range), "not_replayable", "sink_files": [str],
        "rows_late_recovered": int | None, "rows_late_dropped": int | None, "corrections": int | None,
        "balance": str (:func:`balance_line`)}``.
    :raises OSError: when a progress log or the sink cannot be read or written.
    """
    report = run_report(checkpoint, run_tag, quarantine_checkpoint, filesystem=filesystem,
                        storage_options=storage_options)
    ledger = late_ledger(checkpoint, report["batch_ids"], filesystem=filesystem, storage_options=storage_options)
    totals = ledger.totals()
    known = totals["late_rows_known"]
    rows_in = report["input_rows"]
    if report["quarantined_by_reason"]:  # the job's quarantine query counts its rows (observed metrics)
        quarantined, by_reason, source = report["quarantined_rows"], report["quarantined_by_reason"], "quarantine_query"
    else:
        quarantined, by_reason, source = totals["rows_quarantined"], totals["quarantined_by_reason"], "ledger"
    corrections, bad = read_corrections(checkpoint, filesystem=filesystem, storage_options=storage_options)
    run = {
        "run_tag": run_tag,
        "batch_ids": report["batch_ids"],
        "rows_in": rows_in,
        "rows_aggregated": totals["rows_aggregated"],
        "rows_late": totals["rows_late"],
        "window_drops": totals["window_drops"],
        "rows_late_partly": totals["rows_late_partly"],
        "rows_quarantined": quarantined,
        "quarantined_by_reason": by_reason,
        "quarantine_source": source,
        "quarantine_rate": quarantined / rows_in if rows_in else None,
        "set_aside_examples": totals["set_aside_examples"],
        "balanced": known and rows_in == totals["rows_aggregated"] + totals["rows_late"] + quarantined,
        "drop_rate": totals["rows_late"] / rows_in if (rows_in and known) else None,
        "late_partial_aggregates_spark": report["late_partial_aggregates_spark"],
        "late_by_batch": totals["late_by_batch"],
        "late_by_partition": totals["late_by_partition"] if known else None,
        "worst_late_by_ms": max((r.late_by_ms for r in ledger.late_rows), default=None) if known else None,
        "replayed_by": sorted({b.replayed_by for b in ledger.batches if b.replayed_by and b.files}),
        "ledger_rows_read": totals["rows_read"],
        "ledger_quarantined": totals["rows_quarantined"],
        "complete": ledger.complete,
        "late_rows_known": known,
        "late_rows_unknown_reason": ledger.late_rows_unknown_reason,
        "batches_not_replayed": ledger.unreplayed_batch_ids,
        "problems": list(dict.fromkeys(problem_lines(ledger.problems) + report["progress_log_problems"])),
        "not_replayable": list(ledger.not_replayable),
        "sink_files": write_late_rows(ledger, sink, filesystem=filesystem_for(sink, filesystem),
                                      storage_options=storage_options) if sink else [],
        **recovery(ledger.late_rows if known else None, corrections, run_tag,
                   declared=_declares_allowed_lateness(checkpoint, report["batch_ids"], filesystem, storage_options)),
    }
    run["problems"] += bad
    run["balance"] = balance_line(run)
    return run


def balance_line(run: dict[str, Any]) -> str:
    """One run's balance in words, e.g. ``"948 = 890 aggregated + 48 late (30 recovered by 12
    corrections, 18 dropped for good) + 10 set aside: balanced"`` (the split only with an allowed
    lateness; ``unknown`` for late rows not known). With sliding windows a row can be dropped from
    some of its windows and kept in others: it counts as late, and the line adds ``[50 (row, window)
    drops; 4 of the rows kept in some of their windows]``.

    :param run: :func:`reconcile_run`'s result.
    """
    late = ("unknown" if run.get("rows_late") is None else str(run["rows_late"])) + " late"
    drops, partly = run.get("window_drops"), run.get("rows_late_partly")
    if drops is not None and (drops != run.get("rows_late") or partly):  # a sliding window's rows
        late += f" [{drops} (row, window) drops; {partly} of the rows kept in some of their windows]"
    if run.get("rows_late_recovered") is not None:
        count = run.get("corrections") or 0
        late += (f" ({run['rows_late_recovered']} recovered by {count} correction{'' if count == 1 else 's'}, "
                 f"{run['rows_late_dropped']} dropped for good)")
    aggregated = "unknown" if run.get("rows_aggregated") is None else str(run["rows_aggregated"])
    verdict = "balanced" if run.get("balanced") else "late rows unknown" if not run.get("late_rows_known", True) \
        else "NOT balanced"
    return (f"{run.get('rows_in')} = {aggregated} aggregated + {late} + {run.get('rows_quarantined')} "
            f"set aside: {verdict}")


def with_ledger_rows(report: dict[str, Any], ledger: LateLedger | None) -> dict[str, Any]:
    """A run's progress report (:func:`watermark_ops.core.progress.run_report`) with its figures in
    rows, from the late-row ledger of its batches (what the run pattern's ``collect_progress`` pushes).

    Adds ``rows_late`` and ``drop_rate`` (rows late / input rows), None unless the ledger replayed
    every batch (``complete``), with ``late_rows_known`` and ``late_rows_unknown_reason`` saying so
    (a run that ran no batch, ``ledger`` None, knows it dropped none: 0); Spark's count stays apart
    as ``late_partial_aggregates_spark``. When
    the job has no quarantine query of the package's (``quarantined_by_reason`` empty) and the ledger
    is complete, the rows it set aside are the ledger's, by the job's own reasons
    (``quarantine_source`` ``"ledger"``; else ``"quarantine_query"``, or None when neither counted),
    and so are each batch's ``quarantined_rows`` and ``quarantine_batches``: the per-batch figures
    always sum to the run's, from the same source.

    :return: ``report``, updated in place.
    """
    exact = ledger is not None and ledger.complete
    totals = ledger.totals() if exact else None
    if ledger is None and not report.get("batch_ids"):  # no batch ran: nothing was dropped
        report.update(rows_late=0, drop_rate=None, late_rows_known=True, late_rows_unknown_reason=None)
    else:
        report["rows_late"] = totals["rows_late"] if totals else None
        report["drop_rate"] = totals["rows_late"] / report["input_rows"] if totals and report["input_rows"] else None
        report["late_rows_known"] = exact
        report["late_rows_unknown_reason"] = (None if exact else ledger.late_rows_unknown_reason if ledger
                                              else "the late-row ledger was not read")
    if report.get("quarantined_by_reason"):
        report["quarantine_source"] = "quarantine_query"
    elif totals:
        report.update(quarantined_rows=totals["rows_quarantined"], quarantined_by_reason=totals["quarantined_by_reason"],
                      quarantine_source="ledger")
        per_batch = {b.batch_id: sum(b.rows_quarantined.values()) for b in ledger.batches}
        for batch in report.get("batches") or ():
            batch["quarantined_rows"] = per_batch.get(batch["batch_id"], 0)
        report["quarantine_batches"] = [{"batch_id": b, "quarantined_rows": rows} for b, rows in per_batch.items()]
    else:
        report["quarantine_source"] = None
    return report


def _declares_allowed_lateness(checkpoint: str, batch_ids: list[int], filesystem: Any,
                               storage_options: dict[str, Any] | None) -> bool:
    """Whether the launcher's replay records of ``batch_ids`` carry an allowed lateness."""
    from watermark_ops.core.ledger.replayed import read_replay_log

    if not batch_ids:
        return False
    records, _ = read_replay_log(checkpoint, filesystem=filesystem, storage_options=storage_options)
    return any((records.get(b) or {}).get("allowed_lateness_ms") for b in batch_ids)


def quarantine_check(run: dict[str, Any], max_quarantine_rate: float = DEFAULT_MAX_QUARANTINE_RATE) -> str | None:
    """Why a run failed its quarantine check, None when it passed.

    A run fails when it set aside more than ``max_quarantine_rate`` of its input rows, or read rows and
    aggregated none (every row set aside or late): bad input is kept aside, but a job that sets
    everything aside is broken, and nobody should learn it from an empty dashboard a week later.

    :param run: :func:`reconcile_run`'s result.
    :param max_quarantine_rate: the share (0..1) of input rows that may be set aside.
    :return: a message naming the counts, the top reason and one example record (file, line), or None.
    :raises ValueError: for a rate outside 0..1.
    """
    if not 0 <= max_quarantine_rate <= 1:
        raise ValueError(f"max_quarantine_rate must be a share between 0 and 1, got {max_quarantine_rate!r}")
    rows_in = run.get("rows_in") or 0
    if not rows_in:
        return None
    quarantined = run.get("rows_quarantined") or 0
    too_many = quarantined / rows_in > max_quarantine_rate
    none_aggregated = (run.get("rows_aggregated") or 0) == 0 and run.get("complete", True)
    if not (too_many or none_aggregated):
        return None
    by_reason = {k: v for k, v in (run.get("quarantined_by_reason") or {}).items() if v}
    why = (f"set aside {quarantined} of its {rows_in} input rows ({quarantined / rows_in:.1%}, more than the "
           f"{max_quarantine_rate:.0%} allowed)" if too_many
           else f"read {rows_in} rows and aggregated none ({quarantined} set aside, {run.get('rows_late') or 0} late)")
    message = f"run {run.get('run_tag')} {why}"
    if by_reason:
        top = max(by_reason, key=lambda reason: (by_reason[reason], reason))
        message += f"; top reason {top} ({by_reason[top]} rows)"
        examples = run.get("set_aside_examples") or {}
        example = examples.get(top) or next(iter(examples.values()), None)
        if example:
            line = f" line {example['line']}" if example.get("line") is not None else ""
            message += f"; e.g. {example.get('file')}{line}: {json.dumps(example.get('event'), default=str)[:300]}"
    return message


def unknown_late_warning(run: dict[str, Any]) -> str | None:
    """The warning for a run whose late rows cannot be known, None when they are known.

    :param run: :func:`reconcile_run`'s result (a result without ``late_rows_known`` follows ``complete``).
    :return: ``"run <tag>: late rows unknown: batches 3-5 not replayed: <why>"``, or None.
    """
    if run.get("late_rows_known", run.get("complete", True)):
        return None
    reason = run.get("late_rows_unknown_reason") or "the late-row ledger is not complete"
    return f"run {run.get('run_tag')}: late rows unknown: {reason}"


def judge_run(run: dict[str, Any], max_quarantine_rate: float = DEFAULT_MAX_QUARANTINE_RATE,
              fail_on_unknown_late: bool = False) -> dict[str, Any]:
    """The run pattern's ``check_run`` judgement of one run: its quarantine check
    (:func:`quarantine_check`) and whether its late rows are known.

    A run whose late rows cannot be known (a batch not replayed: :func:`unknown_late_warning`) is
    never green silently: it is a warning, and a failure with ``fail_on_unknown_late``.

    :param run: :func:`reconcile_run`'s result.
    :param max_quarantine_rate: the share (0..1) of input rows that may be set aside.
    :param fail_on_unknown_late: fail a run whose late rows are unknown (default: warn only).
    :return: ``{"rows_in", "rows_quarantined", "quarantine_rate", "max_quarantine_rate", "rows_late"
        (None when unknown), "late_rows_known": bool, "late_rows_unknown_reason": str | None,
        "fail_on_unknown_late", "warnings": [str], "failure": str | None}``: ``failure`` names why
        the run failed (the quarantine check's message, the unknown late rows, or both).
    :raises ValueError: for a rate outside 0..1.
    """
    failures = []
    problem = quarantine_check(run, max_quarantine_rate)
    if problem:
        failures.append(problem)
    unknown = unknown_late_warning(run)
    warnings = []
    if unknown:
        if fail_on_unknown_late:
            failures.append(f"{unknown} (fail_on_unknown_late=True)")
        else:
            warnings.append(f"{unknown} (not failed: fail_on_unknown_late=True fails such a run)")
    known = unknown is None
    return {
        "rows_in": run.get("rows_in"), "rows_quarantined": run.get("rows_quarantined"),
        "quarantine_rate": run.get("quarantine_rate"), "max_quarantine_rate": max_quarantine_rate,
        "rows_late": run.get("rows_late") if known else None, "late_rows_known": known,
        "late_rows_unknown_reason": None if known else (run.get("late_rows_unknown_reason")
                                                        or "the late-row ledger is not complete"),
        "fail_on_unknown_late": fail_on_unknown_late, "warnings": warnings,
        "failure": "; ".join(failures) or None,
    }
