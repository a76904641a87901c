"""The late-row ledger and corrections of the job's batch twin, as a ratio to the run's streaming time.

Figures and ratios, not asserts (docs/performance.md). The job is the third team's flat script
(``tests/temps_project/jobs/city_temps.py``: JSON lines, inline parsing, 6-hour windows per city
with count, mean, min and max, a reject query), unlike the example. Its landing is the hourly
temperatures of Seattle and San Francisco in 2010 (``vega_datasets``), San Francisco's delivered 10
hours late; each run lands ``--days`` days of arrivals and runs the launcher once (``python -m
watermark_ops.spark.launch --allowed-lateness "6 hours"``, its own driver, ``local[2]``), which logs
after the run how long the twin's ledger and corrections took against the run's streaming time (from
its first query's start to its queries' end). Printed per run: rows landed, late rows, corrections,
the two times and their ratio; then the median ratio and the ratio of the sums (goal ≤ 0.25).

``python benchmarks/twin_benchmark.py [--runs N] [--days D]`` (about 20 s a run on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "tests" / "temps_project" / "jobs" / "city_temps.py"
_TIMED = re.compile(r"late rows and corrections: ([\d.]+) s after ([\d.]+) s of streaming")
_LATE = re.compile(r"batch \d+ from the job's batch twin: (\d+) rows read, \d+ set aside, \d+ aggregated, (\d+) late")
_CORRECTED = re.compile(r"corrections: (\d+) windows and groups corrected")


def land(start: pd.Timestamp, end: pd.Timestamp, landing: Path) -> int:
    """The readings that arrived in ``[start, end)``, one JSON-lines file per city; how many."""
    from vega_datasets import local_data

    temps = pd.concat([local_data.seattle_temps().assign(city="seattle"), local_data.sf_temps().assign(city="sf")])
    arrived = temps["date"] + pd.to_timedelta(temps["city"].map({"seattle": 0, "sf": 10}), unit="h")
    rows = temps[(arrived >= start) & (arrived < end)]
    landing.mkdir(parents=True, exist_ok=True)
    for city, part in rows.groupby("city"):
        with open(landing / f"temps_{start:%Y-%m-%d}_{city}.json", "w") as out:
            for row in part.itertuples():
                out.write(json.dumps({"city": city, "event_time": f"{row.date:%Y-%m-%d %H:%M:%S}",
                                      "temp": str(row.temp)}) + "\n")
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--days", type=int, default=7, help="days of arrivals landed per run")
    args = parser.parse_args()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    ratios, sums = [], [0.0, 0.0]
    print(f"{'run':>4} {'landed':>7} {'late':>5} {'corrected':>9} {'ledger+corr s':>13} {'streaming s':>11} {'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix="twin-bench-") as folder:
        tmp = Path(folder)
        start = pd.Timestamp("2010-01-01")
        for run in range(args.runs):
            end = start + pd.Timedelta(days=args.days)
            landed = land(start, end, tmp / "landing")
            start = end
            command = [sys.executable, "-m", "watermark_ops.spark.launch", "--checkpoint", str(tmp / "ck" / "windows"),
                       "--run-tag", f"run-{run}", "--window", "6 hours", "--allowed-lateness", "6 hours",
                       "--master", "local[2]", "--", str(JOB), str(tmp / "landing"), str(tmp / "out"), str(tmp / "ck")]
            done = subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=900)
            timed = _TIMED.search(done.stderr)
            if done.returncode != 0 or timed is None:
                print(done.stderr[-3000:])
                raise SystemExit(f"run {run}: the launcher exited {done.returncode}")
            after, streaming = float(timed.group(1)), float(timed.group(2))
            late = sum(int(m.group(2)) for m in _LATE.finditer(done.stderr))
            corrected = sum(int(m.group(1)) for m in _CORRECTED.finditer(done.stderr))
            ratios.append(after / streaming)
            sums[0] += after
            sums[1] += streaming
            print(f"{run:>4} {landed:>7} {late:>5} {corrected:>9} {after:>13.2f} {streaming:>11.2f} {after / streaming:>6.2f}")
    print(f"ledger + corrections / streaming: median {statistics.median(ratios):.2f}, "
          f"of the sums {sums[0] / sums[1]:.2f} (goal <= 0.25)")


if __name__ == "__main__":
    main()
