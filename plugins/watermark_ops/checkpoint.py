"""Read a Spark Structured Streaming checkpoint without a JVM: the offset log, the commit log, the query id.

This is the only module that knows Spark's checkpoint file formats. It imports neither Airflow nor
Spark; files are read through fsspec, so a local path, ``file://``, ``s3://``, ``gs://``,
``abfs://``, ``hdfs://``, ``memory://`` or an Airflow ``ObjectStoragePath`` all work.

Public API (stable; other modules build on it)
-----------------------------------------------
``read_checkpoint(location, *, filesystem=None, storage_options=None) -> Checkpoint``
    Lists the checkpoint folder, ``offsets/`` and ``commits/`` once each and reads every batch
    file and ``metadata`` once. It never raises for bad content: every file it cannot read or
    parse becomes a :class:`ReadProblem` naming the file, and the rest is still read.

``Checkpoint`` (frozen dataclass)
    ``location`` (str: an absolute local path, or a URL such as ``s3://b/cp``), ``query_id``
    (str | None: None when ``metadata`` is missing or unreadable), ``batches`` (tuple of
    :class:`Batch`, ascending batch id; every id that has an offsets or a commit file),
    ``problems`` (tuple of :class:`ReadProblem`), ``has_commit_log`` (False for pre-2.2
    checkpoints, which have no ``commits/`` folder), ``metadata_file``.
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

``OffsetsEntry`` / ``CommitEntry`` / ``ReadProblem``: see their docstrings.

All times are epoch milliseconds UTC (``int``), exactly as Spark stores them.

The formats (Spark's sources, ``sql/core/src/main/scala/org/apache/spark/sql/execution/streaming/``,
since 4.1 mostly under ``checkpointing/`` and ``runtime/``)
---------------------------------------------------------------------------------------------
* ``HDFSMetadataLog.scala``: a log folder holds one file per batch, named by the decimal batch id
  (``isBatchFile``). Writes go to a hidden temp file ``.<name>.<uuid>.tmp`` that is then renamed;
  the local filesystem adds ``.<name>.crc``; 4.1+ can add checksum side files. Any name that is not
  a decimal integer is ignored here. ``minBatchesToRetain`` (default 100) purges old files, so the
  lowest id on storage may be above 0. ``MetadataVersionUtil.validateVersion`` reads the header
  ``v<int>`` (int > 0), else ``MALFORMED_LOG_FILE``; above the maximum,
  ``INVALID_LOG_VERSION.MAX_SUPPORTED_VERSION``. Every file's header is read on its own: a
  checkpoint can change version part way through.
* ``OffsetSeqLog.scala`` / ``OffsetSeq.scala`` (``offsets/N``, written before batch N runs)::

      v1
      {"batchWatermarkMs":280000,"batchTimestampMs":1795263323292,"conf":{...}}
      {"logOffset":1}
      -

  line 2 is ``OffsetSeqMetadata`` (missing fields default to 0 / empty; Spark 2.1 files have no
  ``conf``; unknown fields are ignored; an empty line means no metadata), then one offset per
  source in plan order, ``-`` = the source has no offset yet. ``v2`` (Spark 4.2+, opt-in through
  ``spark.sql.streaming.offsetLog.formatVersion``): metadata ``OffsetSeqMetadataV2`` (adds
  ``sourceMetadataInfo``, required) and source lines ``<sourceId>:<offsetJson or ->`` split at
  the first ``:``. Highest version known here: :data:`OFFSETS_MAX_VERSION`.
* ``CommitLog.scala`` (``commits/N``, written after batch N succeeded)::

      v1
      {"nextBatchWatermarkMs":5000}

  ``nextBatchWatermarkMs`` was added in 2.4 (SPARK-24699); older files hold ``{}`` or only the
  header (``EMPTY_JSON``), meaning 0. v2 (``CommitMetadataV2``) adds ``stateUniqueIds``, v3
  (``CommitMetadataV3``) adds ``sinkMetadataMap``. Highest version known: :data:`COMMITS_MAX_VERSION`.
  Checkpoints of Spark before 2.2 have no ``commits/`` folder at all: not an error.
* ``StreamMetadata.scala`` (``metadata``): ``{"id":"<query uuid>"}``, written once; a new id
  means a new query (the checkpoint was replaced).
* ``MicroBatchExecution.populateStartOffsets``: on restart, with latest offsets N and commits N
  present, batch N+1 starts with ``max(offsets N batchWatermarkMs, commits N nextBatchWatermarkMs)``;
  without commits N, batch N is re-run with its own offsets (in flight, or its driver crashed).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

__all__ = [
    "COMMITS_MAX_VERSION",
    "OFFSETS_MAX_VERSION",
    "Batch",
    "Checkpoint",
    "CommitEntry",
    "OffsetsEntry",
    "ReadProblem",
    "read_checkpoint",
]

#: Highest offset-log version this reader knows (``OffsetSeqLog.MAX_VERSION`` in Spark 4.2+).
OFFSETS_MAX_VERSION = 2
#: Highest commit-log version this reader knows (``CommitLog.MAX_VERSION`` in Spark 4.2+).
COMMITS_MAX_VERSION = 3

_BATCH_NAME = re.compile(r"^[0-9]+$")
_HEADER = re.compile(r"^v([0-9]+)$")
_VOID_OFFSET = "-"  # OffsetSeqLog.SERIALIZED_VOID_OFFSET


@dataclass(frozen=True)
class ReadProblem:
    """A checkpoint file (or the checkpoint itself) that could not be read or parsed.

    :ivar kind: stable name: ``checkpoint_missing`` (the location does not exist),
        ``not_a_checkpoint`` (neither ``metadata`` nor ``offsets/``), ``unreadable`` (I/O error),
        ``empty`` (0 bytes), ``binary`` (NUL bytes or not UTF-8), ``bad_header`` (first line not
        ``v<positive int>``), ``unsupported_version`` (newer than this reader knows),
        ``truncated`` (a required line is missing), ``not_json`` (a line that must be JSON is
        not), ``bad_field`` (JSON of the wrong shape, e.g. a watermark that is not an integer).
    :ivar file: location of the file (or folder) concerned.
    :ivar message: what was found and what was expected, for a human.
    :ivar batch_id: the batch the file belongs to, None for ``metadata`` and the folder.
    """

    kind: str
    file: str
    message: str
    batch_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "file", "message", "batch_id"}``, JSON-ready."""
        return {"kind": self.kind, "file": self.file, "message": self.message, "batch_id": self.batch_id}


