"""Read a job's progress log and summarise the micro-batches of one run.

The progress log is written by ``watermark_ops.spark.recorder`` (``ProgressRecorder``) beside the
checkpoint, at ``<checkpoint>.progress.jsonl``: one JSON object per micro-batch, reduced from
Spark's ``StreamingQueryProgress`` (``sql/core/.../streaming/progress.scala``). Fields used here:
``query_id``, ``run_id`` (Spark's, new at every restart), ``run_tag`` (the Airflow run id the job
was given), ``batch_id``, ``executed``, ``timestamp_ms`` and ``watermark_ms`` (epoch ms UTC),
``input_rows``, ``state_rows_removed`` (windows emitted in append mode), ``rows_dropped_by_watermark``,
``observed_metrics`` (``Dataset.observe`` metrics, e.g. ``quarantine.rows``).

The log grows across runs and is never purged (Spark purges the checkpoint, not this file).
:func:`read_progress_log` reads it whole (the audit, the lateness report, a run's report);
:func:`read_progress_tail` reads only its end, from the last byte backwards until the records of
the batches asked for are in (at most :data:`TAIL_MAX_BYTES`): what a sensor poke needs.

Pure core: no Airflow, no Spark.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from typing import Any, Iterable

import msgspec

from watermark_ops.core.jsontext import loads
from watermark_ops.core.times import iso_utc

__all__ = [
    "TAIL_MAX_BYTES",
    "ProgressLog",
    "progress_log_path",
    "read_progress_log",
    "read_progress_since",
    "read_progress_tail",
    "records_of_run",
    "run_report",
    "summarize_run",
]

#: The most :func:`read_progress_tail` reads from the end of a log (a few thousand records).
TAIL_MAX_BYTES = 4 * 1024 * 1024
_TAIL_BLOCK = 64 * 1024


def progress_log_path(checkpoint: str) -> str:
    """The progress log kept beside a checkpoint: ``<checkpoint>.progress.jsonl``.

    The jobs write it under the same name (``watermark_ops.spark.recorder``; a test keeps the two equal).

    :param checkpoint: checkpoint location (a local path or an fsspec URL).
    :return: the same kind of location, string form.
    """
    return str(checkpoint).rstrip("/") + ".progress.jsonl"


class ProgressLog(msgspec.Struct):
    """The parsed progress log.

    :ivar records: the good lines, as dicts, in file order.
    :ivar problems: one message per line that is not a JSON object with a ``batch_id``, naming the
        file and line number (in a tail read that did not reach the start of the file: the line's
        byte offset); those lines are kept aside here, not dropped silently.
    :ivar start_offset: the byte offset reading started at: 0 for a whole read; for a tail read
        (:func:`read_progress_tail`), where its first whole line starts.
    :ivar complete: False when a tail read stopped at :data:`TAIL_MAX_BYTES` before it reached the
        records it was asked for: records of the requested batches may then be missing.
    :ivar end_offset: the byte offset reading stopped at (the end of the last whole line read):
        where the next read of new lines starts (:func:`read_progress_since`).
    :ivar marker: ``(size, version tag)`` of the file when read (the tag: its ETag on object
        storage, else None), None when not read: the same marker later means the same file.
    """

    location: str
    records: list[dict[str, Any]] = msgspec.field(default_factory=list)
    problems: list[str] = msgspec.field(default_factory=list)
    start_offset: int = 0
    complete: bool = True
    end_offset: int = 0
    marker: Any = None


class _Reader:
    """Reads one file, whole or by byte range: a plain local path with ``open``, anything else
    through fsspec (the ``filesystem`` given, else ``fsspec.core.url_to_fs`` with
    ``storage_options``): one GET for a whole read, a HEAD and ranged GETs for a tail read, each
    retried within :data:`watermark_ops.core.checkpoint.RETRY_DELAYS_S` when the filesystem is
    remote and the error is not a missing file."""

    def __init__(self, location: Any, filesystem: Any = None, storage_options: dict[str, Any] | None = None):
        text = str(location)
        self.fs: Any = None
        self.path = text
        if filesystem is not None:
            self.fs = filesystem
        elif storage_options or "://" in text or "::" in text or text.startswith(("file:", "local:")):
            import fsspec

            self.fs, self.path = fsspec.core.url_to_fs(text, **(storage_options or {}))
        protocol = None
        if self.fs is not None:
            protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        self.remote = protocol not in (None, "file", "local", "memory")

    def _retrying(self, call: Any) -> Any:
        from watermark_ops.core.checkpoint import RETRY_DELAYS_S

        delays = list(RETRY_DELAYS_S) if self.remote else []
        while True:
            try:
                return call()
            except FileNotFoundError:
                raise
            except Exception:
                if not delays:
                    raise
                time.sleep(delays.pop(0))

    def whole(self) -> bytes:
        """The whole file. :raises FileNotFoundError: / :raises OSError:"""
        if self.fs is None:
            with open(self.path, "rb") as handle:
                return handle.read()
        from watermark_ops.core.checkpoint import _one_request

        return self._retrying(lambda: self.fs.cat_file(self.path, **_one_request(self.fs)))

    def stat(self) -> tuple[int, Any]:
        """``(size in bytes, a version marker)``, fresh (not from a cached listing): the marker
        is the object's content hash on object storage (S3's ETag: one HEAD), None elsewhere
        (nothing remembered then). :raises FileNotFoundError:"""
        if self.fs is None:  # no marker: a same-size rewrite can keep the mtime (clock ticks); read again
            return os.stat(self.path).st_size, None
        try:
            self.fs.invalidate_cache(self.path)
        except Exception:  # noqa: BLE001 - a filesystem without a cache
            pass
        info = self._retrying(lambda: self.fs.info(self.path))
        # Only a content hash is trusted (S3's ETag, GCS's md5Hash, ...): a modification time
        # may not change on a same-size rewrite within its resolution.
        marker = info.get("ETag") or info.get("md5Hash") or info.get("etag") if self.remote else None
        return int(info["size"]), str(marker) if marker else None

    def range(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``."""
        if self.fs is None:
            with open(self.path, "rb") as handle:
                handle.seek(start)
                return handle.read(end - start)
        return self._retrying(lambda: self.fs.cat_file(self.path, start=start, end=end))


