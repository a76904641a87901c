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

``Checkpoint`` (frozen dataclass)
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

``Batch`` (frozen dataclass), one per batch id
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

import os
import time
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any, Callable, Iterable

from watermark_ops.core.log_formats import (
    CommitEntry,
    LogFileError,
    OffsetsEntry,
    ReadProblem,
    is_batch_file_name,
    parse_commit,
    parse_metadata,
    parse_offsets,
    split_log_file,
)

__all__ = ["MAX_CONCURRENT_READS", "RETRY_DELAYS_S", "Batch", "Checkpoint", "LogFiles", "StateMetadata",
           "StateOperator", "filesystem_for", "open_storage", "read_checkpoint", "read_log_files", "read_state_metadata"]

#: The most objects read at once from a remote filesystem (``fs.cat``'s ``batch_size`` on an
#: async one such as s3fs, gcsfs or adlfs; a thread pool of this size on a synchronous one). On S3,
#: botocore's ``max_pool_connections`` (default 10) caps it as well:
#: :func:`watermark_ops.airflow.storage.checkpoint_filesystem` and the CLI raise it to this value.
MAX_CONCURRENT_READS = 32
#: The pauses (seconds) before each new attempt at an object of a remote filesystem that could
#: not be read (throttled: S3's 503 ``SlowDown`` after s3fs's and botocore's own retries; a
#: network error), that a listing named but a read did not find, or that looked half-written
#: (``empty``, ``truncated``, ``not_json``): at most ``1 + len(RETRY_DELAYS_S)`` reads, never
#: more; what still fails is reported by name (:class:`ReadProblem`), never fixed. Local folders
#: and ``memory://`` are read once (a file there is whole once Spark renamed it into place).
RETRY_DELAYS_S = (0.1, 0.4)
#: Problem kinds a writer caught in the act can produce, retried on remote filesystems.
_HALF_WRITTEN = ("empty", "truncated", "not_json")

#: Highest offset-log version this reader knows (``OffsetSeqLog.MAX_VERSION`` in Spark 4.2+).
OFFSETS_MAX_VERSION = 2
#: Highest commit-log version this reader knows (``CommitLog.MAX_VERSION`` in Spark 4.2+).
COMMITS_MAX_VERSION = 3


@dataclass(frozen=True)
class Batch:
    """Everything the checkpoint holds about one batch id: its offsets entry and its commit entry."""

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


@dataclass(frozen=True)
class Checkpoint:
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

    @property
    def head_batch_id(self) -> int | None:
        """The latest batch id that has an offsets file (``offsetLog.getLatest``), None if none."""
        ids = [b.batch_id for b in self.batches if b.offsets_file is not None]
        return max(ids) if ids else None

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


# --------------------------------------------------------------------------------------------
# Reading


