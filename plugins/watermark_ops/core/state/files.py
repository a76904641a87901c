"""The state store's data files, decoded without a JVM: names, lz4-java framing, records, RocksDB zips.

What Spark writes under ``state/<opId>/<partition>/[<storeName>/]`` (one folder per partition and
store; ``default`` stores sit directly in the partition folder):

* **HDFS-backed provider** (``HDFSBackedStateStoreProvider.scala``): ``<V>.delta`` per committed
  version V (= batch id + 1), and ``<V>.snapshot`` written only by the maintenance task
  (``StateStore.MaintenanceTask``). Both are a compressed stream (``spark.sql.streaming.
  stateStore.compression.codec``, default ``lz4``: lz4-java's ``LZ4BlockOutputStream``) of
  records ``int keyLen, key bytes, int valueLen, value bytes`` (Java ``DataOutputStream``: big
  endian), a removal being ``valueLen = -1``, and ``int -1`` at the end of the records
  (``writeUpdateToDeltaFile``, ``writeRemoveToDeltaFile``, ``finalizeDeltaFile``,
  ``writeSnapshotFile``). The key and value are ``UnsafeRow`` bytes; the reader compares keys as
  bytes and never decodes a row.
* **RocksDB provider** (``RocksDBFileManager.scala``): ``<V>.zip`` (RocksDB's ``CURRENT``,
  ``MANIFEST-*``, ``OPTIONS-*``, log files and a ``metadata`` file: ``v1`` then the JSON of
  ``RocksDBCheckpointMetadata``: ``sstFiles`` [{``localFileName``, ``dfsSstFileName``,
  ``sizeBytes``}], ``numKeys``, ...) with the SST files it names in the shared ``SSTs/`` folder.
  With changelog checkpointing (``spark.sql.streaming.stateStore.rocksdb.
  changelogCheckpointing.enabled``) every version writes ``<V>.changelog``
  (``StateStoreChangelog.scala``) and ``<V>.zip`` only at snapshots.
* **Checkpoint format version 2** (``spark.sql.streaming.stateStore.checkpointFormatVersion=2``,
  Spark 4.0+, RocksDB only): the same files named ``<V>_<uniqueId>.zip`` / ``.changelog``; the
  commit log's ``stateUniqueIds`` names the id of each partition's version, and each changelog
  carries its lineage (``[{"version", "checkpointUniqueId"}, ...]``) back to a snapshot.

Changelog versions (``StateStoreChangelogReaderFactory``): v1 = the delta format above, no
header; v2 = ``writeUTF("v2")`` then records ``byte type`` (``0x01`` put, ``0x10`` delete,
``0x11`` merge, ``0x00`` end), key and value as above; v3 = ``writeUTF("v3")``,
``writeUTF(lineage JSON)`` then v1 records; v4 = ``writeUTF("v4")``, lineage, v2 records.

The lz4-java framing (``net.jpountz.lz4.LZ4BlockOutputStream``): per block the 8 bytes
``LZ4Block``, a token byte (high nibble ``0x10`` stored raw, ``0x20`` LZ4; low nibble the
compression level), then little-endian int32 compressed length, original length and checksum
(xxhash32, not verified here), then the payload (a raw LZ4 block: :func:`lz4.block.decompress`).
``finish()`` writes an end block whose lengths are 0: a file without it was cut short.

Pure core: imports neither Airflow nor Spark (the ``lz4`` package for LZ4 blocks).
"""

from __future__ import annotations

import io
import json
import re
import struct
import zipfile
from dataclasses import dataclass
from typing import Any, Iterator

__all__ = ["LZ4_MAGIC", "StateFileError", "StateFileName", "Record", "changelog_records", "decode_lz4_blocks",
           "parse_state_file_name", "read_records", "rocksdb_zip_metadata"]

#: The magic bytes every lz4-java block starts with (``LZ4BlockOutputStream.MAGIC``).
LZ4_MAGIC = b"LZ4Block"
_HEADER = struct.Struct("<Biii")  # token, compressed length, original length, checksum
_RAW, _LZ4 = 0x10, 0x20
#: Data file kinds, by file name suffix.
KINDS = ("delta", "snapshot", "zip", "changelog")
_NAME = re.compile(r"^(\d+)(?:_([0-9A-Za-z-]+))?\.(delta|snapshot|zip|changelog)$")


