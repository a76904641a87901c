"""The state summary every face shows beside the watermark, and what a remembered view keeps of it.

A :class:`StateSummary` is a checkpoint's state (:class:`~watermark_ops.core.state.reader.CheckpointState`)
as read at one head batch, trimmed to what the faces need (each operator's newest
:data:`KEPT_BATCHES` batches; no file listings, no confs): the audit, ``status``, the sensors, their
trigger, the monitor and the overview carry it in the checkpoint's remembered view
(:attr:`watermark_ops.core.view.View.state_store`, moved on by :func:`watermark_ops.core.advance.advance`)
and read the state again only when the checkpoint has new batches (:meth:`StateSummary.fresh_for`).
The state findings (:func:`watermark_ops.core.state.rules.state_findings`) are pure functions of it,
judged with the caller's thresholds at each look.

Two depths, by what a face can afford at every look:

* ``rows`` (the sensors, the trigger, the monitor): the operators' metadata and state schemas
  (a few small files per operator, :func:`~watermark_ops.core.state.metadata.state_metadata_on`)
  and the rows per batch of the progress log the look already reads: enough for
  ``state_unbounded`` and ``state_growing``. Only an operator whose rows the progress log does
  not give (a job without the recorder) has its partition folders listed and its rows counted
  from the files; the summary shows no chain, versions or bytes at this depth;
* ``full`` (the audit, ``status``, the overview): one listing per partition and store folder of
  every operator (the chain a restart replays, versions kept, bytes on disk).

At both depths the rows are counted from the files only for an operator whose rows the progress
log does not give, within :data:`VIEW_MAX_REPLAY_BYTES` of files read (else the operator says it
was not counted).

A checkpoint without ``state/`` whose head is committed is a stateless query: its summary is never
read again (a query that adds a stateful operator is refused by Spark on restart).

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable

import msgspec.structs

from watermark_ops.core.log_formats import ReadProblem
from watermark_ops.core.rules import Finding
from watermark_ops.core.state.model import CheckpointState, OperatorState, StateBatch
from watermark_ops.core.state.rules import state_options  # noqa: F401 (its old home)
from watermark_ops.core.thresholds import DEFAULT_STATE_THRESHOLDS, StateThresholds

__all__ = ["DEPTHS", "KEPT_BATCHES", "VIEW_MAX_REPLAY_BYTES", "StateSummary", "finding_document", "read_summary",
           "read_state_summary", "state_failures", "state_options", "state_outcome", "summary_after",
           "summary_of"]

#: The depths of a read, shallow first (see the module docstring).
DEPTHS = ("rows", "full")
#: Each operator's newest batches a summary keeps (rows per batch; ``state_growing`` looks at the
#: newest ``growing_batches`` of them): the window a view keeps, Spark's ``minBatchesToRetain``.
KEPT_BATCHES = 100
#: The most bytes of state files a look counts rows from (an operator without rows in the
#: progress log); more is listed, not counted. ``watermark-ops state`` reads up to 256 MiB.
VIEW_MAX_REPLAY_BYTES = 16 * 1024 * 1024
#: Missing files named per operator in a summary (the full list: ``watermark-ops state``).
_MISSING_KEPT = 20
#: What the state rows of a progress record are (the audit's light read keeps only these).
PROGRESS_FIELDS = ("executed", "state_operators", "state_rows", "state_rows_removed", "rows_dropped_by_watermark")


def finding_document(finding: Finding) -> dict[str, Any]:
    """A state finding as JSON: ``{"code", "rule", "severity", "batch_id", "file", "message"}``
    (``code`` = ``rule``, the name ``watermark-ops state --json`` uses)."""
    return {"code": finding.rule, **finding.to_dict()}


@dataclass(frozen=True)
class StateSummary:
    """A checkpoint's state as read at one head (module docstring).

    :ivar depth: ``rows`` | ``full`` (:data:`DEPTHS`).
    :ivar head_batch_id: the head batch id of the look that read it (None: no batch yet).
    :ivar head_committed: that head was committed (its state version written).
    :ivar state: the state, trimmed (each operator's newest :data:`KEPT_BATCHES` batches; no
        ``file_rows``, ``conf`` or chains).
    :ivar metadata: the state metadata that read used
        (:class:`~watermark_ops.core.state.metadata.StateMetadata`), kept in process only (not in
        :meth:`to_dict`): a later read at depth ``rows`` of the same query takes it instead of
        listing ``state/`` again (a query's operators change only with a restart Spark accepts, and
        a view is read again whole on a new query id).
    """

    depth: str
    head_batch_id: int | None
    head_committed: bool
    state: CheckpointState
    metadata: Any = field(default=None, compare=False, repr=False)

    def fresh_for(self, head_batch_id: int | None, committed: bool, depth: str) -> bool:
        """True when this summary answers a look at ``head_batch_id`` (committed or not) that wants
        ``depth``: read at that head and at least that deep, or a committed stateless query."""
        if DEPTHS.index(self.depth) < DEPTHS.index(depth):
            return False
        if not self.state.has_state_folder and self.head_committed and not self.state.problems:
            return True
        return self.head_batch_id == head_batch_id and self.head_committed == committed

    def findings(self, thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS) -> list[Finding]:
        """The state findings (:func:`~watermark_ops.core.state.rules.state_findings`) with ``thresholds``."""
        from watermark_ops.core.state.rules import state_findings

        return state_findings(self.state, thresholds)

    def document(self, thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS,
                 findings: Iterable[Finding] | None = None) -> dict[str, Any]:
        """The ``state_store`` key of the faces' JSON (audit, status, sensors' XCom, monitor alarm,
        overview row)::

            {"depth": "rows" | "full", "read_at_batch_id": int | null, "has_state_folder": bool,
             "operators": [{"operator_id", "name", "provider", "partitions", "stores",
                            "bounded_by_watermark": bool | null, "bound_reason", "rows": int | null
                            (held after batch "rows_batch_id"), "rows_batch_id", "rows_source":
                            "progress" | "files" | null, "count_note", "chain_length": int | null
                            (null at depth rows), "snapshot_version", "versions_kept",
                            "bytes_on_disk"}],
             "rows": int | null (every operator's rows now; null when one is unknown),
             "bounded": false (one operator no watermark bounds) | true (all bounded) | null,
             "chain_length": int | null (the longest), "findings": [finding_document]}
        """
        listed = self.depth == "full"
        operators = []
        for op in self.state.operators:
            newest = next((b for b in reversed(op.batches) if b.rows is not None), None)
            operators.append({
                "operator_id": op.operator_id, "name": op.name, "provider": op.provider,
                "partitions": op.partitions if listed else None, "stores": list(op.stores),
                "bounded_by_watermark": op.bounded_by_watermark, "bound_reason": op.bound_reason,
                "rows": newest.rows if newest else None, "rows_batch_id": newest.batch_id if newest else None,
                "rows_source": op.rows_source, "count_note": op.count_note,
                "chain_length": op.chain_length if listed else None,
                "snapshot_version": op.snapshot_version if listed else None,
                "versions_kept": op.versions_kept if listed else None,
                "bytes_on_disk": op.bytes_on_disk if listed else None,
            })
        rows = [o["rows"] for o in operators]
        bounds = [o["bounded_by_watermark"] for o in operators]
        chains = [o["chain_length"] for o in operators if o["chain_length"] is not None]
        found = self.findings(thresholds) if findings is None else list(findings)
        return {
            "depth": self.depth, "read_at_batch_id": self.head_batch_id, "has_state_folder": self.state.has_state_folder,
            "operators": operators,
            "rows": sum(rows) if rows and all(r is not None for r in rows) else None,
            "bounded": False if False in bounds else (True if bounds and all(bounds) else None),
            "chain_length": max(chains) if chains else None,
            "findings": [finding_document(f) for f in found],
        }

    def to_dict(self) -> dict[str, Any]:
        """What a view stores: ``{"depth", "head_batch_id", "head_committed", "state": CheckpointState.to_dict()}``."""
        return {"depth": self.depth, "head_batch_id": self.head_batch_id, "head_committed": self.head_committed,
                "state": self.state.to_dict()}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> StateSummary:
        """The inverse of :meth:`to_dict`.

        :raises KeyError: / TypeError: / ValueError: for another shape (a view that cannot be read
            is read again: :func:`watermark_ops.core.view.load_view`).
        """
        if value["depth"] not in DEPTHS:
            raise ValueError(f"state summary depth {value['depth']!r}: expected one of {DEPTHS}")
        return cls(depth=value["depth"], head_batch_id=value["head_batch_id"],
                   head_committed=bool(value["head_committed"]), state=_state_of_dict(value["state"]))


def summary_of(state: CheckpointState, depth: str, head_batch_id: int | None, committed: bool,
               metadata: Any = None) -> StateSummary:
    """``state`` as a summary (trimmed: see :class:`StateSummary`), read with ``metadata``."""
    operators = tuple(replace(op, batches=op.batches[-KEPT_BATCHES:], file_rows={}, chains=(),
                              missing_files=op.missing_files[:_MISSING_KEPT]) for op in state.operators)
    return StateSummary(depth=depth, head_batch_id=head_batch_id, head_committed=committed,
                        state=msgspec.structs.replace(state, operators=operators, conf={}),
                        metadata=metadata)


def read_summary(storage: Any, root: str, checkpoint: Any, records: Iterable[dict[str, Any]] | None, *, depth: str,
                 max_replay_bytes: int = VIEW_MAX_REPLAY_BYTES, metadata: Any = None) -> StateSummary:
    """Read the state of the checkpoint at ``root`` on ``storage`` (``core.storage``, the look's
    own: its requests are counted with the look's) to ``depth``.

    :param checkpoint: the offset and commit logs as read (the newest batches are enough: the
        committed head, its confs, each batch's watermark).
    :param records: the progress records of those batches (None or empty: rows from the files at
        depth ``full``, unknown at depth ``rows``).
    :param metadata: the state metadata an earlier read of the same query used (None: read it now).
    :raises ValueError: an unknown depth. Never raises for content: what cannot be read is a problem.
    """
    from watermark_ops.core.state.metadata import state_metadata_on
    from watermark_ops.core.state.model import stateless_state

    if depth not in DEPTHS:
        raise ValueError(f"depth must be one of {DEPTHS}, got {depth!r}")
    storage.forget(f"{root}/state")
    if metadata is None:
        metadata = state_metadata_on(storage, root)
    if not metadata.has_state_folder:  # a stateless query: the state files' readers are not needed
        state = stateless_state(storage.display(root), checkpoint, metadata)
    else:
        from watermark_ops.core.state.reader import state_of

        # a light read of the progress log has every asked field, absent ones as None
        kept = [{k: v for k, v in r.items() if v is not None} for r in (records or ())]
        state = state_of(storage, root, checkpoint, metadata, kept, max_replay_bytes=max_replay_bytes,
                         list_files=True if depth == "full" else None, count_files=None)
    head = checkpoint.head_batch_id
    return summary_of(state, depth, head, head is not None and checkpoint.in_flight_batch_id is None, metadata)


def summary_after(storage: Any, root: str, window: Any, previous: StateSummary | None,
                  records: Iterable[dict[str, Any]] | None, *, depth: str) -> StateSummary | None:
    """The state summary after a look at ``window`` (the logs as read now): ``previous`` when it
    still answers (:meth:`StateSummary.fresh_for`), else :func:`read_summary` now. A read that
    fails is a summary with that problem (an ``unreadable`` finding), read again at the next look:
    the state never hides the watermark. None while there is no batch."""
    head = window.head_batch_id
    committed = head is not None and window.in_flight_batch_id is None
    if previous is not None and previous.fresh_for(head, committed, depth):
        if previous.head_batch_id == head or previous.state.has_state_folder:
            return previous
        # a committed stateless query, not read again: what it said holds at this head too, as a read would say
        return replace(previous, head_batch_id=head, head_committed=committed)
    if head is None:
        return None
    try:
        known = (previous.metadata if previous is not None and depth == "rows" and previous.depth == "rows"
                 and not previous.state.problems else None)
        return read_summary(storage, root, window, records, depth=depth, metadata=known)
    except Exception as exc:  # noqa: BLE001 - reported as the state's problem, never the look's failure
        folder = storage.display(f"{root}/state")
        state = CheckpointState(location=window.location, has_state_folder=True, problems=(
            ReadProblem("unreadable", folder, f"cannot read the state: {exc!r}"),))
        return summary_of(state, depth, None, False)


def read_state_summary(location: Any, checkpoint: Any, records: Iterable[dict[str, Any]] | None = None, *,
                       depth: str = "full", filesystem: Any = None, storage_options: dict[str, Any] | None = None,
                       max_replay_bytes: int = VIEW_MAX_REPLAY_BYTES) -> StateSummary:
    """:func:`read_summary` of the checkpoint at ``location`` (local path, fsspec URL, a path on
    ``filesystem``, an ``ObjectStoragePath``): for a face that read the logs without a view
    (``watermark-ops status`` without ``--state``)."""
    from watermark_ops.core.storage import _resolve

    storage, root = _resolve(location, filesystem, storage_options)
    return read_summary(storage, root, checkpoint, records, depth=depth, max_replay_bytes=max_replay_bytes)


def state_failures(summary: StateSummary | None, fail_on: Iterable[str],
                   thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS) -> list[Finding]:
    """The findings of ``summary`` whose rule is in ``fail_on`` (what a sensor with ``fail_on_state``
    fails on, what the monitor alarms on); [] without a summary."""
    wanted = set(fail_on)
    if summary is None or not wanted:
        return []
    return [f for f in summary.findings(thresholds) if f.rule in wanted]


def state_outcome(check: Any, view: Any, fail_on: Iterable[str] = (),
                  thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS) -> tuple[Any, dict[str, Any] | None]:
    """What the sensors and their trigger do with the state after one evaluation
    (:func:`watermark_ops.core.checks.check_tail`): ``(check, document)`` where ``document`` is the
    view's state summary with its findings (:meth:`StateSummary.document`; None without one) and
    ``check`` the evaluation's own, or ``fail`` when a finding's rule is in ``fail_on`` and the
    evaluation was ``done`` or ``wait`` (a state no watermark evicts does not heal by waiting)."""
    summary = getattr(view, "state_store", None)
    if summary is None:
        return check, None
    found = summary.findings(thresholds)
    failures = [f for f in found if f.rule in set(fail_on)]
    if failures and check.outcome in ("done", "wait"):
        first = failures[0]
        check = replace(check, outcome="fail",
                        message=f"state store of {summary.state.location}: {first.rule}: {first.message}")
    return check, summary.document(thresholds, found)


# --------------------------------------------------------------------------------------------
# CheckpointState.to_dict, read back


def _problem(p: dict[str, Any]) -> ReadProblem:
    return ReadProblem(p["kind"], p["file"], p["message"], p.get("batch_id"))


def _operator_of_dict(o: dict[str, Any]) -> OperatorState:
    batches = tuple(StateBatch(b, rows, removed, dropped, wm) for b, rows, removed, dropped, wm in zip(
        o["batch_ids"], o["rows"], o["removed"], o["dropped_by_watermark"], o["watermark_ms"]))
    return OperatorState(
        operator_id=int(o["operator_id"]), name=o["name"], stores=tuple(o["stores"]), partitions=int(o["partitions"]),
        provider=o["provider"], changelog=bool(o["changelog"]), format_version=o["format_version"],
        bounded_by_watermark=o["bounded_by_watermark"], bound_reason=o["bound_reason"],
        watermark_columns=tuple(dict(c) for c in o["watermark_columns"]), batches=batches,
        rows_source=o["rows_source"], file_rows={int(k): v for k, v in o["file_rows"].items()},
        count_note=o["count_note"], target_version=o["target_version"], chain_length=int(o["chain_length"]),
        base_versions=tuple(o["base_versions"]), snapshot_version=o["snapshot_version"],
        versions_kept=int(o["versions_kept"]), oldest_version=o["oldest_version"], latest_version=o["latest_version"],
        bytes_on_disk=int(o["bytes_on_disk"]), files_on_disk=int(o["files_on_disk"]),
        missing_files=tuple(o["missing_files"]), problems=tuple(_problem(p) for p in o["problems"]), folder=o["folder"])


def _state_of_dict(s: dict[str, Any]) -> CheckpointState:
    return CheckpointState(location=s["location"], has_state_folder=bool(s["has_state_folder"]),
                           operators=tuple(_operator_of_dict(o) for o in s["operators"]),
                           committed_batch_id=s["committed_batch_id"], conf={},
                           min_batches_to_retain=int(s["min_batches_to_retain"]),
                           problems=tuple(_problem(p) for p in s["problems"]))