class _FsspecStorage:
    """Lists and reads through an fsspec filesystem (any URL, an ``ObjectStoragePath``, a filesystem given).

    Every listing is fresh (the filesystem's listing cache for the folder is dropped first: s3fs
    keeps listings forever by default, and a long-lived process would never see a new batch).
    Reads are concurrent, at most :data:`MAX_CONCURRENT_READS` at once, and retried within
    :data:`RETRY_DELAYS_S` on a remote filesystem. ``requests`` counts the calls made
    (``{"list": n, "get": n}``: one listing call, one object read).
    """

    def __init__(self, fs: Any):
        self.fs = fs
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.protocol = protocol
        self.retry_delays: tuple[float, ...] = () if protocol in ("file", "local", "memory") else RETRY_DELAYS_S
        self.requests = {"list": 0, "get": 0}

    def display(self, path: str) -> str:
        """A location a human recognises: a plain path on the local filesystem, else a URL."""
        if self.protocol in ("file", "local"):
            return path
        return self.fs.unstrip_protocol(path)

    def _ls(self, path: str, detail: bool) -> list[Any]:
        self.requests["list"] += 1
        try:
            self.fs.invalidate_cache(path)  # fresh: never an old listing of a growing log folder
        except Exception:  # noqa: BLE001 - a filesystem without a cache
            pass
        return self.fs.ls(path, detail=detail)

    def listing(self, path: str) -> dict[str, str]:
        """One fresh listing of a folder -> {name: type ('file' | 'directory' | ...)}."""
        return {_name(info["name"]): info.get("type", "file") for info in self._ls(path, True)}

    def names(self, folder: str) -> list[str]:
        """The names in a folder, freshly listed (no stat per entry)."""
        return [_name(p if isinstance(p, str) else p["name"]) for p in self._ls(folder, False)]

    def _fetch(self, paths: list[str]) -> dict[str, bytes | Exception]:
        """One concurrent read of every path -> {path as given: bytes | exception}."""
        fs = self.fs
        self.requests["get"] += len(paths)
        if not paths:
            return {}
        if getattr(fs, "async_impl", False):
            contents = fs.cat(paths, on_error="return", batch_size=MAX_CONCURRENT_READS, **_one_request(fs))
        elif len(paths) == 1 or self.protocol in ("file", "local", "memory"):
            contents = fs.cat(paths, on_error="return")
        else:  # a synchronous remote filesystem (HDFS, ...): a bounded thread pool
            from concurrent.futures import ThreadPoolExecutor

            def one(path: str) -> bytes | Exception:
                try:
                    return fs.cat_file(path)
                except Exception as exc:  # noqa: BLE001 - returned, reported by the caller
                    return exc

            with ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT_READS, len(paths))) as pool:
                contents = dict(zip(paths, pool.map(one, paths)))
        if not isinstance(contents, dict):  # a single path may come back bare
            contents = {paths[0]: contents}
        out: dict[str, bytes | Exception] = {}
        for path in paths:
            value = contents.get(path)
            if value is None:  # some filesystems key the result by a normalised path
                value = contents.get(fs._strip_protocol(path), FileNotFoundError(path))
            out[path] = value
        return out

    def read(self, paths: list[str], *, probed: Iterable[str] = ()):
        """Read every file at once (concurrent, bounded), retrying within :data:`RETRY_DELAYS_S`
        what failed: any error but a missing object, and a missing object the caller did not
        merely probe for (``probed``: paths that may well not exist, e.g. the commit of a batch
        still running). Returns ``content(path) -> bytes | Exception``; ``content.attempts``
        is ``{path: reads}`` for the paths read more than once."""
        contents = self._fetch(list(paths))
        probed = set(probed)
        attempts: dict[str, int] = {}
        for delay in self.retry_delays:
            again = [p for p, v in contents.items() if isinstance(v, Exception)
                     and not (isinstance(v, FileNotFoundError) and p in probed)]
            if not again:
                break
            time.sleep(delay)
            contents.update(self._fetch(again))
            for p in again:
                attempts[p] = attempts.get(p, 1) + 1
        return _Content(contents, attempts)


def _one_request(fs: Any) -> dict[str, Any]:
    """``cat_file`` keywords that make one small object one request: s3fs (2024.12+) asks for the
    size first (a HEAD, and a LIST when the object is missing) to split large objects into
    concurrent ranges unless ``max_concurrency=1``; checkpoint files are a few hundred bytes."""
    import inspect

    key = type(fs)
    if key not in _ONE_REQUEST:
        try:
            takes = "max_concurrency" in inspect.signature(fs._cat_file).parameters
        except (TypeError, ValueError, AttributeError):
            takes = False
        _ONE_REQUEST[key] = {"max_concurrency": 1} if takes else {}
    return _ONE_REQUEST[key]


_ONE_REQUEST: dict[type, dict[str, Any]] = {}


