"""The state files' formats decoded without a JVM (``watermark_ops.core.state.files``), on hand-made
bytes laid out as Spark writes them; a real Spark's files are read in the corpus test."""

from __future__ import annotations

import struct

import pytest

from tests.watermark_ops.core.state import state_fixtures as sf
from watermark_ops.core.state.files import (
    StateFileError,
    changelog_records,
    decode_lz4_blocks,
    parse_state_file_name,
    read_records,
    rocksdb_zip_metadata,
)

CHANGES = [(sf.key(1), b"a" * 40), (sf.key(2), b"b" * 40), (sf.key(1), None), (sf.key(3), b"c" * 200)]


@pytest.mark.parametrize("compress", [True, False])
def test_lz4_java_blocks_round_trip_over_several_blocks(compress):
    data = sf.records(CHANGES)
    framed = sf.lz4java(data, block=37, compress=compress)
    assert framed.count(b"LZ4Block") == -(-len(data) // 37) + 1  # the blocks and the end block
    assert decode_lz4_blocks(framed) == data
    assert [(r.key, r.value) for r in read_records(framed)] == CHANGES


@pytest.mark.parametrize("cut", [0, 5, 21, 30, -21, -1])
def test_a_file_cut_short_is_truncated_wherever_it_is_cut(cut):
    framed = sf.lz4java(sf.records(CHANGES), block=64)
    with pytest.raises(StateFileError) as err:
        read_records(framed[:cut] if cut else b"")
    assert err.value.kind == "truncated"


def test_records_that_stop_before_their_end_marker_are_truncated():
    with pytest.raises(StateFileError, match="cut short") as err:
        read_records(sf.lz4java(sf.records(CHANGES, eof=False)))
    assert err.value.kind == "truncated"


def test_another_codec_and_a_corrupt_block_are_named():
    with pytest.raises(StateFileError, match="compression codec") as err:
        read_records(b"\x82SNAPPY\x00" + bytes(30))  # snappy's framing, not lz4-java
    assert err.value.kind == "unsupported"
    framed = bytearray(sf.lz4java(sf.records(CHANGES), block=512))
    framed[21:40] = bytes(range(200, 219))  # garbage inside the LZ4 payload
    with pytest.raises(StateFileError) as err:
        read_records(bytes(framed))
    assert err.value.kind in ("corrupt", "truncated")


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_changelog_versions_one_to_four(version):
    lineage = [{"version": 3, "checkpointUniqueId": "u3"}] if version >= 3 else None
    read_version, read_lineage, changes = changelog_records(sf.changelog(version, CHANGES, lineage))
    assert read_version == version and read_lineage == lineage
    assert [(r.key, r.value) for r in changes] == CHANGES


def test_a_v1_changelog_whose_first_key_spells_v_is_still_v1():
    """SPARK-52553: a v1 file whose first key length reads as ``writeUTF("v)")`` (bytes 00 02 76 29)
    is version 1, not a header."""
    big = [(b"k" * 0x00027629, b"value")]
    assert sf.records(big)[:4] == b"\x00\x02v)"
    version, lineage, changes = changelog_records(sf.lz4java(sf.records(big), block=65536))
    assert (version, lineage, [(len(r.key), r.value) for r in changes]) == (1, None, [(0x27629, b"value")])
    with pytest.raises(StateFileError, match="v1 to v4"):
        changelog_records(sf.lz4java(sf.utf("v5") + sf.records(CHANGES)))


def test_rocksdb_zip_metadata_and_its_problems():
    assert rocksdb_zip_metadata(sf.rocksdb_zip(7, ["000008-abc.sst"]))["numKeys"] == 7
    whole = sf.rocksdb_zip(7)
    with pytest.raises(StateFileError) as err:
        rocksdb_zip_metadata(whole[: len(whole) // 2])
    assert err.value.kind == "truncated"
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("CURRENT", "x")
    with pytest.raises(StateFileError) as err:
        rocksdb_zip_metadata(buffer.getvalue())
    assert err.value.kind == "bad_metadata"


def test_state_file_names():
    assert parse_state_file_name("12.delta").version == 12
    named = parse_state_file_name("3_2d1c9f0e-8f3b-4c1e-9a63-0b8c4c1f6c11.changelog")
    assert (named.version, named.kind, named.unique_id) == (3, "changelog", "2d1c9f0e-8f3b-4c1e-9a63-0b8c4c1f6c11")
    for other in (".12.delta.crc", "12.delta.crc", "_metadata", "SSTs", "12.delta.tmp", "x.zip", "schema"):
        assert parse_state_file_name(other) is None
