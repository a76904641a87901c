"""The state reader on hand-made checkpoints (``state_fixtures``): chains, snapshots, exact rows,
joins, RocksDB zips and SSTs, format version 2, old layouts, budgets, ``memory://`` and problems."""

from __future__ import annotations

import json

import fsspec
import pytest

from tests.watermark_ops.core.state import state_fixtures as sf
from watermark_ops.core.state.reader import read_state

K = sf.key


def _hdfs_windows(batches: int = 6, snapshot_at: int | None = None) -> dict[str, bytes]:
    """A window aggregation over ``batches`` batches, 2 partitions: partition p puts keys 10p+v at
    version v and, from version 3 on, removes the key of version v-2 (eviction)."""
    files = {**sf.log_files(batches, watermarks=[i * 1000 for i in range(batches)]), **sf.aggregation()}
    for p in range(2):
        live: set[bytes] = set()
        for v in range(1, batches + 1):
            changes = [(K(10 * p + v), b"count")]
            if v >= 3:
                changes.append((K(10 * p + v - 2), None))
            for k, value in changes:
                live.add(k) if value is not None else live.discard(k)
            files[f"state/0/{p}/{v}.delta"] = sf.lz4java(sf.records(changes))
            if v == snapshot_at:
                files[f"state/0/{p}/{v}.snapshot"] = sf.lz4java(sf.records([(k, b"count") for k in sorted(live)]))
    return files


def test_rows_per_batch_from_deltas_exactly(tmp_path):
    sf.write(tmp_path, _hdfs_windows())
    (op,) = read_state(str(tmp_path), progress_records=()).operators
    assert (op.name, op.provider, op.partitions, op.format_version, op.bounded_by_watermark) == (
        "stateStoreSave", "hdfs", 2, 1, True)
    # per partition: 1, 2, then 2 each version (one in, one out); two partitions
    assert op.file_rows == {0: 2, 1: 4, 2: 4, 3: 4, 4: 4, 5: 4}
    assert [b.removed for b in op.batches] == [0, 0, 2, 2, 2, 2] and op.rows_source == "files"
    assert [b.watermark_ms for b in op.batches] == [0, 1000, 2000, 3000, 4000, 5000]
    assert (op.target_version, op.chain_length, op.base_versions, op.snapshot_version) == (6, 6, (0,), None)
    assert op.versions_kept == 6 and op.files_on_disk == 12 and op.bytes_on_disk > 0


def test_a_snapshot_shortens_the_chain_and_the_rows_start_there(tmp_path):
    sf.write(tmp_path, _hdfs_windows(snapshot_at=4))
    (op,) = read_state(str(tmp_path), progress_records=()).operators
    assert (op.chain_length, op.base_versions, op.snapshot_version) == (2, (4,), 4)
    assert op.file_rows == {3: 4, 4: 4, 5: 4}  # version 4 from the snapshot, then deltas 5 and 6


def test_the_restart_loads_the_committed_version_not_an_in_flight_one(tmp_path):
    files = _hdfs_windows()
    files.update(sf.log_files(6, watermarks=[i * 1000 for i in range(6)], committed=3))  # 4 and 5 in flight
    del files["commits/4"], files["commits/5"]
    sf.write(tmp_path, files)
    state = read_state(str(tmp_path), progress_records=())
    (op,) = state.operators
    assert state.committed_batch_id == 3 and op.target_version == 4 and op.chain_length == 4
    assert max(op.file_rows) == 3 and op.latest_version == 6


def test_missing_and_truncated_files_of_the_chain(tmp_path):
    files = _hdfs_windows()
    del files["state/0/1/2.delta"]
    files["state/0/0/5.delta"] = files["state/0/0/5.delta"][:-21]  # no end block
    sf.write(tmp_path, files)
    (op,) = read_state(str(tmp_path), progress_records=()).operators
    assert op.missing_files == (f"{tmp_path}/state/0/1/2.delta",)
    assert [(p.kind, p.file) for p in op.problems] == [("truncated", f"{tmp_path}/state/0/0/5.delta")]
    assert op.file_rows == {0: 2}  # exact up to the hole in partition 1 only


