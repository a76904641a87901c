"""spark-submit against Spark Connect: per DAG run, and thirty daily runs on one Connect server.

Figures and ratios, not asserts (README "Performance").

1. Per DAG run, both launches, on the ``make run`` days (2013-01-01..03): the demo
   (``watermark_ops.examples.flights.demo --launch submit|connect``, each in a runtime folder of
   its own) runs ``airflow dags test flights_pipeline`` per day; printed per run: the Spark part
   split into start (spark-submit + JVM + session, or the Connect client + session), micro-batches
   and stop, and the whole DAG run; then the goals: Connect's Spark part / its micro-batches
   (goal ≤ 2) and Connect's DAG run / submit's (goal ≤ 0.5). The Connect server's start is printed
   apart (paid once).
2. Thirty consecutive daily runs (2013-01-01..30) on one Connect server, each a whole client
   process (``python spark_jobs/flight_windows.py --remote ...``, no Airflow): per-run seconds of
   runs 1-5 and 26-30 and a least-squares slope (seconds per run: flat means no growth from state
   the server keeps), and the server's resident memory (its process group) after the first and the
   thirtieth run.

The figures part 1 measured are written to ``<runtime>/bench/connect_benchmark.json``, which
``make run``'s automatic launch choice reads (``demo.choose_launch``).

``python benchmarks/connect_benchmark.py [--days N] [--skip-dag-runs]`` (about 10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO / "spark_jobs")]

MAKE_RUN_DAYS = ("2013-01-01", "2013-01-02", "2013-01-03")


def dag_runs(launch: str, root: Path) -> dict:
    """Run the demo with ``launch`` in ``root`` (its own runtime folder); return its timings JSON."""
    home = root / launch
    out = home / "timings.json"
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WATERMARK_OPS_HOME": str(home), "AIRFLOW_HOME": str(home / "airflow"),
           "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO / "spark_jobs"),
                                          os.environ.get("PYTHONPATH", "")])}
    for key in ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS"):
        env.pop(key, None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "watermark_ops.examples.flights.demo", "--launch", launch,
                           "--timings-json", str(out), *MAKE_RUN_DAYS], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"demo --launch {launch} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    result = json.loads(out.read_text())
    result["total_s"] = time.monotonic() - started
    return result


def print_dag_runs(results: dict[str, dict]) -> dict[str, float]:
    print("1. Per DAG run on the make run days (seconds)")
    print(f"  {'launch':8} {'day':11} {'start':>6} {'batches':>8} {'stop':>6} {'spark':>6} {'DAG run':>8}")
    means = {}
    for launch, result in results.items():
        for run in result["runs"]:
            spark = run["spark start"] + run["micro-batches"] + run["spark stop"]
            print(f"  {launch:8} {run['start']:11} {run['spark start']:6.1f} {run['micro-batches']:8.1f} "
                  f"{run['spark stop']:6.1f} {spark:6.1f} {run['DAG run']:8.1f}")
        runs = result["runs"]
        means[launch] = {
            "spark": statistics.mean(r["spark start"] + r["micro-batches"] + r["spark stop"] for r in runs),
            "batches": statistics.mean(r["micro-batches"] for r in runs),
            "dag_run": statistics.mean(r["DAG run"] for r in runs),
        }
        if result.get("server_start_s") is not None:
            print(f"  {launch}: Connect server start {result['server_start_s']:.1f} s (once)")
        print(f"  {launch}: whole demo {result['total_s']:.0f} s")
    if {"submit", "connect"} <= set(means):
        c, s = means["connect"], means["submit"]
        print(f"  connect: Spark part / its micro-batches = {c['spark']:.1f} / {c['batches']:.1f} = "
              f"{c['spark'] / max(c['batches'], 1e-9):.2f} (goal <= 2)")
        print(f"  connect / submit, whole DAG run = {c['dag_run']:.1f} / {s['dag_run']:.1f} = "
              f"{c['dag_run'] / s['dag_run']:.2f} (goal <= 0.5)")
        print(f"  connect / submit, Spark part = {c['spark']:.1f} / {s['spark']:.1f} = {c['spark'] / s['spark']:.2f}")
    return {"submit_run_s": means.get("submit", {}).get("dag_run"),
            "connect_run_s": means.get("connect", {}).get("dag_run"),
            "server_start_s": results.get("connect", {}).get("server_start_s")}


def thirty_days(root: Path, days: int) -> None:
    import pendulum

    from watermark_ops.examples.flights.lander import land_interval
    from watermark_ops.spark.connect import new_session_id, start_connect_server

    print(f"\n2. {days} consecutive daily runs on one Spark Connect server (whole client process, seconds)")
    base = root / "thirty"
    t0 = time.monotonic()
    server = start_connect_server(base / "server.log", conf={"spark.sql.shuffle.partitions": "4"})
    print(f"  server {server.url} (pid {server.pid}) started in {time.monotonic() - t0:.1f} s")
    seconds, rss_first = [], None
    try:
        start = pendulum.datetime(2013, 1, 1, tz="America/New_York")
        for day in range(days):
            land_interval(start.add(days=day), start.add(days=day + 1), str(base / "landing"))
            t = time.monotonic()
            done = subprocess.run(
                [sys.executable, str(REPO / "spark_jobs" / "flight_windows.py"), "--landing", str(base / "landing"),
                 "--checkpoint", str(base / "ck"), "--output", str(base / "out"), "--run-tag", f"day{day + 1}",
                 "--remote", server.url, "--session-id", new_session_id()],
                capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO / "spark_jobs")])})
            seconds.append(time.monotonic() - t)
            if done.returncode:
                raise SystemExit(f"run {day + 1} failed:\n{done.stderr[-3000:]}")
            if day == 0:
                rss_first = server.rss_bytes()
        rss_last = server.rss_bytes()
    finally:
        server.stop()
    print("  runs 1-5:   " + " ".join(f"{s:.1f}" for s in seconds[:5]))
    print(f"  runs {days - 4}-{days}: " + " ".join(f"{s:.1f}" for s in seconds[-5:]))
    xs = list(range(1, len(seconds) + 1))
    slope = statistics.linear_regression(xs, seconds).slope if len(xs) > 1 else 0.0
    half = len(seconds) // 2
    print(f"  median first half {statistics.median(seconds[:half]):.2f} s, second half "
          f"{statistics.median(seconds[half:]):.2f} s; slope {slope * 1000:+.0f} ms per run")
    mb = 1024 * 1024
    print(f"  server memory (resident, its process group): after run 1 {rss_first / mb:.0f} MB, "
          f"after run {days} {rss_last / mb:.0f} MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=30, help="consecutive daily runs on one server (default 30)")
    parser.add_argument("--skip-dag-runs", action="store_true", help="only the consecutive runs")
    args = parser.parse_args()
    from watermark_ops.examples.flights.demo import bench_figures_path

    with tempfile.TemporaryDirectory(prefix="connect-bench-") as tmp:
        root = Path(tmp)
        if not args.skip_dag_runs:
            figures = print_dag_runs({launch: dag_runs(launch, root) for launch in ("submit", "connect")})
            path = bench_figures_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(figures, indent=2))
            print(f"  (written to {path}: make run's automatic launch choice reads it)")
        thirty_days(root, args.days)
    return 0


if __name__ == "__main__":
    sys.exit(main())
