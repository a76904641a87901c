"""The file sink's log (``<sink>/_spark_metadata``): the files a streaming file sink committed.

The format (Spark's ``FileStreamSinkLog.scala``, ``VERSION = 1``, on ``CompactibleFileStreamLog.scala``
on ``HDFSMetadataLog``; since 4.1 under ``execution/streaming/runtime/``)
-------------------------------------------------------------------------------------------------
* One log file per micro-batch that wrote, named after its batch id ``N``: ``v1`` then one JSON
  ``SinkFileStatus`` per line::

      v1
      {"path":"file:///out/part-00000-1f0c.c000.snappy.parquet","size":1830,"isDir":false,
       "modificationTime":1795449686774,"blockReplication":1,"blockSize":33554432,"action":"add"}

* Every ``spark.sql.streaming.fileSink.log.compactInterval`` batches (default 10) the file is
  ``N.compact`` and holds every file still live up to ``N`` (``action`` ``delete`` entries are
  applied, ``FileStreamSinkLog.compactLogs``); plain files before it may then be deleted.
* A file of a batch that never committed is in the sink folder but in no log file: a batch read of
  the sink (``MetadataLogFileIndex``) reads only the files the log names, and so does this module.

Pure core: imports neither Airflow nor Spark. Nothing is ever changed or deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from watermark_ops.core.log_formats import LogFileError, ReadProblem, log_json_lines

__all__ = ["SINK_LOG_FOLDER", "SinkLog", "parse_sink_log", "read_sink_log"]

#: ``FileStreamSink.metadataDir``.
SINK_LOG_FOLDER = "_spark_metadata"
_COMPACT = ".compact"


@dataclass(frozen=True)
class SinkLog:
    """The files a file sink committed, as its log says.

    :ivar folder: the log folder as shown to people.
    :ivar files: the live files' URIs as Spark wrote them (``file:///...``, ``s3a://...``), in log order.
    :ivar problems: an unreadable or corrupt log file, or no log folder, each naming the file and
        what was expected (``files`` is then not to be trusted).
    """

    folder: str
    files: tuple[str, ...]
    problems: tuple[ReadProblem, ...]


def parse_sink_log(raw: bytes) -> list[tuple[str, str]]:
    """Parse the bytes of ``_spark_metadata/N`` or ``N.compact``.

    :return: ``[(action, path)]`` in file order (``action`` ``add`` or ``delete``).
    :raises LogFileError: ``empty``, ``binary``, ``bad_header``, ``unsupported_version``,
        ``not_json`` or ``bad_field`` (a line without a string ``path``, naming the line).
    """
    entries = []
    for number, line, value in log_json_lines(raw, "file sink log", 1, 'a {"path": ..., "action": ...} SinkFileStatus'):
        if not (isinstance(value, dict) and isinstance(value.get("path"), str)
                and value.get("action", "add") in ("add", "delete")):
            raise LogFileError("bad_field", f"line {number}: expected a SinkFileStatus "
                                            f'{{"path": str, "action": "add" | "delete"}}, got {line[:80]!r}')
        entries.append((value.get("action", "add"), value["path"]))
    return entries


def read_sink_log(storage: Any, sink: str) -> SinkLog:
    """The live files of the file sink at ``sink`` (``FileStreamSinkLog.allFiles``): the newest
    ``N.compact`` and every plain file after it, ``delete`` entries applied.

    :param storage: from :func:`watermark_ops.core.checkpoint.open_storage` (of the sink's location).
    :param sink: the sink folder inside that storage.
    :return: a :class:`SinkLog`; never raises for bad content or a missing folder.
    """
    folder = f"{sink.rstrip('/')}/{SINK_LOG_FOLDER}"
    shown = storage.display(folder)
    try:
        names = storage.names(folder)
    except FileNotFoundError:
        return SinkLog(shown, (), (ReadProblem("missing", shown, "no file sink log here: expected the "
                                                                 "_spark_metadata folder of a file sink that wrote"),))
    except Exception as exc:  # noqa: BLE001 - permissions, network: reported, naming the folder
        return SinkLog(shown, (), (ReadProblem("unreadable", shown, f"cannot list the folder: {exc!r}"),))
    batches: dict[int, str] = {}
    compacts: list[int] = []
    for name in names:
        stem = name[: -len(_COMPACT)] if name.endswith(_COMPACT) else name
        if stem.isdigit() and stem.isascii():
            batches[int(stem)] = f"{folder}/{name}"
            if name.endswith(_COMPACT):
                compacts.append(int(stem))
    newest_compact = max(compacts, default=-1)
    chosen = [batches[b] for b in sorted(batches) if b >= newest_compact]
    content = storage.read(chosen)
    live: dict[str, None] = {}
    problems: list[ReadProblem] = []
    for path in chosen:
        raw = content(path)
        if isinstance(raw, Exception):
            problems.append(ReadProblem("unreadable", storage.display(path), f"cannot read the file: {raw!r}"))
            continue
        try:
            entries = parse_sink_log(raw)
        except LogFileError as err:
            problems.append(ReadProblem(err.kind, storage.display(path), err.message))
            continue
        for action, file in entries:
            if action == "delete":
                live.pop(file, None)
            else:
                live[file] = None
    return SinkLog(shown, tuple(live), tuple(problems))
