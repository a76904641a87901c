"""What a checkpoint holds of the query that wrote it: its sources, stateful operators and keys,
watermark delays and window durations (a :class:`~watermark_ops.core.state.plan.QueryShape`), for
the driver's start check (:mod:`watermark_ops.core.state.restart`).

Two places, the first that answers wins:

1. the progress log beside the checkpoint (``<checkpoint>.progress.jsonl``): the recorder writes
   what each run started with into every record (``started_with``, the analyzed plan's shape), so
   the newest record of the checkpoint's query (its ``query_id`` is the one in ``metadata``) says
   exactly what the last run ran, an accepted change included;
2. else the checkpoint's own files, for a checkpoint the package never recorded:

   * the number of sources: the source offsets of ``offsets/<head>`` (``OffsetSeq``);
   * the folders file sources read: the files the newest log offset of ``sources/<i>/`` names
     (absolute URIs, ``FileStreamSourceLog``; :mod:`watermark_ops.core.source_log`);
   * the stateful operators: ``state/<op>/_metadata/metadata`` (Spark 3.5+), and each one's key
     fields: the state schema file (``state/<op>/0/[<store>/]_metadata/schema``);
   * the watermark delays: the state schema fields carrying ``spark.watermarkDelayMs``;
   * a time window's duration: one state key decoded from the newest delta, snapshot or
     changelog file of the operator (an ``UnsafeRow``: a null bitset of 8-byte words, one 8-byte
     slot per field, a struct field's slot holding ``offset << 32 | size`` of a nested row whose
     ``start`` and ``end`` are epoch microseconds; ``UnsafeRow.java``, little-endian as
     ``Platform.putLong`` writes on x86 and ARM; a RocksDB key carries one encoder byte before the
     row, ``RocksDBStateEncoder``). RocksDB checkpoint zips without changelogs hold keys only in
     SST files: the duration is then unknown.

What a file cannot tell stays unknown (None, empty) and is not compared. Never raises for content.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from watermark_ops.core.state.plan import QueryShape, source_folder

__all__ = ["HeldShape", "read_held_shape", "window_width_us"]

#: The state schema field metadata key of a time window (``TimeWindow.marker``).
TIME_WINDOW_KEY = "spark.timeWindow"
#: The most partitions, and data files per partition, read to decode one window key.
_MAX_PARTITIONS, _MAX_FILES = 8, 3
#: The file-source entries kept per source to compare folders with (the newest log offset's).
_MAX_ENTRIES = 50


@dataclass(frozen=True)
class HeldShape:
    """What the checkpoint holds (module docstring).

    :ivar shape: the :class:`QueryShape`; its ``evidence`` names the file behind each aspect
        (``sources``, ``source_paths`` ``{index: file}``, ``operators``, ``keys`` ``{index: file}``,
        ``watermarks``, ``windows``) and a file source's ``entries`` (``{index: [file URIs]}``).
    :ivar held_from: ``"progress_log"`` | ``"files"``.
    :ivar location: the checkpoint as shown; ``head_batch_id`` its newest batch; ``query_id``.
    """

    shape: QueryShape
    held_from: str
    location: str
    head_batch_id: int | None
    query_id: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the shape, its evidence, where it came from."""
        return {"held_from": self.held_from, "location": self.location, "head_batch_id": self.head_batch_id,
                "query_id": self.query_id, "shape": self.shape.to_dict(), "evidence": dict(self.shape.evidence)}


def read_held_shape(location: Any, *, filesystem: Any = None, storage_options: dict[str, Any] | None = None,
                    progress_records: list[dict[str, Any]] | None = None) -> HeldShape | None:
    """What the checkpoint at ``location`` holds (module docstring); None when it holds no batch
    yet (no folder, or no ``offsets/``): a new query, nothing to compare.

    Reads ``metadata`` and the two newest offsets and commit files, the progress log (unless
    ``progress_records`` are given: ``[]`` means none), and without a recorded start: one file of
    each ``sources/<i>``, the operators' metadata and schema files, and one to a few state files.
    """
    from watermark_ops.core.checkpoint import read_checkpoint
    from watermark_ops.core.progress import progress_log_path, read_progress_log
    from watermark_ops.core.state.metadata import read_state_metadata
    from watermark_ops.core.storage import _resolve

    checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options, newest=2)
    head = checkpoint.head_batch_id
    if head is None:
        return None
    log_path = progress_log_path(checkpoint.location)
    if progress_records is None:
        try:
            progress_records = read_progress_log(progress_log_path(str(getattr(location, "path", location))),
                                                 filesystem=filesystem or getattr(location, "fs", None),
                                                 storage_options=storage_options).records
        except OSError:
            progress_records = []
    for record in reversed(progress_records):
        started = record.get("started_with")
        if isinstance(started, dict) and (checkpoint.query_id is None or record.get("query_id") == checkpoint.query_id):
            try:
                evidence = {"file": log_path, "batch_id": record.get("batch_id"), "run_tag": record.get("run_tag")}
                shape = QueryShape.from_dict(started, evidence)
            except ValueError:
                break
            return HeldShape(shape, "progress_log", checkpoint.location, head, checkpoint.query_id)
    storage, root = _resolve(location, filesystem, storage_options)
    metadata = read_state_metadata(location, filesystem=filesystem, storage_options=storage_options)
    return HeldShape(_from_files(storage, root, checkpoint, head, metadata), "files", checkpoint.location, head,
                     checkpoint.query_id)