def test_a_join_counts_its_key_with_index_to_value_stores(tmp_path):
    stores = ["left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"]
    files = {**sf.log_files(2), "state/0/_metadata/metadata": sf.operator_metadata(0, "symmetricHashJoin", stores, 2)}
    for store in stores:
        side_has_watermark = store.startswith("left")
        files[f"state/0/0/{store}/_metadata/schema"] = sf.schema_file(
            [sf.field("id")], [sf.field("departed", 3_600_000 if side_has_watermark else None)])
        for p in range(2):
            n = 3 if store.endswith("Value") else 1  # 3 buffered rows per store, under one key
            for v in (1, 2):
                files[f"state/0/{p}/{store}/{v}.delta"] = sf.lz4java(sf.records(
                    [(K(100 * v + i), b"row") for i in range(n)]))
    sf.write(tmp_path, files)
    (op,) = read_state(str(tmp_path), progress_records=()).operators
    assert op.stores == tuple(stores) and op.partitions == 2
    assert op.file_rows == {0: 12, 1: 24}  # 2 sides x 2 partitions x 3 rows per version, keyToNumValues not counted
    assert op.bounded_by_watermark is False and "left side only" in op.bound_reason


def test_rocksdb_zips_give_rows_and_name_a_missing_sst(tmp_path):
    files = {**sf.log_files(3, conf={"spark.sql.streaming.stateStore.providerClass": sf.ROCKSDB}), **sf.aggregation()}
    for p in range(2):
        for v in (1, 2, 3):
            files[f"state/0/{p}/{v}.zip"] = sf.rocksdb_zip(v + p, [f"00000{v}-{p}.sst"])
            files[f"state/0/{p}/SSTs/00000{v}-{p}.sst"] = b"sst" * v
    del files["state/0/1/SSTs/000003-1.sst"]
    sf.write(tmp_path, files)
    (op,) = read_state(str(tmp_path), progress_records=()).operators
    assert (op.provider, op.changelog, op.chain_length) == ("rocksdb", False, 0)
    assert op.file_rows == {0: 3, 1: 5, 2: 7}
    assert op.missing_files == (f"{tmp_path}/state/0/1/SSTs/000003-1.sst",)


#: Changelogs of one store, version by version: key number and value (None: a delete).
_CHANGES = {1: [(1, b"a"), (2, b"a")], 2: [(3, b"a")], 3: [(1, b"b"), (2, None)],  # held at 3: keys 1, 3
            4: [(1, b"c"), (4, b"a")], 5: [(3, None), (1, None)], 6: [(5, b"a"), (4, b"b")]}
_HELD = {1: 2, 2: 3, 3: 2, 4: 3, 5: 1, 6: 2}  # what the store holds after each version


def _changelog_store(tmp_path, versions, zip_keys=2, changes=_CHANGES):
    files = {**sf.log_files(6, conf={"spark.sql.streaming.stateStore.providerClass": sf.ROCKSDB}),
             **sf.aggregation(partitions=1)}
    for v in versions:
        files[f"state/0/0/{v}.changelog"] = sf.changelog(1, [(K(k), value) for k, value in changes[v]])
    files["state/0/0/3.zip"] = sf.rocksdb_zip(zip_keys)
    sf.write(tmp_path, files)
    (op,) = read_state(str(tmp_path), progress_records=()).operators
    return op


def test_rocksdb_changelogs_after_a_snapshot_zip_give_exact_rows_at_every_version(tmp_path):
    """The zip's keys (in SST files) are those the changelogs before it leave: rows after it are the
    zip's numKeys plus keys put that it did not hold minus its keys deleted, at every version."""
    op = _changelog_store(tmp_path / "all", range(1, 7))
    assert (op.changelog, op.base_versions, op.chain_length) == (True, (3,), 3)
    assert op.file_rows == {v - 1: n for v, n in _HELD.items()} and op.count_note is None
    assert [b.removed for b in op.batches] == [0, 0, 1, 0, 2, 0]
    # changelogs 1 and 2 deleted, but 3 alone does not write every key the zip holds: at the zip only
    op = _changelog_store(tmp_path / "gone", range(3, 7))
    assert op.file_rows == {2: 2} and "known at the zip versions only" in op.count_note
    assert "hold 1 of its 2 keys" in op.count_note
    # ... unless the changelogs still on disk wrote all of them
    changes = {**_CHANGES, 3: [(1, b"b"), (3, b"b"), (2, None)]}
    op = _changelog_store(tmp_path / "rewritten", range(3, 7), changes=changes)
    assert op.file_rows == {2: 2, 3: 3, 4: 1, 5: 2} and op.count_note is None
    # a zip whose numKeys the changelogs contradict is not trusted
    op = _changelog_store(tmp_path / "contradicts", range(1, 7), zip_keys=5)
    assert op.file_rows == {2: 5} and "hold 2 of its 5 keys" in op.count_note