class _Content:
    """``content(path) -> bytes | Exception`` with ``attempts`` (``{path: reads}`` beyond one)."""

    def __init__(self, contents: dict[str, Any], attempts: dict[str, int] | None = None):
        self.contents = contents
        self.attempts = attempts or {}

    def __call__(self, path: str) -> bytes | Exception:
        value = self.contents.get(path)
        return FileNotFoundError(path) if value is None else value

    def update(self, other: _Content) -> None:
        """Take ``other``'s contents over these (a later attempt), adding up the attempts."""
        self.contents.update(other.contents)
        for path in other.contents:
            self.attempts[path] = self.attempts.get(path, 1) + other.attempts.get(path, 1)


class _LocalStorage:
    """Lists and reads a plain local path with ``os`` directly: the answers of fsspec's
    ``LocalFileSystem`` (same names, types, bytes and exceptions) without importing fsspec or its
    per-entry and per-file overhead, which dominate a local audit (a 10,000-batch checkpoint is
    40,000 directory entries and 20,000 files)."""

    retry_delays: tuple[float, ...] = ()

    def __init__(self) -> None:
        self.requests = {"list": 0, "get": 0}

    def display(self, path: str) -> str:
        return path

    def listing(self, path: str) -> dict[str, str]:
        self.requests["list"] += 1
        try:
            with os.scandir(path) as entries:
                return {e.name: "directory" if e.is_dir() else "file" for e in entries}
        except NotADirectoryError:  # fsspec lists a file as itself
            return {_name(path): "file"}

    def names(self, folder: str) -> list[str]:
        self.requests["list"] += 1
        return os.listdir(folder)

    def read(self, paths: list[str], *, probed: Iterable[str] = ()):
        """Read every file with ``os.open``/``os.read`` (no buffered file object per file: half
        the cost of ``open().read()`` for small files; one after the other: a local read costs
        microseconds, less than handing it to a thread); ``content(path) -> bytes | Exception``.
        Read once: a local file is whole once Spark renamed it into place."""
        self.requests["get"] += len(paths)
        contents: dict[str, bytes | Exception] = {}
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
        for path in paths:
            try:
                fd = os.open(path, flags)
            except Exception as exc:  # noqa: BLE001 - reported as a ReadProblem naming the file
                contents[path] = exc
                continue
            try:
                chunks = []
                while chunk := os.read(fd, 65536):
                    chunks.append(chunk)
                contents[path] = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            except Exception as exc:  # noqa: BLE001 - e.g. IsADirectoryError on read
                contents[path] = exc
            finally:
                os.close(fd)
        return _Content(contents)


def _local_path(location: Any) -> str | None:
    """The absolute path of a plain local location (a ``str`` or ``os.PathLike`` without a
    protocol), spelled as fsspec's ``LocalFileSystem`` spells it; None for anything else."""
    if os.sep != "/" or not isinstance(location, (str, os.PathLike)):
        return None
    text = os.fspath(location)
    if not isinstance(text, str) or "://" in text or "::" in text or text.startswith(("file:", "local:")):
        return None
    if text.startswith("~"):
        text = os.path.expanduser(text)
    elif not text.startswith("/"):
        text = f"{os.getcwd()}/{'' if text == '.' else text.removeprefix('./')}"
    return text.rstrip("/") or "/"


def _resolve(location: Any, filesystem: Any, storage_options: dict[str, Any] | None):
    """-> (storage, path inside it)."""
    if filesystem is not None:
        return _FsspecStorage(filesystem), str(location).rstrip("/") or "/"
    if hasattr(location, "fs") and hasattr(location, "path"):  # ObjectStoragePath / UPath
        return _FsspecStorage(location.fs), str(location.path).rstrip("/") or "/"
    local = None if storage_options else _local_path(location)
    if local is not None:
        return _LocalStorage(), local
    import fsspec

    fs, path = fsspec.core.url_to_fs(os.fspath(location), **(storage_options or {}))
    return _FsspecStorage(fs), path.rstrip("/") or "/"


