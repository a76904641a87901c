"""Benchmark: one availableNow run of flight_windows vs the equivalent batch job, as whole processes.

    .venv/bin/python benchmarks/flight_windows_benchmark.py [--month 1] [--repeats 3] [--year]

Lands the month's flights (one file per day, as the DAG does) into a temporary folder, then times,
``--repeats`` times each and alternating, two ``spark-submit --master local[2]`` processes (JVM and
session start included in both, ``spark.sql.shuffle.partitions=4`` as the DAG sets it):

* streaming: ``spark_jobs/flight_windows.py`` on a fresh checkpoint: one availableNow run over
  every daily file (file source, watermark, windowed state, trailing no-data batch, Parquet sink,
  and the quarantine query beside it);
* batch: ``benchmarks/flight_windows_batch.py``: the same windows and quarantine with
  ``spark.read.json`` + ``groupBy(window)`` (no watermark, no state store, no checkpoint).

It prints the medians and their ratio, and where the streaming run's time goes: each batch's
``durationMs`` from the progress log (latestOffset, getBatch, queryPlanning, walCommit, addBatch,
commitOffsets), and the time before the first batch (JVM, session, query start).

``--year`` then lands all of 2013 (365 daily files, 336,776 flights) and runs it as one
availableNow run per state store: HDFS-backed (the default) and RocksDB with changelog
checkpointing, printing wall time, rows per second, the peak memory of the driver (JVM + Python,
resident, sampled every 0.2 s) and the state rows at the end. Figures, not asserts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "spark_jobs")]

PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
ROCKSDB = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


def land_days(start, days: int, landing: Path) -> int:
    """Land ``days`` daily files of flights from ``start`` (America/New_York midnight), as the DAG's
    daily runs would, in one pass over the data set; returns the events landed."""
    from watermark_ops.examples.flights.lander import land_intervals

    return sum(s["records"] for s in land_intervals([start.add(days=d) for d in range(days + 1)], str(landing)))


def spark_submit(script: Path, args: list[str], conf: dict[str, str] | None = None) -> tuple[float, int]:
    """Run ``spark-submit --master local[2] script args``; returns (wall seconds, peak resident bytes
    of its process tree: the JVM and the Python driver). Raises on a non-zero exit."""
    import psutil

    settings = {"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false", **(conf or {})}
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    from watermark_ops.examples.flights.settings import spark_submit_env

    env = {**os.environ, **spark_submit_env(), "SPARK_LOCAL_IP": "127.0.0.1"}  # PATH and PYSPARK_PYTHON as the DAGs set them
    started = time.perf_counter()
    process = subprocess.Popen(command + [str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=env, text=True)
    peak = [0]

    def sample() -> None:
        root = psutil.Process(process.pid)
        while process.poll() is None:
            try:
                tree = [root, *root.children(recursive=True)]
                peak[0] = max(peak[0], sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    seconds = time.perf_counter() - started
    sampler.join()
    if process.returncode:
        raise RuntimeError(f"{script.name} exited {process.returncode}:\n{output[-3000:]}")
    return seconds, peak[0]


def streaming(landing: Path, work: Path, conf: dict[str, str] | None = None) -> tuple[float, int, list[dict]]:
    """One availableNow run on a fresh checkpoint: (seconds, peak bytes, progress records)."""
    checkpoint = work / "ck"
    seconds, peak = spark_submit(REPO / "spark_jobs" / "flight_windows.py",
                                 ["--landing", str(landing), "--checkpoint", str(checkpoint),
                                  "--output", str(work / "out")], conf)
    records = [json.loads(line) for line in open(f"{checkpoint}.progress.jsonl")]
    return seconds, peak, records


def batch(landing: Path, work: Path) -> float:
    seconds, _ = spark_submit(REPO / "benchmarks" / "flight_windows_batch.py",
                              ["--landing", str(landing), "--output", str(work / "out")])
    return seconds


def breakdown(records: list[dict], seconds: float, started: float) -> None:
    """Where the streaming run's time went: per batch durationMs, and before the first batch."""
    print("  streaming run, per micro-batch (ms):")
    print("    batch  rows  " + "  ".join(f"{p:>13s}" for p in PHASES) + "  triggerExecution")
    for r in records:
        d = r.get("duration_ms") or {}
        print(f"    {r['batch_id']:5d} {r['input_rows']:5d}  " + "  ".join(f"{d.get(p, 0):13d}" for p in PHASES)
              + f"  {d.get('triggerExecution', 0):16d}")
    in_batches = sum((r.get("duration_ms") or {}).get("triggerExecution", 0) for r in records) / 1000
    first = min(r["timestamp_ms"] for r in records) / 1000
    print(f"    before the first batch (JVM, session, query start): {first - started:.1f} s; in batches: "
          f"{in_batches:.1f} s; after (stop, exit): {seconds - (first - started) - in_batches:.1f} s of {seconds:.1f} s")


def month_benchmark(month: int, repeats: int, work: Path) -> None:
    import pendulum

    t0 = time.perf_counter()
    start = pendulum.datetime(2013, month, 1, tz="America/New_York")
    rows = land_days(start, (start.add(months=1) - start).days, work / "landing")
    print(f"landed 2013-{month:02d}: {rows} events in {time.perf_counter() - t0:.1f} s")
    timings: dict[str, list[float]] = {"streaming (availableNow)": [], "batch": []}
    last = None
    for i in range(repeats):
        started = time.time()
        seconds, _, records = streaming(work / "landing", work / f"stream{i}")
        timings["streaming (availableNow)"].append(seconds)
        last = (records, seconds, started)
        timings["batch"].append(batch(work / "landing", work / f"batch{i}"))
    for name, values in timings.items():
        print(f"  {name:26s} median {statistics.median(values):6.2f} s  runs {[round(v, 2) for v in values]}")
    ratio = statistics.median(timings["streaming (availableNow)"]) / statistics.median(timings["batch"])
    print(f"  ratio streaming / batch: {ratio:.2f}x (goal 1.5x; whole processes, session start in both)")
    records, seconds, started = last
    main = [r for r in records if r.get("executed", True)]
    breakdown(main, seconds, started)


def year_benchmark(work: Path) -> None:
    import pendulum

    t0 = time.perf_counter()
    rows = land_days(pendulum.datetime(2013, 1, 1, tz="America/New_York"), 365, work / "year")
    print(f"landed 2013: {rows} events in 365 files in {time.perf_counter() - t0:.1f} s")
    for name, conf in (("HDFS-backed state store", None), ("RocksDB + changelog checkpointing", ROCKSDB)):
        seconds, peak, records = streaming(work / "year", work / name.split()[0], conf)
        data = [r for r in records if r.get("executed", True)]
        state = data[-1].get("state_rows")
        print(f"  {name:34s} {seconds:6.1f} s  {rows / seconds:8.0f} rows/s  peak driver memory "
              f"{peak / 2**20:6.0f} MiB  state rows at the end {state}  batches {len(data)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--month", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--year", action="store_true", help="also run all of 2013 with both state stores")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wmo-bench-"))
    month_benchmark(args.month, args.repeats, work)
    if args.year:
        year_benchmark(work)


if __name__ == "__main__":
    main()
