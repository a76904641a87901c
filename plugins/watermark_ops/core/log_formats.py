"""Spark's checkpoint log formats, parsed from bytes: the offset log, the commit log, ``metadata``.

The only module that knows how Spark writes these files. It does no I/O: :mod:`watermark_ops.core.checkpoint`
lists and reads the files (fsspec) and hands their bytes here. Every parser raises
:class:`LogFileError` (a stable ``kind`` and a message saying what was found and what was
expected) for a file it cannot use; the reader turns it into a :class:`ReadProblem` naming the file.

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

All times are epoch milliseconds UTC (``int``), exactly as Spark stores them.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

import msgspec

from watermark_ops.core.jsontext import loads

__all__ = [
    "COMMITS_MAX_VERSION",
    "OFFSETS_MAX_VERSION",
    "CommitEntry",
    "LogFileError",
    "OffsetsEntry",
    "ReadProblem",
    "batch_file_names",
    "is_batch_file_name",
    "parse_commit",
    "parse_metadata",
    "parse_offsets",
    "parse_offsets_in_general",
    "log_json_lines",
    "split_log_file",
]

#: Highest offset-log version this reader knows (``OffsetSeqLog.MAX_VERSION`` in Spark 4.2+).
OFFSETS_MAX_VERSION = 2
#: Highest commit-log version this reader knows (``CommitLog.MAX_VERSION`` in Spark 4.2+).
COMMITS_MAX_VERSION = 3

_HEADER = re.compile(r"^v([0-9]+)$")
_VOID_OFFSET = "-"  # OffsetSeqLog.SERIALIZED_VOID_OFFSET

# Fast paths for the exact text Spark writes (no spaces, fields in Spark's order, non-negative
# integers of at most 19 digits). A match gives the very values ``json.loads`` would; anything else
# (other fields, other order, odd numbers, bad JSON) takes the general path, which validates and
# reports. They exist because an audit parses every file of the checkpoint.
_SPARK_OFFSETS_METADATA = re.compile(
    r'\{"batchWatermarkMs":(0|[1-9][0-9]{0,18}),"batchTimestampMs":(0|[1-9][0-9]{0,18}),"conf":(\{.*\})\}', re.S)
_SPARK_COMMIT = re.compile(rb'v([1-9][0-9]{0,8})\n\{"nextBatchWatermarkMs":(0|[1-9][0-9]{0,18})\}\n?')
# The start of a v1 offsets file as Spark writes it, on its bytes (no decoding, no split per line
# first), up to its conf: the rest of that line is found with bytes.find (a regex scanning the
# conf's thousand bytes took a third of the parse).
_SPARK_OFFSETS_START = re.compile(
    rb'v1\n\{"batchWatermarkMs":(0|[1-9][0-9]{0,18}),"batchTimestampMs":(0|[1-9][0-9]{0,18}),"conf":\{')
# The file source's offset (``FileStreamSourceOffset``), the most common source line.
_FILE_SOURCE_OFFSET = re.compile(rb'\{"logOffset":(0|[1-9][0-9]{0,18})\}')


#: Batch ids are Scala ``Long`` s: a larger decimal name is not a batch file for Spark either.
MAX_BATCH_ID = 2**63 - 1


def is_batch_file_name(name: str) -> bool:
    """True for a log file name that is a whole decimal batch id (``HDFSMetadataLog.isBatchFile``:
    ``Try(name.toLong).isSuccess``): ASCII digits only; hidden temp files, ``.crc``, checksum side
    files and numbers beyond a ``Long`` are not. (String methods, not a regex: a listing of a
    10,000-batch log folder holds 20,000 names.)"""
    return name.isdigit() and name.isascii() and (len(name) < 19 or int(name) <= MAX_BATCH_ID)


def batch_file_names(names: Iterable[str]) -> list[str]:
    """The names of a log folder's listing that :func:`is_batch_file_name` accepts, in listing
    order: one pass over the listing (20,000 names in a 10,000-batch log folder, half of them the
    local ``.N.crc`` files), no call per name."""
    return [name for name in names
            if name.isdigit() and name.isascii() and (len(name) < 19 or int(name) <= MAX_BATCH_ID)]


class ReadProblem(msgspec.Struct, frozen=True):
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


class OffsetsEntry(msgspec.Struct, frozen=True):
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
    metadata: dict[str, Any]

    @property
    def by_source(self) -> dict[int | str, Any]:
        """The offsets keyed by source: v1 by plan position (``0``, ``1``, ...: ``int``); v2 by the
        id written before each offset (the source's name, or its position as text: ``str``),
        because a v2 file lists its sources in no fixed order (``OffsetSeqLog`` v2, Spark 4.2+)."""
        if self.version >= 2:
            return dict(zip(self.source_ids, self.sources))
        return dict(enumerate(self.sources))


class CommitEntry(msgspec.Struct, frozen=True):
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
    metadata: dict[str, Any]

    @property
    def has_next_watermark(self) -> bool:
        """False for a pre-2.4 commit (``{}`` or a bare header): ``next_watermark_ms`` is then a default 0,
        not a watermark Spark computed, and must not be compared with the offset log."""
        return "nextBatchWatermarkMs" in self.metadata



class LogFileError(Exception):
    """A log file that cannot be used as a whole.

    :ivar kind: a :class:`ReadProblem` kind (``empty``, ``binary``, ``bad_header``,
        ``unsupported_version``, ``truncated``, ``not_json``, ``bad_field``).
    :ivar message: what was found and what was expected.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def _decode(raw: bytes) -> str | None:
    """UTF-8 text, or None when the bytes are binary (NUL bytes or invalid UTF-8)."""
    if b"\x00" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _lines_with_header(raw: bytes, log_name: str, max_version: int) -> tuple[int, list[str]]:
    """Check a log file's bytes and header -> (version, the lines after the header).

    ``MetadataVersionUtil.validateVersion`` / ``HDFSMetadataLog``: header ``v<int>``, int > 0.
    """
    if not raw:
        raise LogFileError("empty", f"empty file: expected a {log_name} file starting with a 'v<version>' line")
    text = _decode(raw)
    if text is None:
        raise LogFileError("binary", f"binary content: expected UTF-8 text of a {log_name} file")
    lines = text.split("\n")
    header = lines[0].strip()
    match = _HEADER.match(header)
    if not match or int(match.group(1)) <= 0:
        shown = header if len(header) <= 40 else header[:40] + "..."
        raise LogFileError(
            "bad_header",
            f"log file was malformed: failed to read correct log version from {shown!r} "
            f"(expected 'v<positive int>' on the first line)",
        )
    version = int(match.group(1))
    if version > max_version:
        raise LogFileError(
            "unsupported_version",
            f"the maximum supported {log_name} version is v{max_version}, but encountered v{version}: "
            f"the file was produced by a newer version of Spark than this reader knows",
        )
    # A trailing newline is not a line (Spark writes none, but editors do).
    rest = lines[1:]
    if rest and rest[-1] == "":
        rest = rest[:-1]
    return version, rest


def split_log_file(raw: bytes, log_name: str, max_version: int) -> tuple[int, list[str]]:
    """Check any ``HDFSMetadataLog`` file's bytes and ``v<int>`` header (the same checks and
    messages as the offset and commit logs; used for the file source's log,
    :mod:`watermark_ops.core.source_log`).

    :return: ``(version, the lines after the header)``; a trailing newline is not a line.
    :raises LogFileError: ``empty``, ``binary``, ``bad_header`` or ``unsupported_version``.
    """
    return _lines_with_header(raw, log_name, max_version)


def log_json_lines(raw: bytes, log_name: str, max_version: int, expected: str) -> list[tuple[int, str, Any]]:
    """The JSON value of each non-blank line after the header of a ``CompactibleFileStreamLog`` file
    (the file source's and the file sink's logs: one JSON entry per line).

    :param expected: what a line should be, for the error (``'{"path": ..., "action": ...}'``).
    :return: ``[(1-based line number, the line, its value)]``.
    :raises LogFileError: :func:`split_log_file`'s kinds, or ``not_json`` naming the line.
    """
    _, lines = split_log_file(raw, log_name, max_version)
    values = []
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        try:
            values.append((number, line, loads(line)))
        except ValueError as exc:
            raise LogFileError("not_json", f"line {number} is not JSON ({getattr(exc, 'msg', exc)}): {line[:60]!r}; "
                                           f"expected {expected}") from None
    return values


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = loads(text)
    except ValueError as exc:
        shown = text if len(text) <= 60 else text[:60] + "..."
        raise LogFileError("not_json", f"{what} is not JSON ({exc.msg} at column {exc.colno}): {shown!r}") from None
    if not isinstance(value, dict):
        raise LogFileError("bad_field", f"{what} is JSON but not an object: {text[:60]!r}")
    return value


def _int_field(obj: dict[str, Any], key: str, what: str) -> int:
    value = obj.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise LogFileError("bad_field", f"{what}: {key} must be an integer (epoch ms), got {value!r}")
    return value


def _spark_metadata(text: str, conf_cache: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, str]] | None:
    """Line 2 of an offsets file in Spark's exact form -> (the metadata object, ``conf`` as text
    values), else None (the general path then parses, validates and reports).

    ``conf`` is parsed once per distinct text when ``conf_cache`` is given (it is the same in
    every batch of a query): the entries then share one ``conf`` dict, which must not be mutated.
    """
    match = _SPARK_OFFSETS_METADATA.fullmatch(text)
    if match is None:
        return None
    conf_text = match.group(3)
    cached = conf_cache.get(conf_text) if conf_cache is not None else None
    if cached is None:
        try:
            conf = loads(conf_text)
        except ValueError:
            return None
        cached = (conf, {str(k): str(v) for k, v in conf.items()})
        if conf_cache is not None:
            conf_cache[conf_text] = cached
    conf, shown = cached
    return {"batchWatermarkMs": int(match.group(1)), "batchTimestampMs": int(match.group(2)), "conf": conf}, shown


