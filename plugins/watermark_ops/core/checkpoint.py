"""Read a Spark Structured Streaming checkpoint without a JVM: the offset log, the commit log, the query id.

It lists and reads the files; :mod:`watermark_ops.core.log_formats` parses them (the formats, with
Spark's sources). It imports neither Airflow nor Spark; files are read through fsspec, so a local path, ``file://``, ``s3://``, ``gs://``,
``abfs://``, ``hdfs://``, ``memory://`` or an Airflow ``ObjectStoragePath`` all work.

Public API (stable; other modules build on it)
-----------------------------------------------
``read_checkpoint(location, *, filesystem=None, storage_options=None, newest=None) -> Checkpoint``
    Lists the checkpoint folder, ``offsets/`` and ``commits/`` once each and reads every batch
    file and ``metadata`` once. It never raises for bad content: every file it cannot read or
    parse becomes a :class:`ReadProblem` naming the file, and the rest is still read.
    With ``newest=N`` it lists ``offsets/`` and reads only the files of its N highest batch ids
    (their commit files by name, without listing ``commits/``) and ``metadata``: a bounded read
    whose cost does not grow with the history (the sensors' and ``status``'s path,
    :func:`watermark_ops.core.stall.read_recent`); the audit reads everything.
    A plain local path is listed and read with ``os`` (no fsspec import, no per-file overhead);
    anything else goes through fsspec (``filesystem=`` an fsspec filesystem, e.g. the one an
    Airflow connection builds, ``watermark_ops.airflow.storage.checkpoint_filesystem``; the
    location is then a path or URL on it: ``s3://b/k`` and ``b/k`` both work).
    On a remote filesystem (object storage, HDFS): every listing is fresh (the filesystem's
    listing cache is dropped first: s3fs keeps listings forever by default); the files are read
    concurrently, at most :data:`MAX_CONCURRENT_READS` at once (one GET per small object on
    s3fs); an object that cannot be read, that was listed but is not found, or that reads as
    half-written is read again within :data:`RETRY_DELAYS_S`, then reported by name.

``read_log_files(storage, offsets_files, commit_files, metadata_path, probed=..., probed_offsets=...)``
    The reading and parsing step of ``read_checkpoint`` for given files (by batch id), for
    :mod:`watermark_ops.core.tail`, which fetches the next batch files by name instead of listing.

``open_storage(location, filesystem=..., storage_options=...)`` / ``filesystem_for(location, filesystem)``
    The storage a reader of the same checkpoint uses (the file source's log, the ledger), and
    whether another location (a landed file, a sink) is on the same filesystem.

``Checkpoint`` (frozen ``msgspec.Struct``)
    ``location`` (str: an absolute local path, or a URL such as ``s3://b/cp``), ``query_id``
    (str | None: None when ``metadata`` is missing or unreadable), ``batches`` (tuple of
    :class:`Batch`, ascending batch id; every id that has an offsets or a commit file),
    ``problems`` (tuple of :class:`ReadProblem`), ``has_commit_log`` (False for pre-2.2
    checkpoints, which have no ``commits/`` folder), ``metadata_file``; what was read:
    ``newest`` (the bound given, None: everything), ``unread_batches`` (batch ids listed but not
    read, all below ``batches[0]``; 0 when complete; a bounded read counts ``offsets/`` ids), ``lowest_offsets_batch_id`` (the lowest
    batch id with an offsets file as listed, read or not: above 0 after Spark's purge), ``complete``.
    Derived: ``head_batch_id`` (latest batch id in the offset log, what Spark restarts from),
    ``in_flight_batch_id`` (the head batch when it has offsets but no commit: running now, or its
    driver died), ``next_watermark_ms`` (the watermark the next batch starts from, as
    ``MicroBatchExecution.populateStartOffsets`` restores it), ``batch(batch_id)``.
    ``CommitEntry.has_next_watermark`` is False for pre-2.4 commits (``{}``): their 0 is a
    default, not a watermark to compare.

``Batch`` (frozen ``msgspec.Struct``), one per batch id
    ``batch_id`` (int), ``offsets`` (:class:`OffsetsEntry` | None), ``commit``
    (:class:`CommitEntry` | None), ``offsets_file`` / ``commit_file`` (the file's location when
    the file exists on storage, even if it could not be parsed; else None). Shortcuts:
    ``watermark_ms`` (offsets ``batchWatermarkMs``: the watermark the batch ran with),
    ``timestamp_ms`` (offsets ``batchTimestampMs``: processing time of the batch), ``conf``
    (dict), ``sources`` (tuple: one parsed JSON offset per source, None for ``-``),
    ``committed`` (bool: a commit file exists), ``next_watermark_ms`` (commits
    ``nextBatchWatermarkMs``: the watermark computed at the end of the batch). The shortcuts are
    None when the file is absent or unreadable.

``OffsetsEntry`` / ``CommitEntry`` / ``ReadProblem``: see :mod:`watermark_ops.core.log_formats`.

All times are epoch milliseconds UTC (``int``), exactly as Spark stores them.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import contextlib
import gc
import time
from functools import cached_property, partial
from typing import Any, Iterable, Iterator

import msgspec

from watermark_ops.core.log_formats import (
    CommitEntry,
    LogFileError,
    OffsetsEntry,
    ReadProblem,
    _spark_commit_file,
    _spark_offsets_file,
    batch_file_names,
    parse_commit,
    parse_metadata,
    parse_offsets_in_general,
)
# The storage back-ends and the state metadata reader live in their own modules; their public names
# stay importable from here, where the README and the docs show them (the state metadata reader's
# on first use: an audit never needs it).
from watermark_ops.core.storage import (  # noqa: F401 - re-exported
    _HALF_WRITTEN,
    MAX_CONCURRENT_READS,
    RETRY_DELAYS_S,
    _FsspecStorage,
    _LocalStorage,
    _name,
    _one_request,
    _resolve,
    filesystem_for,
    open_storage,
)

_STATE_NAMES = ("StateMetadata", "StateOperator", "read_state_metadata")


def __getattr__(name: str) -> Any:
    """``StateMetadata``, ``StateOperator``, ``read_state_metadata``: from :mod:`watermark_ops.core.state.metadata`."""
    if name in _STATE_NAMES:
        import importlib

        value = getattr(importlib.import_module("watermark_ops.core.state.metadata"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["MAX_CONCURRENT_READS", "RETRY_DELAYS_S", "Batch", "Checkpoint", "LogFiles", "StateMetadata",
           "StateOperator", "filesystem_for", "open_storage", "read_checkpoint", "read_log_files", "read_state_metadata"]


#: Highest offset-log version this reader knows (``OffsetSeqLog.MAX_VERSION`` in Spark 4.2+).
OFFSETS_MAX_VERSION = 2
#: Highest commit-log version this reader knows (``CommitLog.MAX_VERSION`` in Spark 4.2+).
COMMITS_MAX_VERSION = 3


class Batch(msgspec.Struct, frozen=True):
    """Everything the checkpoint holds about one batch id: its offsets entry and its commit entry.

    A frozen ``msgspec.Struct``, as the entries are (an audit builds them for every batch)."""

    batch_id: int
    offsets: OffsetsEntry | None = None
    commit: CommitEntry | None = None
    offsets_file: str | None = None
    commit_file: str | None = None

    @property
    def watermark_ms(self) -> int | None:
        """Offsets ``batchWatermarkMs`` (epoch ms UTC), None when offsets are absent or unreadable."""
        return self.offsets.watermark_ms if self.offsets else None

    @property
    def timestamp_ms(self) -> int | None:
        """Offsets ``batchTimestampMs`` (epoch ms UTC), None when offsets are absent or unreadable."""
        return self.offsets.timestamp_ms if self.offsets else None

    @property
    def conf(self) -> dict[str, str] | None:
        """Offsets ``conf``, None when offsets are absent or unreadable."""
        return self.offsets.conf if self.offsets else None

    @property
    def sources(self) -> tuple[Any, ...] | None:
        """Source offsets (parsed JSON, None for ``-``), None when offsets are absent or unreadable."""
        return self.offsets.sources if self.offsets else None

    @property
    def committed(self) -> bool:
        """True when ``commits/N`` exists (readable or not)."""
        return self.commit_file is not None

    @property
    def next_watermark_ms(self) -> int | None:
        """Commits ``nextBatchWatermarkMs`` (epoch ms UTC), None when no readable commit."""
        return self.commit.next_watermark_ms if self.commit else None


class Checkpoint(msgspec.Struct, frozen=True, dict=True):
    """A checkpoint as read by :func:`read_checkpoint` (see the module docstring)."""

    location: str
    query_id: str | None
    batches: tuple[Batch, ...]
    problems: tuple[ReadProblem, ...]
    has_commit_log: bool
    metadata_file: str | None = None
    newest: int | None = None
    unread_batches: int = 0
    lowest_offsets_batch_id: int | None = None

    @property
    def complete(self) -> bool:
        """True when every batch file listed was read (always, without ``newest``)."""
        return self.unread_batches == 0

    @cached_property
    def _by_id(self) -> dict[int, Batch]:
        return {b.batch_id: b for b in self.batches}

    def batch(self, batch_id: int) -> Batch | None:
        """The :class:`Batch` with this id, or None."""
        return self._by_id.get(batch_id)

    @cached_property
    def head_batch_id(self) -> int | None:
        """The latest batch id that has an offsets file (``offsetLog.getLatest``), None if none."""
        for b in reversed(self.batches):  # ascending batch ids
            if b.offsets_file is not None:
                return b.batch_id
        return None

    @property
    def in_flight_batch_id(self) -> int | None:
        """The head batch when it has offsets but no commit (running, or its driver died), else None.

        Always None for a checkpoint without a commit log (pre-2.2: nothing to tell it by).
        """
        head = self.head_batch_id
        if head is None or not self.has_commit_log:
            return None
        return None if self.batch(head).committed else head

    @property
    def next_watermark_ms(self) -> int | None:
        """The watermark the next batch starts from (epoch ms UTC), as Spark restores it.

        ``MicroBatchExecution.populateStartOffsets``: head N committed →
        ``max(offsets N batchWatermarkMs, commits N nextBatchWatermarkMs)``; not committed (or no
        commit log) → batch N is re-run with ``offsets N batchWatermarkMs``. None when there is no
        batch or the head's files could not be read; 0 for a checkpoint without any batch is not
        assumed.
        """
        head = self.head_batch_id
        if head is None:
            return None
        batch = self.batch(head)
        if batch.offsets is None:
            return None
        if batch.committed:
            if batch.commit is None:
                return None
            return max(batch.offsets.watermark_ms, batch.commit.next_watermark_ms)
        return batch.offsets.watermark_ms

def _batch_files(storage: Any, folder: str) -> dict[int, str]:
    """One listing of a log folder (names only: no stat per file) -> {batch id: path} of the names
    that are a whole decimal batch id (``HDFSMetadataLog.isBatchFile``)."""
    return {int(name): f"{folder}/{name}" for name in batch_file_names(storage.names(folder))}


def read_checkpoint(location: Any, *, filesystem: Any = None, storage_options: dict[str, Any] | None = None,
                    newest: int | None = None, on_progress: Any = None) -> Checkpoint:
    """Read a Structured Streaming checkpoint folder (see the module docstring for the formats).

    Lists the folder, ``offsets/`` and ``commits/`` once each, reads ``metadata`` and every batch
    file once (one ``fs.cat`` call over all of them: concurrent on async filesystems). A plain
    local path is listed and read with ``os`` directly (same answers, less overhead).

    :param location: the checkpoint folder: local path, fsspec URL (``s3://...``, ``memory://...``),
        ``os.PathLike``, or an Airflow ``ObjectStoragePath`` / ``UPath`` (its ``fs`` is used).
    :param filesystem: an fsspec filesystem to read ``location`` (a path inside it) with.
    :param storage_options: passed to ``fsspec.core.url_to_fs`` (credentials, endpoint).
    :param newest: read only the files of the ``newest`` highest batch ids of ``offsets/`` (what
        Spark restarts from), plus ``metadata``; None reads every file. ``commits/`` is then not
        listed: the commit file of each of those ids is read by name (absent: not committed), so
        a commit file without an offsets file is not seen (the audit reports it). The cost is two
        listings and at most ``2 * newest + 1`` files, whatever the history: what a sensor poke
        needs. The older files are neither read nor checked (their problems are not reported);
        :attr:`Checkpoint.unread_batches` counts them.
    :param on_progress: ``on_progress(done, total)``: files read of files to read, called every
        :data:`~watermark_ops.core.storage.PROGRESS_EVERY` files of a long read (any reader of the
        core does the same inside :func:`~watermark_ops.core.storage.reporting_progress`).
    :return: a :class:`Checkpoint`; unreadable or malformed files are in ``problems`` (each names
        its file), never raised, and every other file is still read.
    :raises ValueError: ``newest`` below 1.
    """
    if newest is not None and (isinstance(newest, bool) or not isinstance(newest, int) or newest < 1):
        raise ValueError(f"newest must be a positive number of batches (or None: all), got {newest!r}")
    from watermark_ops.core.storage import reporting_progress

    storage, root = _resolve(location, filesystem, storage_options)
    with reporting_progress(on_progress) if on_progress is not None else contextlib.nullcontext():
        return _read(storage, root, newest)  # without one, a callback in force around the call still hears


def _read(storage: Any, root: str, newest: int | None) -> Checkpoint:
    """:func:`read_checkpoint` on a resolved storage (``storage.requests`` counts what it did)."""
    return _read_sized(storage, root, newest)[0]


def _read_sized(storage: Any, root: str, newest: int | None) -> tuple[Checkpoint, int | None, dict[str, str] | None]:
    """:func:`_read`, the size in bytes of the head's ``offsets/<head>`` (None when unread), and
    the checkpoint folder's listing (``{name: "file" | "directory"}``; None when not listed)."""
    display = storage.display
    shown = display(root)
    problems: list[ReadProblem] = []
    top = _list_checkpoint(storage, root, shown, problems)
    if top is None:
        return Checkpoint(location=shown, query_id=None, batches=(), problems=tuple(problems), has_commit_log=False,
                          newest=newest), None, None
    commit_files: dict[int, str] = {}
    if newest is None and storage.retry_delays and top.get("commits") == "directory":
        # A remote store: both log folders listed at once (each listing is pages of 1,000 names).
        from concurrent.futures import ThreadPoolExecutor

        commit_problems: list[ReadProblem] = []
        with ThreadPoolExecutor(max_workers=1) as pool:
            commits_future = pool.submit(_list_log, storage, root, "commits", top, commit_problems)
            offsets_files = _list_log(storage, root, "offsets", top, problems)
            commit_files = commits_future.result()
        problems.extend(commit_problems)
    else:
        offsets_files = _list_log(storage, root, "offsets", top, problems)
        if newest is None:
            commit_files = _list_log(storage, root, "commits", top, problems)
    lowest_offsets = min(offsets_files) if offsets_files else None
    unread = 0
    probed: dict[int, str] = {}
    if newest is not None:
        # The window is the newest offsets ids (what Spark restarts from); their commit files are
        # probed by name instead of listing commits/ (as long as offsets/ once the history is long).
        ids = sorted(offsets_files)
        if len(ids) > newest:
            unread, keep_from = len(ids) - newest, ids[-newest]
            offsets_files = {i: path for i, path in offsets_files.items() if i >= keep_from}
        if top.get("commits") == "directory":
            probed = {i: f"{root}/commits/{i}" for i in offsets_files}
        commit_files = probed
    metadata_path = f"{root}/metadata" if "metadata" in top else None
    head = max(offsets_files) if offsets_files else None
    files = read_log_files(storage, offsets_files, commit_files, metadata_path, probed=probed.values(),
                           size_of=() if head is None else (head,))
    problems.extend(files.problems)
    offsets_files, commit_files = files.offsets_files, files.commit_files
    offsets, commits = files.offsets, files.commits
    built = []  # one Batch per batch id (10,000 in an audit)
    for i in sorted(offsets_files.keys() | commit_files.keys()):
        offsets_file, commit_file = offsets_files.get(i), commit_files.get(i)
        built.append(Batch(i, offsets.get(i), commits.get(i), None if offsets_file is None else display(offsets_file),
                           None if commit_file is None else display(commit_file)))
    batches = tuple(built)
    return Checkpoint(location=shown, query_id=files.query_id, batches=batches, problems=tuple(problems),
                      has_commit_log=top.get("commits") == "directory",
                      metadata_file=display(metadata_path) if metadata_path else None,
                      newest=newest, unread_batches=unread, lowest_offsets_batch_id=lowest_offsets), \
        files.offsets_sizes.get(head), top


class LogFiles(msgspec.Struct):
    """What :func:`read_log_files` read: parsed entries by batch id and the problems, in
    :func:`read_checkpoint`'s order (``metadata``'s, then the offsets files' by batch id, then the
    commit files' by batch id); ``commit_files`` keeps only the probed commits that exist."""

    query_id: str | None
    offsets: dict[int, OffsetsEntry]
    commits: dict[int, CommitEntry]
    offsets_files: dict[int, str]
    commit_files: dict[int, str]
    problems: list[ReadProblem]
    metadata_read: bool = False
    offsets_sizes: dict[int, int] = msgspec.field(default_factory=dict)


def read_log_files(storage: Any, offsets_files: dict[int, str], commit_files: dict[int, str],
                   metadata_path: str | None, *, probed: Iterable[str] = (),
                   probed_offsets: Iterable[str] = (), size_of: Iterable[int] = ()) -> LogFiles:
    """Read and parse offset-log and commit-log files (and ``metadata``) in one concurrent read.

    Shared by :func:`read_checkpoint` and :func:`watermark_ops.core.tail.follow`.

    :param storage: / paths: from :func:`open_storage` (paths inside it).
    :param probed: commit files that may not exist (absent: not committed, no problem, dropped
        from ``commit_files``); ``probed_offsets``: offsets files likewise (dropped from
        ``offsets_files`` when absent). Every other missing file is a problem naming it.
    :param size_of: batch ids whose offsets file's size in bytes goes into ``offsets_sizes``
        (the remembered view notices a rewritten head by its size).
    :return: a :class:`LogFiles`. A file that cannot be read, or reads as half-written
        (``empty``, ``truncated``, ``not_json``) on a remote filesystem, is read again within
        :data:`RETRY_DELAYS_S`; what still fails is a problem naming it and the reads made.
    """
    display = storage.display
    probed = set(probed)
    probed_offsets = set(probed_offsets)
    paths = [*offsets_files.values(), *commit_files.values(), *([metadata_path] if metadata_path else [])]
    ids = [*offsets_files, *commit_files]
    conf_cache: dict[Any, Any] = {}  # one parse of the conf every batch repeats
    # offsets files: Spark's exact form first (spark_form), then the general parser (not that try again)
    parse_offsets_cached = partial(parse_offsets_in_general, conf_cache=conf_cache)
    parsed: dict[str, Any] = {}
    own_problems: dict[str, list[ReadProblem]] = {}
    n_offsets, n_logs = len(offsets_files), len(ids)
    sized, sizes = set(size_of), {}
    fast_offsets: dict[int, OffsetsEntry] = {}  # by batch id, in offsets_files' order
    fast_commits: dict[int, CommitEntry] = {}

    def spark_form(index: int, raw: bytes) -> bool:
        """The common case, as each file is read: a file in Spark's exact form (20,000 of them
        in an audit) parsed, and not kept; every other file is left to parse_some, which reports."""
        if index >= n_logs:
            return False  # metadata
        batch_id = ids[index]
        if index < n_offsets:
            value = _spark_offsets_file(raw, batch_id, display(paths[index]), conf_cache)
            if value is None:
                return False
            fast_offsets[batch_id] = value
            if batch_id in sized:
                sizes[batch_id] = len(raw)
            return True
        value = _spark_commit_file(raw, batch_id, display(paths[index]))
        if value is None:
            return False
        fast_commits[batch_id] = value
        return True

    with collector_paused(len(paths) > _MANY_FILES):
        content = storage.read(paths, probed=probed | probed_offsets, consume=spark_form)
    read = content.contents.get  # content(path) without a call per file

    def parse_some(some: Iterable[tuple[Any, int, str]]) -> None:
        """Parse ``(parser, batch id, path)`` (the parser None for ``metadata``)."""
        for parse, batch_id, path in some:
            if parse is None:
                own: list[ReadProblem] = []
                parsed[path] = _query_id(content(path), display(path), own, content.attempts.get(path, 1))
                own_problems[path] = own
                continue
            raw = read(path)
            if raw is None:
                raw = content(path)  # not read: a FileNotFoundError naming it
            if raw.__class__ is bytes:  # a file read whole (not in Spark's exact form: spark_form took those)
                try:
                    value = parse(raw, batch_id, display(path))
                except LogFileError as err:
                    own_problems[path] = [ReadProblem(err.kind, display(path), err.message
                                                      + _reads(content.attempts.get(path, 1)), batch_id)]
                    parsed[path] = None
                    continue
                if parse is not parse_commit:
                    value, line_problems = value
                    if line_problems:
                        own_problems[path] = list(line_problems)
                    else:
                        own_problems.pop(path, None)
                elif own_problems:
                    own_problems.pop(path, None)
                parsed[path] = value
                continue
            if isinstance(raw, FileNotFoundError) and path in (probed if parse is parse_commit else probed_offsets):
                parsed[path] = _ABSENT
                own_problems.pop(path, None)
                continue
            own = []
            parsed[path] = _parse(parse, raw, batch_id, display(path), own, content.attempts.get(path, 1))
            own_problems[path] = own

    jobs = [*((parse_offsets_cached, i, path) for i, path in offsets_files.items() if i not in fast_offsets),
            *((parse_commit, i, path) for i, path in commit_files.items() if i not in fast_commits),
            *([(None, -1, metadata_path)] if metadata_path else [])]
    with collector_paused(len(jobs) > _MANY_FILES):
        parse_some(jobs)
    for delay in storage.retry_delays:  # half-written files: read again, within a bound
        again = {path for path, own in own_problems.items() if any(p.kind in _HALF_WRITTEN for p in own)}
        if not again:
            break
        time.sleep(delay)
        content.update(storage.read(sorted(again), probed=probed | probed_offsets))
        parse_some(job for job in jobs if job[2] in again)
    # only a probed file can be absent (a copy, not a pass over every file, when none was probed)
    found_offsets = ({i: path for i, path in offsets_files.items() if parsed.get(path) is not _ABSENT}
                     if probed_offsets else dict(offsets_files))
    found_commits = ({i: path for i, path in commit_files.items() if parsed.get(path) is not _ABSENT}
                     if probed else dict(commit_files))
    # read_checkpoint's order: metadata's problems, the offsets files' by batch id, the commits'
    ordered: list[ReadProblem] = list(own_problems.get(metadata_path, ())) if metadata_path else []
    if len(own_problems) > (1 if metadata_path else 0):
        for batch_id in sorted(found_offsets):
            ordered.extend(own_problems.get(found_offsets[batch_id], ()))
        for batch_id in sorted(found_commits):
            ordered.extend(own_problems.get(found_commits[batch_id], ()))
    for i in sized.difference(sizes):  # the sizes of the files not taken in Spark's exact form
        raw = content(found_offsets[i]) if i in found_offsets else None
        if raw is not None and not isinstance(raw, Exception):
            sizes[i] = len(raw)
    return LogFiles(
        query_id=parsed.get(metadata_path) if metadata_path else None,
        offsets=_entries(found_offsets, fast_offsets, parsed), commits=_entries(found_commits, fast_commits, parsed),
        offsets_files=found_offsets, commit_files=found_commits, problems=ordered,
        metadata_read=metadata_path is not None, offsets_sizes=sizes)


_ABSENT = object()


def _entries(found: dict[int, str], fast: dict[int, Any], parsed: dict[str, Any]) -> dict[int, Any]:
    """``{batch id: entry}`` of the ``found`` files that parsed, in their order: those taken in
    Spark's exact form (``fast``, by batch id) and the others (``parsed``, by path; None when not)."""
    if len(fast) == len(found):  # every file in Spark's exact form (fast holds found's ids, in order)
        return fast
    return {i: value for i, path in found.items()
            if (value := fast[i] if i in fast else parsed[path]) is not None}
#: Above this many files a read pauses Python's cyclic garbage collector while it parses them.
_MANY_FILES = 2000


@contextlib.contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """Python's cyclic garbage collector paused (when ``pause``) while a checkpoint is read and
    judged: a few objects per batch (100,000 for 10,000 batches), no reference cycle among them,
    and each collection their allocations trigger walks every object built so far (an eighth of a
    terminal audit's time). Re-enabled after, unless it was off before; nests (an inner pause
    leaves the collector as the outer one set it)."""
    was = pause and gc.isenabled()
    if was:
        gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _list_checkpoint(storage: Any, root: str, shown: str, problems: list[ReadProblem]) -> dict[str, str] | None:
    """The checkpoint folder's listing, or None (with a problem) when it is missing, unlistable or
    not a checkpoint (neither ``metadata`` nor ``offsets/``)."""
    try:
        top = storage.listing(root)
    except FileNotFoundError:
        problems.append(ReadProblem("checkpoint_missing", shown, "no checkpoint folder at this location"))
        return None
    except Exception as exc:  # permissions, network, ...
        problems.append(ReadProblem("unreadable", shown, f"cannot list the checkpoint folder: {exc!r}"))
        return None
    if "metadata" not in top and top.get("offsets") != "directory":
        problems.append(ReadProblem(
            "not_a_checkpoint", shown,
            "neither 'metadata' nor 'offsets/' here: expected a Structured Streaming checkpoint folder",
        ))
        return None
    return top


def _list_log(storage: Any, root: str, log_name: str, top: dict[str, str],
              problems: list[ReadProblem]) -> dict[int, str]:
    """``{batch id: path}`` of one log folder (empty when the folder is absent or unlistable)."""
    if top.get(log_name) != "directory":
        return {}
    folder = f"{root}/{log_name}"
    try:
        return _batch_files(storage, folder)
    except Exception as exc:
        problems.append(ReadProblem("unreadable", storage.display(folder), f"cannot list the folder: {exc!r}"))
        return {}


def _reads(attempts: int) -> str:
    return f" (the same in {attempts} reads)" if attempts > 1 else ""


def _parse(parse: Any, raw: bytes | Exception, batch_id: int, file: str, problems: list[ReadProblem],
           attempts: int = 1) -> Any:
    """``parse(raw, batch_id, file)``, or None with a problem naming the file when it cannot be read or used."""
    if isinstance(raw, Exception):
        problems.append(ReadProblem("unreadable", file, f"cannot read the file: {raw!r}{_reads(attempts)}", batch_id))
        return None
    try:
        return parse(raw, batch_id, file)
    except LogFileError as err:
        problems.append(ReadProblem(err.kind, file, err.message + _reads(attempts), batch_id))
        return None


def _query_id(raw: bytes | Exception, file: str, problems: list[ReadProblem], attempts: int = 1) -> str | None:
    """The query id of ``metadata`` (:func:`~watermark_ops.core.log_formats.parse_metadata`), or
    None with a problem naming the file."""
    if isinstance(raw, Exception):
        problems.append(ReadProblem("unreadable", file, f"cannot read the file: {raw!r}{_reads(attempts)}"))
        return None
    try:
        return parse_metadata(raw)
    except LogFileError as err:
        problems.append(ReadProblem(err.kind, file, err.message + _reads(attempts)))
        return None
