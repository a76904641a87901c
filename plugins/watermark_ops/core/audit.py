"""Audit a checkpoint: prove that the event-time watermark never moved backwards.

:func:`run_audit` reads the checkpoint (:func:`watermark_ops.core.checkpoint.read_checkpoint`),
applies every rule of :mod:`watermark_ops.core.rules` against the head remembered by the previous
audit (:mod:`watermark_ops.core.memory`), remembers the new head and returns an
:class:`AuditReport` (plain data; :meth:`AuditReport.to_dict` is the ``--json`` shape).

Status: ``violation`` when any error finding other than ``unreadable`` exists, else
``unreadable`` when any ``unreadable`` finding exists, else ``ok``; exit codes 1, 2, 0.

The state store: :func:`run_audit` also reads the stateful operators' state (once per new head:
the summary is remembered in the view, :mod:`watermark_ops.core.state.summary`) and adds the
state findings (:mod:`watermark_ops.core.state.rules`) to the report's findings, with their
severities: ``state_unbounded``, ``state_growing``, ``state_never_compacted`` and
``state_files_accumulating`` are warnings (they say what will hurt, not that the watermark broke
its rule: never a ``violation``), a state file or folder that cannot be read is ``unreadable``
(an error, as any checkpoint file: status ``unreadable``). The report's ``state_store`` is the
summary (:meth:`~watermark_ops.core.state.summary.StateSummary.document`).

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import json
import time
from typing import Any

import msgspec

from watermark_ops.core.checkpoint import Checkpoint, collector_paused
from watermark_ops.core.memory import AuditMemory, RememberedHead
from watermark_ops.core.progress import ProgressLog
from watermark_ops.core.findings import batch_records, log_findings, log_rules, sort_findings, with_memory  # noqa: F401
from watermark_ops.core.rules import ERROR, BatchRecord, Finding, memory_rules, unreadable
from watermark_ops.core.thresholds import DEFAULT_STATE_THRESHOLDS, StateThresholds
from watermark_ops.core.times import iso_utc

__all__ = ["EXIT_CODES", "AuditReport", "audit_checkpoint", "log_findings", "run_audit", "sort_findings", "with_memory"]

EXIT_CODES = {"ok": 0, "violation": 1, "unreadable": 2}


class AuditReport(msgspec.Struct, frozen=True):
    """The result of one audit (see :meth:`to_dict` for the JSON shape).

    :ivar watermark_ms: the watermark the next batch starts from (epoch ms UTC), None if unknown.
    :ivar remembered: the head remembered by the previous audit, None if none.
    :ivar added_batch_ids: ids of the batches added since the remembered head (all when no memory):
        the batches of the runs since the previous audit.
    :ivar reads: what the audit read (:func:`run_audit`): ``{"mode": "full" | "incremental",
        "batch_files": files read, "requests": n, "new_batches": batches read above the remembered
        view, "batches_held": len(batches), "batches_in_logs": batches in the offset log,
        "lowest_batch_id": int | None}``; None for :func:`audit_checkpoint`.
    :ivar state_store: the state summary with its findings
        (:meth:`~watermark_ops.core.state.summary.StateSummary.document`), None when not read.
    """

    location: str
    query_id: str | None
    head_batch_id: int | None
    in_flight_batch_id: int | None
    watermark_ms: int | None
    batches: tuple[BatchRecord, ...]
    findings: tuple[Finding, ...]
    remembered: RememberedHead | None = None
    audited_at_ms: int = 0
    added_batch_ids: tuple[int, ...] = ()
    reads: dict[str, Any] | None = None
    state_store: dict[str, Any] | None = None

    @property
    def status(self) -> str:
        """``ok`` | ``violation`` | ``unreadable`` (see the module docstring)."""
        errors = [f for f in self.findings if f.severity == ERROR]
        if any(f.rule != "unreadable" for f in errors):
            return "violation"
        return "unreadable" if errors else "ok"

    @property
    def exit_code(self) -> int:
        """0 ok, 1 violation, 2 unreadable."""
        return EXIT_CODES[self.status]

    def by_severity(self, severity: str) -> list[Finding]:
        """The findings of one severity."""
        return [f for f in self.findings if f.severity == severity]

    def head(self) -> RememberedHead | None:
        """What to remember after this audit, None when the head or its watermark is unknown."""
        if self.head_batch_id is None or self.watermark_ms is None:
            return None
        return RememberedHead(self.query_id, self.head_batch_id, self.watermark_ms, self.audited_at_ms)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (documented in the README)::

            {"location": str, "status": "ok" | "violation" | "unreadable", "query_id": str | null,
             "watermark_ms": int | null, "watermark": ISO-8601 UTC | null,
             "head_batch_id": int | null, "in_flight_batch": int | null,
             "batches": [{"batch_id", "watermark_ms", "timestamp_ms", "next_watermark_ms", "committed"}],
             "findings": [{"rule", "severity", "batch_id", "file", "message"}],
             "remembered": {"query_id", "head_batch_id", "watermark_ms", "audited_at_ms"} | null,
             "added_batches": {"first": int, "last": int, "count": int} | null,
             "audited_at_ms": int, "reads": {...} | null, "state_store": {...} | null}

        ``batches`` are every batch read (a full audit), or the newest ones a remembered view
        holds (an incremental one: ``reads``). ``findings`` hold the state findings too;
        ``state_store`` is the state summary (the module docstring).
        """
        added = None
        if self.added_batch_ids:
            added = {"first": self.added_batch_ids[0], "last": self.added_batch_ids[-1],
                     "count": len(self.added_batch_ids)}
        return {
            "location": self.location,
            "status": self.status,
            "query_id": self.query_id,
            "watermark_ms": self.watermark_ms,
            "watermark": iso_utc(self.watermark_ms),
            "head_batch_id": self.head_batch_id,
            "in_flight_batch": self.in_flight_batch_id,
            "batches": [b.to_dict() for b in self.batches],
            "findings": [f.to_dict() for f in self.findings],
            "remembered": self.remembered.to_dict() if self.remembered else None,
            "added_batches": added,
            "audited_at_ms": self.audited_at_ms,
            "reads": self.reads,
            "state_store": self.state_store,
        }

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)


