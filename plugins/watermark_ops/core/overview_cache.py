"""Overview rows that read only what changed since the last view, shared by concurrent viewers.

The overview at a platform's scale (hundreds of checkpoints, each viewed every few seconds by
several people) cannot read every checkpoint whole at each view. This module remembers, per
checkpoint (keyed by its location; a change of query id, a rewind or a gap starts over):

* the newest batch already audited for good (the *boundary*: the committed head, or the batch
  below an in-flight head), its files (the rules compare it with the next batch), and the
  findings about the batches up to it, which no later file can change;
* the newest batches (a window of :func:`watermark_ops.core.stall.recent_batches` ids, what a
  sensor poke reads), the progress-log records of those batches and the state operators'
  metadata when the watermark is 0: what the stall classification needs, re-classified at each
  evaluation instant without reading anything.

At the next view (:func:`advance`) it reads ``metadata`` (the query id) and probes
``offsets/<head+1>`` by name: with no new batch that is two GETs and no batch file, whatever
the history, and a check that ``offsets/<head>`` still exists (a stat, or one HEAD request). New batches are read by name (offsets and commits, in growing rounds) and audited
together with the boundary batch; their findings are added to the remembered ones. A first view,
a changed query id (the checkpoint was replaced), a head whose files went away (rewind) or a
missing checkpoint reads the whole checkpoint (as :func:`watermark_ops.core.overview.overview_row`).

:class:`SharedOverview` evaluates every known checkpoint once per refresh, concurrently with a
bound, for every viewer at once (single flight: a viewer arriving while a refresh runs waits for
it instead of starting another), serves that evaluation to the views within ``max_age`` seconds,
and then, up to ``max_stale``, serves it at once while one refresh runs in the background. Its
rows are the same for everyone; a face filters them per user afterwards.

Pure core: imports neither Airflow nor Spark; times are epoch milliseconds UTC.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Hashable, Iterable, Sequence

from watermark_ops.core.audit import AuditReport, audit_checkpoint
from watermark_ops.core.checkpoint import Batch, Checkpoint, _parse, open_storage, read_checkpoint
from watermark_ops.core.log_formats import LogFileError, ReadProblem, parse_commit, parse_metadata, parse_offsets
from watermark_ops.core.progress import ProgressLog, progress_log_path, read_progress_log, read_progress_tail
from watermark_ops.core.rules import ERROR, INFO, WARNING, Finding
from watermark_ops.core.thresholds import Thresholds
from watermark_ops.core.times import now_ms

__all__ = ["MAX_CONCURRENT_ROWS", "STALE_FACTOR", "Evaluation", "Job", "RowMemory", "SharedOverview", "advance",
           "row_of"]

#: Checkpoints evaluated at once by :class:`SharedOverview` (threads; each one's reads are
#: themselves concurrent on an async filesystem, bounded by the core's reader).
MAX_CONCURRENT_ROWS = 16
#: The first probe round reads ``offsets/<head+1>`` alone; then rounds of this many ids and more.
_FIRST_ROUND = 8
_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}
#: An evaluation older than ``max_age`` is still served, while a background refresh runs, until
#: it is this many times ``max_age`` old (:class:`SharedOverview`).
STALE_FACTOR = 6
#: The progress-log problems a memory keeps (the newest).
_PROBLEMS_KEPT = 50


@dataclass(frozen=True)
class RowMemory:
    """What one checkpoint's previous evaluation remembers (see the module docstring).

    :ivar location: the location as given (the memory is only used again for the same one).
    :ivar query_id: ``metadata``'s query id when it was read (None: none or unreadable).
    :ivar newest: the window size (batch ids) kept for the classification.
    :ivar boundary: the newest batch id whose findings are final (None: none yet).
    :ivar boundary_batch: that batch's files (the rules compare it with the next batch).
    :ivar final: the findings about batch ids up to ``boundary``.
    :ivar findings: every finding of the last evaluation (``final`` + the newer batches' + those
        about the whole checkpoint), what the row shows.
    :ivar window: the newest ``newest`` batches as a :class:`Checkpoint` (``unread_batches``
        counts the older ones).
    :ivar progress: the progress-log records of the window's batches, and the log's problems.
    :ivar progress_found: False when the log was missing at the last read (a job of another tool).
    :ivar async_tracking: a progress record asked for async progress tracking (kept for the rules).
    :ivar state_metadata: the state operators' metadata and its problems, read while the
        watermark is 0 (None otherwise).
    :ivar reads: what the last :func:`advance` read: ``{"mode": "full" | "incremental",
        "batch_files": n, "requests": n}`` (``requests``: files and folders asked for).
    """

    location: str
    query_id: str | None
    newest: int
    boundary: int | None
    boundary_batch: Batch | None
    final: tuple[Finding, ...]
    findings: tuple[Finding, ...]
    window: Checkpoint
    progress: ProgressLog
    progress_found: bool = True
    async_tracking: dict[str, Any] | None = None
    state_metadata: tuple[Any, tuple[str, ...]] | None = None
    reads: dict[str, Any] = field(default_factory=dict)

    @property
    def head_batch_id(self) -> int | None:
        """The head batch id of the last read."""
        return self.window.head_batch_id


def _sorted(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    return tuple(sorted(findings, key=lambda f: (_ORDER[f.severity], -1 if f.batch_id is None else f.batch_id)))


def _boundary(checkpoint: Checkpoint) -> int | None:
    """The newest batch id whose files are final: the committed head, else the highest id below an
    in-flight head (None when there is none)."""
    head = checkpoint.head_batch_id
    if head is None:
        return None
    if checkpoint.in_flight_batch_id is None:
        return head
    below = [b.batch_id for b in checkpoint.batches if b.batch_id < head]
    return max(below) if below else None


def _forget(filesystem: Any, path: str) -> None:
    """Drop ``path`` (and its folders) from the filesystem's listing cache: s3fs sizes a file it
    opens from a cached listing, and would read a grown progress log only up to its old size."""
    if filesystem is not None and hasattr(filesystem, "invalidate_cache"):
        filesystem.invalidate_cache(filesystem._strip_protocol(path))


def _progress_tail(path: str, since: int, query_id: str | None, filesystem: Any) -> ProgressLog:
    """The progress log's records of batch ids ``>= since`` (its end only), fresh."""
    _forget(filesystem, path)
    return read_progress_tail(path, since, query_id=query_id, filesystem=filesystem)