def _parse_lines(log: ProgressLog, data: bytes, first_offset: int, numbered: bool) -> None:
    """Append the records (and the problems) of whole lines ``data`` starting at byte ``first_offset``."""
    text = data.decode("utf-8", errors="replace")
    offset = first_offset
    for number, line in enumerate(text.splitlines(), start=1):
        at = offset
        if not numbered:  # byte offsets only where line numbers are unknown (a tail read)
            offset += len(line.encode("utf-8", errors="replace")) + 1
        if not line.strip():
            continue
        try:
            record = loads(line)
        except json.JSONDecodeError as exc:
            problem = f"expected one JSON object per line ({exc.msg})"
        else:
            if isinstance(record, dict) and isinstance(record.get("batch_id"), int):
                log.records.append(record)
                continue
            problem = "expected a JSON object with an integer batch_id"
        where = f"{log.location}:{number}" if numbered else f"{log.location}: line at byte {at}"
        log.problems.append(f"{where}: {problem}")


def read_progress_log(location: str, *, filesystem: Any = None, storage_options: dict[str, Any] | None = None,
                      fields: Iterable[str] | None = None) -> ProgressLog:
    """Read the whole log at ``location`` (local path or fsspec URL); a missing file is an empty log.

    :param filesystem: an fsspec filesystem to read ``location`` (a path or URL on it) with.
    :param storage_options: passed to ``fsspec.core.url_to_fs`` (credentials, endpoint).
    :param fields: keep only these fields of each record (and ``batch_id``), e.g. what the audit's
        rules read (``query_id``, ``run_id``, ``requested_conf``): a record is then decoded without
        building the rest (msgspec), several times faster on a long log. None: every field.
    :raises OSError: when the file exists but cannot be read.
    """
    log = ProgressLog(location=str(location))
    reader = _Reader(location, filesystem, storage_options)
    try:
        # a local file: in pieces into one buffer (every line whole); a bad or unfinished line reads it whole
        size = end = _parse_fields_in_pieces(log, reader.path, tuple(fields)) \
            if fields is not None and reader.fs is None else None
        if size is None:
            log.records.clear()
            data = reader.whole()
            size, end = len(data), data.rfind(b"\n") + 1
            if fields is not None:
                _parse_fields(log, data, tuple(fields))
            else:
                _parse_lines(log, data, 0, numbered=True)
    except FileNotFoundError:
        return log
    log.end_offset = end  # after the last whole line
    log.marker = (size, None)  # found (its version tag unknown: the next stat tells)
    return log


