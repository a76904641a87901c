"""Where a checkpoint's files are read from: the local filesystem (``os``) or any fsspec filesystem.

The storage back-ends behind every reader of the core (the offset and commit logs,
:mod:`watermark_ops.core.checkpoint`; the file source's log; the progress log; the state
metadata; the ledger's landed files). A storage lists a folder (``listing``/``names``), reads many
files at once (``read``: concurrent and bounded on a remote filesystem, retried within
:data:`RETRY_DELAYS_S`, never raising per file) and says how to show a path (``display``).

* :class:`_LocalStorage`: a plain local path, read with ``os`` (no fsspec import, no per-file
  overhead: a local audit of 10,000 batches is 40,000 directory entries and 20,000 files);
* :class:`_FsspecStorage`: anything else (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``,
  ``memory://``, an Airflow ``ObjectStoragePath``, a filesystem given), every listing fresh.

:func:`open_storage` picks one for a location; :func:`filesystem_for` tells whether another
location (a landed file, a sink) is on the same filesystem.

Pure core: imports neither Airflow nor Spark (fsspec only when a location needs it).
"""

from __future__ import annotations

import os
import stat
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterable, Iterator

__all__ = ["MAX_CONCURRENT_READS", "PROGRESS_EVERY", "RETRY_DELAYS_S", "filesystem_for", "open_storage",
           "reporting_progress", "uri_location"]

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
#: Files read between two calls of a progress callback (:func:`reporting_progress`); on a remote
#: filesystem, the files handed to one concurrent read while a callback listens.
PROGRESS_EVERY = 256


class _Progress:
    """Files read of files to read, over every read while :func:`reporting_progress` is in force."""

    def __init__(self, on_progress: Callable[[int, int], Any]):
        self.on_progress, self.done, self.total = on_progress, 0, 0


_PROGRESS: ContextVar[_Progress | None] = ContextVar("watermark_ops_read_progress", default=None)


@contextmanager
def reporting_progress(on_progress: Callable[[int, int], Any] | None) -> Iterator[None]:
    """While in force (this thread or task), every read of many files calls ``on_progress(done,
    total)``: files read so far, of the files the reads so far were given (both counts only grow;
    each read ends with ``done == total``), every :data:`PROGRESS_EVERY` files. None: no calls.
    The faces render it (a terminal bar, a task-log line); the core only counts."""
    token = _PROGRESS.set(_Progress(on_progress) if on_progress is not None else None)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


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
        self.requests = {"list": 0, "get": 0, "head": 0}

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

    def read(self, paths: list[str], *, probed: Iterable[str] = (), consume: Any = None):
        """Read every file at once (concurrent, bounded), retrying within :data:`RETRY_DELAYS_S`
        what failed: any error but a missing object, and a missing object the caller did not
        merely probe for (``probed``: paths that may well not exist, e.g. the commit of a batch
        still running). Returns ``content(path) -> bytes | Exception``; ``content.attempts``
        is ``{path: reads}`` for the paths read more than once.

        :param consume: ``consume(index in paths, bytes) -> bool``, called for every file read
            (after the retries); a file it returns True for is not kept in the content (the
            caller took what it needed from it), as :meth:`_LocalStorage.read` does."""
        progress = _PROGRESS.get()
        if progress is None or len(paths) <= PROGRESS_EVERY:
            contents = self._fetch(list(paths))
        else:  # in pieces, each read concurrently, so that the callback hears between them
            contents, before = {}, progress.done
            progress.total += len(paths)
            for start in range(0, len(paths), PROGRESS_EVERY):
                contents.update(self._fetch(list(paths[start:start + PROGRESS_EVERY])))
                progress.done = before + min(start + PROGRESS_EVERY, len(paths))
                progress.on_progress(progress.done, progress.total)
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
        if consume is not None:
            for index, path in enumerate(paths):
                value = contents.get(path)
                if value.__class__ is bytes and consume(index, value):
                    del contents[path]
        return _Content(contents, attempts)


    def forget(self, *paths: str) -> None:
        """Drop ``paths`` (folders or files) from the filesystem's listing cache: s3fs answers
        ``info`` and sizes an opened file from a cached listing, which never expires by default."""
        for path in paths:
            try:
                self.fs.invalidate_cache(path)
            except Exception:  # noqa: BLE001 - a filesystem without a cache
                pass

    def stat(self, paths: list[str]) -> dict[str, tuple[int, Any] | Exception]:
        """``{path: (size in bytes, version tag) | exception}``, fresh (one HEAD each on object
        storage, concurrently): the tag is the object's content hash where the store gives one
        (S3's ETag, GCS's md5Hash), else None. Nothing is read."""
        self.requests["head"] += len(paths)

        def one(path: str) -> tuple[int, Any] | Exception:
            try:
                info = self.fs.info(path)
            except Exception as exc:  # noqa: BLE001 - returned, judged by the caller
                return exc
            if info.get("type") == "directory":
                return IsADirectoryError(path)
            return int(info.get("size") or 0), _tag(info)

        if len(paths) <= 1 or not self.retry_delays:
            return {path: one(path) for path in paths}
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT_READS, len(paths))) as pool:
            return dict(zip(paths, pool.map(one, paths)))