def parse_offsets(raw: bytes, batch_id: int, file: str, *,
                  conf_cache: dict[str, Any] | None = None) -> tuple[OffsetsEntry, list[ReadProblem]]:
    """Parse the bytes of ``offsets/<batch_id>`` (``OffsetSeqLog.deserialize``).

    :param conf_cache: a dict kept across the files of one read (opaque to the caller): each
        distinct ``conf`` text is then parsed once and its dicts shared by the entries (read-only),
        instead of once per batch.
    :return: the entry and the problems of individual source lines (kept, see :class:`OffsetsEntry`).
    :raises LogFileError: when the file as a whole cannot be used; :func:`watermark_ops.core.checkpoint.read_checkpoint` turns it
        into a :class:`ReadProblem`.
    """
    if conf_cache is not None:
        fast = _spark_offsets_file(raw, batch_id, file, conf_cache)
        if fast is not None:
            return fast, []
    return parse_offsets_in_general(raw, batch_id, file, conf_cache=conf_cache)


def parse_offsets_in_general(raw: bytes, batch_id: int, file: str, *,
                             conf_cache: dict[str, Any] | None = None) -> tuple[OffsetsEntry, list[ReadProblem]]:
    """:func:`parse_offsets` without its first try of Spark's exact form (for a reader that
    tried it already): every form this reader knows, validated, problems named."""
    version, lines = _lines_with_header(raw, "offset log", OFFSETS_MAX_VERSION)
    if not lines:
        raise LogFileError("truncated", "truncated: expected a metadata JSON line after the version line")
    metadata_line = lines[0].strip()
    if metadata_line == "":
        if version >= 2:
            raise LogFileError("truncated", "truncated: a v2 offset log requires a metadata JSON line on line 2")
        metadata: dict[str, Any] = {}  # OffsetSeq without metadata (Spark 2.0): defaults
        conf_text = None
    else:
        fast = _spark_metadata(metadata_line, conf_cache)
        metadata = fast[0] if fast else _json_object(metadata_line, "line 2 (offset-log metadata)")
        conf_text = fast[1] if fast else None
    watermark_ms = _int_field(metadata, "batchWatermarkMs", "line 2 (offset-log metadata)")
    timestamp_ms = _int_field(metadata, "batchTimestampMs", "line 2 (offset-log metadata)")
    conf = metadata.get("conf") or {}
    if not isinstance(conf, dict):
        raise LogFileError("bad_field", f"line 2 (offset-log metadata): conf must be an object, got {conf!r}")
    if conf_text is None:
        conf_text = {str(k): str(v) for k, v in conf.items()}
    source_lines = lines[1:]
    if not source_lines:
        raise LogFileError("truncated", "truncated: expected one offset line per source after the metadata line")
    problems: list[ReadProblem] = []
    sources: list[Any] = []
    ids: list[str] = []
    for number, line in enumerate(source_lines, start=3):
        text = line.strip()
        if version >= 2:
            source_id, sep, text = text.partition(":")
            if not sep or not source_id or any(c in source_id for c in '{["'):
                raise LogFileError(
                    "bad_field", f"line {number}: expected '<sourceId>:<offset>' in a v2 offset log, got {line[:60]!r}"
                )
            ids.append(source_id)
        else:
            ids.append(str(number - 3))
        if text == _VOID_OFFSET:
            sources.append(None)
            continue
        try:
            sources.append(loads(text))
        except ValueError as exc:
            sources.append(text)
            problems.append(ReadProblem(
                "not_json", file,
                f"line {number} (offset of source {ids[-1]}) is not JSON ({exc.msg}): {text[:60]!r}; kept as text",
                batch_id,
            ))
    entry = OffsetsEntry(
        batch_id=batch_id, file=file, version=version, watermark_ms=watermark_ms, timestamp_ms=timestamp_ms,
        conf=conf_text, sources=tuple(sources), source_ids=tuple(ids),
        metadata=metadata,
    )
    return entry, problems