def open_storage(location: Any, *, filesystem: Any = None, storage_options: dict[str, Any] | None = None):
    """The storage :func:`read_checkpoint` reads ``location`` with, for other readers of the same
    checkpoint (the file source's log, :mod:`watermark_ops.core.source_log`).

    :return: ``(storage, path)``: ``storage.display(path) -> str`` (what to show),
        ``storage.listing(path) -> {name: "file" | "directory"}``, ``storage.names(folder) -> [name]``
        and ``storage.read([path]) -> content(path) -> bytes | Exception`` (never raises per file);
        ``path`` is the location inside it (an absolute local path, or fsspec's path).
        Listing a missing folder raises ``FileNotFoundError``.
    """
    return _resolve(location, filesystem, storage_options)


def filesystem_for(location: Any, filesystem: Any) -> Any:
    """``filesystem`` when ``location`` is on it, else None (the location is then resolved by itself).

    Used for the other files a checkpoint's readers open (landing files named by the file
    source's log, the late-row sink, landing folders): ``s3://b/k`` (or ``s3a://``, as Spark
    writes) is on an s3 filesystem, ``file:///landing/x`` is not; a location without a scheme is
    taken as a path on ``filesystem`` unless that is a remote filesystem and the path is an
    absolute local one that exists here.
    """
    if filesystem is None:
        return None
    text = os.fspath(location) if isinstance(location, (str, os.PathLike)) else str(location)
    protocols = (filesystem.protocol,) if isinstance(filesystem.protocol, str) else tuple(filesystem.protocol)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        if scheme in ("s3a", "s3n"):
            scheme = "s3"
        return filesystem if scheme in protocols else None
    if text.startswith("/") and not {"file", "local"} & set(protocols) and os.path.exists(text):
        return None
    return filesystem


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _batch_files(storage: Any, folder: str) -> dict[int, str]:
    """One listing of a log folder (names only: no stat per file) -> {batch id: path} of the names
    that are a whole decimal batch id (``HDFSMetadataLog.isBatchFile``)."""
    return {int(name): f"{folder}/{name}" for name in storage.names(folder) if is_batch_file_name(name)}