#: The bytes of a local progress log read and decoded at a time (:func:`_parse_fields_in_pieces`).
PIECE_BYTES = 1 << 20


def _parse_fields_in_pieces(log: ProgressLog, path: str, fields: tuple[str, ...]) -> int | None:
    """:func:`_parse_fields` over a local file read into one reused buffer of
    :data:`PIECE_BYTES` (the whole lines each time; an unfinished line is carried over), not into
    one bytes value of the whole log: a 10 MB log takes 1 MB of fresh memory instead of 10 (the
    pages the kernel hands out cost a sixth of the decoding).

    :return: the size in bytes (every line whole) with ``log.records`` filled; None when a line is not a
        record or the last line has no newline: the caller reads the log whole then (the line
        numbers of the problems count from its start).
    :raises FileNotFoundError: / :raises OSError: the file cannot be read.
    """
    decoder, asdict = _light_decoder(fields)
    buffer = bytearray(PIECE_BYTES)
    held = size = 0  # the bytes of an unfinished line at the buffer's start; the bytes read
    with open(path, "rb", buffering=0) as handle:
        while True:
            if held == len(buffer):  # a line longer than the buffer
                buffer.extend(bytes(len(buffer)))
            with memoryview(buffer) as view:
                count = handle.readinto(view[held:])
                if not count:
                    break
                size += count
                end = buffer.rfind(b"\n", 0, held + count) + 1
                if end:
                    try:
                        log.records.extend(asdict(value) for value in decoder.decode_lines(view[:end]))
                    except msgspec.MsgspecError:
                        return None
            held += count - end
            if end:
                buffer[:held] = buffer[end:end + held]
    return None if held else size


def read_progress_since(location: str, start: int, known: Any = None, *, filesystem: Any = None,
                        storage_options: dict[str, Any] | None = None, stat: Any = None) -> ProgressLog | None:
    """The lines appended to the log at ``location`` since byte ``start`` (a position a previous
    read ended at, :attr:`ProgressLog.end_offset`): a stat, then one ranged read of the new bytes.

    :param known: the ``marker`` of the previous read: the same size and tag now means nothing
        changed (nothing is read).
    :param stat: the log's ``(size, tag)`` just taken by the caller (with the checkpoint's own
        reads): not taken again.
    :return: a :class:`ProgressLog` of the new whole lines (``start_offset`` = ``start``,
        ``end_offset`` after the last whole line, ``marker`` now; problems name the line's byte
        offset), or None when the log is shorter than ``start`` (rewritten: read its end again).
    :raises FileNotFoundError: the log is gone. :raises OSError: it cannot be read.
    """
    reader = _Reader(location, filesystem, storage_options)
    size, tag = reader.stat() if stat is None else stat
    log = ProgressLog(location=str(location), start_offset=start, end_offset=start, marker=(size, tag))
    if known is not None and tuple(known) == (size, tag) and size >= start:
        return log
    if size < start:
        return None
    if size == start:
        return log
    data = reader.range(start, size)
    whole = data[: data.rfind(b"\n") + 1]
    log.end_offset = start + len(whole)
    _parse_lines(log, whole, start, numbered=False)
    return log


_LIGHT_DECODERS: dict[tuple[str, ...], Any] = {}