def _from_files(storage: Any, root: str, checkpoint: Any, head: int, metadata: Any) -> QueryShape:
    from watermark_ops.core.source_log import file_source_log_offset, read_source_log

    evidence: dict[str, Any] = {"source_paths": {}, "entries": {}, "keys": {}}
    offsets = checkpoint.batch(head).sources
    if offsets is None and head > 0 and checkpoint.batch(head - 1) is not None:
        offsets, head = checkpoint.batch(head - 1).sources, head - 1
    sources: list[dict[str, Any]] = []
    if offsets is not None:
        evidence["sources"] = checkpoint.batch(head).offsets_file
        for index, offset in enumerate(offsets):
            k = file_source_log_offset(offset)
            log = read_source_log(storage, f"{root}/sources/{index}", [k]) if k is not None else None
            entries = [e.path for e in (log.files.get(k) or ())][-_MAX_ENTRIES:] if log else []
            if entries:
                folders = sorted({source_folder(p.rsplit("/", 1)[0]) for p in entries})
                sources.append({"kind": "file", "path": _common_folder(folders), "description": "file source log"})
                evidence["source_paths"][index] = log.read_from.get(k)
                evidence["entries"][index] = [source_folder(p) for p in entries]
            else:
                sources.append({"kind": "other", "path": None, "description": f"source {index}"})
    operators: list[dict[str, Any]] = []
    known = True
    windows: list[int] = []
    delays = sorted({c["delay_ms"] for c in metadata.watermark_columns if c.get("delay_ms") is not None})
    if metadata.watermark_columns:
        evidence["watermarks"] = metadata.watermark_columns[0]["file"]
    for op in metadata.operators:
        if op.name is None:
            known = False
            continue
        evidence.setdefault("operators", op.metadata_file)
        keys, window_index, schema_file = _key_fields(storage, f"{root}/state/{op.operator_id}", op.stores)
        operators.append({"name": op.name, "keys": keys if op.name != "symmetricHashJoin" else None})
        evidence["keys"][len(operators) - 1] = schema_file
        if window_index is not None and keys is not None:
            width = _decoded_window(storage, f"{root}/state/{op.operator_id}", op.stores, len(keys), window_index)
            if width is not None:
                windows.append(width[0] // 1000)
                evidence["windows"] = width[1]
    if metadata.problems:
        known = False
    return QueryShape(tuple(sources), tuple(operators), known,
                      tuple({"column": None, "delay_ms": d} for d in delays), tuple(sorted(set(windows))),
                      evidence=evidence)


def _common_folder(folders: list[str]) -> str:
    import os

    if len(folders) == 1:
        return folders[0]
    try:
        return os.path.commonpath(folders)
    except ValueError:  # URIs of different schemes
        return folders[0]


def _key_fields(storage: Any, folder: str, stores: tuple[str, ...]) -> tuple[list[str] | None, int | None, str | None]:
    """``(key field names, index of the time window field or None, schema file)`` of the operator's first store."""
    from watermark_ops.core.log_formats import LogFileError
    from watermark_ops.core.state.metadata import parse_state_schema, state_schema_path

    path = state_schema_path(folder, (stores or ("default",))[0])
    raw = storage.read([path])(path)
    if isinstance(raw, Exception):
        return None, None, None
    try:
        key, _ = parse_state_schema(raw)
    except LogFileError:
        return None, None, storage.display(path)
    fields = [f for f in (key.get("fields") or []) if isinstance(f, dict)] if isinstance(key, dict) else []
    window = next((i for i, f in enumerate(fields) if (f.get("metadata") or {}).get(TIME_WINDOW_KEY)), None)
    return [str(f.get("name")) for f in fields], window, storage.display(path)


def window_width_us(key: bytes, fields: int, index: int) -> int | None:
    """The width (end − start, µs) of the time window struct at field ``index`` of an ``UnsafeRow``
    key of ``fields`` fields (module docstring); None when the bytes are not such a row."""
    if len(key) % 8 == 1:  # RocksDB's encoder byte before the row
        key = key[1:]
    slot = 8 * ((fields + 63) // 64) + 8 * index
    if len(key) % 8 or slot + 8 > len(key):
        return None
    if key[index // 8] >> (index % 8) & 1:  # a null window
        return None
    word = int.from_bytes(key[slot:slot + 8], "little")
    offset, size = word >> 32, word & 0xFFFFFFFF
    if size < 24 or offset + size > len(key):
        return None
    nested = key[offset:offset + size]
    start = int.from_bytes(nested[8:16], "little", signed=True)
    end = int.from_bytes(nested[16:24], "little", signed=True)
    return end - start if end > start else None


def _decoded_window(storage: Any, folder: str, stores: tuple[str, ...], fields: int,
                    index: int) -> tuple[int, str] | None:
    """``(width µs, the file it was read from)`` from the operator's newest data files, else None."""
    from watermark_ops.core.log_formats import is_batch_file_name
    from watermark_ops.core.state.files import StateFileError, changelog_records, parse_state_file_name, read_records

    store = (stores or ("default",))[0]
    try:
        partitions = sorted(int(n) for n in storage.names(folder) if is_batch_file_name(n))[:_MAX_PARTITIONS]
    except Exception:  # noqa: BLE001 - unknown, not compared
        return None
    for partition in partitions:
        where = f"{folder}/{partition}" if store == "default" else f"{folder}/{partition}/{store}"
        try:
            names = storage.names(where)
        except Exception:  # noqa: BLE001
            continue
        files = sorted(((parsed.version, name) for name in names
                        if (parsed := parse_state_file_name(name)) and parsed.kind != "zip"), reverse=True)
        for _, name in files[:_MAX_FILES]:
            path = f"{where}/{name}"
            raw = storage.read([path])(path)
            if isinstance(raw, Exception):
                continue
            try:
                records = changelog_records(raw)[2] if name.endswith(".changelog") else read_records(raw)
            except StateFileError:
                continue
            for record in records[:1]:
                width = window_width_us(record.key, fields, index)
                if width is not None:
                    return width, storage.display(path)
    return None