def read_checkpoint(location: Any, *, filesystem: Any = None, storage_options: dict[str, Any] | None = None,
                    newest: int | None = None) -> Checkpoint:
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
    :return: a :class:`Checkpoint`; unreadable or malformed files are in ``problems`` (each names
        its file), never raised, and every other file is still read.
    :raises ValueError: ``newest`` below 1.
    """
    if newest is not None and (isinstance(newest, bool) or not isinstance(newest, int) or newest < 1):
        raise ValueError(f"newest must be a positive number of batches (or None: all), got {newest!r}")
    storage, root = _resolve(location, filesystem, storage_options)
    return _read(storage, root, newest)


def _read(storage: Any, root: str, newest: int | None) -> Checkpoint:
    """:func:`read_checkpoint` on a resolved storage (``storage.requests`` counts what it did)."""
    display = storage.display
    shown = display(root)
    problems: list[ReadProblem] = []
    top = _list_checkpoint(storage, root, shown, problems)
    if top is None:
        return Checkpoint(location=shown, query_id=None, batches=(), problems=tuple(problems), has_commit_log=False,
                          newest=newest)
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
    files = read_log_files(storage, offsets_files, commit_files, metadata_path, probed=probed.values())
    problems.extend(files.problems)
    offsets_files, commit_files = files.offsets_files, files.commit_files
    batches = tuple(
        Batch(
            batch_id=i,
            offsets=files.offsets.get(i),
            commit=files.commits.get(i),
            offsets_file=display(offsets_files[i]) if i in offsets_files else None,
            commit_file=display(commit_files[i]) if i in commit_files else None,
        )
        for i in sorted(offsets_files.keys() | commit_files.keys())
    )
    return Checkpoint(location=shown, query_id=files.query_id, batches=batches, problems=tuple(problems),
                      has_commit_log=top.get("commits") == "directory",
                      metadata_file=display(metadata_path) if metadata_path else None,
                      newest=newest, unread_batches=unread, lowest_offsets_batch_id=lowest_offsets)


@dataclass
class LogFiles:
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


def read_log_files(storage: Any, offsets_files: dict[int, str], commit_files: dict[int, str],
                   metadata_path: str | None, *, probed: Iterable[str] = (),
                   probed_offsets: Iterable[str] = ()) -> LogFiles:
    """Read and parse offset-log and commit-log files (and ``metadata``) in one concurrent read.

    Shared by :func:`read_checkpoint` and :func:`watermark_ops.core.tail.follow`.

    :param storage: / paths: from :func:`open_storage` (paths inside it).
    :param probed: commit files that may not exist (absent: not committed, no problem, dropped
        from ``commit_files``); ``probed_offsets``: offsets files likewise (dropped from
        ``offsets_files`` when absent). Every other missing file is a problem naming it.
    :return: a :class:`LogFiles`. A file that cannot be read, or reads as half-written
        (``empty``, ``truncated``, ``not_json``) on a remote filesystem, is read again within
        :data:`RETRY_DELAYS_S`; what still fails is a problem naming it and the reads made.
    """
    display = storage.display
    probed = set(probed)
    probed_offsets = set(probed_offsets)
    paths = [*offsets_files.values(), *commit_files.values(), *([metadata_path] if metadata_path else [])]
    content = storage.read(paths, probed=probed | probed_offsets)
    conf_cache: dict[str, Any] = {}  # one parse of the conf every batch repeats
    parse_offsets_cached = partial(parse_offsets, conf_cache=conf_cache)
    kinds = {**{path: (parse_offsets_cached, i) for i, path in offsets_files.items()},
             **{path: (parse_commit, i) for i, path in commit_files.items()}}
    parsed: dict[str, Any] = {}
    own_problems: dict[str, list[ReadProblem]] = {}

    def parse_some(some: Iterable[str]) -> None:
        for path in some:
            own: list[ReadProblem] = []
            if path == metadata_path:
                parsed[path] = _query_id(content(path), display(path), own, content.attempts.get(path, 1))
            else:
                parse, batch_id = kinds[path]
                raw = content(path)
                if isinstance(raw, FileNotFoundError) and path in (probed if parse is parse_commit else probed_offsets):
                    parsed[path] = _ABSENT
                    own_problems[path] = []
                    continue
                value = _parse(parse, raw, batch_id, display(path), own, content.attempts.get(path, 1))
                if value is not None and parse is not parse_commit:
                    value, line_problems = value
                    own.extend(line_problems)
                parsed[path] = value
            own_problems[path] = own

    parse_some(paths)
    for delay in storage.retry_delays:  # half-written files: read again, within a bound
        again = [path for path, own in own_problems.items() if any(p.kind in _HALF_WRITTEN for p in own)]
        if not again:
            break
        time.sleep(delay)
        content.update(storage.read(again, probed=probed | probed_offsets))
        parse_some(again)
    found_offsets = {i: path for i, path in offsets_files.items() if parsed[path] is not _ABSENT}
    found_commits = {i: path for i, path in commit_files.items() if parsed[path] is not _ABSENT}
    # read_checkpoint's order: metadata's problems, the offsets files' by batch id, the commits'
    ordered: list[ReadProblem] = list(own_problems.get(metadata_path, ())) if metadata_path else []
    for batch_id in sorted(found_offsets):
        ordered.extend(own_problems[found_offsets[batch_id]])
    for batch_id in sorted(found_commits):
        ordered.extend(own_problems[found_commits[batch_id]])
    return LogFiles(
        query_id=parsed.get(metadata_path) if metadata_path else None,
        offsets={i: parsed[path] for i, path in found_offsets.items() if parsed[path] is not None},
        commits={i: parsed[path] for i, path in found_commits.items() if parsed[path] is not None},
        offsets_files=found_offsets, commit_files=found_commits, problems=ordered,
        metadata_read=metadata_path is not None)


_ABSENT = object()


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


# --------------------------------------------------------------------------------------------
# The state operators' metadata (state/<opId>/...): which stateful operators a query has, and
# which of their state columns carry an event-time watermark


#: The field metadata key Spark puts on an event-time column once ``withWatermark`` names it
#: (``EventTimeWatermark.delayKey``); a window column built from it carries it too.
WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"
#: Highest ``OperatorStateMetadata`` version this reader knows (``OperatorStateMetadata.scala``, 4.0+).
STATE_METADATA_MAX_VERSION = 2


@dataclass(frozen=True)
class StateOperator:
    """One stateful operator's metadata (``state/<opId>/_metadata/metadata``, v1, Spark 3.5+; or
    the newest ``state/<opId>/_metadata/v2/<batchId>``, 4.0+, ``OperatorStateMetadata.scala``)
    and the event-time columns of its state schema.

    :ivar operator_id: ``<opId>``, the folder name.
    :ivar name: ``operatorInfo.operatorName``, Spark's short name of the operator: ``stateStoreSave``
        (aggregation), ``dedupe``, ``dedupeWithinWatermark``, ``symmetricHashJoin``,
        ``sessionWindowStateStoreSaveExec``, ``flatMapGroupsWithState``, ``globalLimit``,
        ``transformWithStateExec``; None when no metadata file was readable.
    :ivar version: the metadata file's version (1 or 2), None without one.
    :ivar metadata_file: the file read, None without one.
    :ivar stores: the state store names (``stateStoreInfo[].storeName``; ``default`` for most).
    :ivar watermark_columns: ``{"store", "key_or_value", "column", "delay_ms", "file"}`` per state
        column whose schema carries ``spark.watermarkDelayMs`` (:data:`WATERMARK_DELAY_KEY`): the
        operator keeps an event-time column of a watermark (a window, or the event time itself);
        read from the state schema file (``state/<opId>/0[/<store>]/_metadata/schema``, v1/v2,
        ``SchemaHelper.scala``).
    """

    operator_id: int
    name: str | None = None
    version: int | None = None
    metadata_file: str | None = None
    stores: tuple[str, ...] = ()
    watermark_columns: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every attribute."""
        return {"operator_id": self.operator_id, "name": self.name, "version": self.version,
                "metadata_file": self.metadata_file, "stores": list(self.stores),
                "watermark_columns": [dict(c) for c in self.watermark_columns]}


