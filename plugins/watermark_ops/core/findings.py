"""The audit's findings over a checkpoint already read: every rule that needs no memory, the
order every face shows them in, and a remembered view's audit moved on by new batches.

:func:`log_findings` applies the rules of :mod:`watermark_ops.core.rules` that judge the files
alone (read problems, the offset and commit logs, the progress log); :func:`with_memory` adds the
memory rules' findings in :func:`watermark_ops.core.audit.audit_checkpoint`'s order. A remembered
view keeps the former (:mod:`watermark_ops.core.advance` audits the new batches with them); the
audit adds the latter against the head it remembers.

Pure core: imports neither Airflow nor Spark; nothing here reads.
"""

from __future__ import annotations

from typing import Any, Iterable

from watermark_ops.core.checkpoint import Batch, Checkpoint
from watermark_ops.core.log_formats import ReadProblem
from watermark_ops.core.progress import ProgressLog
from watermark_ops.core.rules import (
    ERROR,
    INFO,
    WARNING,
    BatchRecord,
    Finding,
    batch_kinds,
    commit_offset_mismatch,
    commit_without_offsets,
    conf_changed,
    conf_requested_but_frozen,
    in_flight_batch,
    missing_batch,
    unreadable,
    uses_async_progress_tracking,
    watermark_regressed,
)
from watermark_ops.core.view import Audited

__all__ = ["audit_new", "batch_records", "depends_on_head", "log_findings", "log_rules", "sort_findings", "watermark_high",
           "with_memory"]

_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}


