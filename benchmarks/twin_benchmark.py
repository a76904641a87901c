"""The late-row ledger and corrections of the job's batch twin, as a ratio to the run's streaming time.

Figures and ratios, not asserts (docs/performance.md), for three team projects, one per window kind:

* ``tumbling``: ``tests/temps_project/jobs/city_temps.py`` (JSON lines, inline parsing, 6-hour
  windows per city with count, mean, min and max, a reject query). Its landing is the hourly
  temperatures of Seattle and San Francisco in 2010 (``vega_datasets``), San Francisco's delivered 10
  hours late; each run lands ``--days`` days of arrivals (``--window "6 hours" --allowed-lateness
  "6 hours"``).
* ``sliding``: ``tests/precip_project/jobs/weekly_precip.py`` (Parquet, ``window(day, "7 days", "1
  day")`` per weather, a quarantine query with a reason column), landed as its DAG
  (``tests/precip_project/dags/weekly_precip.py``) lands it: Seattle's daily weather
  (``vega_datasets``' ``seattle_weather``), one Parquet file per weekly run from 6 January 2013, a day
  of 10 mm of rain or more read from the hand gauge and arriving 5 days late.
* ``session``: ``tests/spells_project/jobs/weather_spells.py`` (JSON lines, ``session_window(day, "1
  day")`` per weather, a reject query without a reason column, an epilogue), landed as its DAG
  (``tests/spells_project/dags/weather_spells.py``) lands it: the same weather, one JSON-lines file
  per weekly run from 18 November 2012, the hand-gauge days arriving 4 days late.

The sliding and session jobs are launched as their DAGs launch them: ``--allowed-lateness "30 days"``
and no ``--window`` (the launcher reads the window from the job's plan), their landing and data
interval declared. Each run is the launcher once (``python -m watermark_ops.spark.launch``, its own
driver, ``local[2]``), which logs after the run how long the twin's ledger and corrections took
against the run's streaming time (from its first query's start to its queries' end). Printed per
run: rows landed, late rows, corrections, the two times and their ratio; then per project the median
ratio and the ratio of the sums (goal <= 0.25).

``python benchmarks/twin_benchmark.py [--project tumbling|sliding|session|all] [--runs N] [--days D] [--logs DIR]``
(about 20 s a run on 2 cores; all three projects, 6 runs each: about 6 minutes).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
_TIMED = re.compile(r"late rows and corrections: ([\d.]+) s after ([\d.]+) s of streaming")
_LATE = re.compile(r"batch \d+ from the job's batch twin: (\d+) rows read, \d+ set aside, \d+ aggregated, (\d+) late")
_CORRECTED = re.compile(r"corrections: (\d+) windows and groups corrected")
HAND_GAUGE_MM = 10.0  # both weather DAGs: a day this wet is read from the hand gauge and arrives late


def land_temps(start: pd.Timestamp, end: pd.Timestamp, landing: Path) -> int:
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


def _arrived_days(start: pd.Timestamp, end: pd.Timestamp, days_late: int) -> pd.DataFrame:
    """Seattle's days whose readings arrived in ``[start, end)``: a hand-gauge day ``days_late`` late."""
    from vega_datasets import local_data

    days = local_data.seattle_weather()
    late = days["precipitation"] >= HAND_GAUGE_MM
    arrived = days["date"] + pd.to_timedelta(late.astype(int) * days_late, unit="D")
    rows = days[(arrived >= start) & (arrived < end)].copy()
    rows["date"] = rows["date"].dt.strftime("%Y-%m-%d")
    return rows


def _publish(landing: Path, name: str, write: Callable[[Path], None]) -> None:
    """Write a landed file under a hidden name (the file source skips it), then move it in place."""
    landing.mkdir(parents=True, exist_ok=True)
    hidden = landing / ("." + name)
    write(hidden)
    os.replace(hidden, landing / name)


def land_precip(start: pd.Timestamp, end: pd.Timestamp, landing: Path) -> int:
    """As ``weekly_precip``'s ``land`` task: the days that arrived in ``[start, end)``, one Parquet file."""
    rows = _arrived_days(start, end, 5)
    _publish(landing, f"weather_{start:%Y-%m-%d}.parquet", lambda path: rows.to_parquet(path, index=False))
    return len(rows)


def land_spells(start: pd.Timestamp, end: pd.Timestamp, landing: Path) -> int:
    """As ``weather_spells``' ``land`` task: the days that arrived in ``[start, end)``, one JSON-lines file."""
    rows = _arrived_days(start, end, 4)
    _publish(landing, f"weather_{start:%Y-%m-%d}.json",
             lambda path: rows.to_json(path, orient="records", lines=True))
    return len(rows)


@dataclass(frozen=True)
class Project:
    job: Path
    land: Callable[[pd.Timestamp, pd.Timestamp, Path], int]
    query: str  # the checkpoint folder of the watermarked query, under the job's CHECKPOINTS
    first: str  # the first run's data interval start
    declared: tuple[str, ...]  # the launcher's declarations
    dag_like: bool  # declare the landing and the data interval, as the run pattern does


PROJECTS = {
    "tumbling": Project(REPO / "tests" / "temps_project" / "jobs" / "city_temps.py", land_temps, "windows",
                        "2010-01-01", ("--window", "6 hours", "--allowed-lateness", "6 hours"), False),
    "sliding": Project(REPO / "tests" / "precip_project" / "jobs" / "weekly_precip.py", land_precip, "windows",
                       "2013-01-06", ("--allowed-lateness", "30 days"), True),
    "session": Project(REPO / "tests" / "spells_project" / "jobs" / "weather_spells.py", land_spells, "spells",
                       "2012-11-18", ("--allowed-lateness", "30 days"), True),
}


def bench(name: str, project: Project, runs: int, days: int, env: dict[str, str],
          logs: Path | None = None) -> tuple[list[float], list[float]]:
    """Run ``project`` ``runs`` times on a fresh landing and checkpoint; print a line per run; the
    (ledger + corrections, streaming) seconds per run. With ``logs``, each launcher's log goes there."""
    step = pd.Timedelta(days=days if name == "tumbling" else 7)  # the weather DAGs run weekly
    afters, streamings = [], []
    print(f"{name}: {project.job.relative_to(REPO)}, {' '.join(project.declared)}")
    print(f"{'run':>4} {'landed':>7} {'late':>5} {'corrected':>9} {'ledger+corr s':>13} {'streaming s':>11} "
          f"{'ratio':>6}")
    with tempfile.TemporaryDirectory(prefix=f"twin-bench-{name}-") as folder:
        tmp = Path(folder)
        landing = tmp / "landing"
        start = pd.Timestamp(project.first)
        for run in range(runs):
            end = start + step
            landed = project.land(start, end, landing)
            command = [sys.executable, "-m", "watermark_ops.spark.launch", "--checkpoint",
                       str(tmp / "ck" / project.query), "--run-tag", f"run-{run}", *project.declared]
            if project.dag_like:
                command += ["--data-interval-start", f"{start.isoformat()}+00:00",
                            "--data-interval-end", f"{end.isoformat()}+00:00", "--landing", str(landing)]
            command += ["--master", "local[2]", "--", str(project.job), str(landing), str(tmp / "out"), str(tmp / "ck")]
            start = end
            done = subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=900)
            if logs is not None:
                logs.mkdir(parents=True, exist_ok=True)
                (logs / f"{name}-run-{run}.log").write_text(done.stderr)
            timed = _TIMED.search(done.stderr)
            if done.returncode != 0 or timed is None:
                print(done.stderr[-3000:])
                raise SystemExit(f"{name} run {run}: the launcher exited {done.returncode} "
                                 f"{'' if timed else 'without its timing line'}")
            after, streaming = float(timed.group(1)), float(timed.group(2))
            late = sum(int(m.group(2)) for m in _LATE.finditer(done.stderr))
            corrected = [int(m.group(1)) for m in _CORRECTED.finditer(done.stderr)]
            afters.append(after)
            streamings.append(streaming)
            print(f"{run:>4} {landed:>7} {late:>5} {sum(corrected) if corrected else '-':>9} {after:>13.2f} "
                  f"{streaming:>11.2f} {after / streaming:>6.2f}")
    return afters, streamings


def summary(name: str, afters: list[float], streamings: list[float]) -> str:
    ratios = [a / s for a, s in zip(afters, streamings)]
    return (f"{name}: ledger + corrections / streaming over {len(ratios)} runs: "
            f"median {statistics.median(ratios):.2f}, of the sums {sum(afters) / sum(streamings):.2f} (goal <= 0.25)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", choices=[*PROJECTS, "all"], default="all")
    parser.add_argument("--runs", type=int, default=6, help="runs per project")
    parser.add_argument("--days", type=int, default=7, help="days of arrivals landed per tumbling run "
                                                              "(the weather projects land a week a run, as their DAGs)")
    parser.add_argument("--logs", type=Path, help="a folder to keep each launcher's log in (<project>-run-N.log)")
    args = parser.parse_args()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    names = list(PROJECTS) if args.project == "all" else [args.project]
    lines = []
    for name in names:
        lines.append(summary(name, *bench(name, PROJECTS[name], args.runs, args.days, env, args.logs)))
        print(lines[-1] + "\n")
    if len(lines) > 1:
        print("\n".join(lines))


if __name__ == "__main__":
    main()