def _progress_whole(path: str, filesystem: Any) -> ProgressLog:
    """The whole progress log, fresh."""
    _forget(filesystem, path)
    return read_progress_log(path, filesystem=filesystem)


def _exists(path: str, filesystem: Any) -> bool:
    """Whether ``path`` exists (a stat or HEAD request: nothing is read)."""
    import os

    if filesystem is None and "://" not in path:
        return os.path.exists(path)
    if filesystem is None:
        storage, path = open_storage(path)
        filesystem = storage.fs
    return filesystem.exists(path)


def _fresh_reader(storage: Any) -> Callable[[list[str]], Callable[[str], Any]]:
    """``paths -> content(path)`` as ``storage.read``, but never answered from a filesystem's
    listing cache: s3fs keeps listings with no expiry and answers "missing" for an object created
    after the listing (or sizes it by a stale entry). The checkpoint's folders are forgotten from
    the cache first, and s3fs reads each object with one plain GET (no size lookup)."""
    fs = getattr(storage, "fs", None)
    if fs is None:
        return storage.read
    import inspect

    try:
        plain = "max_concurrency" in inspect.signature(fs._cat_file).parameters
    except (AttributeError, TypeError, ValueError):
        plain = False

    def read(paths: list[str]):
        contents = fs.cat(paths, on_error="return", **({"max_concurrency": 1} if plain else {})) if paths else {}

        def content(path: str) -> Any:
            value = contents.get(path)
            if value is None:
                value = contents.get(fs._strip_protocol(path), FileNotFoundError(path))
            return value

        return content

    return read


def _forget_listings(storage: Any, root: str) -> None:
    """Drop ``root`` and its log folders from the filesystem's listing cache (s3fs), if it has one."""
    fs = getattr(storage, "fs", None)
    if fs is not None and hasattr(fs, "invalidate_cache"):
        for folder in (root, f"{root}/offsets", f"{root}/commits"):
            fs.invalidate_cache(folder)


