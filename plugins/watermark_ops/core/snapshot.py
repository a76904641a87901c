"""One read of a checkpoint: everything the rules judge, read first, in one value.

Reading and judging are apart: :func:`read_snapshot` reads the offset and commit logs and
``metadata`` (the newest batches, or all of them), the progress log (its end: the records of the
batches read; or whole), and the state operators' metadata when the classification needs it (the
watermark is 0: evidence of a watermark); :func:`view_snapshot` gives the same value from a
remembered view (:mod:`watermark_ops.core.view`) without reading anything. The audit rules
(:func:`watermark_ops.core.audit.log_findings`), the stall classification
(:func:`watermark_ops.core.classification.classify_snapshot`), the status
(:meth:`watermark_ops.core.status.CheckpointStatus.of`) and the overview row
(:mod:`watermark_ops.core.overview`) are pure functions of a :class:`Snapshot`.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from watermark_ops.core.checkpoint import Checkpoint, read_checkpoint
from watermark_ops.core.progress import TAIL_MAX_BYTES, ProgressLog, progress_log_path

if TYPE_CHECKING:
    from watermark_ops.core.state.metadata import StateMetadata
    from watermark_ops.core.view import View

__all__ = ["PROGRESS_READS", "Snapshot", "needs_state_metadata", "read_recent", "read_snapshot", "snapshot_of",
           "state_metadata_of", "view_snapshot"]

#: How much of the progress log a snapshot reads: ``tail`` (the records of the batches read, from
#: the end of the log), ``whole``, or None (not read).
PROGRESS_READS = ("tail", "whole", None)


@dataclass(frozen=True)
class Snapshot:
    """A checkpoint as read once.

    :ivar checkpoint: the offset and commit logs and ``metadata``
        (:class:`~watermark_ops.core.checkpoint.Checkpoint`: every batch, or the newest ones).
    :ivar records: the progress records the classification uses: of the batches read (from the
        oldest one read on), in the log's order; () without a progress log.
    :ivar problems: the progress log's (bad lines, a log that cannot be read, a tail cut at its
        byte bound) and the state metadata's problems, as messages naming the file.
    :ivar state_metadata: the state operators' metadata (read while the watermark is 0), or None.
    :ivar progress: the progress log as read (the whole log for a whole read: every run's records,
        what the audit's rules and the run table use), or None.
    :ivar progress_error: the progress log exists but could not be read (a message naming it), else None.
    """

    checkpoint: Checkpoint
    records: tuple[dict[str, Any], ...] = ()
    problems: tuple[str, ...] = ()
    state_metadata: StateMetadata | None = None
    progress: ProgressLog | None = None
    progress_error: str | None = None


def needs_state_metadata(checkpoint: Checkpoint) -> bool:
    """True when the watermark the next batch starts from is 0 (never set): only then does the
    classification look at the state operators' metadata (:func:`watermark_ops.core.evidence.watermark_evidence`)."""
    return checkpoint.next_watermark_ms == 0


def state_metadata_of(checkpoint: Checkpoint, location: Any = None,
                      storage_options: dict[str, Any] | None = None, *,
                      filesystem: Any = None) -> tuple[StateMetadata | None, list[str]]:
    """The state operators' metadata when :func:`needs_state_metadata`, else None; and its problems
    as messages (``"<kind>: <file>: <message>"``). Read from ``location`` (default the
    checkpoint's own location) with :func:`watermark_ops.core.state.metadata.read_state_metadata`."""
    if not needs_state_metadata(checkpoint):
        return None, []
    from watermark_ops.core.state.metadata import read_state_metadata

    try:
        state = read_state_metadata(checkpoint.location if location is None else location,
                                    filesystem=filesystem, storage_options=storage_options)
    except Exception as exc:  # noqa: BLE001 - evidence missing, not a failed classification
        return None, [f"state metadata of {checkpoint.location} cannot be read: {exc!r}"]
    return state, [f"{p.kind}: {p.file}: {p.message}" for p in state.problems]


def read_recent(location: Any, newest: int, *, at_ms: int | None = None, storage_options: dict[str, Any] | None = None,
                filesystem: Any = None) -> Checkpoint:
    """``read_checkpoint(location, newest=newest)``: two listings, ``metadata`` and at most
    ``2 * newest`` batch files, whatever the history. When ``at_ms`` is given and fewer than
    ``newest`` of the batches read are at or before it (an instant in the past), the read is
    widened until they are, or everything is read: classifying at a past instant gives what a
    read of the whole checkpoint gives for the batches before it.

    :raises ValueError: ``newest`` below 1.
    """
    checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options, newest=newest)
    while at_ms is not None and not checkpoint.complete:
        before = sum(1 for b in checkpoint.batches if b.timestamp_ms is not None and b.timestamp_ms <= at_ms)
        if before >= newest:
            break
        checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options,
                                     newest=len(checkpoint.batches) - before + newest)
    return checkpoint


