"""Overview rows that read only what changed since the last view, shared by concurrent viewers.

The overview at a platform's scale (hundreds of checkpoints, each viewed every few seconds by
several people) cannot read every checkpoint whole at each view. Each checkpoint is remembered as
a view (:mod:`watermark_ops.core.view`, kept in the api-server's process: :class:`InProcessViews`):
the audited boundary and the findings up to it, the state summary (:mod:`watermark_ops.core.state.summary`,
depth ``full``: read again only when the head moved), the newest batches (a window of
:func:`watermark_ops.core.stall.recent_batches` ids, what a sensor poke reads), the progress-log
records of those batches and the state operators' metadata when the watermark is 0: what the
stall classification needs, re-classified at each evaluation instant without reading anything.

At the next view, :func:`advance` (:func:`watermark_ops.core.advance.advance`, the one function
every face moves a view on with) reads ``metadata`` (the query id) and probes ``offsets/<head+1>``
by name: with no new batch that is two GETs and no batch file, whatever the history, and a stat of
``offsets/<head>`` (one HEAD request). New batches are read by name and audited together with the
boundary batch; their findings are added to the remembered ones. A first view, a changed query id
(the checkpoint was replaced), a head whose files went away (rewind) or a missing checkpoint reads
the whole checkpoint (as :func:`watermark_ops.core.overview.overview_row`).

:class:`SharedOverview` evaluates every known checkpoint once per refresh, concurrently with a
bound, for every viewer at once (one refresh at a time: a viewer arriving while a refresh runs waits for
it instead of starting another), serves that evaluation to the views within ``max_age`` seconds,
and then, up to ``max_stale``, serves it at once while one refresh runs in the background. Its
rows are the same for everyone; a face filters them per user afterwards.

Pure core: imports neither Airflow nor Spark; times are epoch milliseconds UTC.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

from watermark_ops.core.audit import AuditReport
from watermark_ops.core.thresholds import DEFAULT_STATE_THRESHOLDS, StateThresholds, Thresholds
from watermark_ops.core.times import now_ms
from watermark_ops.core.view import InProcessViews, View

__all__ = ["MAX_CONCURRENT_ROWS", "STALE_FACTOR", "Evaluation", "Job", "RowMemory", "SharedOverview", "advance",
           "row_of"]

#: Checkpoints evaluated at once by :class:`SharedOverview` (threads; each one's reads are
#: themselves concurrent on an async filesystem, bounded by the core's reader).
MAX_CONCURRENT_ROWS = 16
#: An evaluation older than ``max_age`` is still served, while a background refresh runs, until
#: it is this many times ``max_age`` old (:class:`SharedOverview`).
STALE_FACTOR = 6

#: What one checkpoint's previous evaluation remembers: its remembered view.
RowMemory = View


def advance(location: str, memory: View | None = None, *, newest: int, filesystem: Any = None,
            storage_options: dict[str, Any] | None = None) -> View:
    """The checkpoint's view after reading what changed since ``memory`` (everything without one):
    :func:`watermark_ops.core.advance.advance` with an audit of the whole log, the progress log's
    new lines when the checkpoint changed, and the state metadata while the watermark is 0.

    :param location: the checkpoint folder (local path, fsspec URL, or a path on ``filesystem``).
    :param memory: the previous result for this location, or None.
    :param newest: the batch ids the classification needs (:func:`watermark_ops.core.stall.recent_batches`).
    :param filesystem: an fsspec filesystem to read with (None: local ``os`` / fsspec from the URL).
    :param storage_options: fsspec options when no filesystem is given.
    :return: a new view (``reads`` tells what this call read). Never raises for bad content (the
        problems are in the findings); a filesystem error may raise.
    """
    from watermark_ops.core.advance import advance as move

    if memory is not None and memory.newest != newest:
        memory = None  # another window: read it again
    return move(location, memory, newest=newest, audit=True, progress="on_change", state=True,
                filesystem=filesystem, storage_options=storage_options, state_store="full")


def row_of(memory: View, thresholds: Thresholds, *, name: str | None = None, missing_ok: bool = False,
           at_ms: int | None = None, state_thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS) -> dict[str, Any]:
    """The overview row of a remembered checkpoint at ``at_ms`` (nothing is read): the same fields
    and ranks as :func:`watermark_ops.core.overview.overview_row`, the stall classification over
    the remembered newest batches, and the view's state summary as the row's ``state_store``
    (:func:`watermark_ops.core.overview.with_state_column`).

    :param at_ms: the evaluation instant (epoch ms UTC), default now.
    """
    from watermark_ops.core.classification import StallInputError, classify_snapshot
    from watermark_ops.core.overview import _row_of, empty_row, with_state_column
    from watermark_ops.core.snapshot import view_snapshot
    from watermark_ops.core.stall import recent_batches
    from watermark_ops.core.status import CheckpointStatus

    snapshot = view_snapshot(memory, recent_batches(thresholds))
    window = snapshot.checkpoint
    row = empty_row(memory.location, name)
    missing = [p for p in window.problems if p.kind == "checkpoint_missing"]
    if missing:
        return _row_of(row, window, thresholds, at_ms, missing_ok, (None, None, None, None))
    status = CheckpointStatus.of(window)
    report = AuditReport(location=window.location, query_id=window.query_id, head_batch_id=window.head_batch_id,
                         in_flight_batch_id=window.in_flight_batch_id, watermark_ms=window.next_watermark_ms,
                         batches=(), findings=memory.findings)
    at = now_ms() if at_ms is None else at_ms
    try:
        classification, why_not = classify_snapshot(snapshot, thresholds, at), None
    except StallInputError as exc:
        classification, why_not = None, str(exc)
    row = _row_of(row, window, thresholds, at_ms, missing_ok, (status, report, classification, why_not))
    return with_state_column(row, memory.state_store, state_thresholds)


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
    state_thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS


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
    meanwhile (one refresh at a time).

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
        self.views = InProcessViews()  # the remembered views, in this process (the pages write nothing elsewhere)
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
        from watermark_ops.core.overview import with_refused_restart
        from watermark_ops.core.stall import recent_batches
        from watermark_ops.core.state.diagnosis import refused_restart

        started = time.monotonic()
        at = now_ms()
        reads = {"full": 0, "incremental": 0, "batch_files": 0, "requests": 0}

        def one(job: Job) -> tuple[Hashable, dict[str, Any]]:
            newest = recent_batches(job.thresholds)
            try:
                previous = self.views.load_view_entry(job.location)
                if previous is not None and previous.newest > newest:
                    newest = previous.newest  # another job of the same checkpoint keeps more: classify ours
                memory = advance(job.location, previous, newest=newest, filesystem=job.filesystem,
                                 storage_options=job.storage_options)
                self.views.save_view_entry(job.location, memory)
                with self._lock:
                    reads[memory.reads.get("mode", "full")] += 1
                    reads["batch_files"] += memory.reads.get("batch_files", 0)
                    reads["requests"] += memory.reads.get("requests", 0)
                row = row_of(memory, job.thresholds, name=job.location, missing_ok=job.missing_ok, at_ms=at,
                             state_thresholds=job.state_thresholds)
                # a refused restart changes no checkpoint file: its diagnosis is read at every refresh
                refused = refused_restart(job.location, filesystem=job.filesystem, storage_options=job.storage_options)
                return job.key, with_refused_restart(row, refused)
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
        self.views.forget(job.location for job in jobs)  # checkpoints no longer known
        return Evaluation(rows=rows, at_ms=at, seconds=time.monotonic() - started, reads=reads)
