"""The file source's log in a checkpoint (``sources/<i>/``): which files each log offset added.

The formats (Spark's sources, ``sql/core/src/main/scala/org/apache/spark/sql/execution/streaming/``,
since 4.1 under ``runtime/`` and ``checkpointing/``)
-----------------------------------------------------------------------------------------------
* ``FileStreamSource.scala``: a file source keeps its own log at ``<checkpoint>/sources/<i>``
  (``i`` = the source's position in the plan, the source id of a v2 offset log). Each time it
  finds new files it adds one log entry ``k`` (its *log offset*, counted by the source, not the
  query's batch id) listing them. ``getBatch(start, end)`` reads ``metadataLog.get(start + 1,
  end)``: micro-batch N reads the files of the log offsets in
  ``(log offset of batch N-1, log offset of batch N]``.
* ``FileStreamSourceOffset.scala``: the source's line in ``offsets/N`` is ``{"logOffset": k}``
  (a bare long ``k`` is also read, Spark 2.0's ``LongOffset``).
* ``FileStreamSourceLog.scala`` (``VERSION = 1``) on ``CompactibleFileStreamLog.scala`` on
  ``HDFSMetadataLog``: a log file is ``v1`` then one JSON ``FileEntry`` per line::

      v1
      {"path":"file:///landing/readings_1.jsonl","timestamp":1795449686774,"batchId":0}

  ``path`` is the file's URI, ``timestamp`` its modification time (epoch ms UTC), ``batchId`` the
  log offset ``k``. Every ``spark.sql.streaming.fileSource.log.compactInterval`` (default 10) log
  offsets, ``(k + 1) % interval == 0``, the file is ``k.compact`` and holds the entries of every
  log offset ``0..k`` (``compactLogs`` keeps all of them for a source); plain files before the
  latest compaction may then be deleted (``fileSource.log.deletion``, after
  ``minBatchesToRetain``). ``FileStreamSourceLog.get(k)`` reads file ``k`` (or ``k.compact``) and
  keeps the entries whose ``batchId == k``; for a deleted file it searches a compact file.

This module reads those files with the checkpoint's storage
(:func:`watermark_ops.core.checkpoint.open_storage`: a local path or any fsspec URL). A corrupt or
missing file is reported as a :class:`~watermark_ops.core.log_formats.ReadProblem` naming it and
what was expected; nothing is ever changed or deleted.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterable

from watermark_ops.core.log_formats import LogFileError, ReadProblem, log_json_lines

__all__ = [
    "COMPACT_SUFFIX",
    "MAX_LOG_OFFSETS_PER_READ",
    "SOURCE_LOG_MAX_VERSION",
    "SourceFile",
    "SourceLog",
    "file_source_log_offset",
    "parse_source_log",
    "read_source_log",
]

#: ``FileStreamSourceLog.VERSION``.
SOURCE_LOG_MAX_VERSION = 1
#: ``CompactibleFileStreamLog.COMPACT_FILE_SUFFIX``.
COMPACT_SUFFIX = ".compact"
#: The most log offsets one read may ask for. The file source adds one log entry per micro-batch
#: that found new files (``FileStreamSource.fetchMaxOffset``), so a batch reads one or two; more
#: than this means a corrupt ``logOffset`` (a huge number), which must not become a huge set.
MAX_LOG_OFFSETS_PER_READ = 10_000


@dataclass(frozen=True)
class SourceFile:
    """One ``FileEntry`` of the file source's log.

    :ivar path: the file's URI as Spark wrote it (``file:///...``, ``s3a://...``).
    :ivar timestamp_ms: the file's modification time when the source listed it (epoch ms UTC).
    :ivar log_offset: the source's log offset that added the file (the entry's ``batchId``).
    """

    path: str
    timestamp_ms: int
    log_offset: int


def file_source_log_offset(offset: Any) -> int | None:
    """The log offset of a source's line in ``offsets/N`` when it is a file source's
    (``FileStreamSourceOffset``: ``{"logOffset": k}``, or a bare ``k``); None for any other
    source's offset (Kafka's ``{"topic": {"0": 42}}``, a rate source's, ...)."""
    if isinstance(offset, dict) and set(offset) == {"logOffset"}:
        value = offset["logOffset"]
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
    if isinstance(offset, int) and not isinstance(offset, bool) and offset >= 0:
        return offset
    return None