def read_snapshot(location: Any, *, newest: int | None = None, at_ms: int | None = None, progress: str | None = "tail",
                  state: bool = True, filesystem: Any = None,
                  storage_options: dict[str, Any] | None = None) -> Snapshot:
    """Read a checkpoint once for the rules (see the module docstring).

    :param location: / filesystem: / storage_options: as for
        :func:`~watermark_ops.core.checkpoint.read_checkpoint`.
    :param newest: read the newest ``newest`` batches only (:func:`read_recent`, widened for a past
        ``at_ms``); None reads every file.
    :param progress: one of :data:`PROGRESS_READS` (the log beside the checkpoint,
        ``<checkpoint>.progress.jsonl``; a missing log is no problem).
    :param state: read the state operators' metadata when :func:`needs_state_metadata`.
    """
    if newest is None:
        checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options)
    else:
        checkpoint = read_recent(location, newest, at_ms=at_ms, filesystem=filesystem, storage_options=storage_options)
    return snapshot_of(checkpoint, location, progress=progress, state=state, filesystem=filesystem,
                       storage_options=storage_options)


def snapshot_of(checkpoint: Checkpoint, location: Any = None, *, progress: str | None = "tail",
                progress_log: str | None = None, state: bool = True, filesystem: Any = None,
                storage_options: dict[str, Any] | None = None) -> Snapshot:
    """The rest of a snapshot for a checkpoint already read: its progress log and, when needed,
    its state metadata (read from ``location``, default the checkpoint's own).

    :param progress_log: the log's location; default beside the checkpoint
        (:func:`watermark_ops.core.progress.progress_log_path` of ``checkpoint.location``).
    """
    from watermark_ops.core.progress import read_progress_log, read_progress_tail

    records: list[dict[str, Any]] = []
    problems: list[str] = []
    log = error = None
    path = progress_log or progress_log_path(checkpoint.location)
    if progress is not None and checkpoint.batches:  # without a batch the progress log adds nothing
        first = checkpoint.batches[0].batch_id
        try:
            if progress == "whole":
                log = read_progress_log(path, filesystem=filesystem, storage_options=storage_options)
                records = [r for r in log.records if r["batch_id"] >= first]
            else:
                log = read_progress_tail(path, first, query_id=checkpoint.query_id, filesystem=filesystem,
                                         storage_options=storage_options)
                records = log.records
            problems = list(log.problems)
            if not log.complete:
                problems.append(f"progress log {path}: read from byte {log.start_offset} on only (the last "
                                f"{TAIL_MAX_BYTES} bytes): records of the oldest batches read may be missing")
        except (OSError, ValueError, ImportError) as exc:
            error = f"progress log {path} cannot be read: {exc!r}"
            problems.append(error)
    metadata, state_problems = (None, [])
    if state:
        metadata, state_problems = state_metadata_of(checkpoint, location, storage_options, filesystem=filesystem)
    return Snapshot(checkpoint=checkpoint, records=tuple(records), problems=tuple(problems + state_problems),
                    state_metadata=metadata, progress=log, progress_error=error)


def view_snapshot(view: View, newest: int | None = None) -> Snapshot:
    """The snapshot a remembered view holds (nothing is read): its window (the newest ``newest``
    batches of it, default all), the progress records of those batches, and the state metadata."""
    from watermark_ops.core.view import _window

    window = view.window
    if newest is not None and newest < view.newest:
        window = _window(window, window.batches, newest, window.unread_batches, window.problems,
                         window.lowest_offsets_batch_id)
    position = view.progress
    first = window.batches[0].batch_id if window.batches else 0
    records = tuple(r for r in (position.records or ()) if r["batch_id"] >= first) if position is not None else ()
    problems = tuple(position.problems) if position is not None else ()
    metadata, state_problems = view.state if view.state is not None else (None, ())
    return Snapshot(checkpoint=window, records=records, problems=problems + tuple(state_problems),
                    state_metadata=metadata)