def _light_decoder(fields: tuple[str, ...]) -> tuple[Any, Any]:
    """The decoder of a record keeping only ``fields`` (and ``batch_id``; an absent one reads as
    None, what ``record.get(field)`` gives for a whole record), and ``msgspec.structs.asdict``."""
    import msgspec.structs

    decoder = _LIGHT_DECODERS.get(fields)
    if decoder is None:
        record = msgspec.defstruct("ProgressFields", [("batch_id", int)] + [
            (name, Any, None) for name in fields if name != "batch_id"])
        decoder = _LIGHT_DECODERS[fields] = msgspec.json.Decoder(record)
    return decoder, msgspec.structs.asdict


def _parse_fields(log: ProgressLog, data: bytes, fields: tuple[str, ...]) -> None:
    """:func:`_parse_lines` keeping only ``fields`` (and ``batch_id``) of each record, an absent
    one as None: msgspec decodes them without building the rest (the whole log of a long history
    in an audit)."""
    decoder, asdict = _light_decoder(fields)
    if data.endswith(b"\n") or not data:
        try:  # the whole log in one call when every line is a record (the usual case)
            log.records.extend(asdict(value) for value in decoder.decode_lines(data))
            return
        except msgspec.MsgspecError:
            pass  # a bad line somewhere: line by line, each problem named
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = decoder.decode(line)
        except msgspec.ValidationError:
            problem = "expected a JSON object with an integer batch_id"
        except msgspec.DecodeError as exc:
            problem = f"expected one JSON object per line ({exc})"
        else:
            log.records.append(asdict(value))
            continue
        log.problems.append(f"{log.location}:{number}: {problem}")


def read_progress_tail(location: str, since_batch_id: int, *, query_id: str | None = None,
                       max_bytes: int = TAIL_MAX_BYTES, filesystem: Any = None,
                       storage_options: dict[str, Any] | None = None) -> ProgressLog:
    """Read the end of the log at ``location``: the records of batch ids ``>= since_batch_id``.

    Reads blocks backwards from the end of the file (64 KiB, doubling) until the first whole line
    of what was read is a record of an earlier batch (``batch_id < since_batch_id``) or of another
    query than ``query_id`` (an earlier checkpoint at the same path), or the start of the file is
    reached, or ``max_bytes`` were read. The log is written in time order, so what lies before that
    line belongs to earlier batches or an earlier query. The cost depends on how many records the
    requested batches have, not on the length of the log; a log unchanged since this process last
    read the same tail (same size and ETag: one HEAD on object storage) is not read nor parsed
    again; a local log is always read (a local read costs less than the doubt).

    :param since_batch_id: the lowest batch id whose records are wanted (e.g. the oldest batch a
        bounded checkpoint read holds); records of lower batch ids are left out.
    :param query_id: the checkpoint's query id; records of other queries are left out. None if
        unknown (the query is then not checked).
    :param max_bytes: the most read from the end; when reached first, ``complete`` is False.
    :param filesystem: / storage_options: as for :func:`read_progress_log` (on object storage: one
        HEAD for the size, then one ranged GET per block read).
    :return: a :class:`ProgressLog` (``start_offset``, ``complete``); a missing file is an empty log.
    :raises OSError: when the file exists but cannot be read.
    """
    log = ProgressLog(location=str(location))
    reader = _Reader(location, filesystem, storage_options)
    try:
        end, marker = reader.stat()
    except FileNotFoundError:
        return log
    log.end_offset, log.marker = end, (end, marker)
    key = (str(location), since_batch_id, query_id, max_bytes, id(filesystem), repr(storage_options))
    with _TAIL_LOCK:
        cached = _TAIL_CACHE.get(key)
        if cached is not None and cached[0] == (end, marker) and marker is not None:
            _TAIL_CACHE.move_to_end(key)
            return _copy(cached[1])
    start, block, data = end, _TAIL_BLOCK, b""
    while start > 0:
        start = max(0, start - block, end - max_bytes)
        data = reader.range(start, end)
        whole = data if start == 0 else data[data.find(b"\n") + 1:] if b"\n" in data else b""
        if start == 0 or _precedes(whole, since_batch_id, query_id):
            break
        if end - start >= max_bytes:
            log.complete = False
            break
        block *= 2
    skipped = 0 if start == 0 else (data.find(b"\n") + 1 if b"\n" in data else len(data))
    log.start_offset = start + skipped
    if data and not data.endswith(b"\n") and b"\n" in data:  # a last line being written: read it again next time
        log.end_offset = start + data.rfind(b"\n") + 1
    _parse_lines(log, data[skipped:], log.start_offset, numbered=start == 0)
    log.records = [r for r in log.records if r["batch_id"] >= since_batch_id
                   and (query_id is None or r.get("query_id") in (None, query_id))]
    if marker is not None:
        with _TAIL_LOCK:
            _TAIL_CACHE[key] = ((end, marker), _copy(log))
            while len(_TAIL_CACHE) > _TAIL_CACHE_SIZE:
                _TAIL_CACHE.popitem(last=False)
    return log