def _async_marker(records: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    from watermark_ops.core.rules import ASYNC_PROGRESS_TRACKING

    for record in records:
        conf = record.get("requested_conf") if isinstance(record, dict) else None
        if isinstance(conf, dict) and str(conf.get(ASYNC_PROGRESS_TRACKING, "")).strip().lower() == "true":
            return {"batch_id": -1, "query_id": record.get("query_id"),
                    "requested_conf": {ASYNC_PROGRESS_TRACKING: "true"}}
    return None


def _state_metadata(window: Checkpoint, filesystem: Any) -> tuple[Any, tuple[str, ...]] | None:
    from watermark_ops.core.stall import needs_state_metadata, state_metadata_of

    if not window.batches or not needs_state_metadata(window):
        return None
    if filesystem is not None:
        from watermark_ops.core.checkpoint import read_state_metadata

        try:
            state = read_state_metadata(window.location, filesystem=filesystem)
        except Exception as exc:  # noqa: BLE001 - evidence missing, not a failed classification
            return None, (f"state metadata of {window.location} cannot be read: {exc!r}",)
        return state, tuple(f"{p.kind}: {p.file}: {p.message}" for p in state.problems)
    state, problems = state_metadata_of(window)
    return state, tuple(problems)


def _window(checkpoint: Checkpoint, batches: Sequence[Batch], newest: int, older: int,
            problems: Sequence[ReadProblem]) -> Checkpoint:
    """The newest ``newest`` offsets ids of ``batches`` (and the commit-only ids among them)."""
    ids = sorted(b.batch_id for b in batches if b.offsets_file is not None)
    keep_from = ids[-newest] if len(ids) > newest else (ids[0] if ids else None)
    kept = tuple(b for b in batches if keep_from is None or b.batch_id >= keep_from)
    dropped = sum(1 for i in ids if keep_from is not None and i < keep_from)
    kept_ids = {b.batch_id for b in kept}
    kept_problems = tuple(p for p in problems if p.batch_id is None or p.batch_id in kept_ids)
    return Checkpoint(location=checkpoint.location, query_id=checkpoint.query_id, batches=kept,
                      problems=kept_problems, has_commit_log=checkpoint.has_commit_log,
                      metadata_file=checkpoint.metadata_file, newest=newest, unread_batches=older + dropped,
                      lowest_offsets_batch_id=checkpoint.lowest_offsets_batch_id)


def _full(location: str, newest: int, filesystem: Any, storage_options: dict[str, Any] | None) -> RowMemory:
    """Read everything (a first view, or the memory no longer matches) and audit it whole."""
    if filesystem is not None:
        _forget_listings(*open_storage(location, filesystem=filesystem))
    checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options)
    path = progress_log_path(checkpoint.location if filesystem is None else location)
    problems: list[str] = []
    found = True
    progress: ProgressLog | None
    try:
        progress = _progress_whole(path, filesystem) if checkpoint.batches else None
    except FileNotFoundError:
        progress, found = None, False
    except (OSError, ValueError, ImportError) as exc:
        progress = None
        problems.append(f"progress log {path} cannot be read: {exc!r}")
    if progress is not None and not progress.records and not progress.problems and not _exists(path, filesystem):
        found = False
    report = audit_checkpoint(checkpoint, None, progress=progress)
    window = _window(checkpoint, checkpoint.batches, newest, 0, checkpoint.problems)
    boundary = _boundary(checkpoint)
    first = window.batches[0].batch_id if window.batches else 0
    records = [r for r in (progress.records if progress else []) if r["batch_id"] >= first
               and (checkpoint.query_id is None or r.get("query_id") in (None, checkpoint.query_id))]
    kept = ProgressLog(location=path, records=records, problems=list(progress.problems if progress else []) + problems)
    return RowMemory(
        location=location, query_id=checkpoint.query_id, newest=newest, boundary=boundary,
        boundary_batch=checkpoint.batch(boundary) if boundary is not None else None,
        final=tuple(f for f in report.findings if f.batch_id is not None and boundary is not None
                    and f.batch_id <= boundary),
        findings=report.findings, window=window, progress=kept, progress_found=found,
        async_tracking=_async_marker(progress.records) if progress else None,
        state_metadata=_state_metadata(window, filesystem),
        reads={"mode": "full", "batch_files": sum(int(b.offsets_file is not None) + int(b.committed)
                                                 for b in checkpoint.batches)},
    )


