"""Read the state of a checkpoint without a JVM: per stateful operator, what it holds and what a
restart will load.

:func:`read_state` reads once and returns a plain value (:class:`CheckpointState`); the rules
(:mod:`watermark_ops.core.state.rules`, :mod:`watermark_ops.core.state.preflight`) are pure
functions of it. What it reads:

* the operators' metadata and state schemas (:func:`watermark_ops.core.state.metadata.read_state_metadata`):
  id, Spark's operator name (``stateStoreSave``, ``dedupe``, ``dedupeWithinWatermark``,
  ``symmetricHashJoin``, ...), stores, and which state columns carry ``spark.watermarkDelayMs``;
* the offset and commit logs (:func:`watermark_ops.core.checkpoint.read_checkpoint`, unless a read
  checkpoint is given): the batch a restart starts from (so the state version it loads), the frozen
  confs (provider), each batch's watermark, ``stateUniqueIds`` (checkpoint format version 2);
* one listing per partition and store folder (sizes included), then the files of the chain a
  restart loads and of the newest versions (:mod:`watermark_ops.core.state.chain`), read at once;
* the job's progress log beside the checkpoint (``<checkpoint>.progress.jsonl``) when the recorder
  wrote one: Spark's own per-operator figures (``stateOperators``: ``numRowsTotal``,
  ``numRowsRemoved``, ``numRowsDroppedByWatermark``) per batch.

Rows per batch come from the progress log when it has them, else from the files (exact: see
:mod:`watermark_ops.core.state.chain`); the files' counts are kept either way (``file_rows``). A
join's rows are those of its two ``*-keyWithIndexToValue`` stores, as Spark counts them
(``SymmetricHashJoinStateManager.metrics``). Bytes on disk measure versions since the last
snapshot, not state size (eviction appends tombstones); rows measure state.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from typing import Any, Iterable

from watermark_ops.core.log_formats import ReadProblem, is_batch_file_name
from watermark_ops.core.state.chain import (
    DataFile,
    StoreChain,
    base_changelogs,
    count_rows,
    list_store,
    plan_chain,
    sized_listing,
)
from watermark_ops.core.state.files import StateFileError, changelog_records
from watermark_ops.core.state.metadata import StateOperator, read_state_metadata
from watermark_ops.core.state.model import (  # noqa: F401 - re-exported: the values are read here
    DEFAULT_MIN_BATCHES_TO_RETAIN,
    PROVIDER_CONF,
    CheckpointState,
    OperatorState,
    StateBatch,
    committed_and_conf,
    provider_of_class,
    stateless_state,
)
from watermark_ops.core.storage import _resolve

__all__ = ["DEFAULT_HISTORY_VERSIONS", "DEFAULT_MAX_REPLAY_BYTES", "DEFAULT_MIN_BATCHES_TO_RETAIN", "PROVIDER_CONF",
           "CheckpointState", "OperatorState", "StateBatch", "provider_of_class", "read_state", "state_of"]

#: RocksDB zips whose ``numKeys`` are read per store (the newest versions), for rows per batch.
DEFAULT_HISTORY_VERSIONS = 30
#: The most bytes of state files read to count rows; a bigger chain is listed and checked by
#: name, not counted (the operator says so).
DEFAULT_MAX_REPLAY_BYTES = 256 * 1024 * 1024
#: The join stores whose rows Spark reports as the operator's rows.
JOIN_ROW_STORE_SUFFIX = "-keyWithIndexToValue"


def read_state(location: Any, *, filesystem: Any = None, storage_options: dict[str, Any] | None = None,
               checkpoint: Any = None, progress_records: Iterable[dict[str, Any]] | None = None,
               min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN,
               history_versions: int = DEFAULT_HISTORY_VERSIONS,
               max_replay_bytes: int = DEFAULT_MAX_REPLAY_BYTES) -> CheckpointState:
    """Read the state of the checkpoint at ``location`` (module docstring).

    :param location: the checkpoint folder (local path, fsspec URL, ``ObjectStoragePath``).
    :param checkpoint: the :class:`~watermark_ops.core.checkpoint.Checkpoint` already read, else
        it is read here (whole).
    :param progress_records: the job's progress records, else the log beside the checkpoint is read
        (missing: none); pass ``()`` to count from the files only.
    :param min_batches_to_retain: the query's ``spark.sql.streaming.minBatchesToRetain``.
    :param history_versions: RocksDB zips read per store for rows per batch (newest first).
    :param max_replay_bytes: the most bytes of state files read to count rows.
    :return: a :class:`CheckpointState`; what cannot be read is a :class:`ReadProblem` naming
        the file, never raised.
    """
    from watermark_ops.core.checkpoint import read_checkpoint
    from watermark_ops.core.progress import progress_log_path, read_progress_log

    storage, root = _resolve(location, filesystem, storage_options)
    if checkpoint is None:
        checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options)
    if progress_records is None:
        try:
            progress_records = read_progress_log(progress_log_path(storage.display(root)), filesystem=filesystem,
                                                 storage_options=storage_options).records
        except OSError:
            progress_records = []
    metadata = read_state_metadata(location, filesystem=filesystem, storage_options=storage_options)
    return state_of(storage, root, checkpoint, metadata, list(progress_records), min_batches_to_retain,
                    history_versions, max_replay_bytes)


def state_of(storage: Any, root: str, checkpoint: Any, metadata: Any, progress_records: list[dict[str, Any]],
             min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN,
             history_versions: int = DEFAULT_HISTORY_VERSIONS,
             max_replay_bytes: int = DEFAULT_MAX_REPLAY_BYTES, *, list_files: bool | None = True,
             count_files: bool | None = True) -> CheckpointState:
    """:func:`read_state` on a resolved storage, with the checkpoint, the state metadata and the
    progress records already read (what a caller holding one snapshot of the checkpoint passes).

    :param list_files: list the partition and store folders (the chain, versions, bytes); False:
        the metadata and the progress log's rows only (no request beyond the metadata's); None:
        only the folders of operators whose rows the progress log does not give.
    :param count_files: count rows from the files (True); False never; None only for operators
        whose rows the progress log does not give (what a face looking often reads).
    """
    shown = storage.display(root)
    if not metadata.has_state_folder:
        return stateless_state(shown, checkpoint, metadata, min_batches_to_retain)
    committed_id, conf = committed_and_conf(checkpoint)
    problems = list(metadata.problems)
    target = committed_id + 1 if committed_id is not None else None
    commit = checkpoint.batch(committed_id).commit if committed_id is not None else None
    unique_ids = (commit.metadata.get("stateUniqueIds") if commit is not None else None) or {}
    watermarks = {b.batch_id: b.watermark_ms for b in checkpoint.batches}
    planned = []
    n = len(metadata.operators)
    in_progress = {op.operator_id for op in metadata.operators
                   if _progress_series(progress_records, checkpoint.query_id, op.operator_id, n)}
    for op in metadata.operators:
        listed = list_files or (list_files is None and op.operator_id not in in_progress)
        chains = _operator_chains(storage, f"{root}/state/{op.operator_id}", op, problems) if listed else []
        ids = unique_ids.get(str(op.operator_id)) if isinstance(unique_ids, dict) else None
        stores = _store_names(op, chains)
        for chain in chains:
            plan_chain(chain, target if target is not None else (max(chain.versions) if chain.versions else None),
                       _ids_of(ids, chain, stores, target))
        planned.append((op, chains, stores))
    _lineage(storage, [c for _, chains, _ in planned for c in chains], problems)
    to_read: dict[str, str] = {}  # shown -> inside the storage
    budget_ok: dict[int, bool | None] = {}
    for op, chains, _ in planned:
        if count_files is False or (count_files is None and op.operator_id in in_progress):
            budget_ok[op.operator_id] = None  # not counted: not asked to
            continue
        wanted = [f for c in chains for f in _files_to_read(c, history_versions)]
        total = sum(f.size or 0 for f in wanted)
        budget_ok[op.operator_id] = total <= max_replay_bytes
        if budget_ok[op.operator_id]:
            to_read.update({f.path: f"{c.internal}/{f.path.rsplit('/', 1)[-1]}" for c in chains
                            for f in _files_to_read(c, history_versions)})
    raw = storage.read(list(to_read.values()))

    def content(path: str) -> bytes | Exception:
        return raw(to_read[path]) if path in to_read else FileNotFoundError(path)

    operators = []
    for op, chains, stores in planned:
        if budget_ok[op.operator_id]:
            for chain in chains:
                count_rows(chain, content, [f for f in _files_to_read(chain, history_versions) if f.kind == "zip"])
        operators.append(_operator_state(op, chains, stores, conf, progress_records, checkpoint, watermarks,
                                         budget_ok[op.operator_id], max_replay_bytes,
                                         storage.display(f"{root}/state/{op.operator_id}"), len(planned)))
    return CheckpointState(shown, True, tuple(operators), committed_id, conf, min_batches_to_retain, tuple(problems))


def _operator_chains(storage: Any, folder: str, op: StateOperator, problems: list[ReadProblem]) -> list[StoreChain]:
    """Every partition and store folder of an operator, listed (sizes included)."""
    try:
        top = sized_listing(storage, folder)
    except Exception as exc:  # noqa: BLE001 - reported, not guessed
        problems.append(ReadProblem("unreadable", storage.display(folder), f"cannot list the folder: {exc!r}"))
        return []
    chains = []
    for name in sorted((n for n, (kind, _) in top.items() if kind == "directory" and is_batch_file_name(n)), key=int):
        partition_folder = f"{folder}/{name}"
        try:
            listing = sized_listing(storage, partition_folder)
        except Exception as exc:  # noqa: BLE001
            problems.append(ReadProblem("unreadable", storage.display(partition_folder), f"cannot list the folder: {exc!r}"))
            continue
        named = [n for n, (kind, _) in listing.items() if kind == "directory" and n not in ("_metadata", "SSTs")]
        if named and not any(n.endswith((".delta", ".snapshot", ".zip", ".changelog")) for n in listing):
            for store in sorted(named):
                store_folder = f"{partition_folder}/{store}"
                try:
                    chain = list_store(storage, store_folder, int(name), store)
                except Exception as exc:  # noqa: BLE001
                    problems.append(ReadProblem("unreadable", storage.display(store_folder),
                                                f"cannot list the folder: {exc!r}"))
                    continue
                chains.append(chain)
        else:
            chain = list_store(storage, partition_folder, int(name), "default", listing)
            chains.append(chain)
    return chains


def _store_names(op: StateOperator, chains: list[StoreChain]) -> tuple[str, ...]:
    found = tuple(sorted({c.store for c in chains}))
    return op.stores if op.stores and set(found) <= set(op.stores) else (found or op.stores or ("default",))


def _ids_of(ids: Any, chain: StoreChain, stores: tuple[str, ...], target: int | None) -> dict[int, str] | None:
    """The unique id of the target version of this partition and store (format version 2)."""
    if target is None or not isinstance(ids, list) or chain.partition >= len(ids):
        return None
    per_store = ids[chain.partition]
    index = stores.index(chain.store) if chain.store in stores else 0
    if isinstance(per_store, list) and index < len(per_store) and isinstance(per_store[index], str):
        return {target: per_store[index]}
    return None


def _lineage(storage: Any, chains: list[StoreChain], problems: list[ReadProblem]) -> None:
    """Format version 2: read the target changelog of each store first, and plan again with the
    unique ids its lineage names (``StateStoreChangelogWriterV3/V4.writeLineage``)."""
    heads = {}
    for chain in chains:
        target = chain.target_version
        if target is None or not any(f.unique_id for f in chain.files):
            continue
        head = next((f for f in chain.replay if f.version == target), None)
        if head is not None:
            heads[chain.internal + "/" + head.path.rsplit("/", 1)[-1]] = (chain, head)
    if not heads:
        return
    raw = storage.read(list(heads))
    for path, (chain, head) in heads.items():
        data = raw(path)
        if isinstance(data, Exception):
            continue  # reported when the chain is read
        try:
            _, lineage, _ = changelog_records(data)
        except StateFileError:
            continue
        ids = {head.version: head.unique_id}
        for item in lineage or []:
            if isinstance(item, dict) and isinstance(item.get("version"), int):
                ids[item["version"]] = item.get("checkpointUniqueId")
        chain.replay, chain.missing, chain.needed_zip = [], [], None
        plan_chain(chain, chain.target_version, ids)


def _files_to_read(chain: StoreChain, history_versions: int) -> list[DataFile]:
    files = list(chain.replay)
    if chain.provider == "hdfs" and chain.base_version:
        files += [f for f in chain.files if f.version == chain.base_version and f.kind == "snapshot"][:1]
    if chain.provider == "rocksdb":
        top = chain.target_version or 0
        zips = [f for f in chain.files if f.kind == "zip" and f.version <= top]
        zips = zips[-history_versions:] if not chain.changelog else zips
        if chain.needed_zip is not None and chain.needed_zip not in zips:
            zips.append(chain.needed_zip)
        files += zips + base_changelogs(chain)  # the changelogs that give the base zip's keys
    return files


def _counted_stores(stores: tuple[str, ...]) -> set[str]:
    joined = {s for s in stores if s.endswith(JOIN_ROW_STORE_SUFFIX)}
    return joined or set(stores)


def _bound(op: StateOperator, stores: tuple[str, ...]) -> tuple[bool | None, str]:
    """Whether a watermark can evict the operator's state, from its name and state schema."""
    columns = op.watermark_columns
    name = op.name
    described = ", ".join(f"{c['store']} {c['key_or_value']} column {c['column']} (delay {c['delay_ms']} ms)"
                          for c in columns)
    if name == "dedupeWithinWatermark":
        return True, "dropDuplicatesWithinWatermark: each key expires once the watermark passes its event time"
    if name == "symmetricHashJoin":
        sides = {side: any(c["store"].startswith(side + "-") for c in columns) for side in ("left", "right")}
        if all(sides.values()):
            return True, f"both join sides keep a watermarked event-time column: {described}"
        if any(sides.values()):
            with_wm = next(s for s, has in sides.items() if has)
            return False, (f"a stream-stream join with a watermark on the {with_wm} side only: neither side's state "
                           f"is ever evicted (StreamingSymmetricHashJoinHelper)")
        if op.metadata_file is not None and columns == ():
            return False, "a stream-stream join without a watermark on either side: its state is never evicted"
        return None, "no state schema to tell"
    key_columns = [c for c in columns if c["key_or_value"] == "key"]
    if name in ("dedupe", "stateStoreSave"):
        if key_columns:
            return True, f"the state key holds a watermarked event-time column: {described}"
        if op.version is None:
            return None, "no operator metadata to tell"
        what = "dropDuplicates" if name == "dedupe" else "an aggregation"
        return False, (f"{what} whose state key holds no event-time column with a watermark: no watermark can evict "
                       f"its state, which grows with every new key")
    if key_columns:
        return True, f"the state key holds a watermarked event-time column: {described}"
    return None, f"operator {name or 'unknown'}: eviction depends on its own timeouts, not told by the files"