def audit_checkpoint(checkpoint: Checkpoint, remembered: RememberedHead | None = None,
                     now_ms: int | None = None, progress: ProgressLog | None = None) -> AuditReport:
    """Apply every rule to a checkpoint read by :func:`watermark_ops.core.checkpoint.read_checkpoint`.

    :param remembered: the head remembered by the previous audit of this checkpoint, or None.
    :param now_ms: the audit instant (epoch ms UTC), default now.
    :param progress: the job's progress log (:class:`watermark_ops.core.progress.ProgressLog`), or None.
    """
    records = batch_records(checkpoint)
    memory = memory_rules(records, remembered, query_id=checkpoint.query_id, head_batch_id=checkpoint.head_batch_id,
                          location=checkpoint.location)
    findings = sort_findings([*unreadable(checkpoint.problems), *memory, *log_rules(records, checkpoint, progress)])
    return _report(checkpoint, records, findings, remembered, now_ms)


def _report(checkpoint: Checkpoint, records: tuple[BatchRecord, ...], findings: tuple[Finding, ...],
            remembered: RememberedHead | None, now_ms: int | None, reads: dict[str, Any] | None = None,
            known: tuple[BatchRecord, ...] | None = None, state_store: dict[str, Any] | None = None) -> AuditReport:
    since = remembered.head_batch_id if remembered is not None and remembered.query_id == checkpoint.query_id else None
    added = tuple(r.batch_id for r in (known or records) if r.has_offsets and (since is None or r.batch_id > since))
    return AuditReport(
        location=checkpoint.location,
        query_id=checkpoint.query_id,
        head_batch_id=checkpoint.head_batch_id,
        in_flight_batch_id=checkpoint.in_flight_batch_id,
        watermark_ms=checkpoint.next_watermark_ms,
        batches=records,
        findings=findings,
        remembered=remembered,
        audited_at_ms=int(time.time() * 1000) if now_ms is None else now_ms,
        added_batch_ids=added,
        reads=reads,
        state_store=state_store,
    )


