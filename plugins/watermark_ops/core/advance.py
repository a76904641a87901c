"""Move a remembered view on: read only what changed since the last look, by name, no listing.

:func:`advance` is the one way every face reads a checkpoint it looked at before (the audit, the
sensors and their trigger, the monitor, ``status``, the UI overview). Spark names log files by
batch id (``HDFSMetadataLog``: ``offsets/<N>``, ``commits/<N>``) and writes them in order, so
from the remembered head the next files are known by name. A look at an unchanged checkpoint is
one concurrent round, whatever the history:

* ``metadata`` (the query id: a new one means the checkpoint was replaced);
* ``offsets/<head+1>`` (the probe: missing means no new batch);
* ``commits/<N>`` of a batch that was in flight (its commit may have landed);
* a stat of ``offsets/<head>`` (one HEAD on object storage: gone or another size or ETag means a
  rewind, an old copy restored; nothing is read);
* the files of the window that had a problem (a half-written file may be whole now);
* with ``progress="always"``, a stat of the progress log (a trigger that ran no batch writes a
  record there and no file in the checkpoint).

When ``offsets/<head+1>`` exists, the next batches are fetched by name in growing rounds until one
is missing; their progress-log records are read from where the last read ended (one ranged read);
with an audit, the new batches are audited together with the *boundary* batch before them
(:mod:`watermark_ops.core.audit`) and their findings added to the remembered ones; the lowest
remembered ``offsets/<id>`` is stat'ed (Spark's purge, ``minBatchesToRetain``, runs when it writes a
batch): gone, ``offsets/`` is listed once to learn the new lowest id and findings about purged
batches are dropped.

Everything is read again (a *full* read with ``audit=True``: every file, as
:func:`~watermark_ops.core.checkpoint.read_checkpoint`; else a *bounded* read of the newest
``newest`` batches) when there is no view, ``full=True``, the query id changed (a reset) or
``metadata`` cannot be read, the head's offsets file is gone or changed (a rewind), a batch id is
missing between new ones (a gap), an offsets file of the window is gone, a problem lies outside
the batch files (a folder that could not be listed), or, without an audit, more new batches
arrived than the window holds (a listing is then cheaper).

Under Spark's invariants (ids contiguous above the head, old files removed only from the bottom,
a file never rewritten in place but by a rewind) the view's window is what
``read_checkpoint(location, newest=newest)`` returns at that moment, and its audit's findings are
what a full audit of the retained files gives. A file changed or deleted in the middle of the
history by hand is seen by a full read (``watermark-ops audit --full``, ``full=True``).

Pure core: imports neither Airflow nor Spark. Times are epoch ms UTC.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import msgspec.structs

from watermark_ops.core.checkpoint import Batch, Checkpoint, _parse, _read_sized
from watermark_ops.core.findings import audit_new, batch_records, depends_on_head
from watermark_ops.core.log_formats import LogFileError, ReadProblem, parse_commit, parse_metadata, parse_offsets
from watermark_ops.core.storage import _resolve
from watermark_ops.core.view import Audited, ProgressPosition, View, _boundary, _log_of, _window

__all__ = ["PROGRESS_MODES", "advance"]

#: How a look follows the progress log: ``never`` (the logs only), ``on_change`` (read its new
#: lines when the checkpoint changed, or while the head's record is missing), ``always`` (also
#: stat it at every look: a trigger that ran no batch writes only there).
PROGRESS_MODES = ("never", "on_change", "always")
#: The second round fetches this many batch ids by name; each later round twice as many, up to _MAX_ROUND.
_FIRST_ROUND, _MAX_ROUND = 2, 512
#: The progress-log problems a view keeps (the newest).
_PROBLEMS_KEPT = 50
#: What the audit reads of each progress record (the rest is not decoded on a full read), and the
#: state summary (:data:`watermark_ops.core.state.summary.PROGRESS_FIELDS`).
_AUDIT_FIELDS = ("query_id", "run_id", "requested_conf")
_STATE_FIELDS = ("executed", "state_operators", "state_rows", "state_rows_removed", "rows_dropped_by_watermark")


def advance(location: Any, view: View | None = None, *, newest: int, audit: bool = False,
            progress: str = "on_change", state: bool = True, full: bool = False, filesystem: Any = None,
            storage_options: dict[str, Any] | None = None, state_store: str | None = None) -> View:
    """The checkpoint's view after reading what changed since ``view`` (see the module docstring).

    :param location: the checkpoint folder (local path, fsspec URL, a path on ``filesystem``, or
        an Airflow ``ObjectStoragePath``).
    :param view: the view of the last look (:func:`watermark_ops.core.view.load_view`), or None.
    :param newest: the window: batch ids the stall classification needs (at least 1,
        :func:`watermark_ops.core.stall.recent_batches`); a view with a smaller window is read again.
    :param audit: keep an audit of the whole retained log (the audit, the overview): a view without
        one is read whole once. Without, a view's audit is still kept up to date when it has one.
    :param progress: one of :data:`PROGRESS_MODES` (only for a location given as text).
    :param state: read the state operators' metadata while the watermark is 0 (the classification's
        evidence of a watermark).
    :param full: read everything again whatever the view (``--full``).
    :param state_store: keep the view's state summary up to date to this depth (``rows`` |
        ``full``, :mod:`watermark_ops.core.state.summary`): read again only when the head moved
        (new batches, a commit) or a deeper read is asked for; None: carried as it is.
    :param filesystem: / storage_options: as for :func:`~watermark_ops.core.checkpoint.read_checkpoint`.
    :return: a new :class:`~watermark_ops.core.view.View` (``reads`` / ``requests`` say what this
        look read), carrying ``view.remembered``. Never raises for bad content (the problems are in
        the window and the findings); a filesystem error may raise.
    :raises ValueError: ``newest`` below 1, an unknown ``progress`` or ``state_store``.
    """
    if isinstance(newest, bool) or not isinstance(newest, int) or newest < 1:
        raise ValueError(f"newest must be a positive number of batches, got {newest!r}")
    if progress not in PROGRESS_MODES:
        raise ValueError(f"progress must be one of {PROGRESS_MODES}, got {progress!r}")
    if state_store not in (None, "rows", "full"):
        raise ValueError(f"state_store must be None, 'rows' or 'full', got {state_store!r}")
    storage, root = _resolve(location, filesystem, storage_options)
    reading = _Reading(storage, root, location, filesystem, storage_options, newest, audit, progress, state,
                       state_store)
    if not full and _usable(view, storage.display(root), newest, audit):
        looked = _look(reading, view)
        if looked is not None:
            return _moved(reading, view, looked)
    return _read_again(reading, view.remembered if view is not None else None)


class _Reading(msgspec.Struct):
    """What one :func:`advance` reads with and for."""

    storage: Any
    root: str
    given: Any  # the location as given
    filesystem: Any
    storage_options: dict[str, Any] | None
    newest: int
    audit: bool
    progress: str
    state: bool
    state_store: str | None = None
    progress_requests: int = 0

    @property
    def progress_path(self) -> str | None:
        """``<checkpoint>.progress.jsonl`` beside the checkpoint as shown (a local path, a URL);
        None when not followed."""
        from watermark_ops.core.progress import progress_log_path

        if self.progress == "never":
            return None
        return progress_log_path(self.storage.display(self.root))

    def progress_where(self) -> dict[str, Any]:
        """How the progress log is read: the filesystem given, or the location's own (an
        ``ObjectStoragePath``), else fsspec with the storage options (or ``os``)."""
        if self.filesystem is not None or isinstance(self.given, str):
            return {"filesystem": self.filesystem, "storage_options": self.storage_options}
        return {"filesystem": getattr(self.storage, "fs", None), "storage_options": None}

    def counts(self, listed: bool) -> dict[str, Any]:
        r = self.storage.requests
        return {"list": r["list"], "get": r["get"], "head": r["head"], "listed": listed}


def _usable(view: View | None, shown: str, newest: int, audit: bool) -> bool:
    if view is None or view.location != shown or view.newest < newest or (audit and view.audit is None):
        return False
    window = view.window
    head = window.head_batch_id
    if head is None or window.metadata_file is None:
        return False
    # A problem outside the batch files (an unlistable folder, a missing checkpoint) is only
    # checked again by reading everything.
    return all(p.batch_id is not None and _log_of(p) in ("offsets", "commits") for p in window.problems)


# --------------------------------------------------------------------------------------------
# Reading everything again


def _read_again(reading: _Reading, remembered: Any) -> View:
    """A full read (with an audit) or a bounded read of the newest batches, and the progress log."""
    storage, root = reading.storage, reading.root
    storage.forget(root, f"{root}/offsets", f"{root}/commits")
    if reading.audit and storage.retry_delays and reading.progress_path is not None:
        # A remote store: the whole progress log is read while the checkpoint is.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1) as pool:
            log = pool.submit(_progress_read, reading, None, whole=True)
            checkpoint, head_size, top = _read_sized(storage, root, None)
            position, whole = log.result()
    else:
        checkpoint, head_size, top = _read_sized(storage, root, None if reading.audit else reading.newest)
    window = checkpoint
    if reading.audit:
        window = _window(checkpoint, checkpoint.batches, reading.newest, 0, checkpoint.problems,
                         checkpoint.lowest_offsets_batch_id)
        if not (storage.retry_delays and reading.progress_path is not None):
            # a checkpoint without state/ (listed above): its records' state fields are not read
            position, whole = _progress_read(reading, window, whole=True,
                                             stateless=top is not None and "state" not in top)
        if position is not None and position.records is not None:
            first = window.batches[0].batch_id if window.batches else 0
            query_id = checkpoint.query_id
            position = replace(position, records=[r for r in position.records if r["batch_id"] >= first
                                                  and (query_id is None or r.get("query_id") in (None, query_id))])
    else:
        position, whole = _progress_read(reading, window, whole=False)
    audited = None
    if reading.audit:
        from watermark_ops.core.findings import log_findings, watermark_high

        reported: dict[tuple[Any, str], int] = {}
        findings = tuple(log_findings(checkpoint, whole, reported=reported))
        boundary = _boundary(checkpoint)
        upto = [] if boundary is None else [b for b in checkpoint.batches if b.batch_id <= boundary]  # a prefix
        audited = Audited(boundary=boundary,
                          boundary_batch=checkpoint.batch(boundary) if boundary is not None else None,
                          final=tuple(f for f in findings if f.batch_id is not None and boundary is not None
                                      and f.batch_id <= boundary),
                          # async progress tracking only excuses a hole below the head: new batches read
                          # by name have none (a gap reads everything again), so it is not looked for here
                          findings=findings, async_tracking=False,
                          highest=watermark_high(batch_records(checkpoint)[:len(upto)]),
                          conf_seen=tuple(pair for pair, batch in reported.items()
                                          if boundary is not None and batch <= boundary))
    batches = checkpoint.batches
    files = (len([b for b in batches if b.offsets_file is not None])
             + len([b for b in batches if b.commit_file is not None]))
    summary = _state_summary(reading, window, None, position)
    r = storage.requests
    return View(location=checkpoint.location, query_id=checkpoint.query_id, newest=reading.newest, window=window,
                head_size=head_size, audit=audited, progress=position,
                state=_state(reading, window, None, changed=True), remembered=remembered, state_store=summary,
                reads={"mode": "full" if reading.audit else "bounded", "batch_files": files,
                       "requests": r["list"] + r["get"] + r["head"] + reading.progress_requests},
                requests=reading.counts(listed=True), fresh=checkpoint if reading.audit else None,
                added=checkpoint.batches)


# --------------------------------------------------------------------------------------------
# The look: metadata, the probe, the head's stat, by name


class _Looked(msgspec.Struct):
    query_id: str | None
    batches: dict[int, Batch]  # the window's batches as they are now, and the new ones
    new_ids: list[int]
    problems: list[ReadProblem]  # fresh problems of the files read (batch files only)
    reread: set[tuple[str, int]]  # files read again (their old problems are replaced)
    changed: bool
    changed_final: bool  # a file at or below the boundary read differently
    head_tag: Any
    head_size: int | None
    new_head_size: int | None
    progress_stat: Any  # the progress log's (size, tag) or exception, stat'ed with the logs; None: not taken
    lowest: int | None
    unread: int | None  # recounted after a purge, else None
    batch_files: int


def _look(reading: _Reading, view: View) -> _Looked | None:
    """Read ``metadata``, the probe and what may have changed (see the module docstring); None
    when the view no longer matches (read everything again)."""
    storage, root = reading.storage, reading.root
    display = storage.display
    window = view.window
    head = window.head_batch_id
    boundary = _boundary(window)
    pending = [b for b in window.batches if (boundary is None or b.batch_id > boundary) and not b.committed
               and b.offsets_file is not None and window.has_commit_log]
    reread = {(_log_of(p), p.batch_id) for p in window.problems if (_log_of(p), p.batch_id) != ("offsets", head)}
    reread |= {("commits", b.batch_id) for b in pending}
    metadata, probe, head_path = f"{root}/metadata", f"{root}/offsets/{head + 1}", f"{root}/offsets/{head}"
    paths = [metadata, probe, *(f"{root}/{log}/{i}" for log, i in sorted(reread))]
    storage.forget(root, f"{root}/offsets", f"{root}/commits")
    # the progress log's stat in the same round, when a look checks it anyway (the sensors)
    position = view.progress
    progress_path = reading.progress_path if reading.progress == "always" else None
    if not (progress_path and position is not None and position.found and position.records is not None
            and position.path == progress_path and reading.progress_where()["filesystem"] is getattr(storage, "fs", None)
            and (reading.filesystem is not None or reading.storage_options is None)):
        progress_path = None
    if progress_path:
        storage.forget(progress_path)
    content, stats = _read_and_stat(storage, paths, [head_path] + ([progress_path] if progress_path else []))
    raw = content(metadata)
    if isinstance(raw, Exception):
        return None  # gone or unreadable: a full read reports it
    try:
        query_id = parse_metadata(raw)
    except LogFileError:
        return None
    if query_id != view.query_id:
        return None  # the checkpoint was replaced
    stat = stats[head_path]
    if isinstance(stat, Exception) or (view.head_size is not None and stat[0] != view.head_size):
        return None  # the head's offsets are gone or rewritten: rewound
    if view.head_tag is not None and stat[1] != view.head_tag:
        return None
    batches = {b.batch_id: b for b in window.batches}
    problems: list[ReadProblem] = []
    changed = changed_final = False
    files = 0
    for log, i in sorted(reread):
        path = f"{root}/{log}/{i}"
        got = content(path)
        old = batches.get(i)
        if log == "offsets":
            if isinstance(got, FileNotFoundError):
                return None  # an offsets file of the window is gone: the window is not what it was
            own: list[ReadProblem] = []
            parsed = _parse(parse_offsets, got, i, display(path), own)
            entry = None
            if parsed is not None:
                entry, line_problems = parsed
                own.extend(line_problems)
            files += int(not isinstance(got, Exception))
            problems.extend(own)
            updated = Batch(batch_id=i, offsets=entry, commit=old.commit if old else None,
                            offsets_file=display(path), commit_file=old.commit_file if old else None)
        else:
            found = not isinstance(got, FileNotFoundError)
            own = []
            entry = _parse(parse_commit, got, i, display(path), own) if found else None
            files += int(found and not isinstance(got, Exception))
            problems.extend(own)
            updated = Batch(batch_id=i, offsets=old.offsets if old else None, commit=entry,
                            offsets_file=old.offsets_file if old else None,
                            commit_file=display(path) if found else None)
        was = [p for p in window.problems if (_log_of(p), p.batch_id) == (log, i)]
        if updated != old or was != own:
            changed = True
            changed_final |= boundary is not None and i <= boundary
        batches[i] = updated
    new_ids: list[int] = []
    new_head_size = None
    raw_probe = content(probe)
    if not isinstance(raw_probe, FileNotFoundError):
        found = _fetch_new(reading, window, head, raw_probe, batches, problems)
        if found is None:
            return None
        new_ids, fetched, new_head_size = found
        files += fetched
        changed = True
    batches = {i: b for i, b in batches.items() if b.offsets_file is not None or b.commit_file is not None}
    lowest, unread = window.lowest_offsets_batch_id, None
    if changed and lowest is not None and lowest != head:
        purged = _purge(reading, lowest)
        if purged is not None:
            lowest, ids = purged
            first_kept = sorted(i for i, b in batches.items() if b.offsets_file is not None)
            first_kept = first_kept[-reading.newest] if len(first_kept) > reading.newest else (
                first_kept[0] if first_kept else lowest)
            unread = sum(1 for i in ids if i < first_kept)
            batches = {i: b for i, b in batches.items() if i >= lowest}
    return _Looked(query_id=query_id, batches=batches, new_ids=new_ids, problems=problems, reread=reread,
                   changed=changed, changed_final=changed_final, head_tag=stat[1], head_size=stat[0],
                   new_head_size=new_head_size, progress_stat=stats.get(progress_path) if progress_path else None,
                   lowest=lowest, unread=unread, batch_files=files)


def _read_and_stat(storage: Any, paths: list[str], stat_paths: list[str]):
    """One concurrent read of ``paths`` (missing files are no error) and stat of ``stat_paths``."""
    if not storage.retry_delays:
        return storage.read(paths, probed=paths), storage.stat(stat_paths)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        stats = pool.submit(storage.stat, stat_paths)
        content = storage.read(paths, probed=paths)
        return content, stats.result()


def _fetch_new(reading: _Reading, window: Checkpoint, head: int, raw_probe: Any, batches: dict[int, Batch],
               problems: list[ReadProblem]) -> tuple[list[int], int, int | None] | None:
    """The new batches from ``head + 1`` on, by name, in growing rounds, into ``batches``: their ids,
    the files read and the new head's offsets size; None when a listing is needed (a gap, or more
    than the window without an audit)."""
    storage, root = reading.storage, reading.root
    display = storage.display
    commit_log = window.has_commit_log
    offsets_raw = {head + 1: raw_probe}
    commits_raw: dict[int, Any] = {}
    pending_commit = [head + 1] if commit_log else []
    next_id, size = head + 2, _FIRST_ROUND
    while True:
        ids = range(next_id, next_id + size)
        paths = [f"{root}/commits/{i}" for i in pending_commit]
        paths += [f"{root}/offsets/{i}" for i in ids] + ([f"{root}/commits/{i}" for i in ids] if commit_log else [])
        content = storage.read(paths, probed=paths)
        for i in pending_commit:
            commits_raw[i] = content(f"{root}/commits/{i}")
        pending_commit = []
        found = [i for i in ids if not isinstance(content(f"{root}/offsets/{i}"), FileNotFoundError)]
        contiguous = [i for n, i in enumerate(ids) if i in found and all(j in found for j in ids[:n])]
        if len(found) != len(contiguous):
            return None  # a batch id missing between new ones: a gap, read everything
        for i in contiguous:
            offsets_raw[i] = content(f"{root}/offsets/{i}")
            if commit_log:
                commits_raw[i] = content(f"{root}/commits/{i}")
        if not reading.audit and len(offsets_raw) > reading.newest:
            return None  # more new batches than the window: a bounded read is cheaper
        if len(contiguous) < size:
            break
        next_id += size
        size = min(size * 2, _MAX_ROUND)
    files = 0
    for i in sorted(offsets_raw):
        offsets_path, commit_path = f"{root}/offsets/{i}", f"{root}/commits/{i}"
        own: list[ReadProblem] = []
        parsed = _parse(parse_offsets, offsets_raw[i], i, display(offsets_path), own)
        entry = None
        if parsed is not None:
            entry, line_problems = parsed
            own.extend(line_problems)
        raw_commit = commits_raw.get(i, FileNotFoundError(commit_path))
        committed = not isinstance(raw_commit, FileNotFoundError)
        commit = _parse(parse_commit, raw_commit, i, display(commit_path), own) if committed else None
        problems.extend(own)
        files += int(not isinstance(offsets_raw[i], Exception)) + int(committed and not isinstance(raw_commit, Exception))
        batches[i] = Batch(batch_id=i, offsets=entry, commit=commit, offsets_file=display(offsets_path),
                           commit_file=display(commit_path) if committed else None)
    newest_raw = offsets_raw[max(offsets_raw)]
    return sorted(offsets_raw), files, None if isinstance(newest_raw, Exception) else len(newest_raw)


def _purge(reading: _Reading, lowest: int) -> tuple[int, list[int]] | None:
    """``(the new lowest offsets id, every offsets id)`` when ``offsets/<lowest>`` is gone (Spark's
    purge: one stat, then one listing of ``offsets/``), else None."""
    storage, root = reading.storage, reading.root
    path = f"{root}/offsets/{lowest}"
    if not isinstance(storage.stat([path])[path], FileNotFoundError):
        return None
    from watermark_ops.core.log_formats import batch_file_names

    ids = sorted(int(name) for name in batch_file_names(storage.names(f"{root}/offsets")))
    return (ids[0] if ids else lowest), ids


# --------------------------------------------------------------------------------------------
# The new view


def _moved(reading: _Reading, view: View, looked: _Looked) -> View:
    """The view after a look that matched (see :func:`_look`)."""
    window = view.window
    head = window.head_batch_id
    boundary = _boundary(window)
    r = reading.storage.requests
    if not looked.changed:
        position = _progress_follow(reading, view, window, changed=False, stat=looked.progress_stat)
        summary = _state_summary(reading, window, view.state_store, position)
        return replace(view, head_tag=looked.head_tag, head_size=looked.head_size, progress=position,
                       state=_state(reading, window, view.state, changed=False), state_store=summary,
                       reads={"mode": "incremental", "batch_files": looked.batch_files,
                              "requests": r["list"] + r["get"] + r["head"] + reading.progress_requests},
                       requests=reading.counts(listed=False), fresh=None, added=())
    ordered = [looked.batches[i] for i in sorted(looked.batches)]
    problems = [p for p in window.problems if (_log_of(p), p.batch_id) not in looked.reread
                and p.batch_id in looked.batches] + looked.problems
    older = window.unread_batches if looked.unread is None else 0
    new_window = _window(window, ordered, reading.newest, older, problems, looked.lowest)
    new_window = msgspec.structs.replace(new_window, query_id=looked.query_id)
    if looked.unread is not None:
        new_window = msgspec.structs.replace(new_window, unread_batches=looked.unread)
    position = _progress_follow(reading, view, new_window, changed=True, stat=looked.progress_stat)
    above = [b for b in ordered if boundary is None or b.batch_id > boundary]
    audited = view.audit
    if audited is not None:
        whole = looked.changed_final or position is None or any(depends_on_head(f) for f in audited.findings)
        audited = None if whole else audit_new(audited, new_window, above, problems, batches=looked.batches,
                                               purged_below=looked.lowest if looked.unread is not None else None,
                                               progress_path=position.path, records=position.records or (),
                                               boundary=boundary)
        if audited is None:
            if reading.audit:  # what was final may read differently now: audit everything again
                return _read_again(reading, view.remembered)
            # without the progress log, with a final file changed, or findings that depend on the
            # head or the lowest batch, the audit is not kept (the next audit reads everything)
    same_head = new_window.head_batch_id == head
    summary = _state_summary(reading, new_window, view.state_store, position)
    return replace(view, query_id=looked.query_id, newest=reading.newest, window=new_window, state_store=summary,
                   head_size=looked.head_size if same_head else looked.new_head_size,
                   head_tag=looked.head_tag if same_head else None,
                   audit=audited, progress=position, state=_state(reading, new_window, view.state, changed=True),
                   reads={"mode": "incremental", "batch_files": looked.batch_files,
                          "requests": r["list"] + r["get"] + r["head"] + reading.progress_requests},
                   requests=reading.counts(listed=looked.unread is not None), fresh=None, added=tuple(above))


# --------------------------------------------------------------------------------------------
# The progress log and the state metadata


def _tail_cut(log: Any, path: str) -> list[str]:
    from watermark_ops.core.progress import TAIL_MAX_BYTES

    if log.complete:
        return []
    return [f"progress log {path}: read from byte {log.start_offset} on only (the last {TAIL_MAX_BYTES} bytes): "
            f"records of the oldest batches read may be missing"]


def _progress_read(reading: _Reading, window: Checkpoint, *, whole: bool,
                   stateless: bool = False) -> tuple[ProgressPosition | None, Any]:
    """The progress log read afresh: whole (an audit reads every run's records; only the audit's
    fields, and the state's unless the checkpoint is ``stateless``) or its end (the records of the
    window's batches). Returns the position and, for a whole read, the log."""
    from watermark_ops.core.progress import read_progress_log, read_progress_tail

    path = reading.progress_path
    if path is None:
        return None, None
    where = reading.progress_where()
    reading.progress_requests += 2
    try:
        if whole:  # the window's records are selected by the caller (the checkpoint may not be read yet)
            fields = None if reading.state else _AUDIT_FIELDS + (
                _STATE_FIELDS if reading.state_store and not stateless else ())
            log = read_progress_log(path, **where, fields=fields)
            records = log.records if reading.state or reading.state_store else None
        elif window.batches:
            first, query_id = window.batches[0].batch_id, window.query_id
            log = read_progress_tail(path, first, query_id=query_id, **where)
            records = log.records
        else:
            return ProgressPosition(path=path, found=False, records=[]), None
    except (OSError, ValueError, ImportError) as exc:
        problem = f"progress log {path} cannot be read: {exc!r}"
        return ProgressPosition(path=path, found=True, records=[], problems=(problem,)), None
    problems = (list(log.problems) + _tail_cut(log, path))[-_PROBLEMS_KEPT:]
    return ProgressPosition(path=path, found=log.marker is not None, end=log.end_offset, records=records,
                            problems=tuple(problems), complete=log.complete, marker=log.marker), log


def _progress_follow(reading: _Reading, view: View, window: Checkpoint, *, changed: bool,
                     stat: Any = None) -> ProgressPosition | None:
    """The progress position after a look: its new lines read when the checkpoint changed, while
    the head's record is missing, or at every look with ``progress="always"`` (``stat``: the log's
    ``(size, tag)`` or error, taken with the logs' reads; None: take it now)."""
    from watermark_ops.core.progress import read_progress_since

    path = reading.progress_path
    position = view.progress
    if path is None:
        if position is not None and changed:
            return replace(position, records=None)  # no longer the window's: read again when wanted
        return position
    if position is None or position.records is None or position.path != path:
        return _progress_read(reading, window, whole=False)[0]
    first = window.batches[0].batch_id if window.batches else 0
    head = window.head_batch_id
    head_missing = (position.found and head is not None and window.in_flight_batch_id is None
                    and not any(r["batch_id"] == head for r in position.records))
    if not (changed or head_missing or (reading.progress == "always" and position.found)):
        return position
    if isinstance(stat, FileNotFoundError):
        return ProgressPosition(path=path, found=False, records=[], problems=position.problems)
    if isinstance(stat, Exception):
        stat = None  # read it again the usual way (with its retries)
    reading.progress_requests += int(stat is None)
    try:
        log = read_progress_since(path, position.end, position.marker, **reading.progress_where(), stat=stat)
    except FileNotFoundError:
        return ProgressPosition(path=path, found=False, records=[], problems=position.problems)
    except (OSError, ValueError, ImportError) as exc:
        problems = (*position.problems, f"progress log {path} cannot be read: {exc!r}")[-_PROBLEMS_KEPT:]
        return replace(position, problems=tuple(problems))
    if log is None:  # shorter than what was read: rewritten, read its end again
        return _progress_read(reading, window, whole=False)[0]
    query_id = window.query_id
    new = [r for r in log.records if query_id is None or r.get("query_id") in (None, query_id)]
    reading.progress_requests += int(log.end_offset > position.end)
    records = [r for r in position.records if r["batch_id"] >= first] + [r for r in new if r["batch_id"] >= first]
    problems = list(dict.fromkeys([*position.problems, *log.problems]))[-_PROBLEMS_KEPT:]
    return ProgressPosition(path=path, found=True, end=log.end_offset, records=records, problems=tuple(problems),
                            complete=position.complete, marker=log.marker)


def _state(reading: _Reading, window: Checkpoint, previous: Any, *, changed: bool) -> Any:
    """What the state operators' metadata says, while the watermark the next batch starts from is 0
    (read again when the checkpoint changed); None otherwise or when not asked for."""
    if not window.batches or window.next_watermark_ms != 0:
        return None
    if previous is not None and not changed:
        return previous
    if not reading.state:
        return None
    from watermark_ops.core.state.metadata import read_state_metadata

    try:
        state = read_state_metadata(reading.given, filesystem=reading.filesystem,
                                    storage_options=reading.storage_options)
    except Exception as exc:  # noqa: BLE001 - evidence missing, not a failed classification
        return None, (f"state metadata of {window.location} cannot be read: {exc!r}",)
    return state, tuple(f"{p.kind}: {p.file}: {p.message}" for p in state.problems)


def _state_summary(reading: _Reading, window: Checkpoint, previous: Any, position: ProgressPosition | None) -> Any:
    """The view's state summary after a look: :func:`watermark_ops.core.state.summary.summary_after`
    with the look's own storage (its requests counted with the look's)."""
    if reading.state_store is None:
        return previous
    from watermark_ops.core.state.summary import summary_after

    return summary_after(reading.storage, reading.root, window, previous,
                         position.records if position is not None else None, depth=reading.state_store)