@dataclass(frozen=True)
class StateMetadata:
    """What ``state/`` says of a checkpoint's stateful operators (:func:`read_state_metadata`).

    :ivar location: the checkpoint location.
    :ivar has_state_folder: a ``state/`` folder exists (a stateful query wrote state); False for a
        stateless query (or one that has not run a batch yet).
    :ivar operators: one :class:`StateOperator` per ``state/<opId>`` folder, by id.
    :ivar problems: metadata files that could not be read or parsed, each naming its file.
    """

    location: str
    has_state_folder: bool
    operators: tuple[StateOperator, ...] = ()
    problems: tuple[ReadProblem, ...] = ()

    @property
    def watermark_columns(self) -> list[dict[str, Any]]:
        """Every state column carrying a watermark's delay, over all operators (with ``operator_id``)."""
        return [dict(c, operator_id=op.operator_id) for op in self.operators for c in op.watermark_columns]

    def to_dict(self) -> dict[str, Any]:
        """``{"location", "has_state_folder", "operators": [StateOperator.to_dict()], "problems": [...]}``."""
        return {"location": self.location, "has_state_folder": self.has_state_folder,
                "operators": [op.to_dict() for op in self.operators],
                "problems": [p.to_dict() for p in self.problems]}


def read_state_metadata(location: Any, *, filesystem: Any = None,
                        storage_options: dict[str, Any] | None = None) -> StateMetadata:
    """Read the stateful operators' metadata under ``<checkpoint>/state/`` (no state store data).

    Lists ``state/``, each ``state/<opId>/_metadata`` (and ``_metadata/v2`` when present), reads
    the metadata file (v1 ``metadata``, else the newest v2 batch file) and the schema file of
    each state store of partition 0 (``state/<opId>/0/_metadata/schema`` for the ``default``
    store, ``state/<opId>/0/<store>/_metadata/schema`` for a named one, as
    ``StateSchemaCompatibilityChecker`` places them). A few small files per operator, whatever
    the history. Spark writes the operator metadata since 3.5 (``OperatorStateMetadataWriter``);
    an older checkpoint has state folders without it (``name`` None).

    :param location: the checkpoint folder (see :func:`read_checkpoint`).
    :return: a :class:`StateMetadata`; a missing ``state/`` is ``has_state_folder`` False, a bad
        or unreadable file a :class:`ReadProblem` naming it. Never raises for content.
    """
    storage, root = _resolve(location, filesystem, storage_options)
    shown = storage.display(root)
    problems: list[ReadProblem] = []
    state = f"{root}/state"
    try:
        op_ids = sorted(int(name) for name in storage.names(state) if is_batch_file_name(name))
    except (FileNotFoundError, NotADirectoryError):
        return StateMetadata(location=shown, has_state_folder=False)
    except Exception as exc:  # permissions, network: say so, do not guess
        problems.append(ReadProblem("unreadable", storage.display(state), f"cannot list the folder: {exc!r}"))
        return StateMetadata(location=shown, has_state_folder=True, problems=tuple(problems))
    operators = []
    for op_id in op_ids:
        operators.append(_state_operator(storage, f"{state}/{op_id}", op_id, problems))
    return StateMetadata(location=shown, has_state_folder=True, operators=tuple(operators), problems=tuple(problems))