def _follow(memory: RowMemory, filesystem: Any, storage_options: dict[str, Any] | None
            ) -> tuple[str | None, list[Batch], list[ReadProblem], int] | None:
    """Read ``metadata`` and what came after the remembered head, by name (no listing).

    One concurrent round: ``metadata``, ``offsets/<head+1>`` and, for an in-flight head, its
    ``commits/<head>``; then that the head's ``offsets/<head>`` still exists (a stat or HEAD: its
    content is remembered, not read again). Then new batches in growing rounds (offsets and
    commits) until an offsets file is missing.

    :return: ``(query id, the batches above the boundary, ascending (the in-flight head again,
        with its commit if it landed; then the new ones), their problems, requests made)``, or
        None when the memory no longer matches (the query id changed or ``metadata`` went away,
        the in-flight head's offsets file is gone): the caller reads everything.
    """
    storage, root = open_storage(memory.location, filesystem=filesystem, storage_options=storage_options)
    display = storage.display
    window = memory.window
    head = window.head_batch_id
    boundary = memory.boundary
    pending = [b for b in window.batches if boundary is None or b.batch_id > boundary]  # the in-flight head
    metadata = f"{root}/metadata"
    next_id = (head + 1) if head is not None else 0
    first = [metadata, f"{root}/offsets/{next_id}"]
    first += [f"{root}/commits/{b.batch_id}" for b in pending if not b.committed]
    _forget_listings(storage, root)
    read = _fresh_reader(storage)
    content = read(first)
    requests = len(first)
    raw = content(metadata)
    if isinstance(raw, FileNotFoundError):
        return None
    problems: list[ReadProblem] = []
    if isinstance(raw, Exception):
        problems.append(ReadProblem("unreadable", display(metadata), f"cannot read the file: {raw!r}"))
        query_id = memory.query_id  # a failed read: keep going, the problem is shown
    else:
        try:
            query_id = parse_metadata(raw)
        except LogFileError as err:
            problems.append(ReadProblem(err.kind, display(metadata), err.message))
            query_id = memory.query_id
    if query_id != memory.query_id:
        return None
    batches: list[Batch] = []
    stat_fs = filesystem if filesystem is not None else getattr(storage, "fs", None)
    if head is not None and not any(b.batch_id == head for b in pending):
        requests += 1
        if not _exists(f"{root}/offsets/{head}", stat_fs):
            return None  # the remembered head's offsets went away: rewound (an old copy restored)
    for batch in pending:
        if batch.offsets_file is not None:
            requests += 1
            if not _exists(f"{root}/offsets/{batch.batch_id}", stat_fs):
                return None  # the in-flight head's offsets went away: rewound
        if not batch.committed:
            commit_path = f"{root}/commits/{batch.batch_id}"
            raw_commit = content(commit_path)
            if not isinstance(raw_commit, FileNotFoundError):
                commit = _parse(parse_commit, raw_commit, batch.batch_id, display(commit_path), problems)
                batch = replace(batch, commit=commit, commit_file=display(commit_path))
        batches.append(batch)
    got, size = content, 1
    while True:
        ended = False
        for batch_id in range(next_id, next_id + size):
            offsets_path, commit_path = f"{root}/offsets/{batch_id}", f"{root}/commits/{batch_id}"
            raw_offsets = got(offsets_path)
            if isinstance(raw_offsets, FileNotFoundError):
                ended = True
                break
            if got is content:  # the first probe found a new batch: its commit, alone
                raw_commit = read([commit_path])(commit_path)
                requests += 1
            else:
                raw_commit = got(commit_path)
            offsets = _parse(parse_offsets, raw_offsets, batch_id, display(offsets_path), problems)
            if offsets is not None:
                offsets, line_problems = offsets
                problems.extend(line_problems)
            commit = None
            committed = not isinstance(raw_commit, FileNotFoundError)
            if committed:
                commit = _parse(parse_commit, raw_commit, batch_id, display(commit_path), problems)
            batches.append(Batch(batch_id=batch_id, offsets=offsets, commit=commit, offsets_file=display(offsets_path),
                                 commit_file=display(commit_path) if committed else None))
        if ended:
            break
        next_id += size
        size = _FIRST_ROUND if size == 1 else size * 2
        paths = [f"{root}/{log}/{i}" for log in ("offsets", "commits") for i in range(next_id, next_id + size)]
        got = read(paths)
        requests += len(paths)
    return query_id, batches, problems, requests


