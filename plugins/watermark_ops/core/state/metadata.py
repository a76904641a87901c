"""The state operators' metadata (``state/<opId>/...``): which stateful operators a query has, and
which of their state columns carry an event-time watermark. No state store data is read here.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from typing import Any

import msgspec

from watermark_ops.core.log_formats import LogFileError, ReadProblem, is_batch_file_name, split_log_file
from watermark_ops.core.storage import _resolve

__all__ = ["STATE_METADATA_MAX_VERSION", "WATERMARK_DELAY_KEY", "StateMetadata", "StateOperator",
           "parse_state_schema", "read_state_metadata", "state_metadata_on", "state_schema_path"]

# which of their state columns carry an event-time watermark


#: The field metadata key Spark puts on an event-time column once ``withWatermark`` names it
#: (``EventTimeWatermark.delayKey``); a window column built from it carries it too.
WATERMARK_DELAY_KEY = "spark.watermarkDelayMs"
#: Highest ``OperatorStateMetadata`` version this reader knows (``OperatorStateMetadata.scala``, 4.0+).
STATE_METADATA_MAX_VERSION = 2


class StateOperator(msgspec.Struct, frozen=True):
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


class StateMetadata(msgspec.Struct, frozen=True):
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
    return state_metadata_on(storage, root)


def state_metadata_on(storage: Any, root: str) -> StateMetadata:
    """:func:`read_state_metadata` on a resolved storage (``core.storage``: what a caller already
    reading the checkpoint with it passes, so that its requests are counted together)."""
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
        schema = state_schema_path(folder, store)
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


def state_schema_path(operator_folder: str, store: str) -> str:
    """The schema file of ``store`` under ``state/<opId>`` (partition 0, where
    ``StateSchemaCompatibilityChecker`` keeps it): ``<op>/0/_metadata/schema`` for the ``default``
    store, ``<op>/0/<store>/_metadata/schema`` for a named one."""
    return f"{operator_folder}/0/_metadata/schema" if store == "default" else f"{operator_folder}/0/{store}/_metadata/schema"


def parse_state_schema(raw: bytes) -> tuple[Any, Any]:
    """The key and value schemas (``StructType`` JSON) of a state schema file: see :func:`_parse_state_schema`.

    :raises LogFileError: ``truncated``, ``unsupported_version``, ``not_json``.
    """
    return _parse_state_schema(raw)


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