def _progress_series(records: list[dict[str, Any]], query_id: str | None, operator_index: int,
                     n_operators: int) -> dict[int, tuple[int | None, int | None, int | None]]:
    """``{batch id: (rows, removed, dropped)}`` of one operator from the progress records (the
    newest record of a batch wins: a re-run batch)."""
    out = {}
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("batch_id"), int):
            continue
        if query_id and record.get("query_id") not in (None, query_id):
            continue
        if record.get("executed") is False:
            continue
        per_op = record.get("state_operators")
        if isinstance(per_op, list) and operator_index < len(per_op) and isinstance(per_op[operator_index], dict):
            item = per_op[operator_index]
            out[record["batch_id"]] = (item.get("rows_total"), item.get("rows_removed"),
                                       item.get("rows_dropped_by_watermark"))
        elif n_operators == 1 and "state_rows" in record:
            out[record["batch_id"]] = (record.get("state_rows"), record.get("state_rows_removed"),
                                       record.get("rows_dropped_by_watermark"))
    return out


def _operator_state(op: StateOperator, chains: list[StoreChain], stores: tuple[str, ...], conf: dict[str, str],
                    progress_records: list[dict[str, Any]], checkpoint: Any, watermarks: dict[int, int | None],
                    counted: bool | None, max_replay_bytes: int, folder: str, n_operators: int) -> OperatorState:
    partitions = sorted({c.partition for c in chains})
    providers = {c.provider for c in chains if c.provider}
    provider = providers.pop() if len(providers) == 1 else provider_of_class(conf.get(PROVIDER_CONF))
    changelog = any(c.changelog for c in chains)
    format_version = (2 if any(f.unique_id for c in chains for f in c.files) else 1) if any(c.files for c in chains) \
        else None
    count_in = _counted_stores(stores)
    row_chains = [c for c in chains if c.store in count_in]
    versions = set.intersection(*(set(c.rows) for c in row_chains)) if row_chains else set()
    file_rows = {v - 1: sum(c.rows[v] for c in row_chains) for v in sorted(versions)}
    file_removed = {v - 1: sum(c.removed[v] for c in row_chains) for v in sorted(versions)
                    if all(v in c.removed for c in row_chains)}
    note = None
    if counted is None:
        pass  # not asked to count: the progress log's rows
    elif not counted:
        note = f"not counted: the files to replay exceed {max_replay_bytes} bytes"
    elif next((c.count_note for c in row_chains if c.count_note), None):
        note = next(c.count_note for c in row_chains if c.count_note)  # a RocksDB zip whose keys are not known
    elif row_chains and not file_rows and any(c.problems for c in row_chains):
        note = "the files could not be counted (see the problems)"
    elif row_chains and not file_rows:  # no problem to point at: say what is missing
        note = (f"not counted: no state version is known in all {len(row_chains)} stores' files (each partition's "
                f"rows are known at other versions)")
    series = _progress_series(progress_records, checkpoint.query_id, op.operator_id, n_operators)
    if series:
        source = "progress"
        batches = tuple(StateBatch(b, *series[b], watermarks.get(b)) for b in sorted(series))
    elif file_rows:
        source = "files"
        batches = tuple(StateBatch(b, file_rows[b], file_removed.get(b), None, watermarks.get(b)) for b in file_rows)
    else:
        source, batches = None, ()
    bounded, reason = _bound(op, stores)
    all_versions = [v for c in chains for v in c.versions]
    snapshots = [v for c in chains for v in c.snapshot_versions]
    problems = tuple(p for c in chains for p in c.problems)
    return OperatorState(
        operator_id=op.operator_id, name=op.name, stores=stores, partitions=len(partitions), provider=provider,
        changelog=changelog, format_version=format_version, bounded_by_watermark=bounded, bound_reason=reason,
        watermark_columns=op.watermark_columns, batches=batches, rows_source=source, file_rows=file_rows,
        count_note=note, target_version=max((c.target_version or 0 for c in chains), default=None) or None,
        chain_length=max((len(c.replay) + len([m for m in c.missing if not m.endswith('.sst') and '/SSTs/' not in m])
                          for c in chains), default=0),
        base_versions=tuple(sorted({c.base_version for c in chains if c.base_version is not None})),
        snapshot_version=max(snapshots) if snapshots else None,
        versions_kept=max((len(c.versions) for c in chains), default=0),
        oldest_version=min(all_versions) if all_versions else None,
        latest_version=max(all_versions) if all_versions else None,
        bytes_on_disk=sum(c.bytes for c in chains), files_on_disk=sum(len(c.files) for c in chains),
        missing_files=tuple(m for c in chains for m in c.missing), problems=problems, folder=folder,
        chains=tuple(chains))
