"""Benchmark: the audit against ``cat`` of the same files, and a status poke at 10,000 batches against 10.

Writes a checkpoint of ``--batches`` batches in the exact format Spark 4.2 writes (``offsets/N``
with the 15 confs Spark freezes, ``commits/N``, ``metadata``, the ``.N.crc`` files of the local
filesystem) with its progress log beside it (``<checkpoint>.progress.jsonl``, one record per batch
as ``watermark_ops.spark.recorder`` writes them), and a second one of 10 batches. Then times,
as medians of ``--repeat`` runs after one warm-up each:

Whole processes (what a terminal or a sensor pays, interpreter start and imports included; the
package is run as ``sys.executable -m watermark_ops`` with ``PYTHONPATH`` set to this checkout's
``plugins``, so it measures the code it lives beside):

* ``cat``: ``xargs cat`` of ``offsets/* commits/* metadata`` to /dev/null (reading the bytes, no parsing);
* ``audit``: ``watermark-ops audit CKPT`` (the table), and ``audit --json``;
* ``status@N`` / ``status@10``: ``watermark-ops status --json CKPT`` at ``--batches`` and at 10 batches;
* ``floor``: ``benchmarks/audit_floor.py CKPT``, the least a Python process does to audit the
  same files (list, read, one regular expression per file, one rule, the progress log's fields,
  a rich table; none of the package): what the interpreter itself costs beside ``cat``.

In process (the core alone, imports done):

* ``read``: :func:`watermark_ops.core.checkpoint.read_checkpoint` (list three folders, read and parse every file);
* ``audit``: :func:`watermark_ops.core.audit.run_audit` (read + every rule, no memory);
* ``audit+json``: the audit and its ``--json`` text.

Prints the times and the ratios issues 9 and 27 set goals for: audit / cat (goal <= 1.5 since
issue 27) and status@N / status@10 (goal <= 1.2: a poke's cost independent of the history). A
script, not a test: timings vary with the machine and its load, so compare ratios measured in one run.
The whole-process ratios are given three ways (:func:`ratio_figures`): on a shared machine the load
of other tenants slows a Python process more than ``cat`` (the bare floor itself has measured
0.8-1.3x ``cat`` within one hour), and the fastest runs and each round's own ratio say what the
code costs better than the medians do.

The package's modules are compiled to bytecode first (``compileall``, into ``__pycache__`` beside
them), as ``pip`` does when it installs a wheel: with ``PYTHONDONTWRITEBYTECODE`` set (as on these
machines) an editable checkout would otherwise compile every module from source in every process,
which no installed copy does. ``--no-precompile`` measures that case.

Usage: ``.venv/bin/python benchmarks/audit_benchmark.py [--batches 10000] [--repeat 5] [--keep DIR]
[--no-precompile]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"
sys.path.insert(0, str(PLUGINS))

from watermark_ops.core.audit import run_audit  # noqa: E402
from watermark_ops.core.checkpoint import read_checkpoint  # noqa: E402

QUERY_ID = "5d9a862d-487d-41b1-ac75-1f104fb133ae"

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
    """A healthy checkpoint of ``batches`` batches (data batch + trailing no-data batch pairs, one
    ``availableNow`` run each) and its progress log; returns the checkpoint's files (``cat``'s list)."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    files = [root / "metadata"]
    files[0].write_text(json.dumps({"id": QUERY_ID}))
    watermark, timestamp = 1_357_033_140_000, 1_795_265_474_094
    progress = []
    for batch_id in range(batches):
        data = batch_id % 2 == 0
        next_watermark = watermark + (3_240_000 if data else 0)
        metadata = json.dumps({"batchWatermarkMs": watermark, "batchTimestampMs": timestamp, "conf": CONF},
                              separators=(",", ":"))
        offsets = root / "offsets" / str(batch_id)
        offsets.write_text(f"v1\n{metadata}\n{{\"logOffset\":{batch_id // 2}}}")
        commit = root / "commits" / str(batch_id)
        commit.write_text(f"v1\n{{\"nextBatchWatermarkMs\":{next_watermark}}}")
        for path in (offsets, commit):
            (path.parent / f".{path.name}.crc").write_bytes(b"crc\x00\x00\x00\x01\x02")
        files += [offsets, commit]
        progress.append(_progress_record(batch_id, watermark, timestamp, 1000 if data else 0))
        watermark, timestamp = next_watermark, timestamp + 1_500
    Path(f"{root}.progress.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in progress))
    return files


def _progress_record(batch_id: int, watermark_ms: int, timestamp_ms: int, rows: int) -> dict:
    """One progress-log line in the shape ``watermark_ops.spark.progress_record`` writes."""
    run = batch_id // 2
    offset = {"logOffset": batch_id // 2}
    return {
        "query_id": QUERY_ID, "run_id": f"00000000-0000-0000-0000-{run:012d}", "name": "flight_windows",
        "run_tag": f"scheduled__run_{run}", "batch_id": batch_id,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(timestamp_ms / 1000)),
        "timestamp_ms": timestamp_ms, "watermark_ms": watermark_ms,
        "event_time_min_ms": watermark_ms if rows else None, "event_time_max_ms": watermark_ms + 3_840_000 if rows else None,
        "input_rows": rows, "executed": True, "output_rows": 40 if rows else 0, "state_rows_removed": 40 if rows else 0,
        "rows_dropped_by_watermark": 0, "state_rows": 120,
        "duration_ms": {"addBatch": 900, "commitOffsets": 20, "getBatch": 5, "latestOffset": 3, "queryPlanning": 40,
                        "triggerExecution": 1000, "walCommit": 20},
        "observed_metrics": {"quarantine": {"rows": 0}},
        "sources": [{"description": "FileStreamSource[file:/landing/flights]", "start_offset": offset,
                     "end_offset": offset, "input_rows": rows}],
        "spark_trigger": "availableNow",
        "requested_conf": {"spark.sql.streaming.multipleWatermarkPolicy": "min", "spark.sql.shuffle.partitions": "2"},
    }


def median_of(repeat: int, action) -> float:
    """The median of ``repeat`` timed runs of ``action`` (seconds), after one warm-up run."""
    action()  # warm-up: page cache, imports
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def timed_interleaved(repeat: int, actions: dict) -> dict[str, list[float]]:
    """Seconds of each run per action, round by round; the actions take turns in each round (after
    one warm-up round), so a change of load on a shared machine touches them all alike."""
    for action in actions.values():
        action()
    times: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(repeat):
        for name, action in actions.items():
            started = time.perf_counter()
            action()
            times[name].append(time.perf_counter() - started)
    return times


def medians_interleaved(repeat: int, actions: dict) -> dict[str, float]:
    """Median seconds per action of :func:`timed_interleaved`."""
    return {name: statistics.median(values) for name, values in timed_interleaved(repeat, actions).items()}


def ratio_figures(times: dict[str, list[float]], top: str, bottom: str) -> tuple[float, float, float]:
    """``top / bottom`` three ways: of the medians, the median of the rounds' own ratios (both ran
    within a second of each other: the least touched by the machine's load moving between rounds),
    and of the fastest runs (the least disturbed by other processes)."""
    return (statistics.median(times[top]) / statistics.median(times[bottom]),
            statistics.median(a / b for a, b in zip(times[top], times[bottom])),
            min(times[top]) / min(times[bottom]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", help="write the checkpoint here and keep it (default: a temp folder, removed); "
                                       "the 10-batch one goes beside it, at DIR-10")
    parser.add_argument("--no-precompile", action="store_true",
                        help="do not compile the package's modules to bytecode first (see the module docstring)")
    args = parser.parse_args(argv)
    if not args.no_precompile:
        import compileall

        compileall.compile_dir(str(PLUGINS / "watermark_ops"), quiet=1)

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="audit-benchmark-")) / "checkpoint"
    small = root.parent / f"{root.name}-10"
    try:
        started = time.perf_counter()
        files = write_checkpoint(root, args.batches)
        write_checkpoint(small, 10)
        size = sum(f.stat().st_size for f in files)
        print(f"checkpoint: {root}: {args.batches} batches, {len(files)} files, {size / 1e6:.1f} MB, progress log "
              f"{Path(f'{root}.progress.jsonl').stat().st_size / 1e6:.1f} MB (written in "
              f"{time.perf_counter() - started:.1f} s); and {small}: 10 batches")
        listing = "\n".join(str(f) for f in files)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")])))

        def cat() -> None:
            subprocess.run(["xargs", "cat"], input=listing, text=True, stdout=subprocess.DEVNULL, check=True)

        def command(*words: str):
            def run() -> None:
                done = subprocess.run([sys.executable, "-m", "watermark_ops", *words], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if done.returncode not in (0, 1):  # 1: a rule violated (not expected here), still a run
                    raise SystemExit(f"watermark-ops {' '.join(words)} failed ({done.returncode}): {done.stderr}")
            return run

        rounds = timed_interleaved(args.repeat, {
            "cat": cat,
            "audit": command("audit", str(root)),
            "audit --json": command("audit", "--json", str(root)),
            f"status@{args.batches}": command("status", "--json", str(root)),
            "status@10": command("status", "--json", str(small)),
            "floor": lambda: subprocess.run([sys.executable, str(Path(__file__).with_name("audit_floor.py")), str(root)],
                                            stdout=subprocess.DEVNULL, check=True),
        })
        processes = {name: statistics.median(values) for name, values in rounds.items()}

        def audit() -> None:
            report = run_audit(str(root))
            assert report.status == "ok" and len(report.batches) == args.batches, report.findings[:3]

        in_process = {
            "read": median_of(args.repeat, lambda: read_checkpoint(str(root))),
            "audit": median_of(args.repeat, audit),
            "audit+json": median_of(args.repeat, lambda: run_audit(str(root)).to_json()),
        }
        if os.environ.get("PYTHONDONTWRITEBYTECODE"):
            print("note: PYTHONDONTWRITEBYTECODE is set: modules without a .pyc are compiled from source in every "
                  "process (the Makefile installs the venv's packages precompiled; the project's own modules "
                  + ("were compiled first, as pip does)" if not args.no_precompile else "are not: --no-precompile)"))
        print(f"whole processes, median of {args.repeat} (seconds):")
        for name, seconds in processes.items():
            print(f"  {name:<14} {seconds:8.3f}")
        print(f"in process, median of {args.repeat} (seconds):")
        for name, seconds in in_process.items():
            print(f"  {name:<14} {seconds:8.3f}   {seconds / args.batches * 1e6:7.1f} µs per batch")
        status_ratio = processes[f"status@{args.batches}"] / processes["status@10"]
        print("ratios: of the medians | median of each round's | of the fastest runs")
        for top, bottom, note in (("audit", "cat", "(goal <= 1.5)"), ("audit --json", "cat", ""),
                                  ("floor", "cat", "(a bare Python reader)"), ("audit", "floor", "")):
            figures = " | ".join(f"{value:.2f}" for value in ratio_figures(rounds, top, bottom))
            print(f"ratio {top + ' / ' + bottom:<26}{figures}   {note}".rstrip())
        print(f"ratio status@{args.batches} / status@10: {status_ratio:.2f}   (goal <= 1.2)")
        print(f"in process: audit / cat {in_process['audit'] / processes['cat']:.2f}, "
              f"read / cat {in_process['read'] / processes['cat']:.2f}")
    finally:
        if not args.keep:
            shutil.rmtree(root.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