#: Tail reads remembered by this process, keyed by the log and what was asked, with the log's
#: size and ETag when read: a poke of a log on object storage that did not change since (the same
#: size and ETag, one HEAD) reads and parses nothing again. Local logs are not remembered.
_TAIL_CACHE: collections.OrderedDict[tuple, tuple[tuple[int, Any], ProgressLog]] = collections.OrderedDict()
_TAIL_CACHE_SIZE = 512
_TAIL_LOCK = threading.Lock()


def _copy(log: ProgressLog) -> ProgressLog:
    """A copy the caller may change (the records themselves are shared: read-only)."""
    return ProgressLog(location=log.location, records=list(log.records), problems=list(log.problems),
                       start_offset=log.start_offset, complete=log.complete, end_offset=log.end_offset,
                       marker=log.marker)


def _precedes(data: bytes, since_batch_id: int, query_id: str | None) -> bool:
    """Whether the first whole line of ``data`` is a record before the wanted ones: of an earlier
    batch, or of another query (a line that is not a record does not tell)."""
    line = data.split(b"\n", 1)[0]
    try:
        record = loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    if not isinstance(record, dict) or not isinstance(record.get("batch_id"), int):
        return False
    other_query = query_id is not None and record.get("query_id") not in (None, query_id)
    return record["batch_id"] < since_batch_id or other_query