def _spark_offsets_file(raw: bytes, batch_id: int, file: str, conf_cache: dict[Any, Any]) -> OffsetsEntry | None:
    """The entry of a v1 offsets file in Spark's exact form whose sources are file-source offsets
    or ``-`` (the very values the general path gives), else None (the general path then parses,
    validates and reports). One match on the bytes; each distinct ``conf`` parsed once."""
    match = _SPARK_OFFSETS_START.match(raw)
    if match is None:
        return None
    conf_start = match.end() - 1
    end = raw.find(b"\n", conf_start)  # the metadata line ends with the conf's "}" and its own
    if end < 0 or raw[end - 2:end] != b"}}" or end - conf_start < 3 or raw[end + 1:end + 2] in (b"", b"\n"):
        return None  # no source line after it, or a line that is not {"batchWatermarkMs":..,"conf":{..}}
    watermark, timestamp = match.groups()
    conf_raw = raw[conf_start:end - 1]
    lines = raw[end + 1:].split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # a trailing newline is not a line
    sources: list[Any] = []
    for line in lines:
        if line == b"-":
            sources.append(None)
            continue
        offset = _FILE_SOURCE_OFFSET.fullmatch(line)
        if offset is None:
            return None
        sources.append({"logOffset": int(offset.group(1))})
    last = conf_cache.get(_LAST_CONF)  # every batch of a query repeats the conf: compare, not hash
    cached = last[1] if last is not None and last[0] == conf_raw else conf_cache.get(conf_raw)
    if cached is None:
        try:
            conf = loads(conf_raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(conf, dict):
            return None
        cached = conf_cache[conf_raw] = (conf, {str(k): str(v) for k, v in conf.items()})
    conf_cache[_LAST_CONF] = (conf_raw, cached)
    conf, shown = cached
    ids = _SOURCE_IDS.get(len(sources))
    if ids is None:
        ids = _SOURCE_IDS[len(sources)] = tuple(str(i) for i in range(len(sources)))
    watermark_ms, timestamp_ms = int(watermark), int(timestamp)
    return OffsetsEntry(batch_id, file, 1, watermark_ms, timestamp_ms, shown, tuple(sources), ids,
                        {"batchWatermarkMs": watermark_ms, "batchTimestampMs": timestamp_ms, "conf": conf})


#: The key of the conf cache under which the last conf seen is kept (no text or bytes key is it).
_LAST_CONF = object()
#: The source ids of a v1 offsets file of N sources (their positions, as text), made once per N.
_SOURCE_IDS: dict[int, tuple[str, ...]] = {}


def _spark_commit_file(raw: bytes, batch_id: int, file: str) -> CommitEntry | None:
    """The entry of a commit file in Spark's exact form (``v<n>\\n{"nextBatchWatermarkMs":<ms>}``,
    a version this reader knows), else None (then :func:`parse_commit` parses and reports)."""
    match = _SPARK_COMMIT.fullmatch(raw)
    if match is None or int(match.group(1)) > COMMITS_MAX_VERSION:
        return None
    version, next_ms = match.groups()
    next_ms = int(next_ms)
    return CommitEntry(batch_id, file, int(version), next_ms, {"nextBatchWatermarkMs": next_ms})


def parse_commit(raw: bytes, batch_id: int, file: str) -> CommitEntry:
    """Parse the bytes of ``commits/<batch_id>`` (``CommitLog.deserialize``).

    A header with no JSON line, or ``{}``, is a pre-2.4 commit: ``next_watermark_ms`` 0.

    :raises LogFileError: turned into a :class:`ReadProblem` by the reader.
    """
    entry = _spark_commit_file(raw, batch_id, file)
    if entry is not None:
        return entry
    version, lines = _lines_with_header(raw, "commit log", COMMITS_MAX_VERSION)
    text = lines[0].strip() if lines else ""
    metadata = _json_object(text, "line 2 (commit metadata)") if text else {}
    next_ms = _int_field(metadata, "nextBatchWatermarkMs", "line 2 (commit metadata)")
    return CommitEntry(batch_id=batch_id, file=file, version=version, next_watermark_ms=next_ms, metadata=metadata)


def parse_metadata(raw: bytes) -> str:
    """Parse the bytes of ``metadata`` (``StreamMetadata.read``): ``{"id": "<query uuid>"}`` -> the id.

    :raises LogFileError: ``empty``, ``binary``, ``not_json`` or ``bad_field``.
    """
    if not raw:
        raise LogFileError("empty", 'empty file: expected {"id": "<query uuid>"}')
    text = _decode(raw)
    if text is None:
        raise LogFileError("binary", 'binary content: expected {"id": "<query uuid>"}')
    try:
        value = loads(text.strip().split("\n", 1)[0])
    except ValueError as exc:
        raise LogFileError("not_json", f'not JSON ({exc.msg}): expected {{"id": "<query uuid>"}}') from None
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        raise LogFileError("bad_field", f'expected {{"id": "<query uuid>"}}, got {text[:80]!r}')
    return value["id"]