def advance(location: str, memory: RowMemory | None = None, *, newest: int, filesystem: Any = None,
            storage_options: dict[str, Any] | None = None) -> RowMemory:
    """The checkpoint's memory after reading what changed since ``memory`` (everything without one).

    :param location: the checkpoint folder (local path, fsspec URL, or a path on ``filesystem``).
    :param memory: the previous result for this location, or None.
    :param newest: the batch ids the classification needs (:func:`watermark_ops.core.stall.recent_batches`).
    :param filesystem: an fsspec filesystem to read with (None: local ``os`` / fsspec from the URL).
    :param storage_options: fsspec options when no filesystem is given.
    :return: a new :class:`RowMemory` (``reads`` tells what this call read). Never raises for bad
        content (the problems are in the findings); a filesystem error may raise.
    """
    if (memory is None or memory.location != location or memory.newest != newest
            or memory.window.head_batch_id is None):
        return _full(location, newest, filesystem, storage_options)
    followed = _follow(memory, filesystem, storage_options)
    if followed is None:
        return _full(location, newest, filesystem, storage_options)
    query_id, new, problems, requests = followed
    boundary = memory.boundary
    window = memory.window
    metadata_problems = tuple(p for p in problems if p.batch_id is None)
    unchanged = [b for b in window.batches if boundary is None or b.batch_id > boundary]
    above = new  # every batch above the boundary, as followed now
    if new == unchanged:
        new = []  # the in-flight head as it was: nothing changed
    if not new and not metadata_problems and not any(p.batch_id is None for p in window.problems):
        reads = {"mode": "incremental", "batch_files": 0, "requests": requests}
        head = window.head_batch_id
        if (memory.progress_found and head is not None and head == boundary
                and not any(r["batch_id"] == head for r in memory.progress.records)):
            # The head's progress record is written after its commit: read the log's end again
            # until it is there (one read of the end of the log, no batch file).
            try:
                late = _progress_tail(memory.progress.location, head, query_id, filesystem)
            except (OSError, ValueError, ImportError):
                late = None
            reads["requests"] += 1
            if late is not None and late.records:
                records = [r for r in memory.progress.records if r["batch_id"] < head] + late.records
                return replace(memory, progress=replace(memory.progress, records=records), reads=reads)
        return replace(memory, reads=reads)
    # Batches above the boundary replace the window's (an in-flight head re-read with its commit).
    kept = [b for b in window.batches if boundary is None or b.batch_id <= boundary]
    batches = kept + above
    reused = {b.batch_id for b in unchanged}  # an in-flight head's offsets are not read again
    old_problems = [p for p in window.problems if p.batch_id is not None and
                    (boundary is None or p.batch_id <= boundary or p.batch_id in reused)]
    shell = replace(window, query_id=query_id, batches=tuple(batches))
    new_window = _window(shell, batches, memory.newest, window.unread_batches,
                         old_problems + list(problems))
    # Audit the new batches with the boundary batch before them; keep the findings about the new ones.
    path = progress_log_path(window.location if filesystem is None else location)
    since = (boundary + 1) if boundary is not None else 0
    progress_problems: list[str] = []
    found = memory.progress_found
    fresh = ProgressLog(location=path)
    if new:
        try:
            fresh = _progress_tail(path, since, query_id, filesystem)
        except FileNotFoundError:
            found = False
        except (OSError, ValueError, ImportError) as exc:
            progress_problems.append(f"progress log {path} cannot be read: {exc!r}")
        found = found or bool(fresh.records)
    audited = Checkpoint(location=window.location, query_id=query_id,
                         batches=tuple(([memory.boundary_batch] if memory.boundary_batch else []) + above),
                         problems=tuple(problems) + tuple(p for p in window.problems if p.batch_id in reused),
                         has_commit_log=window.has_commit_log, metadata_file=window.metadata_file)
    marker = memory.async_tracking or _async_marker(fresh.records)
    audit_progress = ProgressLog(location=path, records=list(fresh.records) + ([marker] if marker else []))
    report = audit_checkpoint(audited, None, progress=audit_progress)
    added = [f for f in report.findings if f.batch_id is None or boundary is None or f.batch_id > boundary]
    findings = _sorted(list(memory.final) + added)
    new_boundary = _boundary(new_window) if new_window.batches else boundary
    if new_boundary is None or (boundary is not None and new_boundary < boundary):
        new_boundary = boundary
    first = new_window.batches[0].batch_id if new_window.batches else 0
    if new:
        records = [r for r in memory.progress.records if first <= r["batch_id"] < since]
        records += [r for r in fresh.records if r["batch_id"] >= first]
    else:
        records = [r for r in memory.progress.records if r["batch_id"] >= first]
    # A bad line at the log's end is read again with the next batches: each problem once, the newest kept.
    problems_seen = list(dict.fromkeys([*memory.progress.problems, *fresh.problems, *progress_problems]))
    progress = ProgressLog(location=path, records=records, problems=problems_seen[-_PROBLEMS_KEPT:])
    state = memory.state_metadata
    if new:
        state = _state_metadata(new_window, filesystem)
    return replace(
        memory, query_id=query_id, boundary=new_boundary,
        boundary_batch=new_window.batch(new_boundary) if new_boundary is not None else None,
        final=tuple(f for f in findings if f.batch_id is not None and new_boundary is not None
                    and f.batch_id <= new_boundary),
        findings=findings, window=new_window, progress=progress, progress_found=found, async_tracking=marker,
        state_metadata=state,
        reads={"mode": "incremental", "batch_files": sum(int(b.offsets_file is not None and b.batch_id not in reused)
                                                         + int(b.committed) for b in above), "requests": requests},
    )


