"""Benchmark: audit of a 10,000-batch checkpoint against ``cat`` of the same files.

Writes a checkpoint of ``--batches`` batches in the exact format Spark 4.2 writes (``offsets/N``
with the 15 confs Spark freezes, ``commits/N``, ``metadata``, and the ``.N.crc`` files of the
local filesystem), then times, best of ``--repeat`` after one warm-up each:

* ``cat``: ``xargs cat`` of the batch files and ``metadata`` to /dev/null (reading the bytes, no parsing);
* ``read``: :func:`watermark_ops.core.checkpoint.read_checkpoint` (list three folders, read and parse every file);
* ``audit``: :func:`watermark_ops.core.audit.run_audit` (read + every rule, no memory);
* ``audit+json``: the audit and its ``--json`` text.

Prints the times and the ratio audit / cat. A script, not a test: timings vary with the machine.

Usage: ``python benchmarks/audit_benchmark.py [--batches 10000] [--repeat 5] [--keep DIR]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from watermark_ops.core.audit import run_audit  # noqa: E402
from watermark_ops.core.checkpoint import read_checkpoint  # noqa: E402

# What Spark 4.2.0 froze in offsets/N of the main job (copied from a real checkpoint).
CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "2",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "false",
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.stateStore.rowChecksum.enabled": "false",
    "spark.sql.streaming.aggregation.stateFormatVersion": "2",
    "spark.sql.function.protobufExtensions.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.join.stateFormatVersion": "2",
    "spark.sql.streaming.stateStore.compression.codec": "lz4",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "false",
}


def write_checkpoint(root: Path, batches: int) -> list[Path]:
    """A healthy checkpoint of ``batches`` batches (data batch + trailing no-data batch pairs)."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    files = [root / "metadata"]
    files[0].write_text(json.dumps({"id": "5d9a862d-487d-41b1-ac75-1f104fb133ae"}))
    watermark, timestamp = 1_357_033_140_000, 1_795_265_474_094
    for batch_id in range(batches):
        next_watermark = watermark + (3_240_000 if batch_id % 2 == 0 else 0)
        metadata = json.dumps({"batchWatermarkMs": watermark, "batchTimestampMs": timestamp, "conf": CONF},
                              separators=(",", ":"))
        offsets = root / "offsets" / str(batch_id)
        offsets.write_text(f"v1\n{metadata}\n{{\"logOffset\":{batch_id // 2}}}")
        commit = root / "commits" / str(batch_id)
        commit.write_text(f"v1\n{{\"nextBatchWatermarkMs\":{next_watermark}}}")
        for path in (offsets, commit):
            (path.parent / f".{path.name}.crc").write_bytes(b"crc\x00\x00\x00\x01\x02")
        files += [offsets, commit]
        watermark, timestamp = next_watermark, timestamp + 1_500
    return files


def best_of(repeat: int, action) -> float:
    action()  # warm-up: page cache, imports
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", help="write the checkpoint here and keep it (default: a temp folder, removed)")
    args = parser.parse_args(argv)

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="audit-benchmark-")) / "checkpoint"
    try:
        started = time.perf_counter()
        files = write_checkpoint(root, args.batches)
        size = sum(f.stat().st_size for f in files)
        print(f"checkpoint: {root}: {args.batches} batches, {len(files)} files, {size / 1e6:.1f} MB "
              f"(written in {time.perf_counter() - started:.1f} s)")
        listing = "\n".join(str(f) for f in files)

        def cat() -> None:
            subprocess.run(["xargs", "cat"], input=listing, text=True, stdout=subprocess.DEVNULL, check=True)

        def audit() -> None:
            report = run_audit(str(root))
            assert report.status == "ok" and len(report.batches) == args.batches, report.findings[:3]

        figures = {
            "cat": best_of(args.repeat, cat),
            "read": best_of(args.repeat, lambda: read_checkpoint(str(root))),
            "audit": best_of(args.repeat, audit),
            "audit+json": best_of(args.repeat, lambda: run_audit(str(root)).to_json()),
        }
        print(f"best of {args.repeat} (seconds):")
        for name, seconds in figures.items():
            print(f"  {name:<11} {seconds:8.3f}   {seconds / args.batches * 1e6:7.1f} µs per batch")
        print(f"ratio audit / cat: {figures['audit'] / figures['cat']:.2f}")
        print(f"ratio read / cat:  {figures['read'] / figures['cat']:.2f}")
    finally:
        if not args.keep:
            shutil.rmtree(root.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