class StateFileError(Exception):
    """A state file that cannot be used as a whole.

    :ivar kind: ``truncated`` (no end block, or records cut short), ``corrupt`` (not lz4-java
        framing, a block that does not decompress, a record length out of range),
        ``unsupported`` (another compression codec, a changelog version this reader does not know),
        ``bad_metadata`` (a RocksDB zip without a readable ``metadata``).
    :ivar message: what was found and what was expected, for a human.
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class StateFileName:
    """A parsed state data file name: ``<version>[_<uniqueId>].<kind>``.

    :ivar version: the state version V (batch id + 1).
    :ivar kind: ``delta`` | ``snapshot`` (HDFS-backed) | ``zip`` | ``changelog`` (RocksDB).
    :ivar unique_id: the checkpoint unique id (checkpoint format version 2), None in version 1.
    """

    version: int
    kind: str
    unique_id: str | None = None


def parse_state_file_name(name: str) -> StateFileName | None:
    """The :class:`StateFileName` of a data file name, None for anything else (``_metadata``,
    ``SSTs``, hidden ``.crc`` files, the checksum sidecars ``<file>.crc``, temporary files)."""
    match = _NAME.match(name)
    if match is None:
        return None
    return StateFileName(int(match.group(1)), match.group(3), match.group(2))


def decode_lz4_blocks(raw: bytes) -> bytes:
    """The bytes an lz4-java ``LZ4BlockOutputStream`` wrote (module docstring), up to its end block.

    :raises StateFileError: ``unsupported`` when the file is not lz4-java framing (another
        ``spark.sql.streaming.stateStore.compression.codec``: snappy, zstd), ``truncated`` when it
        ends before the end block (a file cut short), ``corrupt`` for a block that does not decode.
    """
    import lz4.block

    out = bytearray()
    position, size = 0, len(raw)
    if size == 0:
        raise StateFileError("truncated", "0 bytes: expected lz4-java blocks ending with an end block")
    if size < 8 and LZ4_MAGIC.startswith(raw):
        raise StateFileError("truncated", f"ends at byte {size} inside the first block header: the file was cut short")
    if not raw.startswith(LZ4_MAGIC):
        raise StateFileError("unsupported", f"does not start with the lz4-java magic 'LZ4Block' (first bytes "
                                            f"{raw[:8]!r}): another compression codec (spark.sql.streaming."
                                            f"stateStore.compression.codec), which this reader does not decode")
    while True:
        if position == size:
            raise StateFileError("truncated", f"ends at byte {size} without the lz4-java end block: the file was cut "
                                              f"short (Spark fails to load it: EOF)")
        if raw[position:position + 8] != LZ4_MAGIC:
            if size - position < 8 and LZ4_MAGIC.startswith(raw[position:]):
                raise StateFileError("truncated", f"ends at byte {size} inside a block header: the file was cut short")
            raise StateFileError("corrupt", f"expected an lz4-java block ('LZ4Block') at byte {position}")
        if size - position < 8 + _HEADER.size:
            raise StateFileError("truncated", f"ends at byte {size} inside a block header: the file was cut short")
        token, compressed, original, _checksum = _HEADER.unpack_from(raw, position + 8)
        position += 8 + _HEADER.size
        if compressed < 0 or original < 0 or original > 1 << 30:
            raise StateFileError("corrupt", f"block at byte {position - 21}: lengths {compressed}/{original} out of range")
        if original == 0:  # the end block (LZ4BlockOutputStream.finish)
            return bytes(out)
        if size - position < compressed:
            raise StateFileError("truncated", f"ends at byte {size} inside a block of {compressed} bytes starting at "
                                              f"byte {position}: the file was cut short")
        payload = raw[position:position + compressed]
        position += compressed
        method = token & 0xF0
        if method == _RAW:
            out += payload
        elif method == _LZ4:
            try:
                out += lz4.block.decompress(payload, uncompressed_size=original)
            except Exception as exc:  # noqa: BLE001 - lz4.block.LZ4BlockError and friends
                raise StateFileError("corrupt", f"the LZ4 block at byte {position - compressed} does not "
                                                f"decompress ({exc})") from None
        else:
            raise StateFileError("corrupt", f"block at byte {position - compressed - 21}: unknown method "
                                            f"{method:#04x} (expected 0x10 raw or 0x20 LZ4)")


@dataclass(frozen=True)
class Record:
    """One change: ``value`` None is a removal (``valueLen -1``, a changelog delete)."""

    key: bytes
    value: bytes | None


class _Stream:
    def __init__(self, data: bytes):
        self.data, self.position = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.position + n > len(self.data):
            raise StateFileError("truncated", f"the records end at byte {len(self.data)} (decompressed), expected "
                                              f"{n} more bytes at byte {self.position}: the file was cut short")
        chunk = self.data[self.position:self.position + n]
        self.position += n
        return chunk

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def length(self, what: str) -> int:
        n = self.int32()
        if n < -1 or n > len(self.data) - self.position:
            raise StateFileError("corrupt", f"{what} length {n} at byte {self.position - 4} (decompressed) is out of "
                                            f"range")
        return n

    def utf(self) -> str:
        (n,) = struct.unpack(">H", self.take(2))
        return self.take(n).decode("utf-8", errors="replace")


def _v1_records(stream: _Stream) -> Iterator[Record]:
    """``int keyLen, key, int valueLen, value`` ... ``int -1`` (delta, snapshot, changelog v1/v3)."""
    while True:
        key_len = stream.length("key")
        if key_len == -1:
            return
        key = stream.take(key_len)
        value_len = stream.length("value")
        yield Record(key, None if value_len == -1 else stream.take(value_len))


def _v2_records(stream: _Stream) -> Iterator[Record]:
    """``byte type, int keyLen, key[, int valueLen, value]`` ... ``byte 0`` (changelog v2/v4)."""
    while True:
        (kind,) = stream.take(1)
        if kind == 0x00:
            return
        if kind not in (0x01, 0x10, 0x11):
            raise StateFileError("corrupt", f"changelog record type {kind:#04x} at byte {stream.position - 1} "
                                            f"(expected 0x00, 0x01, 0x10 or 0x11)")
        key = stream.take(stream.length("key"))
        value_len = stream.length("value")
        yield Record(key, None if value_len == -1 or kind == 0x10 else stream.take(value_len))


def read_records(raw: bytes) -> list[Record]:
    """Every record of an HDFS-backed ``.delta`` or ``.snapshot`` file, in order.

    :raises StateFileError: see :func:`decode_lz4_blocks`; ``truncated`` also when the records
        stop before the ``int -1`` that ends them.
    """
    return list(_v1_records(_Stream(decode_lz4_blocks(raw))))


def changelog_records(raw: bytes) -> tuple[int, list[dict[str, Any]] | None, list[Record]]:
    """A RocksDB ``.changelog`` -> (changelog version 1-4, lineage or None, records).

    The version is read as ``StateStoreChangelogReaderFactory`` reads it: a first ``writeUTF``
    that spells ``v<number>``; anything else is a version 1 file (no header).

    :raises StateFileError: see :func:`read_records`; ``unsupported`` for a version above 4.
    """
    data = decode_lz4_blocks(raw)
    stream = _Stream(data)
    version = 1
    if len(data) >= 2:
        (n,) = struct.unpack(">H", data[:2])
        head = data[2:2 + n]
        if 2 + n <= len(data) and head[:1] == b"v" and head[1:].isdigit():
            version = int(head[1:])
            stream.position = 2 + n
    if version > 4:
        raise StateFileError("unsupported", f"changelog version v{version}: this reader knows v1 to v4 "
                                            f"(StateStoreChangelog.scala)")
    lineage = None
    if version >= 3:
        text = stream.utf()
        try:
            lineage = json.loads(text)
        except ValueError:
            raise StateFileError("corrupt", f"the changelog's lineage is not JSON: {text[:80]!r}") from None
    records = list(_v2_records(stream) if version in (2, 4) else _v1_records(stream))
    return version, lineage, records


def rocksdb_zip_metadata(raw: bytes) -> dict[str, Any]:
    """The ``metadata`` JSON inside a RocksDB checkpoint ``<V>.zip`` (``RocksDBCheckpointMetadata``:
    ``v1`` then JSON with ``sstFiles``, ``numKeys``, ...).

    :raises StateFileError: ``truncated`` / ``corrupt`` for a zip that does not open (a file cut
        short loses the zip's central directory at its end), ``bad_metadata`` for a zip without a
        readable ``metadata``.
    """
    if not raw:
        raise StateFileError("truncated", "0 bytes: expected a zip of a RocksDB checkpoint")
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            text = archive.read("metadata").decode("utf-8")
    except KeyError:
        raise StateFileError("bad_metadata", "the zip has no 'metadata' entry (RocksDBCheckpointMetadata)") from None
    except zipfile.BadZipFile as exc:
        raise StateFileError("truncated", f"not a whole zip ({exc}): the file was cut short or is not a zip") from None
    except Exception as exc:  # noqa: BLE001 - zlib errors, bad CRC
        raise StateFileError("corrupt", f"the zip does not read ({exc!r})") from None
    lines = text.split("\n", 1)
    if len(lines) < 2 or not re.fullmatch(r"v\d+", lines[0].strip()):
        raise StateFileError("bad_metadata", f"the zip's metadata does not start with a version line: {text[:40]!r}")
    try:
        body = json.loads(lines[1])
    except ValueError:
        raise StateFileError("bad_metadata", f"the zip's metadata is not JSON: {lines[1][:80]!r}") from None
    if not isinstance(body, dict):
        raise StateFileError("bad_metadata", "the zip's metadata is not a JSON object")
    return body