def _tag(info: dict[str, Any]) -> Any:
    """A file's version tag from an fsspec ``info``: its content hash where the store gives one
    (S3's ETag, GCS's md5Hash), else None: a modification time changes when the same bytes are
    written again, which is no change of the file."""
    for key in ("ETag", "md5Hash", "etag"):
        value = info.get(key)
        if value is not None:
            return value if isinstance(value, (int, float, str)) else str(value)
    return None


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
        self.requests = {"list": 0, "get": 0, "head": 0}

    def display(self, path: str) -> str:
        return path

    def forget(self, *paths: str) -> None:
        """Nothing to forget: ``os`` keeps no listing cache."""

    def stat(self, paths: list[str]) -> dict[str, tuple[int, Any] | Exception]:
        """``{path: (size in bytes, None) | exception}`` (``os.stat``: a local file has no content hash)."""
        self.requests["head"] += len(paths)
        out: dict[str, tuple[int, Any] | Exception] = {}
        for path in paths:
            try:
                st = os.stat(path)
            except OSError as exc:
                out[path] = exc
                continue
            out[path] = IsADirectoryError(path) if stat.S_ISDIR(st.st_mode) else (st.st_size, None)
        return out

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

    def read(self, paths: list[str], *, probed: Iterable[str] = (), consume: Any = None):
        """Read every file with ``os.open``/``os.read`` (no buffered file object per file: half
        the cost of ``open().read()`` for small files; one after the other: a local read costs
        microseconds, less than handing it to a thread); ``content(path) -> bytes | Exception``.
        Read once: a local file is whole once Spark renamed it into place.

        :param consume: ``consume(index in paths, bytes) -> bool``, called as soon as a file is
            read; a file it returns True for is not kept (its memory serves the next file: a
            10,000-batch audit no longer holds 10 MB of file contents at once)."""
        self.requests["get"] += len(paths)
        contents: dict[str, bytes | Exception] = {}
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
        progress = _PROGRESS.get() if len(paths) > PROGRESS_EVERY else None
        if progress is not None:
            before = progress.done
            progress.total += len(paths)
        for index, path in enumerate(paths):
            if progress is not None and index and not index % PROGRESS_EVERY:
                progress.done = before + index
                progress.on_progress(progress.done, progress.total)
            try:
                fd = os.open(path, flags)
            except Exception as exc:  # noqa: BLE001 - reported as a ReadProblem naming the file
                contents[path] = exc
                continue
            try:
                data = os.read(fd, 65536)
                if len(data) == 65536:  # a short read of a regular file is its end: one call for a log file
                    chunks = [data]
                    while chunk := os.read(fd, 65536):
                        chunks.append(chunk)
                    data = b"".join(chunks)
            except Exception as exc:  # noqa: BLE001 - e.g. IsADirectoryError on read
                contents[path] = exc
                continue
            finally:
                os.close(fd)
            if consume is None or not consume(index, data):
                contents[path] = data
        if progress is not None:
            progress.done = before + len(paths)
            progress.on_progress(progress.done, progress.total)
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


def uri_location(uri: str) -> str:
    """A file URI as Spark writes it in its logs (the file source's, the file sink's) → what
    :func:`open_storage` and fsspec read: a local path for ``file:`` (or no scheme), ``s3://`` for
    Hadoop's ``s3a://`` and ``s3n://``, any other URI as it is."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return unquote(parts.path)
    if parts.scheme in ("s3a", "s3n"):
        return "s3://" + uri.split("://", 1)[1]
    return uri


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