def row_of(memory: RowMemory, thresholds: Thresholds, *, name: str | None = None, missing_ok: bool = False,
           at_ms: int | None = None) -> dict[str, Any]:
    """The overview row of a remembered checkpoint at ``at_ms`` (nothing is read): the same fields
    and ranks as :func:`watermark_ops.core.overview.overview_row`, the stall classification over
    the remembered newest batches.

    :param at_ms: the evaluation instant (epoch ms UTC), default now.
    """
    from watermark_ops.core.overview import _row_of, empty_row
    from watermark_ops.core.stall import StallInputError, classify
    from watermark_ops.core.status import CheckpointStatus

    window = memory.window
    row = empty_row(memory.location, name)
    missing = [p for p in window.problems if p.kind == "checkpoint_missing"]
    if missing:
        return _row_of(row, window, thresholds, at_ms, missing_ok, (None, None, None, None))
    status = CheckpointStatus.of(window)
    report = AuditReport(location=window.location, query_id=window.query_id, head_batch_id=window.head_batch_id,
                         in_flight_batch_id=window.in_flight_batch_id, watermark_ms=window.next_watermark_ms,
                         batches=(), findings=memory.findings)
    at = now_ms() if at_ms is None else at_ms
    state, state_problems = memory.state_metadata or (None, ())
    try:
        classification, why_not = classify(window, memory.progress.records, thresholds, at,
                                           list(memory.progress.problems) + list(state_problems),
                                           state_metadata=state), None
    except StallInputError as exc:
        classification, why_not = None, str(exc)
    return _row_of(row, window, thresholds, at_ms, missing_ok, (status, report, classification, why_not))


# --------------------------------------------------------------------------------------------
# One evaluation for every viewer


@dataclass(frozen=True)
class Job:
    """One row to evaluate: ``key`` (the face's identity of the entry), the location and how to
    read and classify it."""

    key: Hashable
    location: str
    thresholds: Thresholds
    missing_ok: bool = False
    filesystem: Any = None
    storage_options: dict[str, Any] | None = None


@dataclass(frozen=True)
class Evaluation:
    """The rows of one refresh: ``rows`` {job key: row}, ``at_ms`` (its evaluation instant, epoch
    ms UTC), ``seconds`` (how long it took), ``reads`` {"full": n, "incremental": n, "batch_files":
    n, "requests": n} over its checkpoints."""

    rows: dict[Hashable, dict[str, Any]]
    at_ms: int
    seconds: float
    reads: dict[str, int]