def summarize_run(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Summarise the micro-batches of one run (records already selected, e.g. by ``run_tag``).

    Records of triggers that ran no batch (``executed`` false) are left out of ``batches``.

    :return: ``{"batches": [{"batch_id", "watermark_ms", "timestamp_ms", "input_rows",
        "windows_emitted", "late_partial_aggregates_spark", "quarantined_rows"}], "batch_ids": [int],
        "input_rows": int, "windows_emitted": int, "late_partial_aggregates_spark": int,
        "quarantined_rows": int, "quarantined_by_reason": {reason: int},
        "last_watermark_ms": int | None}``. ``last_watermark_ms`` is the watermark the run's last
        batch ran with (epoch ms UTC), None when the run executed no batch. ``quarantined_rows`` and
        ``quarantined_by_reason`` are rows (summed over the batches) from the ``quarantine``
        observed metrics (``rows`` and one count per reason, see ``watermark_ops.spark.quarantined``):
        every reason any batch reported, zeros included, in the order first seen; ``{}`` when no
        batch carried them (the main query's log). ``late_partial_aggregates_spark`` is Spark's
        ``numRowsDroppedByWatermark`` (the log's ``rows_dropped_by_watermark``): for an aggregation
        late partial aggregates, not rows; the rows come from the late-row ledger
        (:func:`watermark_ops.core.ledger.with_ledger_rows`).
    """
    executed = [r for r in sorted(records, key=lambda r: r["batch_id"]) if r.get("executed", True)]
    batches = [
        {
            "batch_id": r["batch_id"],
            "watermark_ms": r.get("watermark_ms"),
            "timestamp_ms": r.get("timestamp_ms"),
            "input_rows": int(r.get("input_rows") or 0),
            "windows_emitted": int(r.get("state_rows_removed") or 0),
            "late_partial_aggregates_spark": int(r.get("rows_dropped_by_watermark") or 0),
            "quarantined_rows": int(((r.get("observed_metrics") or {}).get("quarantine") or {}).get("rows") or 0),
        }
        for r in executed
    ]
    by_reason: dict[str, int] = {}
    for r in executed:
        for reason, rows in (((r.get("observed_metrics") or {}).get("quarantine") or {}).items()):
            if reason != "rows":
                by_reason[reason] = by_reason.get(reason, 0) + int(rows or 0)
    watermarks = [b["watermark_ms"] for b in batches if b["watermark_ms"] is not None]
    return {
        "batches": batches,
        "batch_ids": [b["batch_id"] for b in batches],
        "input_rows": sum(b["input_rows"] for b in batches),
        "windows_emitted": sum(b["windows_emitted"] for b in batches),
        "late_partial_aggregates_spark": sum(b["late_partial_aggregates_spark"] for b in batches),
        "quarantined_rows": sum(b["quarantined_rows"] for b in batches),
        "quarantined_by_reason": by_reason,
        "last_watermark_ms": watermarks[-1] if watermarks else None,
    }


def records_of_run(log: ProgressLog, run_tag: str) -> list[dict[str, Any]]:
    """The records stamped with ``run_tag`` (the job's ``--run-tag``, the DAG passes its run id)."""
    return [r for r in log.records if r.get("run_tag") == run_tag]


def run_report(checkpoint: str, run_tag: str, quarantine_checkpoint: str | None = None, *,
               filesystem: Any = None, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What one DAG run's restart of a job did, from the progress logs beside its checkpoints.

    :param checkpoint: the main query's checkpoint; its log is ``<checkpoint>.progress.jsonl``.
    :param run_tag: the ``--run-tag`` the job was given (the DAG's run id).
    :param quarantine_checkpoint: the quarantine query's checkpoint (default ``<checkpoint>_quarantine``).
    :return: :func:`summarize_run` of the main query's batches, plus ``quarantined_rows`` and
        ``quarantined_by_reason`` (``{reason: rows}``, e.g. ``{"malformed_record": 3,
        "null_event_time": 4, ...}``: this run's rows the quarantine query kept aside, summed from its
        ``observed_metrics["quarantine"]``; zeros included), ``quarantine_batches`` (``[{"batch_id",
        "quarantined_rows"}]``: the batches whose rows make ``quarantined_rows``, which sum to it),
        ``last_watermark`` (ISO-8601 UTC or None) and ``progress_log_problems`` (lines of either log
        that could not be read, each naming file and line). When the quarantine query counted the
        rows, it counted them in its own batches (not the main query's ids): each of ``batches``
        then has ``quarantined_rows`` None, and ``quarantine_batches`` are the quarantine query's.
        Without a quarantine query the run's figures stay the main query's own (its batches'
        ``quarantined_rows`` sum to them), for the late-row ledger to fill in
        (:func:`watermark_ops.core.ledger.with_ledger_rows`).
    """
    where = {"filesystem": filesystem, "storage_options": storage_options}
    main = read_progress_log(progress_log_path(checkpoint), **where)
    quarantine = read_progress_log(progress_log_path(quarantine_checkpoint or checkpoint.rstrip("/") + "_quarantine"),
                                   **where)
    report = summarize_run(records_of_run(main, run_tag))
    kept_aside = summarize_run(records_of_run(quarantine, run_tag))
    counted_by = report
    if kept_aside["quarantined_by_reason"]:  # the quarantine query counts them, in batches of its own
        counted_by = kept_aside
        report["quarantined_rows"] = kept_aside["quarantined_rows"]
        report["quarantined_by_reason"] = kept_aside["quarantined_by_reason"]
        for batch in report["batches"]:
            batch["quarantined_rows"] = None
    report["quarantine_batches"] = [{"batch_id": b["batch_id"], "quarantined_rows": b["quarantined_rows"]}
                                    for b in counted_by["batches"]]
    report["last_watermark"] = iso_utc(report["last_watermark_ms"])
    report["progress_log_problems"] = main.problems + quarantine.problems
    return report