@dataclass(frozen=True)
class OffsetsEntry:
    """One parsed ``offsets/N`` file (``OffsetSeqLog``; format in the module docstring).

    :ivar batch_id: N.
    :ivar file: location of the file.
    :ivar version: the file's own header version (1 or 2).
    :ivar watermark_ms: ``batchWatermarkMs``, the watermark batch N runs with (epoch ms UTC; 0 if absent).
    :ivar timestamp_ms: ``batchTimestampMs``, the processing time of batch N (epoch ms UTC; 0 if absent).
    :ivar conf: ``conf``, the SQL confs Spark froze at the first batch (``{}`` in Spark 2.1 files).
    :ivar sources: one offset per source in file order: parsed JSON, None for ``-``; a line
        that is not JSON is kept as its raw text (and reported as a ``not_json`` problem).
    :ivar source_ids: v1: the positions ``"0"``, ``"1"``, ...; v2: the ids written in the file.
    :ivar metadata: the whole metadata JSON object as read (``sourceMetadataInfo``, unknown fields).
    """

    batch_id: int
    file: str
    version: int
    watermark_ms: int
    timestamp_ms: int
    conf: dict[str, str]
    sources: tuple[Any, ...]
    source_ids: tuple[str, ...]
    metadata: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class CommitEntry:
    """One parsed ``commits/N`` file (``CommitLog``; format in the module docstring).

    :ivar batch_id: N.
    :ivar file: location of the file.
    :ivar version: the file's own header version (1, 2 or 3).
    :ivar next_watermark_ms: ``nextBatchWatermarkMs``, the watermark computed at the end of batch
        N (epoch ms UTC; 0 for pre-2.4 files holding ``{}`` or only the header).
    :ivar metadata: the whole JSON object as read (``stateUniqueIds``, ``sinkMetadataMap``, ...).
    """

    batch_id: int
    file: str
    version: int
    next_watermark_ms: int
    metadata: dict[str, Any] = field(repr=False)

    @property
    def has_next_watermark(self) -> bool:
        """False for a pre-2.4 commit (``{}`` or a bare header): ``next_watermark_ms`` is then a default 0,
        not a watermark Spark computed, and must not be compared with the offset log."""
        return "nextBatchWatermarkMs" in self.metadata


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


