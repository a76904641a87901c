"""The main command: run flights_pipeline for consecutive days of 2013 and show what each run did.

``python -m watermark_ops.examples.flights.demo [--keep] [DAY ...]`` (``make run`` calls it). For each DAY
(``YYYY-MM-DD``, the start of a daily America/New_York data interval; default 2013-01-01,
2013-01-02, 2013-01-03) it runs ``airflow dags test flights_pipeline`` — a real DAG run: land the
interval's flights, spark-submit the flight_windows job (a restart of the same query from its
checkpoint), collect its progress — then prints per run the micro-batches, the watermark as
ISO-8601 time, the windows emitted and the rows dropped as late.

A manual run of logical date D covers the interval that *ends* at D (Airflow infers manual data
intervals that way), so the day's interval end is passed as the logical date.

Unless ``--keep`` is given, the demo starts from a fresh landing folder, checkpoint and output
(under ``$WATERMARK_OPS_HOME``), so that every invocation replays the same days, and forgets what
Airflow remembers of the deleted checkpoints (the audit memory and the announced days in the
asset state store, ``python -m watermark_ops.airflow.memory forget``): otherwise the next audit
would see a new query id at a remembered checkpoint and fail with ``checkpoint_reset``. The Airflow
environment (home, DAG and plugin folders, ``spark_default``) defaults to the runtime folder.

``--launch`` says how the Spark job runs: ``submit`` (spark-submit: a Spark application per run),
``connect`` (a local Spark Connect server started first, stopped by its PID at the end; each run a
thin client on it) or ``auto`` (default): whichever is faster end to end for these days, server
start included, by :func:`choose_launch` from the figures ``benchmarks/connect_benchmark.py``
measured on this machine (``<runtime>/bench/connect_benchmark.json``), or the defaults below
without them. The demo says which it took and why.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import pendulum

from watermark_ops.core.progress import progress_log_path, read_progress_log, summarize_run
from watermark_ops.core.times import watermark_text
from watermark_ops.examples.flights.settings import (
    REPO_ROOT,
    STATE_MAINTENANCE_CONF,
    airflow_config_env,
    job_locations,
    runtime_home,
)

DAG_ID = "flights_pipeline"
JOB = "flight_windows"
DEFAULT_DAYS = ("2013-01-01", "2013-01-02", "2013-01-03")
LAUNCHES = ("auto", "submit", "connect")
#: Seconds per DAG run (whole run) per launch, and the Connect server's start, measured here
#: (2 cores, `make bench` on 2026-11-25) and used when this machine has no benchmark figures yet.
DEFAULT_FIGURES = {"submit_run_s": 24.0, "connect_run_s": 14.0, "server_start_s": 8.0}


def bench_figures_path() -> Path:
    """Where ``benchmarks/connect_benchmark.py`` leaves its figures for :func:`choose_launch`."""
    return runtime_home() / "bench" / "connect_benchmark.json"


def choose_launch(days: int, figures: dict[str, float] | None = None) -> tuple[str, str]:
    """``("submit" | "connect", why)``: the launch with the shorter end-to-end time for ``days`` DAG
    runs, the Connect server's start included: ``days × submit_run_s`` against
    ``server_start_s + days × connect_run_s`` (seconds; :data:`DEFAULT_FIGURES` fills what
    ``figures`` lacks)."""
    f = {**DEFAULT_FIGURES, **(figures or {})}
    submit = days * f["submit_run_s"]
    connect = f["server_start_s"] + days * f["connect_run_s"]
    choice = "connect" if connect < submit else "submit"
    why = (f"{days} runs: submit ≈ {days} × {f['submit_run_s']:.1f} = {submit:.0f} s, connect ≈ "
           f"{f['server_start_s']:.1f} (server start) + {days} × {f['connect_run_s']:.1f} = {connect:.0f} s")
    return choice, why


def _measured_figures() -> tuple[dict[str, float] | None, str]:
    path = bench_figures_path()
    try:
        return json.loads(path.read_text()), f"measured by benchmarks/connect_benchmark.py ({path})"
    except (OSError, ValueError):
        return None, "defaults measured on a 2-core machine (run `make bench` to measure this one)"


def airflow_environment() -> dict[str, str]:
    """The environment for Airflow commands: this process's, with the project's defaults filled in."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    defaults = {
        "AIRFLOW_HOME": str(runtime_home() / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": "client"}}
        ),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "WATERMARK_OPS_HOME": str(runtime_home()),
        **airflow_config_env(runtime_home()),  # the example's [watermark_ops] settings (thresholds, "runtime" root)
    }
    for key, value in defaults.items():
        env.setdefault(key, value)
    return env


def _airflow(args: list[str], env: dict[str, str], log_file: Path) -> int:
    with open(log_file, "a") as handle:
        handle.write(f"\n$ airflow {' '.join(args)}\n")
        handle.flush()
        return subprocess.run([str(Path(sys.executable).parent / "airflow"), *args], env=env,
                              stdout=handle, stderr=subprocess.STDOUT).returncode


def time_breakdown(env: dict[str, str], run_tag: str, records: list[dict]) -> dict[str, float] | None:
    """Where one DAG run's wall time went, in seconds: each task's duration from the metadata DB
    (``task_instance.start_date``/``end_date``; only for the default SQLite DB under
    ``$AIRFLOW_HOME``, else None), and inside ``flight_windows`` the time before its first
    micro-batch started (spark-submit, JVM, session, query start), in the micro-batches
    (``triggerExecution`` summed) and after them (query stop, exit).
    """
    import sqlite3

    db = Path(env["AIRFLOW_HOME"]) / "airflow.db"
    if "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" in env or not db.exists():
        return None
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        rows = connection.execute("SELECT task_id, start_date, end_date FROM task_instance WHERE dag_id = ? AND run_id = ?",
                                  (DAG_ID, run_tag)).fetchall()
    spans = {task: (pendulum.parse(a).float_timestamp, pendulum.parse(b).float_timestamp) for task, a, b in rows if a and b}
    if JOB not in spans:
        return None
    seconds = {task: end - start for task, (start, end) in spans.items()}
    start, end = spans[JOB]
    batches = [r for r in records if r.get("executed", True) and r.get("timestamp_ms")]
    in_batches = sum((r.get("duration_ms") or {}).get("triggerExecution", 0) for r in batches) / 1000
    before = (min(r["timestamp_ms"] for r in batches) / 1000 - start) if batches else end - start
    return {**seconds, "spark start": before, "micro-batches": in_batches,
            "spark stop": max(0.0, end - start - before - in_batches)}


def _ledger(locations: dict[str, str], run_tag: str | None) -> dict[str, str]:
    """The run's late flights (the ledger) and its balance, as table cells; empty without a run."""
    if run_tag is None:
        return {}
    from watermark_ops.core.ledger import reconcile_run

    try:
        found = reconcile_run(locations["checkpoint"], run_tag)
    except (OSError, ValueError) as exc:
        return {"rows_late": f"unreadable: {exc}"}
    balance = (f"{found['rows_in']} = {found['rows_aggregated']} + {found['rows_late']} + {found['rows_quarantined']}"
               if found["balanced"] else f"NO: {found['problems'][:1] or found['rows_in']}")
    return {"rows_late": "unknown" if found["rows_late"] is None else str(found["rows_late"]), "balance": balance}


def fresh_start(locations: dict[str, str]) -> list[str]:
    """Delete the job's landing folder, checkpoints (the job's and its quarantine query's), outputs and
    progress logs; return the checkpoints deleted (what :func:`forget_remembered` must forget)."""
    checkpoints = [locations["checkpoint"], locations["checkpoint"] + "_quarantine"]
    for path in (locations["landing"], *checkpoints, locations["output"], locations["output"] + "_quarantine",
                 locations["output"] + "_late"):
        shutil.rmtree(path, ignore_errors=True)
    for path in (locations["progress_log"], progress_log_path(checkpoints[1])):
        Path(path).unlink(missing_ok=True)
    return checkpoints


def forget_remembered(checkpoints: list[str], env: dict[str, str], log_file: Path) -> tuple[int, str]:
    """Forget the audit memory and announced partitions of ``checkpoints`` in Airflow's metadata DB,
    with the keys the operators use (``python -m watermark_ops.airflow.memory forget``, in Airflow's
    environment ``env``); returns (exit code, its last output line). Run after ``airflow db migrate``."""
    command = [sys.executable, "-m", "watermark_ops.airflow.memory", "forget", *checkpoints]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    with open(log_file, "a") as handle:
        handle.write(f"\n$ {' '.join(command)}\n{done.stdout}{done.stderr}")
    lines = done.stdout.strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def _compact_instant(ms: int | None) -> str:
    """``MM-DD HH:mmZ`` (UTC) for the narrow table: ``01-02 21:59Z``; 0 is ``not set yet``."""
    if not ms:
        return watermark_text(ms, "-")
    return pendulum.from_timestamp(ms / 1000, tz="UTC").format("MM-DD HH:mm[Z]")


def _fitted_table(title: str, headings: Sequence[str], cells: list[list[str]], whole: Sequence[int], narrow: bool,
                  fixed: bool = True):
    """A rich table whose every column is as wide as its longest heading word and its longest cell
    (columns in ``whole``) or cell word (the others): nothing folded mid-word, nothing cut with
    ``…``; ``fixed=False`` lets rich shrink it (narrower than the narrow form). Returns (table, its
    width in columns). The narrow form has no vertical lines nor edges (``box.SIMPLE_HEAD``)."""
    from rich import box
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    widths = [
        max([len(word) for word in heading.split()]
            + [len(c[i]) if i in whole else max((len(w) for w in c[i].split()), default=0) for c in cells])
        for i, heading in enumerate(headings)
    ]
    table = Table(title=title, box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, pad_edge=not narrow,
                  show_edge=not narrow)
    for i, heading in enumerate(headings):
        table.add_column(heading, overflow="fold", width=widths[i] if fixed else None,
                         min_width=None if fixed or i not in whole else widths[i],
                         justify="left" if i in whole or i == 1 else "right")
    for row_cells in cells:
        table.add_row(*(f"[red]{c}[/]" if c == "failed" else c for c in row_cells))
    measuring = Console(width=10_000, file=io.StringIO())
    return table, Measurement.get(measuring, measuring.options, table).maximum


def _fit(build: Any, width: int):
    """``build(narrow)`` -> (title, headings, cells, whole): the wide form when it fits ``width``,
    else the narrow form, else the narrow form shrunk by rich."""
    for narrow in (False, True):
        table, needed = _fitted_table(*build(narrow), narrow=narrow)
        if needed <= width:
            return table
    return _fitted_table(*build(True), narrow=True, fixed=False)[0]


def runs_table(rows: list[dict], width: int):
    """The demo's table of runs, readable at ``width`` columns: the full table when it fits without
    breaking a word (about 145 columns), else a narrow form for 80 columns and pipes: the interval
    as its New York start day, the watermark as ``MM-DD HH:mmZ`` (UTC; the data set is all 2013),
    the balance for the input, late and quarantined counts, no seconds (the timing table has them).
    The interval, watermark and balance cells are never folded nor cut (no ``…``).

    :param rows: one dict per run: ``start``/``end`` (pendulum, the data interval), ``failed``
        (bool), ``batch_ids`` (list of int), ``input_rows``, ``quarantined``, ``windows``,
        ``late_groups`` (int), ``watermark_ms`` (epoch ms UTC, the watermark after the run, or
        None), ``late_flights``, ``balance`` (text cells, ``-`` when unknown), ``seconds`` (float).
    :param width: the console's width in columns.
    :return: a ``rich.table.Table``.
    """

    def build(narrow: bool):
        if narrow:
            title = f"{DAG_ID}: one restart of {JOB} per day"
            headings = ("NY day", "batches", "watermark (UTC)", "windows", "late groups*", "balanced‡")
            whole = (0, 2, 5)
        else:
            title = f"{DAG_ID}: one restart of the {JOB} query per data interval"
            headings = ("data interval (New York)", "batches", "input rows", "quarantined",
                        "watermark after run (UTC)", "windows emitted", "late groups*", "late flights§",
                        "balanced‡", "seconds")
            whole = (0, 4, 8)
        cells: list[list[str]] = []
        for row in rows:
            start, end = row["start"].to_date_string(), row["end"].to_date_string()
            batches = ", ".join(map(str, row["batch_ids"]))
            if narrow:
                balance = (row["balance"] if row["balance"] != "-" else
                           f"{row['input_rows']} = ? + {row['late_flights']} + {row['quarantined']}")
                cells.append([start, batches or "none", _compact_instant(row["watermark_ms"]), str(row["windows"]),
                              str(row["late_groups"]), balance])
            else:
                cells.append([f"{start} → {end}", batches or "none (no new input)", str(row["input_rows"]),
                              str(row["quarantined"]), watermark_text(row["watermark_ms"], "-"), str(row["windows"]),
                              str(row["late_groups"]), row["late_flights"], row["balance"], f"{row['seconds']:.0f}"])
            if row["failed"]:
                cells.append(["failed"] + [""] * (len(headings) - 1))
        return title, headings, cells, whole

    return _fit(build, width)


#: The timing table's columns after the interval: (heading, key of :func:`time_breakdown`'s result).
_TIMING = (("DAG run", "DAG run"), ("land", "land"), ("spark start°", "spark start"), ("batches", "micro-batches"),
           ("spark stop", "spark stop"), ("progress", "collect_progress"), ("audit", "audit_checkpoint"),
           ("gate", "windows_complete"), ("Airflow†", "Airflow"))


def timing_table(rows: list[dict], width: int):
    """Where each run's time went, in seconds, readable at ``width`` columns (narrow: the interval as
    its start day ``MM-DD``, two headings shortened).

    :param rows: one dict per run: ``start`` (pendulum) and the seconds under the keys of
        :data:`_TIMING` (``DAG run``, ``land``, ``spark start``, ..., ``Airflow``).
    """

    def build(narrow: bool):
        cells = [[row["start"].format("MM-DD") if narrow else row["start"].to_date_string(),
                  *(f"{row.get(key, 0.0):.1f}" for _, key in _TIMING)] for row in rows]
        headings = ("interval", *(h for h, _ in _TIMING))
        if narrow:  # "batch" and "prog." for "batches" and "progress"
            headings = ("day", *({"batches": "batch", "progress": "prog."}.get(h, h) for h, _ in _TIMING))
        return "Where each run's time went (seconds)", headings, cells, (0,)

    return _fit(build, width)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run flights_pipeline for consecutive days and report each run.")
    parser.add_argument("days", nargs="*", default=list(DEFAULT_DAYS), help="interval start days, YYYY-MM-DD")
    parser.add_argument("--keep", action="store_true", help="keep earlier landing/checkpoint/output (restart on them)")
    parser.add_argument("--launch", choices=LAUNCHES, default=os.environ.get("WATERMARK_OPS_DEMO_LAUNCH") or "auto",
                        help="submit (spark-submit per run), connect (a Spark Connect server), auto (the faster here)")
    parser.add_argument("--timings-json", metavar="FILE",
                        help="also write the launch, the server start and each run's time breakdown (seconds) here")
    args = parser.parse_args(argv)

    from rich.console import Console

    console = Console()  # the terminal's width; 80 columns (or $COLUMNS) when piped
    home = runtime_home()
    home.mkdir(parents=True, exist_ok=True)
    locations = job_locations(JOB)
    deleted = [] if args.keep else fresh_start(locations)
    env = airflow_environment()
    log_file = home / "demo.log"
    console.print(f"Runtime folder: {home}   (Airflow and Spark output: {log_file})")
    started = time.monotonic()
    if _airflow(["db", "migrate"], env, log_file) != 0:
        console.print(f"[red]airflow db migrate failed, see {log_file}")
        return 1
    if deleted:
        code, summary = forget_remembered(deleted, env, log_file)
        if code != 0:
            console.print(f"[red]could not forget the deleted checkpoints' memories, see {log_file}")
            return 1
        console.print(f"Fresh start: {summary}")
    launch = args.launch
    if launch == "auto":
        figures, source = _measured_figures()
        launch, why = choose_launch(len(args.days), figures)
        console.print(f"Spark launch: [bold]{launch}[/] (the faster end to end here; {why}; {source})")
    else:
        console.print(f"Spark launch: [bold]{launch}[/] (asked for)")
    server, server_start_s = None, None
    if launch == "connect":
        from watermark_ops.spark.connect import start_connect_server

        t0 = time.monotonic()
        # The server's state store maintenance task runs for as long as the server lives; its interval
        # comes from the first query's session conf (the DAG's conf), set here too for the server's own.
        server = start_connect_server(home / "spark-connect.log",
                                      conf={"spark.sql.shuffle.partitions": "4", **STATE_MAINTENANCE_CONF})
        server_start_s = time.monotonic() - t0
        console.print(f"Spark Connect server {server.url} (pid {server.pid}) started in {server_start_s:.1f} s; "
                      f"stopped at the end")
        env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"] = json.dumps(
            {"conn_type": "spark_connect", "host": server.host, "port": server.port})
    env["WATERMARK_OPS_SPARK_LAUNCH"] = launch
    try:
        return _run_days(args, console, env, locations, log_file, started, launch, server_start_s)
    finally:
        if server is not None:
            server.stop()