def parse_source_log(raw: bytes) -> list[SourceFile]:
    """Parse the bytes of ``sources/<i>/<k>`` or ``<k>.compact`` (``CompactibleFileStreamLog.deserialize``).

    :return: every entry in file order (a compact file holds many log offsets).
    :raises LogFileError: ``empty``, ``binary``, ``bad_header``, ``unsupported_version``,
        ``not_json`` or ``bad_field`` (a line that is not ``{"path": str, "timestamp": int,
        "batchId": int}``, naming the line).
    """
    entries = []
    expected = '{"path": ..., "timestamp": ..., "batchId": ...}'
    for number, line, value in log_json_lines(raw, "file source log", SOURCE_LOG_MAX_VERSION, expected):
        if not (isinstance(value, dict) and isinstance(value.get("path"), str)
                and _is_long(value.get("timestamp")) and _is_long(value.get("batchId")) and value["batchId"] >= 0):
            raise LogFileError("bad_field", f"line {number}: expected a file entry "
                                            f'{{"path": str, "timestamp": int, "batchId": int >= 0}}, got {line[:80]!r}')
        entries.append(SourceFile(value["path"], value["timestamp"], value["batchId"]))
    return entries


def _is_long(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SourceLog:
    """The entries of the log offsets asked for, read from one ``sources/<i>`` folder.

    :ivar folder: the folder as shown to people.
    :ivar files: ``{log offset: (SourceFile, ...)}`` for every offset found (a log offset with no
        file is absent, and named in ``problems``).
    :ivar read_from: ``{log offset: the file its entries came from}`` (a plain file, or a compact
        file when the plain one was compacted or deleted).
    :ivar problems: unreadable, corrupt or missing log files, each naming the file and what was
        expected (consecutive missing log offsets are one problem).
    :ivar newest: the highest log offset a file of the folder is named after (``k`` or
        ``k.compact``), None when the folder holds none (or could not be listed).
    """

    folder: str
    files: dict[int, tuple[SourceFile, ...]]
    read_from: dict[int, str]
    problems: tuple[ReadProblem, ...]
    newest: int | None = None


def read_source_log(storage: Any, folder: str, log_offsets: Iterable[int], *,
                    listings: dict[str, Any] | None = None) -> SourceLog:
    """Read the entries of ``log_offsets`` from the file source log at ``folder``.

    For each log offset ``k``: the file ``k`` or ``k.compact`` when it exists (entries with
    ``batchId == k``, as ``FileStreamSourceLog.get``), else the oldest compact file after ``k``
    (which holds every entry up to its own offset). Each file is read once.

    :param storage: from :func:`watermark_ops.core.checkpoint.open_storage`.
    :param folder: ``<checkpoint path>/sources/<i>`` inside that storage.
    :param log_offsets: the log offsets wanted (e.g. ``range(start + 1, end + 1)`` for a batch), at
        most :data:`MAX_LOG_OFFSETS_PER_READ` of them: more is reported (``too_many``) and nothing is
        read; a ``range`` is measured without being expanded.
    :param listings: a dict kept by the caller across reads of one moment (e.g. one ledger): the
        folder is then listed once (freshly) and its names reused; None lists at every call.
    :return: a :class:`SourceLog`; never raises for bad content or a missing folder. A listed
        file that cannot be read is read again within
        :data:`watermark_ops.core.checkpoint.RETRY_DELAYS_S` on a remote filesystem.
    """
    shown = storage.display(folder)
    problems: list[ReadProblem] = []
    if isinstance(log_offsets, range):
        count, first = len(log_offsets), (log_offsets[0] if len(log_offsets) else None)
    else:
        head = list(itertools.islice(iter(log_offsets), MAX_LOG_OFFSETS_PER_READ + 1))
        count, first = len(head), (min(head) if head else None)
        log_offsets = head
    if count > MAX_LOG_OFFSETS_PER_READ:
        problems.append(ReadProblem(
            "too_many", shown, f"{count if isinstance(log_offsets, range) else 'more than ' + str(count - 1)} log "
            f"offsets asked for from {first} on: expected at most {MAX_LOG_OFFSETS_PER_READ} (the file source "
            "adds one log entry per micro-batch; a corrupt logOffset?)"))
        return SourceLog(shown, {}, {}, tuple(problems))
    wanted = sorted(set(log_offsets))
    try:
        names = _names(storage, folder, listings)
    except FileNotFoundError:
        names = []
        if wanted:
            problems.append(ReadProblem("missing", shown, "no file source log folder here: expected the files "
                                                          f"of log offsets {wanted[0]}..{wanted[-1]}"))
        return SourceLog(shown, {}, {}, tuple(problems))
    except Exception as exc:  # noqa: BLE001 - permissions, network: reported, naming the folder
        problems.append(ReadProblem("unreadable", shown, f"cannot list the folder: {exc!r}"))
        return SourceLog(shown, {}, {}, tuple(problems))
    plain: dict[int, str] = {}
    compact: dict[int, str] = {}
    for name in names:
        stem, is_compact = (name[: -len(COMPACT_SUFFIX)], True) if name.endswith(COMPACT_SUFFIX) else (name, False)
        if stem.isdigit() and stem.isascii():
            (compact if is_compact else plain)[int(stem)] = f"{folder}/{name}"
    newest = max(itertools.chain(plain, compact), default=None)
    chosen: dict[int, str] = {}
    compacts = sorted(compact)
    absent: list[int] = []
    for k in wanted:
        path = plain.get(k) or compact.get(k) or next((compact[c] for c in compacts if c > k), None)
        if path is None:
            absent.append(k)
        else:
            chosen[k] = path
    for low, high in _runs(absent):  # one problem per run of consecutive missing log offsets
        span = str(low) if low == high else f"{low}..{high}"
        problems.append(ReadProblem(
            "missing", f"{shown}/{low}",
            f"no file holds log offset{'s' if low != high else ''} {span}: expected {low} or {low}{COMPACT_SUFFIX}, "
            f"or a later <n>{COMPACT_SUFFIX} (compaction), in the file source log (newest entry: "
            f"{'none' if newest is None else newest})"))
    content = storage.read(sorted(set(chosen.values())))
    parsed: dict[str, list[SourceFile] | None] = {}
    for path in sorted(set(chosen.values())):
        raw = content(path)
        if isinstance(raw, Exception):
            problems.append(ReadProblem("unreadable", storage.display(path), f"cannot read the file: {raw!r}"))
            parsed[path] = None
            continue
        try:
            parsed[path] = parse_source_log(raw)
        except LogFileError as err:
            problems.append(ReadProblem(err.kind, storage.display(path), err.message))
            parsed[path] = None
    files: dict[int, tuple[SourceFile, ...]] = {}
    read_from: dict[int, str] = {}
    for k, path in chosen.items():
        entries = parsed[path]
        if entries is None:
            continue
        own = tuple(e for e in entries if e.log_offset == k)
        if not own and path.endswith(COMPACT_SUFFIX) and path != compact.get(k):
            problems.append(ReadProblem(
                "missing", storage.display(path),
                f"log offset {k} has no plain file and this compact file holds no entry of it "
                f"(expected entries with batchId {k})"))
            continue
        files[k] = own
        read_from[k] = storage.display(path)
    return SourceLog(shown, files, read_from, tuple(problems), newest)


def _names(storage: Any, folder: str, listings: dict[str, Any] | None) -> list[str]:
    """The folder's names, listed once per ``listings`` (thread-safe: one listing per folder)."""
    if listings is None:
        return storage.names(folder)
    import threading

    lock = listings.setdefault("__lock__", threading.Lock())
    with lock:
        entry = listings.get(folder)
        if entry is None:
            try:
                entry = ("ok", storage.names(folder))
            except Exception as exc:  # noqa: BLE001 - raised again below, for each caller
                entry = ("error", exc)
            listings[folder] = entry
    if entry[0] == "error":
        raise entry[1]
    return entry[1]


def _runs(ids: list[int]) -> list[tuple[int, int]]:
    """Sorted ids → ``[(first, last)]`` of consecutive runs."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs
