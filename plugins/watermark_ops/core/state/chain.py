"""One state store's files (one partition, one store): what is on disk, the chain a restart loads,
and the rows it holds per version, counted from the files.

A restart of batch N loads state version N (the version batch N-1 committed, V = batch id + 1 for
the batch that wrote it; ``StatefulOperatorStateInfo.storeVersion``). How each provider loads a
version V, and so which files must be there:

* HDFS-backed (``HDFSBackedStateStoreProvider.loadMap``): the newest ``<S>.snapshot`` with S <= V
  (none: the empty map of version 0), then every ``<S+1..V>.delta`` in order;
* RocksDB without changelog checkpointing (``RocksDB.load``, ``RocksDBFileManager.loadCheckpointFromDfs``):
  ``<V>.zip`` and the SST files its metadata names in ``SSTs/``;
* RocksDB with changelog checkpointing: the newest ``<S>.zip`` with S <= V (none: empty), then
  every ``<S+1..V>.changelog``; in checkpoint format version 2 the files of the unique ids the
  commit log and the changelog lineage name (``<V>_<uniqueId>``).

The *chain* is the files after the base a restart must replay (deltas or changelogs); its length
is what every restart pays, per partition and store, until the maintenance task writes a snapshot.

Rows are counted exactly without decoding a row: replaying the base snapshot's records and each
later delta by key bytes (a removal is a tombstone, ``valueLen -1``) gives the number of keys after
every version; a RocksDB zip carries ``numKeys``.

A RocksDB changelog chain whose base is a zip ``<S>.zip``: the zip's keys are in SST files, which
are not decoded here, but every ``<V>.changelog`` records every put and delete of its version
(``StateStoreChangelogWriter``, written by ``RocksDB.put`` / ``RocksDB.remove``), so the keys held
at S are known from the changelogs before it (:func:`snapshot_keys`): the changelogs ``B+1..S``
still on disk replayed by key give the keys *known* to be held at S (put and not deleted since);
when they are as many as the zip's ``numKeys`` (always so when ``B`` is 0, every changelog since
version 1 on disk, which Spark keeps for ``minBatchesToRetain`` versions), they are all of them,
and the changelogs after S are replayed from that set: rows at every version are exact (rows(V) =
``numKeys(S)`` + keys put after S that S did not hold − keys of S deleted after S). Otherwise the
rows are known at the zip versions only, and :attr:`StoreChain.count_note` says why.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from watermark_ops.core.log_formats import ReadProblem
from watermark_ops.core.state.files import (
    StateFileError,
    changelog_records,
    parse_state_file_name,
    read_records,
    rocksdb_zip_metadata,
)

__all__ = ["DataFile", "StoreChain", "base_changelogs", "count_rows", "list_store", "plan_chain", "sized_listing",
           "snapshot_keys"]


@dataclass(frozen=True)
class DataFile:
    """One data file: ``version``, ``kind`` (delta | snapshot | zip | changelog), ``path`` (as
    shown), ``size`` (bytes; None when the listing gave none), ``unique_id`` (format version 2)."""

    version: int
    kind: str
    path: str
    size: int | None = None
    unique_id: str | None = None


@dataclass
class StoreChain:
    """One partition's store: its files, the chain a restart of ``target_version`` loads, its rows.

    :ivar partition: / store: which one (``default`` for the operator's only store).
    :ivar folder: where its files are.
    :ivar files: every data file on disk, by version then kind.
    :ivar target_version: the version a restart loads (None: no version to load).
    :ivar base_version: the snapshot (HDFS) or zip (RocksDB) the load starts from; 0: from empty.
    :ivar replay: the delta / changelog files after the base, oldest first (the chain); the
        files of versions that are missing are in ``missing``.
    :ivar missing: files the load needs that are not on disk (paths where they should be).
    :ivar rows: ``{version: rows held after it}``, counted from the files (exact).
    :ivar removed: ``{version: rows removed by it}`` (tombstones of present keys), where replayed.
    :ivar problems: files that could not be read (each names its file): a truncated or corrupt
        file the load needs is also the reason a restart fails.
    :ivar sst_bytes: bytes of the RocksDB ``SSTs/`` folder.
    :ivar count_note: why the rows after a RocksDB base zip are not known at every version, else None.
    """

    partition: int
    store: str
    folder: str
    files: list[DataFile] = field(default_factory=list)
    target_version: int | None = None
    base_version: int | None = None
    replay: list[DataFile] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    rows: dict[int, int] = field(default_factory=dict)
    removed: dict[int, int] = field(default_factory=dict)
    problems: list[ReadProblem] = field(default_factory=list)
    sst_bytes: int = 0
    sst_names: set[str] | None = None
    needed_zip: DataFile | None = None
    count_note: str | None = None
    internal: str = ""  # the folder as the storage reads it (``folder`` is how it is shown)

    @property
    def versions(self) -> list[int]:
        """The distinct versions with a data file, ascending."""
        return sorted({f.version for f in self.files})

    @property
    def bytes(self) -> int:
        """Bytes of every data file and SST of this store (files whose size is unknown count 0)."""
        return sum(f.size or 0 for f in self.files) + self.sst_bytes

    @property
    def snapshot_versions(self) -> list[int]:
        """Versions with a snapshot (HDFS ``.snapshot``) or a zip (RocksDB with changelogs)."""
        kinds = {"snapshot", "zip"} if self.changelog else {"snapshot"}
        return sorted({f.version for f in self.files if f.kind in kinds})

    @property
    def changelog(self) -> bool:
        """RocksDB with changelog checkpointing (``.changelog`` files)."""
        return any(f.kind == "changelog" for f in self.files)

    @property
    def provider(self) -> str | None:
        """``hdfs`` | ``rocksdb`` from the files, None without any."""
        kinds = {f.kind for f in self.files}
        if kinds & {"delta", "snapshot"}:
            return "hdfs"
        if kinds & {"zip", "changelog"}:
            return "rocksdb"
        return None


def sized_listing(storage: Any, folder: str) -> dict[str, tuple[str, int | None]]:
    """``{name: (type, size)}`` of a folder in one listing: ``os.scandir`` on a local storage, the
    fsspec filesystem's detailed ``ls`` otherwise. :raises FileNotFoundError: no such folder."""
    fs = getattr(storage, "fs", None)
    if fs is None:
        storage.requests["list"] += 1
        out: dict[str, tuple[str, int | None]] = {}
        with os.scandir(folder) as entries:
            for entry in entries:
                directory = entry.is_dir()
                out[entry.name] = ("directory" if directory else "file", None if directory else entry.stat().st_size)
        return out
    return {info["name"].rstrip("/").rsplit("/", 1)[-1]: (info.get("type", "file"), info.get("size"))
            for info in storage._ls(folder, True)}


def list_store(storage: Any, folder: str, partition: int, store: str,
               listing: dict[str, tuple[str, int | None]] | None = None) -> StoreChain:
    """The data files of one store folder (one listing; ``SSTs/`` listed too when present).

    :raises FileNotFoundError: the folder does not exist (unless ``listing`` is given).
    """
    if listing is None:
        listing = sized_listing(storage, folder)
    chain = StoreChain(partition=partition, store=store, folder=storage.display(folder), internal=folder)
    for name, (kind, size) in listing.items():
        parsed = parse_state_file_name(name) if kind != "directory" else None
        if parsed is not None:
            chain.files.append(DataFile(parsed.version, parsed.kind, storage.display(f"{folder}/{name}"), size,
                                        parsed.unique_id))
    chain.files.sort(key=lambda f: (f.version, f.kind, f.unique_id or ""))
    if listing.get("SSTs", ("",))[0] == "directory":
        try:
            ssts = sized_listing(storage, f"{folder}/SSTs")
        except FileNotFoundError:
            ssts = {}
        chain.sst_names = {n for n, (kind, _) in ssts.items() if kind != "directory" and n.endswith(".sst")}
        chain.sst_bytes = sum(size or 0 for n, (_, size) in ssts.items() if n in chain.sst_names)
    elif any(f.kind == "zip" for f in chain.files):
        chain.sst_names = set()
    return chain


def _file(chain: StoreChain, version: int, kind: str, unique_id: str | None = None) -> DataFile | None:
    candidates = [f for f in chain.files if f.version == version and f.kind == kind
                  and (unique_id is None or f.unique_id == unique_id)]
    if unique_id is None and len({f.unique_id for f in candidates}) > 1:
        return candidates[-1]  # several attempts at one version without an id to choose: the newest name
    return candidates[0] if candidates else None


def _where(chain: StoreChain, version: int, kind: str, unique_id: str | None) -> str:
    name = f"{version}_{unique_id}.{kind}" if unique_id else f"{version}.{kind}"
    return f"{chain.folder.rstrip('/')}/{name}"


def plan_chain(chain: StoreChain, target_version: int | None, unique_ids: dict[int, str] | None = None) -> None:
    """Fill ``target_version``, ``base_version``, ``replay``, ``missing`` and ``needed_zip`` of a
    store for a restart that loads ``target_version`` (module docstring). ``unique_ids``: the
    checkpoint unique id of each version (format version 2: from the commit log and the changelog
    lineage), else None. Reads nothing."""
    chain.target_version = target_version
    if target_version is None or target_version <= 0:
        chain.base_version = None
        return
    ids = unique_ids or {}
    provider = chain.provider
    if provider == "rocksdb" and not chain.changelog:
        zip_file = _file(chain, target_version, "zip", ids.get(target_version))
        chain.base_version = target_version
        chain.needed_zip = zip_file
        if zip_file is None:
            chain.missing.append(_where(chain, target_version, "zip", ids.get(target_version)))
        return
    base_kind, step_kind = ("zip", "changelog") if provider == "rocksdb" else ("snapshot", "delta")
    base = 0
    for version in range(target_version, 0, -1):
        if _file(chain, version, base_kind, ids.get(version)) is not None:
            base = version
            break
    chain.base_version = base
    if base and base_kind == "zip":
        chain.needed_zip = _file(chain, base, "zip", ids.get(base))
    for version in range(base + 1, target_version + 1):
        step = _file(chain, version, step_kind, ids.get(version))
        if step is None:
            chain.missing.append(_where(chain, version, step_kind, ids.get(version)))
        else:
            chain.replay.append(step)


def base_changelogs(chain: StoreChain) -> list[DataFile]:
    """The changelogs up to a RocksDB changelog chain's base zip S, oldest first: ``<B+1..S>.changelog``,
    the longest unbroken run on disk ending at S (B is 0 when every one since version 1 is there);
    [] for any other chain. Their records give the keys the zip holds (:func:`snapshot_keys`)."""
    if not chain.changelog or not chain.base_version:
        return []
    out = []
    for version in range(chain.base_version, 0, -1):
        step = _file(chain, version, "changelog")
        if step is None:
            break
        out.append(step)
    return out[::-1]


def snapshot_keys(changes: list[list[Any]], first_version: int, num_keys: int | None) -> set[bytes] | None:
    """The keys a RocksDB snapshot holds, from the changelogs that led to it, or None when they
    cannot be known.

    :param changes: the records of changelogs ``first_version..S`` in order (one list per version;
        a record's ``value`` None is a delete).
    :param first_version: the version of the first list: 1 means every changelog since the empty
        store, so the keys replayed are all the keys.
    :param num_keys: the zip's ``numKeys`` (``RocksDBCheckpointMetadata``), None if unread.
    :return: the set of keys put and not deleted since (bytes, as ``UnsafeRow`` keys are stored),
        when it is complete: replayed from version 1 (and, with ``num_keys``, as many), or as many
        as ``num_keys`` (every key of the snapshot was written after ``first_version - 1``); else None.
    """
    keys: set[bytes] = set()
    for records in changes:
        for record in records:
            if record.value is None:
                keys.discard(record.key)
            else:
                keys.add(record.key)
    if num_keys is None:
        return keys if first_version == 1 else None
    return keys if len(keys) == num_keys else None


def count_rows(chain: StoreChain, content: Any, history_zips: list[DataFile]) -> None:
    """Count the rows of a planned store from the file contents read (``content(path) -> bytes |
    Exception``, paths as shown): fills ``rows``, ``removed`` and ``problems``.

    * HDFS: the base snapshot's records, then each delta of the chain; rows after every version.
    * RocksDB zips: ``numKeys`` of each zip in ``history_zips`` (the needed one included); also
      checks that the SST files the needed zip names are in ``SSTs/``.
    * RocksDB changelogs: replayed from empty when the chain starts at version 0; after a base zip,
      from the zip's keys as the changelogs before it give them (:func:`snapshot_keys`, read from
      :func:`base_changelogs`), so rows are exact at every version; when they cannot give them,
      the zip versions' ``numKeys`` only and ``count_note`` says why.
    """
    def raw_of(data_file: DataFile) -> bytes | None:
        raw = content(data_file.path)
        if isinstance(raw, Exception):
            chain.problems.append(ReadProblem("unreadable", data_file.path, f"cannot read the state file: {raw!r}",
                                              data_file.version - 1))
            return None
        return raw

    def problem(data_file: DataFile, err: StateFileError) -> None:
        chain.problems.append(ReadProblem(err.kind, data_file.path, err.message, data_file.version - 1))

    for zip_file in history_zips:
        raw = raw_of(zip_file)
        if raw is None:
            continue
        try:
            metadata = rocksdb_zip_metadata(raw)
        except StateFileError as err:
            problem(zip_file, err)
            continue
        keys = metadata.get("numKeys")
        if isinstance(keys, int) and not isinstance(keys, bool) and keys >= 0:
            chain.rows[zip_file.version] = keys
        if zip_file is chain.needed_zip and chain.sst_names is not None:
            for sst in metadata.get("sstFiles") or []:
                name = sst.get("dfsSstFileName") if isinstance(sst, dict) else None
                if isinstance(name, str) and name not in chain.sst_names:
                    chain.missing.append(f"{chain.folder.rstrip('/')}/SSTs/{name}")
    if chain.base_version is None:
        return
    keys: set[bytes] | None = None
    if chain.provider == "hdfs":
        if chain.base_version == 0:
            keys = set()
        else:
            snapshot = _file(chain, chain.base_version, "snapshot")
            raw = raw_of(snapshot) if snapshot is not None else None
            if raw is not None:
                try:
                    keys = {r.key for r in read_records(raw) if r.value is not None}
                except StateFileError as err:
                    problem(snapshot, err)
            if keys is not None:
                chain.rows[chain.base_version] = len(keys)
    elif chain.changelog and chain.base_version == 0:
        keys = set()
    elif chain.changelog:
        keys = _zip_keys(chain, raw_of, problem)
    expected = (chain.base_version or 0) + 1
    for step in chain.replay:
        raw = raw_of(step)
        if raw is None:
            keys = None
            continue
        try:
            records = read_records(raw) if step.kind == "delta" else changelog_records(raw)[2]
        except StateFileError as err:
            problem(step, err)
            keys = None
            continue
        if keys is None or step.version != expected:
            keys = None  # a gap (missing file) or an unreadable one before: no exact count from here on
            continue
        removed = 0
        for record in records:
            if record.value is None:
                if record.key in keys:
                    keys.discard(record.key)
                    removed += 1
            else:
                keys.add(record.key)
        chain.rows[step.version] = len(keys)
        chain.removed[step.version] = removed
        expected += 1


def _zip_keys(chain: StoreChain, raw_of: Any, problem: Any) -> set[bytes] | None:
    """The keys of a changelog chain's base zip from the changelogs before it (:func:`snapshot_keys`);
    rows at those versions too when they start from version 1. None, with ``count_note``, otherwise."""
    base = chain.base_version
    steps = base_changelogs(chain)
    changes = []
    for step in steps:
        raw = raw_of(step)
        if raw is None:
            break
        try:
            changes.append(changelog_records(raw)[2])
        except StateFileError as err:
            problem(step, err)
            break
    num_keys = chain.rows.get(base)
    first = steps[0].version if steps else base + 1
    keys = snapshot_keys(changes, first, num_keys) if len(changes) == len(steps) and steps else None
    if keys is None:
        reason = ("no changelog before it is on disk" if not steps else
                  "a changelog before it cannot be read" if len(changes) < len(steps) else
                  f"the changelogs {first}..{base} on disk hold {len(snapshot_keys(changes, 1, None) or ())} of "
                  f"its {num_keys} keys (the others were written before version {first}, whose changelog is gone)")
        chain.count_note = (f"rows after the snapshot {base}.zip are known at the zip versions only: its keys are in "
                            f"SST files and {reason}")
        return None
    if first == 1:  # replayed from the empty store: exact at every version before the zip too
        held: set[bytes] = set()
        for version, records in enumerate(changes, start=1):
            removed = 0
            for record in records:
                if record.value is None:
                    removed += record.key in held
                    held.discard(record.key)
                else:
                    held.add(record.key)
            chain.rows.setdefault(version, len(held))
            chain.removed.setdefault(version, removed)
    return keys