def _state_operator(storage: Any, folder: str, op_id: int, problems: list[ReadProblem]) -> StateOperator:
    meta = f"{folder}/_metadata"
    try:
        names = set(storage.names(meta))
    except (FileNotFoundError, NotADirectoryError):
        names = set()
    except Exception as exc:
        problems.append(ReadProblem("unreadable", storage.display(meta), f"cannot list the folder: {exc!r}"))
        names = set()
    path = f"{meta}/metadata" if "metadata" in names else None
    if path is None and "v2" in names:
        try:
            batches = [int(n) for n in storage.names(f"{meta}/v2") if is_batch_file_name(n)]
        except Exception as exc:  # noqa: BLE001 - reported, not guessed
            problems.append(ReadProblem("unreadable", storage.display(f"{meta}/v2"), f"cannot list the folder: {exc!r}"))
            batches = []
        path = f"{meta}/v2/{max(batches)}" if batches else None
    if path is None:
        return StateOperator(operator_id=op_id)
    shown = storage.display(path)
    raw = storage.read([path])(path)
    parsed = None
    if isinstance(raw, Exception):
        problems.append(ReadProblem("unreadable", shown, f"cannot read the file: {raw!r}"))
    else:
        try:
            parsed = _parse_operator_metadata(raw)
        except LogFileError as err:
            problems.append(ReadProblem(err.kind, shown, err.message))
    if parsed is None:
        return StateOperator(operator_id=op_id, metadata_file=shown)
    version, name, stores = parsed
    columns: list[dict[str, Any]] = []
    for store in stores or ("default",):
        schema = f"{folder}/0/_metadata/schema" if store == "default" else f"{folder}/0/{store}/_metadata/schema"
        content = storage.read([schema])(schema)
        if isinstance(content, FileNotFoundError):
            continue
        if isinstance(content, Exception):
            problems.append(ReadProblem("unreadable", storage.display(schema), f"cannot read the file: {content!r}"))
            continue
        try:
            for part, struct in zip(("key", "value"), _parse_state_schema(content)):
                for column, delay in _watermarked_fields(struct):
                    columns.append({"store": store, "key_or_value": part, "column": column, "delay_ms": delay,
                                    "file": storage.display(schema)})
        except LogFileError as err:
            problems.append(ReadProblem(err.kind, storage.display(schema), err.message))
    return StateOperator(operator_id=op_id, name=name, version=version, metadata_file=shown, stores=tuple(stores),
                         watermark_columns=tuple(columns))