@collector_paused()  # the whole read and judgement: acyclic values only (see collector_paused)
def run_audit(location: Any, memory: AuditMemory | None = None, *, storage_options: dict[str, Any] | None = None,
              now_ms: int | None = None, filesystem: Any = None, full: bool = False, state_store: bool = True,
              state_thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS) -> AuditReport:
    """Audit the checkpoint against the head the previous audit remembered, then remember the new head.

    With a ``memory`` that holds a remembered view of this checkpoint
    (:mod:`watermark_ops.core.view`), only what changed since is read: ``metadata``, the new
    batches' files by name (no listing) and the progress log's new lines; the new batches are
    audited with the one before them and their findings added to the remembered ones, which are
    what a full audit of the same files gives (``reads["mode"]`` is ``incremental``; the report's
    ``batches`` are then the newest ones the view holds). Without a view (the first audit, an
    older memory that kept only the head, a view that started from a sensor's bounded read), with
    ``full=True``, or when the view no longer matches (a reset, a rewind, a gap), everything is
    read (``reads["mode"]`` is ``full``). The memory moves on after every audit that found a head,
    violations included: each finding about a change is reported once (by this audit), and the
    next audit compares with what this one saw.

    :param location: the checkpoint (see :func:`watermark_ops.core.checkpoint.read_checkpoint`).
    :param memory: a :class:`watermark_ops.core.memory.StateFileMemory`, an
        :class:`watermark_ops.airflow.memory.AssetStateStoreMemory`, or None (no memory rules;
        everything read).
    :param storage_options: / filesystem: how to reach the checkpoint and its progress log, as for
        :func:`~watermark_ops.core.checkpoint.read_checkpoint` (every file read at once, concurrently).
    :param full: read every file again, whatever the memory holds (``watermark-ops audit --full``).
    :param state_store: also read the stateful operators' state (depth ``full``: the chain a restart
        replays; the rows from the progress log, else the files) when the head moved since the view
        read it, and add the state findings judged with ``state_thresholds`` (module docstring).
    :raises watermark_ops.core.memory.MemoryFormatError: when the memory holds a malformed head
        (nothing is read from the checkpoint then, and nothing is written).
    """
    from watermark_ops.core.advance import advance
    from watermark_ops.core.view import WINDOW, load_view, save_view

    previous = load_view(memory, location) if memory is not None else None
    remembered = previous.remembered if previous is not None else None
    where = {"filesystem": filesystem, "storage_options": storage_options}
    newest = max(WINDOW, previous.newest if previous is not None else 0)
    where["state_store"] = "full" if state_store else None
    view = advance(location, previous, newest=newest, audit=True, state=False, full=full, **where)
    known = _known(view)
    if view.fresh is None and remembered is not None and remembered.query_id == view.query_id and known:
        lowest = view.window.lowest_offsets_batch_id
        if max(remembered.head_batch_id + 1, lowest if lowest is not None else 0) < known[0].batch_id:
            # Batches since the previous audit that the view no longer holds (sensors moved it
            # on by more than its window): the memory rules need them, read everything.
            view = advance(location, previous, newest=newest, audit=True, state=False, full=True, **where)
            known = _known(view)
    checkpoint = view.fresh or view.window
    records = batch_records(view.fresh) if view.fresh is not None else BatchRecord.from_batches(known)
    seen = BatchRecord.from_batches(previous.window.batches) if previous is not None else ()
    memory_findings = memory_rules(records, remembered, query_id=checkpoint.query_id,
                                   head_batch_id=checkpoint.head_batch_id, location=checkpoint.location, seen=seen)
    findings = with_memory(view.findings, memory_findings)
    summary, document = view.state_store if state_store else None, None
    if summary is not None:
        state_found = summary.findings(state_thresholds)
        findings = sort_findings([*findings, *state_found])
        document = summary.document(state_thresholds, state_found)
    shown = records if view.fresh is not None else BatchRecord.from_batches(view.window.batches)
    lowest = checkpoint.lowest_offsets_batch_id
    reads = dict(view.reads, batches_held=len(shown), new_batches=sum(1 for b in view.added if b.offsets_file),
                 batches_in_logs=len(shown) + (0 if view.fresh is not None else view.window.unread_batches),
                 lowest_batch_id=lowest)
    report = _report(checkpoint, shown, findings, remembered, now_ms, reads, known=records, state_store=document)
    head = report.head()
    if memory is not None and head is not None:
        save_view(memory, location, view.with_remembered(head.keeping_acceptance(remembered)), previous=previous)
    return report


def _known(view: Any) -> tuple[Any, ...]:
    """Every batch a look leaves in hand: the whole checkpoint after a full read, else the window
    and the batches read above the previous boundary (more than the window after a long pause)."""
    if view.fresh is not None:
        return view.fresh.batches
    by_id = {b.batch_id: b for b in view.added}
    by_id.update({b.batch_id: b for b in view.window.batches})
    return tuple(by_id[i] for i in sorted(by_id))