def _resolve(location: Any, filesystem: Any, storage_options: dict[str, Any] | None):
    """-> (fsspec filesystem, path inside it)."""
    import fsspec

    if filesystem is not None:
        return filesystem, str(location).rstrip("/") or "/"
    if hasattr(location, "fs") and hasattr(location, "path"):  # ObjectStoragePath / UPath
        return location.fs, str(location.path).rstrip("/") or "/"
    fs, path = fsspec.core.url_to_fs(os.fspath(location), **(storage_options or {}))
    return fs, path.rstrip("/") or "/"


def _display(fs: Any, path: str) -> str:
    """A location a human recognises: a plain path on the local filesystem, else a URL."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        return path
    return fs.unstrip_protocol(path)


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _decode(raw: bytes) -> str | None:
    """UTF-8 text, or None when the bytes are binary (NUL bytes or invalid UTF-8)."""
    if b"\x00" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


class _FileError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def _lines_with_header(raw: bytes, log_name: str, max_version: int) -> tuple[int, list[str]]:
    """Check a log file's bytes and header -> (version, the lines after the header).

    ``MetadataVersionUtil.validateVersion`` / ``HDFSMetadataLog``: header ``v<int>``, int > 0.
    """
    if not raw:
        raise _FileError("empty", f"empty file: expected a {log_name} file starting with a 'v<version>' line")
    text = _decode(raw)
    if text is None:
        raise _FileError("binary", f"binary content: expected UTF-8 text of a {log_name} file")
    lines = text.split("\n")
    header = lines[0].strip()
    match = _HEADER.match(header)
    if not match or int(match.group(1)) <= 0:
        shown = header if len(header) <= 40 else header[:40] + "..."
        raise _FileError(
            "bad_header",
            f"log file was malformed: failed to read correct log version from {shown!r} "
            f"(expected 'v<positive int>' on the first line)",
        )
    version = int(match.group(1))
    if version > max_version:
        raise _FileError(
            "unsupported_version",
            f"the maximum supported {log_name} version is v{max_version}, but encountered v{version}: "
            f"the file was produced by a newer version of Spark than this reader knows",
        )
    # A trailing newline is not a line (Spark writes none, but editors do).
    rest = lines[1:]
    if rest and rest[-1] == "":
        rest = rest[:-1]
    return version, rest


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        shown = text if len(text) <= 60 else text[:60] + "..."
        raise _FileError("not_json", f"{what} is not JSON ({exc.msg} at column {exc.colno}): {shown!r}") from None
    if not isinstance(value, dict):
        raise _FileError("bad_field", f"{what} is JSON but not an object: {text[:60]!r}")
    return value


def _int_field(obj: dict[str, Any], key: str, what: str) -> int:
    value = obj.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _FileError("bad_field", f"{what}: {key} must be an integer (epoch ms), got {value!r}")
    return value


def _parse_offsets(raw: bytes, batch_id: int, file: str) -> tuple[OffsetsEntry, list[ReadProblem]]:
    """Parse the bytes of ``offsets/<batch_id>`` (``OffsetSeqLog.deserialize``).

    :return: the entry and the problems of individual source lines (kept, see :class:`OffsetsEntry`).
    :raises _FileError: when the file as a whole cannot be used; :func:`read_checkpoint` turns it
        into a :class:`ReadProblem`.
    """
    version, lines = _lines_with_header(raw, "offset log", OFFSETS_MAX_VERSION)
    if not lines:
        raise _FileError("truncated", "truncated: expected a metadata JSON line after the version line")
    metadata_line = lines[0].strip()
    if metadata_line == "":
        if version >= 2:
            raise _FileError("truncated", "truncated: a v2 offset log requires a metadata JSON line on line 2")
        metadata: dict[str, Any] = {}  # OffsetSeq without metadata (Spark 2.0): defaults
    else:
        metadata = _json_object(metadata_line, "line 2 (offset-log metadata)")
    watermark_ms = _int_field(metadata, "batchWatermarkMs", "line 2 (offset-log metadata)")
    timestamp_ms = _int_field(metadata, "batchTimestampMs", "line 2 (offset-log metadata)")
    conf = metadata.get("conf") or {}
    if not isinstance(conf, dict):
        raise _FileError("bad_field", f"line 2 (offset-log metadata): conf must be an object, got {conf!r}")
    source_lines = lines[1:]
    if not source_lines:
        raise _FileError("truncated", "truncated: expected one offset line per source after the metadata line")
    problems: list[ReadProblem] = []
    sources: list[Any] = []
    ids: list[str] = []
    for number, line in enumerate(source_lines, start=3):
        text = line.strip()
        if version >= 2:
            source_id, sep, text = text.partition(":")
            if not sep or not source_id or any(c in source_id for c in '{["'):
                raise _FileError(
                    "bad_field", f"line {number}: expected '<sourceId>:<offset>' in a v2 offset log, got {line[:60]!r}"
                )
            ids.append(source_id)
        else:
            ids.append(str(number - 3))
        if text == _VOID_OFFSET:
            sources.append(None)
            continue
        try:
            sources.append(json.loads(text))
        except ValueError as exc:
            sources.append(text)
            problems.append(ReadProblem(
                "not_json", file,
                f"line {number} (offset of source {ids[-1]}) is not JSON ({exc.msg}): {text[:60]!r}; kept as text",
                batch_id,
            ))
    entry = OffsetsEntry(
        batch_id=batch_id, file=file, version=version, watermark_ms=watermark_ms, timestamp_ms=timestamp_ms,
        conf={str(k): str(v) for k, v in conf.items()}, sources=tuple(sources), source_ids=tuple(ids),
        metadata=metadata,
    )
    return entry, problems


def _parse_commit(raw: bytes, batch_id: int, file: str) -> CommitEntry:
    """Parse the bytes of ``commits/<batch_id>`` (``CommitLog.deserialize``).

    A header with no JSON line, or ``{}``, is a pre-2.4 commit: ``next_watermark_ms`` 0.

    :raises _FileError: turned into a :class:`ReadProblem` by :func:`read_checkpoint`.
    """
    version, lines = _lines_with_header(raw, "commit log", COMMITS_MAX_VERSION)
    text = lines[0].strip() if lines else ""
    metadata = _json_object(text, "line 2 (commit metadata)") if text else {}
    next_ms = _int_field(metadata, "nextBatchWatermarkMs", "line 2 (commit metadata)")
    return CommitEntry(batch_id=batch_id, file=file, version=version, next_watermark_ms=next_ms, metadata=metadata)


def _list(fs: Any, path: str) -> dict[str, str]:
    """One listing of a folder -> {name: type ('file' | 'directory' | ...)}."""
    return {_name(info["name"]): info.get("type", "file") for info in fs.ls(path, detail=True)}


def _batch_files(fs: Any, folder: str) -> dict[int, str]:
    """One listing of a log folder (names only: no stat per file) -> {batch id: path} of the names
    that are a whole decimal batch id (``HDFSMetadataLog.isBatchFile``)."""
    paths = (p if isinstance(p, str) else p["name"] for p in fs.ls(folder, detail=False))
    return {int(name): f"{folder}/{name}" for name in map(_name, paths) if _BATCH_NAME.match(name)}


def read_checkpoint(location: Any, *, filesystem: Any = None,
                    storage_options: dict[str, Any] | None = None) -> Checkpoint:
    """Read a Structured Streaming checkpoint folder (see the module docstring for the formats).

    Lists the folder, ``offsets/`` and ``commits/`` once each, reads ``metadata`` and every batch
    file once (one ``fs.cat`` call over all of them: concurrent on async filesystems).

    :param location: the checkpoint folder: local path, fsspec URL (``s3://...``, ``memory://...``),
        ``os.PathLike``, or an Airflow ``ObjectStoragePath`` / ``UPath`` (its ``fs`` is used).
    :param filesystem: an fsspec filesystem to read ``location`` (a path inside it) with.
    :param storage_options: passed to ``fsspec.core.url_to_fs`` (credentials, endpoint).
    :return: a :class:`Checkpoint`; unreadable or malformed files are in ``problems`` (each names
        its file), never raised, and every other file is still read.
    """
    fs, root = _resolve(location, filesystem, storage_options)
    shown = _display(fs, root)
    problems: list[ReadProblem] = []

    def empty(has_commit_log: bool = False) -> Checkpoint:
        return Checkpoint(location=shown, query_id=None, batches=(), problems=tuple(problems),
                          has_commit_log=has_commit_log)

    try:
        top = _list(fs, root)
    except FileNotFoundError:
        problems.append(ReadProblem("checkpoint_missing", shown, "no checkpoint folder at this location"))
        return empty()
    except Exception as exc:  # permissions, network, ...
        problems.append(ReadProblem("unreadable", shown, f"cannot list the checkpoint folder: {exc!r}"))
        return empty()
    if "metadata" not in top and top.get("offsets") != "directory":
        problems.append(ReadProblem(
            "not_a_checkpoint", shown,
            "neither 'metadata' nor 'offsets/' here: expected a Structured Streaming checkpoint folder",
        ))
        return empty()

    folders: dict[str, dict[int, str]] = {}
    for log_name in ("offsets", "commits"):
        folders[log_name] = {}
        if top.get(log_name) != "directory":
            continue
        folder = f"{root}/{log_name}"
        try:
            folders[log_name] = _batch_files(fs, folder)
        except Exception as exc:
            problems.append(ReadProblem("unreadable", _display(fs, folder), f"cannot list the folder: {exc!r}"))
    has_commit_log = top.get("commits") == "directory"

    metadata_path = f"{root}/metadata" if "metadata" in top else None
    paths = list(folders["offsets"].values()) + list(folders["commits"].values())
    if metadata_path:
        paths.append(metadata_path)
    contents = fs.cat(paths, on_error="return") if paths else {}

    def content(path: str) -> bytes | Exception:
        value = contents.get(path)
        if value is None:  # some filesystems key the result by a normalised path
            value = contents.get(fs._strip_protocol(path), FileNotFoundError(path))
        return value

    query_id = None
    if metadata_path:
        query_id = _read_query_id(content(metadata_path), _display(fs, metadata_path), problems)

    offsets: dict[int, OffsetsEntry] = {}
    commits: dict[int, CommitEntry] = {}
    for log_name, parse, into in (("offsets", _parse_offsets, offsets), ("commits", _parse_commit, commits)):
        for batch_id, path in sorted(folders[log_name].items()):
            file = _display(fs, path)
            raw = content(path)
            if isinstance(raw, Exception):
                problems.append(ReadProblem("unreadable", file, f"cannot read the file: {raw!r}", batch_id))
                continue
            try:
                parsed = parse(raw, batch_id, file)
            except _FileError as err:
                problems.append(ReadProblem(err.kind, file, err.message, batch_id))
                continue
            if log_name == "offsets":
                entry, line_problems = parsed
                problems.extend(line_problems)
                into[batch_id] = entry
            else:
                into[batch_id] = parsed

    ids = sorted(set(folders["offsets"]) | set(folders["commits"]))
    batches = tuple(
        Batch(
            batch_id=i,
            offsets=offsets.get(i),
            commit=commits.get(i),
            offsets_file=_display(fs, folders["offsets"][i]) if i in folders["offsets"] else None,
            commit_file=_display(fs, folders["commits"][i]) if i in folders["commits"] else None,
        )
        for i in ids
    )
    return Checkpoint(location=shown, query_id=query_id, batches=batches, problems=tuple(problems),
                      has_commit_log=has_commit_log, metadata_file=_display(fs, metadata_path) if metadata_path else None)


def _read_query_id(raw: bytes | Exception, file: str, problems: list[ReadProblem]) -> str | None:
    """``StreamMetadata.read``: ``{"id": "<query uuid>"}`` -> the id, or None with a problem."""
    if isinstance(raw, Exception):
        problems.append(ReadProblem("unreadable", file, f"cannot read the file: {raw!r}"))
        return None
    if not raw:
        problems.append(ReadProblem("empty", file, 'empty file: expected {"id": "<query uuid>"}'))
        return None
    text = _decode(raw)
    if text is None:
        problems.append(ReadProblem("binary", file, 'binary content: expected {"id": "<query uuid>"}'))
        return None
    try:
        value = json.loads(text.strip().split("\n", 1)[0])
    except ValueError as exc:
        problems.append(ReadProblem("not_json", file, f'not JSON ({exc.msg}): expected {{"id": "<query uuid>"}}'))
        return None
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        problems.append(ReadProblem("bad_field", file, f'expected {{"id": "<query uuid>"}}, got {text[:80]!r}'))
        return None
    return value["id"]