def test_format_version_2_follows_the_commit_ids_and_the_lineage(tmp_path):
    ids = {v: f"0000000{v}-aaaa-4bbb-8ccc-00000000000{v}" for v in (1, 2, 3)}
    stale = "99999999-aaaa-4bbb-8ccc-000000000099"
    files = {**sf.log_files(3, conf={"spark.sql.streaming.stateStore.providerClass": sf.ROCKSDB}, commit_version=2,
                            commit_extra={"stateUniqueIds": {"0": [[ids[3]]]}}), **sf.aggregation(partitions=1)}
    for v in (1, 2, 3):
        lineage = [{"version": u, "checkpointUniqueId": ids[u]} for u in range(1, v)]
        files[f"state/0/0/{v}_{ids[v]}.changelog"] = sf.changelog(3, [(K(v), b"x")], lineage)
    files[f"state/0/0/2_{stale}.changelog"] = sf.changelog(3, [(K(50), b"x"), (K(51), b"x")], [])  # a failed attempt
    sf.write(tmp_path, files)
    (op,) = read_state(str(tmp_path), progress_records=()).operators
    assert (op.format_version, op.changelog, op.chain_length) == (2, True, 3)
    assert op.file_rows == {0: 1, 1: 2, 2: 3}  # the stale attempt at version 2 is not in the lineage
    assert not op.missing_files


def test_an_old_layout_without_operator_metadata_is_counted_but_not_judged(tmp_path):
    """Spark before 3.5: no ``_metadata/metadata``; before 3.0 no schema file either."""
    files = {k: v for k, v in _hdfs_windows(3).items() if "_metadata" not in k}
    files.update(sf.log_files(3))
    sf.write(tmp_path, files)
    (op,) = read_state(str(tmp_path), progress_records=()).operators
    assert (op.name, op.bounded_by_watermark, op.file_rows) == (None, None, {0: 2, 1: 4, 2: 4})


def test_progress_per_operator_figures_are_preferred(tmp_path):
    sf.write(tmp_path, _hdfs_windows(2))
    records = [{"query_id": "5f3a2f6e-0000-4000-8000-000000000001", "batch_id": b, "executed": True,
                "state_operators": [{"name": "stateStoreSave", "rows_total": 10 + b, "rows_removed": 0,
                                     "rows_dropped_by_watermark": b}]} for b in (0, 1)]
    (op,) = read_state(str(tmp_path), progress_records=records).operators
    assert op.rows_source == "progress" and op.rows == [10, 11] and [b.dropped_by_watermark for b in op.batches] == [0, 1]
    assert op.file_rows == {0: 2, 1: 4}  # the files' count is kept beside it


def test_the_replay_budget_and_a_stateless_query(tmp_path):
    sf.write(tmp_path / "big", _hdfs_windows())
    (op,) = read_state(str(tmp_path / "big"), progress_records=(), max_replay_bytes=10).operators
    assert op.file_rows == {} and "not counted" in op.count_note and op.chain_length == 6
    sf.write(tmp_path / "stateless", sf.log_files(2))
    state = read_state(str(tmp_path / "stateless"), progress_records=())
    assert not state.has_state_folder and state.operators == ()


def test_memory_filesystem_reads_as_the_local_one(tmp_path):
    files = _hdfs_windows(snapshot_at=3)
    sf.write(tmp_path, files)
    fs = fsspec.filesystem("memory")
    sf.write("/state-test/cp", files, fs=fs)
    remote = read_state("memory://state-test/cp", progress_records=()).to_dict()
    local = read_state(str(tmp_path), progress_records=()).to_dict()
    assert json.loads(json.dumps(remote).replace("memory:///state-test/cp", str(tmp_path))) == local
    fs.rm("/state-test", recursive=True)


@pytest.mark.parametrize("name,watermarked,bounded", [
    ("dedupe", False, False), ("dedupe", True, True), ("stateStoreSave", False, False),
    ("dedupeWithinWatermark", False, True), ("flatMapGroupsWithState", False, None)])
def test_bounded_by_watermark_by_operator(tmp_path, name, watermarked, bounded):
    files = {**sf.log_files(1), **sf.aggregation(name=name, watermarked=watermarked)}
    files["state/0/0/1.delta"] = files["state/0/1/1.delta"] = sf.lz4java(sf.records([]))
    sf.write(tmp_path, files)
    (op,) = read_state(str(tmp_path), progress_records=()).operators
    assert op.bounded_by_watermark is bounded, op.bound_reason