class SharedOverview:
    """Every viewer's overview from one evaluation (see the module docstring).

    An evaluation younger than ``max_age`` seconds is served as is. One older than that but
    younger than ``max_stale`` is served at once too, while a refresh runs in the background
    (one at a time): a viewer never waits for the checkpoints to be read once there is an
    evaluation, and the page says when its rows were read. Older, or for other jobs (the
    configuration changed), the viewer waits for a refresh, shared with every viewer arriving
    meanwhile (single flight).

    :param max_age: seconds an evaluation is served as is (0: every view waits for a refresh,
        still sharing one already running).
    :param max_stale: seconds an evaluation is served while a background refresh runs (default
        :data:`STALE_FACTOR` × ``max_age``; at most ``max_age`` disables the background refresh).
    :param workers: checkpoints evaluated at once (:data:`MAX_CONCURRENT_ROWS`).
    :param failed_row: ``(job, exception) -> row`` for a checkpoint whose read raised.
    """

    def __init__(self, *, max_age: float = 0.0, max_stale: float | None = None, workers: int = MAX_CONCURRENT_ROWS,
                 failed_row: Callable[[Job, Exception], dict[str, Any]] | None = None):
        self.max_age = max_age
        self.max_stale = max_stale
        self.workers = workers
        self._failed_row = failed_row
        self._lock = threading.Lock()
        self._memory: dict[tuple[str, int, int], RowMemory] = {}
        self._last: tuple[frozenset, float, Evaluation] | None = None
        self._running: tuple[frozenset, Future] | None = None
        self.refreshes = 0
        self.background_refreshes = 0

    def evaluate(self, jobs: Sequence[Job], *, max_age: float | None = None,
                 max_stale: float | None = None) -> Evaluation:
        """The rows of ``jobs`` (see the class docstring for which evaluation is served).

        :param max_age: / max_stale: this call's limits (default the instance's).
        :raises Exception: whatever a refresh this caller waited for raised outside a row (each
            row's own failure is a row).
        """
        age = self.max_age if max_age is None else max_age
        stale = max_stale if max_stale is not None else (
            self.max_stale if self.max_stale is not None else STALE_FACTOR * age)
        keys = frozenset((job.key, job.location, job.thresholds, job.missing_ok) for job in jobs)
        with self._lock:
            last = self._last if self._last is not None and self._last[0] == keys else None
            elapsed = time.monotonic() - last[1] if last is not None else None
            if last is not None and elapsed <= age:
                return last[2]
            running = self._running if self._running is not None and self._running[0] == keys else None
            if last is not None and elapsed <= stale:
                if running is None and self._running is None:
                    future: Future = Future()
                    self._running = (keys, future)
                    threading.Thread(target=self._lead, args=(keys, list(jobs), future, True), daemon=True,
                                     name="watermark-ops-overview-refresh").start()
                return last[2]
            if running is not None:
                future, leader = running[1], False
            else:
                future, leader = Future(), True
                self._running = (keys, future)
        if not leader:
            return future.result()
        return self._lead(keys, jobs, future, False)

    def _lead(self, keys: frozenset, jobs: Sequence[Job], future: Future, background: bool) -> Evaluation | None:
        """Run one refresh and hand its result to everyone waiting for ``future``."""
        try:
            evaluation = self._refresh(jobs)
        except BaseException as exc:
            with self._lock:
                self._running = None
            future.set_exception(exc)
            if background:
                return None  # the next view waits for a refresh of its own and sees the error
            raise
        with self._lock:
            self._last = (keys, time.monotonic(), evaluation)
            self._running = None
            self.refreshes += 1
            self.background_refreshes += int(background)
        future.set_result(evaluation)
        return evaluation

    def _refresh(self, jobs: Sequence[Job]) -> Evaluation:
        from watermark_ops.core.stall import recent_batches

        started = time.monotonic()
        at = now_ms()
        reads = {"full": 0, "incremental": 0, "batch_files": 0, "requests": 0}

        def one(job: Job) -> tuple[Hashable, dict[str, Any]]:
            newest = recent_batches(job.thresholds)
            slot = (job.location, id(job.filesystem), newest)
            try:
                with self._lock:
                    previous = self._memory.get(slot)
                memory = advance(job.location, previous, newest=newest, filesystem=job.filesystem,
                                 storage_options=job.storage_options)
                with self._lock:
                    self._memory[slot] = memory
                    reads[memory.reads.get("mode", "full")] += 1
                    reads["batch_files"] += memory.reads.get("batch_files", 0)
                    reads["requests"] += memory.reads.get("requests", 0)
                return job.key, row_of(memory, job.thresholds, name=job.location, missing_ok=job.missing_ok,
                                       at_ms=at)
            except Exception as exc:  # one checkpoint must never take the overview down
                if self._failed_row is None:
                    raise
                return job.key, self._failed_row(job, exc)

        if len(jobs) <= 1 or self.workers <= 1:
            rows = dict(one(job) for job in jobs)
        else:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(jobs)),
                                    thread_name_prefix="watermark-ops-overview") as pool:
                rows = dict(pool.map(one, jobs))
        locations = {(job.location, id(job.filesystem), recent_batches(job.thresholds)) for job in jobs}
        with self._lock:  # forget checkpoints no longer known
            for slot in [s for s in self._memory if s not in locations]:
                del self._memory[slot]
        return Evaluation(rows=rows, at_ms=at, seconds=time.monotonic() - started, reads=reads)