def sort_findings(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Errors first, then warnings, then info; within a severity by batch id (None first); equal
    keys keep their order (the rules' order: a stable sort)."""
    return tuple(sorted(findings, key=lambda f: (_ORDER[f.severity], -1 if f.batch_id is None else f.batch_id)))


def log_findings(checkpoint: Checkpoint, progress: ProgressLog | None = None, *,
                 highest: tuple[int, str] | None = None, conf_seen: Iterable[tuple[Any, str]] = (),
                 reported: dict[tuple[Any, str], int] | None = None) -> tuple[Finding, ...]:
    """Every rule that needs no memory, over a checkpoint already read: the read problems, then
    the rules of the offset and commit logs (and of the progress log, when given), sorted
    (:func:`sort_findings`). What a remembered view keeps (:mod:`watermark_ops.core.advance`).

    :param highest: / conf_seen: what the rules carry over from the batches before these (an
        audit of the new batches only): the highest watermark so far and where
        (:func:`watermark_high`), the (run, conf key) pairs already reported.
    :param reported: filled with the (run, conf key) pairs reported now, and their batch ids.
    """
    records = batch_records(checkpoint)
    return sort_findings([*unreadable(checkpoint.problems),
                          *log_rules(records, checkpoint, progress, highest=highest, conf_seen=conf_seen,
                                     reported=reported)])


def batch_records(checkpoint: Checkpoint) -> tuple[BatchRecord, ...]:
    """The rules' records of a checkpoint's batches (built once per checkpoint value: an audit of
    10,000 batches uses them for every rule and the report)."""
    records = checkpoint.__dict__.get("_batch_records")
    if records is None:
        records = BatchRecord.from_batches(checkpoint.batches)
        checkpoint.__dict__["_batch_records"] = records  # a memo beside the frozen fields, not one of them
    return records


def watermark_high(records: Iterable[BatchRecord], highest: tuple[int, str] | None = None) -> tuple[int, str] | None:
    """The highest value of the chain ``offsets[N].wm, commits[N].next, ...`` of ``records`` (from
    ``highest`` on) and where it was first seen (``"offsets/N"`` or ``"commits/N"``), as
    :func:`~watermark_ops.core.rules.watermark_regressed` names it."""
    for record in records:
        value = record.watermark_ms
        if value is not None and (highest is None or value > highest[0]):
            highest = (value, f"offsets/{record.batch_id}")
        value = record.next_watermark_ms
        if value is not None and (highest is None or value > highest[0]):
            highest = (value, f"commits/{record.batch_id}")
    return highest


def log_rules(records: tuple[BatchRecord, ...], checkpoint: Checkpoint, progress: ProgressLog | None, *,
              highest: tuple[int, str] | None = None, conf_seen: Iterable[tuple[Any, str]] = (),
              reported: dict[tuple[Any, str], int] | None = None) -> list[Finding]:
    """The rules of the logs (not the read problems, not the memory), in the audit's order."""
    location = checkpoint.location
    return [
        *watermark_regressed(records, highest),
        *commit_offset_mismatch(records),
        *commit_without_offsets(records),
        *missing_batch(records, location, checkpoint.has_commit_log,
                       lambda: uses_async_progress_tracking(records, progress.records if progress is not None else (),
                                                            checkpoint.query_id)),
        *conf_changed(records),
        *batch_kinds(records),
        *(conf_requested_but_frozen(records, progress.records, progress.location, checkpoint.query_id,
                                    seen=conf_seen, reported=reported)
          if progress is not None else []),
        *in_flight_batch(records, checkpoint.has_commit_log),
    ]


def with_memory(findings: Iterable[Finding], memory: Iterable[Finding]) -> tuple[Finding, ...]:
    """:func:`log_findings`' findings with the memory rules' (:func:`~watermark_ops.core.rules.memory_rules`),
    in :func:`audit_checkpoint`'s order: for equal keys, the read problems, then the memory rules,
    then the other rules."""
    findings = list(findings)
    return sort_findings([*(f for f in findings if f.rule == "unreadable"), *memory,
                          *(f for f in findings if f.rule != "unreadable")])


# --------------------------------------------------------------------------------------------
# A remembered view's audit, moved on


def depends_on_head(finding: Any) -> bool:
    """A finding whose words depend on the head or the lowest batch (a hole ``between offsets/<low>
    and offsets/<head>``, ``restart_impossible`` below the head, a commit below the lowest offsets):
    only a full read says them as a full audit would after new batches."""
    return (finding.rule in ("restart_impossible", "commit_without_offsets")
            or (finding.rule == "missing_batch" and "/offsets/" in (finding.file or "")))


def _purged(audited: Audited, lowest: int, window: Checkpoint, boundary: int | None,
            progress_file: str) -> tuple[list[Finding], tuple[int, str] | None] | None:
    """The final findings and the highest watermark once Spark purged every batch below
    ``lowest``: what a full audit of the files left would say; None when that needs them read."""
    def gone(f: Any) -> bool:
        if f.batch_id is None or f.batch_id > lowest:
            return False
        if f.batch_id < lowest:
            return True
        # at the lowest batch left: gone when it compared that batch with the one before it
        return f.rule == "commit_offset_mismatch" or (f.rule == "watermark_regressed"
                                                      and f"/offsets/{lowest}" in (f.file or ""))
    dropped = [f for f in audited.final if gone(f)]
    if any(f.rule == "conf_changed" and f.file == progress_file for f in dropped):
        return None  # a run's conf finding: its later records would name another first batch
    highest = audited.highest
    if highest is not None and int(highest[1].rsplit("/", 1)[1]) < lowest:
        held = window.batches[0].batch_id if window.batches else None
        if held is None or held > lowest:
            return None  # where the highest watermark was first seen among the files left: not held
        highest = watermark_high(BatchRecord.from_batch(b) for b in window.batches
                                 if boundary is not None and b.batch_id <= boundary)
    return [f for f in audited.final if not gone(f)], highest


def audit_new(audited: Audited, window: Checkpoint, above: list[Batch], problems: list[ReadProblem], *,
              batches: dict[int, Batch], purged_below: int | None, progress_path: str,
              records: Iterable[dict[str, Any]], boundary: int | None) -> Audited | None:
    """A remembered view's audit after a look that found new batches: they are audited together
    with the boundary batch before them (the rules carry over the highest watermark so far and the
    runs already reported) and their findings added to the final ones; what Spark purged is
    forgotten as a full audit of the files left forgets it.

    :param window: the view's new window; ``above``: the batches above the old boundary, as read
        now; ``problems``: their files' problems; ``batches``: every batch in hand, by id.
    :param purged_below: the lowest offsets id left when Spark purged since the last look, else None.
    :param records: the progress records in hand (those of the new batches are used).
    :return: the new :class:`~watermark_ops.core.view.Audited`, or None when only a full audit can
        say what changed (after a purge, rarely: :func:`_purged`).
    """
    from watermark_ops.core.rules import ASYNC_PROGRESS_TRACKING
    from watermark_ops.core.view import _boundary

    final, highest = list(audited.final), audited.highest
    if purged_below is not None:
        purged = _purged(audited, purged_below, window, boundary, progress_path)
        if purged is None:
            return None
        final, highest = purged
    ids = {b.batch_id for b in above}
    since = boundary + 1 if boundary is not None else 0
    new_records = [r for r in records if r["batch_id"] >= since]
    tracking = audited.async_tracking or any(_async_record(r) for r in new_records)
    marker = [{"batch_id": -1, "requested_conf": {ASYNC_PROGRESS_TRACKING: "true"}}] if tracking else []
    checked = Checkpoint(location=window.location, query_id=window.query_id,
                         batches=tuple(([audited.boundary_batch] if audited.boundary_batch is not None else []) + above),
                         problems=tuple(p for p in problems if p.batch_id in ids), has_commit_log=window.has_commit_log,
                         metadata_file=window.metadata_file)
    reported: dict[tuple[Any, str], int] = {}
    found = log_findings(checked, ProgressLog(location=progress_path, records=new_records + marker),
                         highest=highest, conf_seen=audited.conf_seen, reported=reported)
    added = [f for f in found if f.batch_id is None or boundary is None or f.batch_id > boundary]
    findings = sort_findings(final + added)
    new_boundary = _boundary(window) if window.batches else boundary
    if new_boundary is None or (boundary is not None and new_boundary < boundary):
        new_boundary = boundary
    boundary_batch = batches.get(new_boundary, audited.boundary_batch) if new_boundary is not None else None
    settled = [BatchRecord.from_batch(b) for b in above if new_boundary is not None and b.batch_id <= new_boundary]
    return Audited(boundary=new_boundary, boundary_batch=boundary_batch,
                   final=tuple(f for f in findings if f.batch_id is not None and new_boundary is not None
                               and f.batch_id <= new_boundary),
                   findings=findings, async_tracking=tracking, highest=watermark_high(settled, highest),
                   conf_seen=audited.conf_seen + tuple(pair for pair, batch in reported.items()
                                                       if new_boundary is not None and batch <= new_boundary))


def _async_record(record: Any) -> bool:
    from watermark_ops.core.rules import ASYNC_PROGRESS_TRACKING

    conf = record.get("requested_conf") if isinstance(record, dict) else None
    return isinstance(conf, dict) and str(conf.get(ASYNC_PROGRESS_TRACKING, "")).strip().lower() == "true"
