"""Benchmark: one availableNow run of flight_windows over a month of flights vs a plain batch job.

    .venv/bin/python benchmarks/flight_windows_benchmark.py [--month 1] [--repeats 2]

Lands the month's flights (one file per day, as the DAG does) into a temporary folder, warms the
JVM up, then times, ``--repeats`` times each and alternating:

* streaming: ``flight_windows.run`` with a fresh checkpoint (all daily files in one availableNow
  run: file source, watermark, windowed state, trailing no-data batch, Parquet sink, quarantine);
* batch: the same hourly windows per origin as ``spark.read.json`` + ``groupBy(window)`` written
  to Parquet (no watermark, no state store, no checkpoint).

It prints the medians and their ratio, then the import time of every DAG file (in a fresh
interpreter that already imported ``airflow.sdk``, as the DAG processor has). Figures, not asserts.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "spark_jobs")]


def land_month(month: int, landing: Path) -> int:
    import pendulum

    from watermark_ops.examples.flights.lander import land_interval

    start = pendulum.datetime(2013, month, 1, tz="America/New_York")
    end, rows = start.add(months=1), 0
    while start < end:
        rows += land_interval(start, start.add(days=1), str(landing))["records"]
        start = start.add(days=1)
    return rows


def batch_job(spark, landing: Path, output: Path) -> int:
    import flight_windows as fw
    from flight_inputs import EVENT_SCHEMA_DDL
    from pyspark.sql import functions as F

    events = (
        spark.read.schema(EVENT_SCHEMA_DDL).option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", "_corrupt_record").json(str(landing))
        .withColumn("event_time", F.expr("try_to_timestamp(dep_time)"))
        .where(F.col("_corrupt_record").isNull() & F.col("event_time").isNotNull() & F.col("arr_time").isNotNull())
    )
    windows = events.groupBy(F.window("event_time", fw.WINDOW_DURATION), "origin").agg(
        F.count(F.lit(1)).alias("departures"), F.avg("dep_delay").alias("mean_dep_delay"),
        F.max("dep_delay").alias("max_dep_delay"),
    )
    windows.write.mode("overwrite").parquet(str(output))
    return spark.read.parquet(str(output)).count()


def streaming_job(spark, landing: Path, work: Path) -> int:
    import flight_windows as fw

    config = fw.JobConfig(landing=str(landing), checkpoint=str(work / "ck"), output=str(work / "out"))
    fw.run(spark, config)
    return spark.read.parquet(config.output).count()


def dag_import_seconds(dag_file: Path, repeats: int = 5) -> float:
    code = (
        "import sys, time, runpy; sys.path.insert(0, sys.argv[2]); import airflow.sdk; "
        "t = time.perf_counter(); runpy.run_path(sys.argv[1]); print(time.perf_counter() - t)"
    )
    runs = [
        float(subprocess.run([sys.executable, "-c", code, str(dag_file), str(REPO / "plugins")],
                             capture_output=True, text=True, check=True).stdout.split()[-1])
        for _ in range(repeats)
    ]
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--month", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from streaming_driver import build_session

    work = Path(tempfile.mkdtemp(prefix="wmo-bench-"))
    t0 = time.perf_counter()
    rows = land_month(args.month, work / "landing")
    print(f"landed 2013-{args.month:02d}: {rows} events in {time.perf_counter() - t0:.1f} s")
    spark = build_session("benchmark", master="local[2]", shuffle_partitions=4)
    spark.range(1000).selectExpr("sum(id)").collect()  # JVM warm-up, charged to neither side
    timings: dict[str, list[float]] = {"streaming (availableNow)": [], "batch": []}
    counts = {}
    for i in range(args.repeats):
        t = time.perf_counter()
        counts["streaming (availableNow)"] = streaming_job(spark, work / "landing", work / f"stream{i}")
        timings["streaming (availableNow)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        counts["batch"] = batch_job(spark, work / "landing", work / f"batch{i}")
        timings["batch"].append(time.perf_counter() - t)
    spark.stop()
    for name, values in timings.items():
        print(f"{name:26s} median {statistics.median(values):6.2f} s  runs {[round(v, 2) for v in values]}  windows {counts[name]}")
    ratio = statistics.median(timings["streaming (availableNow)"]) / statistics.median(timings["batch"])
    print(f"ratio streaming / batch: {ratio:.2f}x  (the streaming run emits only windows the watermark closed)")
    for dag_file in sorted((REPO / "dags").glob("*.py")):
        print(f"DAG file import {dag_file.name:28s} {dag_import_seconds(dag_file) * 1000:7.1f} ms (median of 5)")


if __name__ == "__main__":
    main()