def _parse_operator_metadata(raw: bytes) -> tuple[int, str | None, tuple[str, ...]]:
    """``v<1|2>`` then the JSON of ``OperatorStateMetadataV1``/``V2`` -> (version, operatorName, store names).

    :raises LogFileError: empty, binary, bad header, newer version, not JSON, or the wrong shape.
    """
    import json

    version, lines = split_log_file(raw, "state operator metadata", STATE_METADATA_MAX_VERSION)
    text = "\n".join(lines).strip()
    if not text:
        raise LogFileError("truncated", "no JSON after the version line: expected the operator's metadata")
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise LogFileError("not_json", f"the operator metadata is not JSON ({exc})") from None
    info = body.get("operatorInfo") if isinstance(body, dict) else None
    if not isinstance(info, dict):
        raise LogFileError("bad_field", "expected an object with 'operatorInfo' ({operatorId, operatorName})")
    name = info.get("operatorName")
    stores = tuple(s["storeName"] for s in body.get("stateStoreInfo") or []
                   if isinstance(s, dict) and isinstance(s.get("storeName"), str))
    return version, name if isinstance(name, str) else None, stores


def _parse_state_schema(raw: bytes) -> tuple[Any, Any]:
    """The key and value schemas (parsed ``StructType`` JSON) of a state schema file.

    ``SchemaHelper.scala``: Java ``DataOutputStream`` ``writeUTF("v1"|"v2")``; v1 then one
    ``writeUTF`` per schema JSON; v2 then per schema an ``int`` count of chunks and that many
    ``writeUTF`` chunks (a schema JSON may exceed ``writeUTF``'s 65,535 bytes).

    :raises LogFileError: ``truncated``, ``unsupported_version``, ``not_json``.
    """
    import json
    import struct

    position = 0

    def take(n: int) -> bytes:
        nonlocal position
        if position + n > len(raw):
            raise LogFileError("truncated", f"the state schema file ends at byte {len(raw)}, expected {n} more bytes "
                                            f"at byte {position}")
        chunk = raw[position:position + n]
        position += n
        return chunk

    def utf() -> str:
        (length,) = struct.unpack(">H", take(2))
        return take(length).decode("utf-8", errors="replace")

    version = utf()
    if version not in ("v1", "v2"):
        raise LogFileError("unsupported_version", f"state schema file version {version[:20]!r}: this reader knows "
                                                  f"v1 and v2 (SchemaHelper)")
    texts = []
    for _ in range(2):
        if version == "v1":
            texts.append(utf())
        else:
            (count,) = struct.unpack(">i", take(4))
            if not 0 <= count <= 10_000:
                raise LogFileError("truncated", f"state schema file: {count} chunks announced, expected 0..10000")
            texts.append("".join(utf() for _ in range(count)))
    try:
        return json.loads(texts[0]), json.loads(texts[1])
    except ValueError as exc:
        raise LogFileError("not_json", f"a schema in the state schema file is not JSON ({exc})") from None


def _watermarked_fields(schema: Any, prefix: str = "") -> list[tuple[str, int | None]]:
    """``(column path, delay ms)`` of every field whose metadata holds :data:`WATERMARK_DELAY_KEY`."""
    out: list[tuple[str, int | None]] = []
    for field_ in (schema.get("fields") or []) if isinstance(schema, dict) else []:
        if not isinstance(field_, dict):
            continue
        name = f"{prefix}{field_.get('name')}"
        metadata = field_.get("metadata") or {}
        if isinstance(metadata, dict) and WATERMARK_DELAY_KEY in metadata:
            delay = metadata[WATERMARK_DELAY_KEY]
            out.append((name, delay if isinstance(delay, int) and not isinstance(delay, bool) else None))
        if isinstance(field_.get("type"), dict):
            out.extend(_watermarked_fields(field_["type"], f"{name}."))
    return out
