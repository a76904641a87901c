"""Hand-made state files and checkpoints, byte for byte as Spark writes them (formats in
``watermark_ops.core.state.files``), for the core's tests without a JVM: lz4-java framing, delta and
snapshot records, changelogs v1-v4, RocksDB zips, schema files, operator metadata, the logs.

The real thing is proven against real Spark in ``tests/spark_jobs/test_state_corpus.py``; these
cover what that run cannot cheaply make: snapshots at chosen versions, files cut at chosen bytes,
other codecs, a join's stores, many versions.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from typing import Any

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def lz4java(data: bytes, block: int = 64, compress: bool = True, end: bool = True) -> bytes:
    """``data`` as ``LZ4BlockOutputStream`` frames it: blocks of ``block`` bytes (LZ4 or raw), then
    the end block (unless ``end`` is False: a file cut short)."""
    import lz4.block

    out = bytearray()
    for start in range(0, len(data), block):
        chunk = data[start:start + block]
        packed = lz4.block.compress(chunk, store_size=False) if compress else chunk
        method = 0x20 if compress and len(packed) < len(chunk) else 0x10
        payload = packed if method == 0x20 else chunk
        out += b"LZ4Block" + struct.pack("<Biii", method | 5, len(payload), len(chunk), 0) + payload
    if end:
        out += b"LZ4Block" + struct.pack("<Biii", 0x10 | 5, 0, 0, 0)
    return bytes(out)


def records(changes: list[tuple[bytes, bytes | None]], eof: bool = True) -> bytes:
    """v1 records (delta, snapshot, changelog v1/v3): ``None`` value = a removal."""
    out = bytearray()
    for key, value in changes:
        out += struct.pack(">i", len(key)) + key
        out += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    if eof:
        out += struct.pack(">i", -1)
    return bytes(out)


def typed_records(changes: list[tuple[bytes, bytes | None]]) -> bytes:
    """v2 records (changelog v2/v4): a type byte each, ``0x00`` at the end."""
    out = bytearray()
    for key, value in changes:
        if value is None:
            out += b"\x10" + struct.pack(">i", len(key)) + key + struct.pack(">i", -1)
        else:
            out += b"\x01" + struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    return bytes(out + b"\x00")


def utf(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">H", len(raw)) + raw


def changelog(version: int, changes: list[tuple[bytes, bytes | None]], lineage: list[dict] | None = None) -> bytes:
    head = b"" if version == 1 else utf(f"v{version}")
    if version >= 3:
        head += utf(json.dumps(lineage or []))
    body = typed_records(changes) if version in (2, 4) else records(changes)
    return lz4java(head + body)


def rocksdb_zip(num_keys: int, ssts: list[str] = ()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("CURRENT", "MANIFEST-000001\n")
        metadata = {"sstFiles": [{"localFileName": s.split("-")[0] + ".sst", "dfsSstFileName": s, "sizeBytes": 10}
                                 for s in ssts], "numKeys": num_keys}
        archive.writestr("metadata", "v1\n" + json.dumps(metadata))
    return buffer.getvalue()


def schema_file(key_fields: list[dict], value_fields: list[dict]) -> bytes:
    """``SchemaV2Writer``: writeUTF("v2"), then per schema an int count of chunks and the chunks."""
    out = utf("v2")
    for fields in (key_fields, value_fields):
        text = json.dumps({"type": "struct", "fields": fields})
        out += struct.pack(">i", 1) + utf(text)
    return out


def field(name: str, delay_ms: int | None = None) -> dict:
    metadata = {"spark.watermarkDelayMs": delay_ms} if delay_ms is not None else {}
    return {"name": name, "type": "long", "nullable": True, "metadata": metadata}


def operator_metadata(op_id: int, name: str, stores: list[str], partitions: int) -> bytes:
    return ("v1\n" + json.dumps({"operatorInfo": {"operatorId": op_id, "operatorName": name},
                                 "stateStoreInfo": [{"storeName": s, "numColsPrefixKey": 0,
                                                     "numPartitions": partitions} for s in stores]})).encode()


def log_files(batches: int, watermarks: list[int] | None = None, conf: dict[str, str] | None = None,
              committed: int | None = None, commit_extra: dict | None = None, commit_version: int = 1,
              offsets_version: int = 1) -> dict[str, bytes]:
    """``metadata``, ``offsets/0..batches-1`` and ``commits/0..committed`` (default: all)."""
    conf = {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.multipleWatermarkPolicy": "min",
            "spark.sql.streaming.stateStore.providerClass": HDFS, **(conf or {})}
    watermarks = watermarks or [0] * batches
    committed = batches - 1 if committed is None else committed
    files = {"metadata": b'{"id":"5f3a2f6e-0000-4000-8000-000000000001"}'}
    for n in range(batches):
        meta = {"batchWatermarkMs": watermarks[n], "batchTimestampMs": 1_700_000_000_000 + n * 1000, "conf": conf}
        source = '{"logOffset":%d}' % n if offsets_version == 1 else '0:{"logOffset":%d}' % n
        files[f"offsets/{n}"] = f"v{offsets_version}\n{json.dumps(meta)}\n{source}".encode()
        if n <= committed:
            next_wm = watermarks[n + 1] if n + 1 < batches else watermarks[n]
            files[f"commits/{n}"] = f"v{commit_version}\n{json.dumps({'nextBatchWatermarkMs': next_wm, **(commit_extra or {})})}".encode()
    return files


def aggregation(op_id: int = 0, name: str = "stateStoreSave", watermarked: bool = True,
                partitions: int = 2) -> dict[str, bytes]:
    key = [field("window", 3_600_000 if watermarked else None), field("origin")]
    return {f"state/{op_id}/_metadata/metadata": operator_metadata(op_id, name, ["default"], partitions),
            f"state/{op_id}/0/_metadata/schema": schema_file(key, [field("count")])}


def key(n: int) -> bytes:
    """An UnsafeRow-like key of 16 bytes (the reader never decodes it)."""
    return struct.pack(">qq", 0, n)


def write(root: Any, files: dict[str, bytes], fs: Any = None) -> None:
    """Write ``{relative path: bytes}`` under ``root`` (a local Path, or a path on ``fs``)."""
    from pathlib import Path

    for relative, data in files.items():
        if fs is None:
            path = Path(root) / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        else:
            fs.pipe_file(f"{root}/{relative}", data)