def _run_days(args, console, env: dict[str, str], locations: dict[str, str], log_file: Path, started: float,
              launch: str, server_start_s: float | None) -> int:
    """Run the DAG for each day and print the tables (the body of :func:`main`)."""
    rows: list[dict] = []
    seen_tags: set[str] = set()
    timings: list[dict] = []
    for day in args.days:
        start = pendulum.parse(day, tz="America/New_York")
        end = start.add(days=1)
        console.print(f"Running {DAG_ID} for [{start.to_date_string()}, {end.to_date_string()}) ...")
        t0 = time.monotonic()
        code = _airflow(["dags", "test", DAG_ID, end.isoformat()], env, log_file)
        seconds = time.monotonic() - t0
        windows = read_progress_log(locations["progress_log"])
        quarantine = read_progress_log(progress_log_path(locations["checkpoint"] + "_quarantine"))
        new_tags = {r["run_tag"] for r in windows.records} - seen_tags
        seen_tags |= new_tags
        run = summarize_run([r for r in windows.records if r["run_tag"] in new_tags])
        bad = summarize_run([r for r in quarantine.records if r["run_tag"] in new_tags])
        ledger = _ledger(locations, next(iter(new_tags), None))
        rows.append({
            "start": start, "end": end, "failed": code != 0, "batch_ids": run["batch_ids"],
            "input_rows": run["input_rows"], "quarantined": bad["quarantined_rows"],
            "watermark_ms": run["last_watermark_ms"], "windows": run["windows_emitted"],
            "late_groups": run["late_partial_aggregates_spark"], "late_flights": ledger.get("rows_late", "-"),
            "balance": ledger.get("balance", "-"), "seconds": seconds,
        })
        spent = time_breakdown(env, next(iter(new_tags), ""), [r for r in windows.records if r["run_tag"] in new_tags])
        if spent:
            tasks = sum(spent.get(t, 0.0) for t in ("land", JOB, "collect_progress", "audit_checkpoint", "windows_complete"))
            timings.append({"start": start, **spent, "DAG run": seconds, "Airflow": seconds - tasks})
        if code != 0:
            console.print(runs_table(rows, console.width))
            console.print(f"[red]airflow dags test failed (exit {code}); see {log_file}")
            return 1
    console.print(runs_table(rows, console.width))
    if args.timings_json:
        Path(args.timings_json).write_text(json.dumps({
            "launch": launch, "server_start_s": server_start_s,
            "runs": [{**t, "start": t["start"].to_date_string()} for t in timings]}, indent=2))
    if timings:
        console.print(timing_table(timings, console.width))
        first = ("the Connect client's start and session, until the first micro-batch of flight_windows began"
                 if launch == "connect" else
                 "spark-submit, JVM and session start, until the first micro-batch of flight_windows began")
        console.print(f"° {launch} launch: {first}; "
                      "batches: its micro-batches; progress, audit, gate: the collect_progress, audit_checkpoint "
                      "and windows_complete tasks; † between and around tasks: `airflow dags test` start-up, "
                      "DAG parsing, scheduling.")
    console.print(
        "* Spark's numRowsDroppedByWatermark: counted after partial aggregation, i.e. late "
        "(window, airport, partition) groups rather than single flights.\n"
        "§ late flights: the late-row ledger (watermark-ops late), every flight the run's batches dropped as "
        "late (in the 80-column table: the middle term of balanced‡).\n"
        "‡ input rows = aggregated + late + quarantined.\n"
        f"Checkpoint: {locations['checkpoint']}   windows: {locations['output']}   "
        f"total {time.monotonic() - started:.0f} s\n"
        f"Each run was audited (task audit_checkpoint); audit it yourself with\n"
        f"  {Path(sys.executable).parent / 'watermark-ops'} audit {locations['checkpoint']}"
    )
    console.print(state_summary(locations["checkpoint"]))
    return 0


def state_summary(checkpoint: str) -> str:
    """What the checkpoint's state looks like after the runs, in a few lines: per stateful operator
    the rows held, whether the watermark bounds them, and the chain a restart replays (short when
    the maintenance task compacted it: ``settings.STATE_MAINTENANCE_CONF``), then the findings."""
    from watermark_ops.core.state.reader import read_state
    from watermark_ops.core.state.rules import state_findings

    state = read_state(checkpoint)
    lines = []
    for op in state.operators:
        rows = op.rows[-1] if op.rows else None
        bound = {True: "bounded by the watermark", False: "NOT bounded by any watermark", None: "bound unknown"}
        lines.append(f"State: operator {op.operator_id} {op.name}: {rows} rows after batch "
                     f"{op.batches[-1].batch_id if op.batches else '-'}, {bound[op.bounded_by_watermark]}; a restart "
                     f"replays {op.chain_length} delta files per partition (newest snapshot: "
                     f"{'version ' + str(op.snapshot_version) if op.snapshot_version else 'none'})")
    findings = state_findings(state)
    lines += [f"  {f.severity} {f.rule}: {f.message}" for f in findings] or ["  no state finding"]
    lines.append(f"  {Path(sys.executable).parent / 'watermark-ops'} state {checkpoint}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
