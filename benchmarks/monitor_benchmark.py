"""Benchmark: one ``watermark_monitor`` cycle at 1,000 watched checkpoints, local and on an S3 API.

    .venv/bin/python benchmarks/monitor_benchmark.py [--checkpoints 1000] [--stalled 10]
        [--delay 0.02] [--concurrency 16] [--no-s3] [--rebuild-seed]

The checkpoints are copies of two real Spark-written checkpoints (built once with real PySpark,
``local[2]``, by the test scenarios of ``tests/watermark_ops/stall_fixtures.py`` and kept under
``$WATERMARK_OPS_HOME/bench/monitor_seed``): a healthy one (``inputs_take_turns``, 7 restarts of a
two-input query; idle, not an alarm, with ``max_idle`` 10 years) and a stalled one
(``one_input_without_data``: input ``b`` never gets data under ``min``). Each copy holds what the
monitor reads (``metadata``, ``offsets/``, ``commits/``, no ``.crc`` files, as S3A writes none)
and its progress log beside it. ``--stalled`` copies are the stalled one, one healthy copy has its
head offsets file cut in half (unreadable): ``--stalled + 1`` alarms per cycle.

Each cycle is the real DAG (``dags/watermark_monitor.py``) run by ``dag.test()`` in a fresh
worker process (a subprocess with its own Airflow home and SQLite DB; the webhook is a local HTTP
receiver), twice per setting: ``cold`` (no memory of a previous cycle: every window read in full)
and ``warm`` (the remembered views the cold cycle left in the asset state store of the same
metadata DB, :mod:`watermark_ops.core.view`; no checkpoint changed in between). Printed per cycle:

* task instances of the run (counted in the metadata DB; the goal is at most 2 + one per alarm);
* ``watch`` seconds: the one task that evaluates every checkpoint (its task instance's start to
  end; ``evaluations``: the concurrent evaluations alone, the summary's ``seconds``), and ``run``
  seconds: the whole ``dag.test()`` (the alarm tasks and their webhooks included);
* peak worker memory (``resource.getrusage(RUSAGE_SELF).ru_maxrss`` of the worker process, Airflow
  included) and its resident memory before the cycle;
* requests: on the S3 server, counted by kind by the delaying proxy
  (:class:`watermark_ops.examples.s3server.DelayProxy`, ``--delay`` seconds per request); locally,
  what the reads reported (the summary's ``requests``: listings, reads by name).

On the S3 server, the floor: moto's standalone server is one CPU-bound Python process, so the
same number of GETs of small objects through the same proxy with the same concurrency is timed
first; ``requests / that rate`` is the least time any reader needs for that cycle's requests on
this server (the ratio cycle / floor is printed). A script, not a test: compare figures of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "plugins"
BUCKET = "monitor-bench"
CONN_ID = "watermark_s3"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGINS), str(REPO / "spark_jobs"), str(REPO),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


# --------------------------------------------------------------------------------------------
# The seed: two real Spark-written checkpoints (a child process runs Spark, then exits)


def _snapshot(checkpoint: str, dest: Path) -> None:
    """What the monitor reads: ``metadata``, ``offsets/N``, ``commits/N`` (no ``.crc``), the progress log."""
    source = Path(checkpoint)
    dest.mkdir(parents=True)
    shutil.copy2(source / "metadata", dest / "metadata")
    for log in ("offsets", "commits"):
        (dest / log).mkdir()
        for path in (source / log).iterdir():
            if path.name.isdigit():
                shutil.copy2(path, dest / log / path.name)
    progress = Path(str(source) + ".progress.jsonl")
    if progress.exists():
        shutil.copy2(progress, str(dest) + ".progress.jsonl")


def build_seed(folder: Path) -> None:
    """(In a child process) run the two real scenarios and keep their checkpoints in ``folder``."""
    sys.path[:0] = [str(REPO), str(PLUGINS), str(REPO / "spark_jobs")]
    import logging

    from tests.watermark_ops import stall_fixtures as sf
    from watermark_ops.spark import build_session

    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = build_session("watermark-ops-monitor-bench", master="local[2]", shuffle_partitions=2)
    try:
        _snapshot(sf.inputs_take_turns(spark).checkpoints["min"], folder / "healthy")
        _snapshot(sf.one_input_without_data(spark).checkpoints["min"], folder / "stalled")
    finally:
        spark.stop()


def seed(rebuild: bool) -> Path:
    home = Path(os.environ.get("WATERMARK_OPS_HOME") or REPO / ".runtime")
    folder = home / "bench" / "monitor_seed"
    if rebuild and folder.exists():
        shutil.rmtree(folder)
    if not (folder / "healthy").exists():
        staging = folder.with_name("monitor_seed.partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        started = time.monotonic()
        with open(folder.with_name("monitor_seed.log"), "wb") as log:
            subprocess.run([sys.executable, __file__, "--build-seed", str(staging)], env=_env(), check=True,
                           stdout=log, stderr=subprocess.STDOUT)
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
        print(f"seed: two real checkpoints built with PySpark in {time.monotonic() - started:.0f} s ({folder})")
    return folder


def copies(seed_folder: Path, dest: Path, n: int, stalled: int) -> tuple[list[Path], list[int]]:
    """``n`` copies (``q_0000`` ...), the stalled ones spread evenly, one healthy copy unreadable."""
    stalled_at = {round(i * n / stalled) + n // (2 * stalled) for i in range(stalled)} if stalled else set()
    unreadable = next(i for i in range(n // 3, n) if i not in stalled_at)
    out = []
    for i in range(n):
        target = dest / f"q_{i:04d}"
        source = seed_folder / ("stalled" if i in stalled_at else "healthy")
        shutil.copytree(source, target)
        shutil.copy2(str(source) + ".progress.jsonl", str(target) + ".progress.jsonl")
        out.append(target)
    offsets = out[unreadable] / "offsets"
    head = offsets / str(max(int(p.name) for p in offsets.iterdir()))
    text = head.read_text()
    head.write_text(text[: len(text) // 2])
    return out, sorted(stalled_at | {unreadable})


def monitor_config(locations: list[str], conn_id: str | None) -> str:
    extra = {"conn_id": conn_id} if conn_id else {}
    return json.dumps({"defaults": {"max_lag": "PT6H", "max_idle": "P3650D"},
                       "checkpoints": [{"checkpoint": loc, **extra} for loc in locations]})


# --------------------------------------------------------------------------------------------
# One cycle in a fresh worker process


def cycle_child(home: str, init_db: bool, dag_file: Path | None = None) -> None:
    """(In the worker process) one ``dag.test()`` of the monitor; prints one JSON line of figures."""
    import resource
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[dict] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            received.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK"] = json.dumps(
        {"conn_type": "http", "host": "127.0.0.1", "port": server.server_address[1], "schema": "http"})

    import logging

    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    if init_db:
        from airflow.utils.db import resetdb

        resetdb()
    dag = DagBag(dag_folder=str(dag_file or REPO / "dags" / "watermark_monitor.py")).dags["watermark_monitor"]
    logging.getLogger("airflow").setLevel(logging.WARNING)
    rss_before = _rss_mb()
    started = time.monotonic()
    run = dag.test()
    run_seconds = time.monotonic() - started
    with create_session() as session:
        rows = session.scalar(select(func.count()).select_from(TaskInstance).where(
            TaskInstance.dag_id == dag.dag_id, TaskInstance.run_id == run.run_id))
        tis = run.get_task_instances(session=session)
        watch = [ti for ti in tis if ti.task_id == "watch" and ti.start_date]
        watch_seconds = (max(ti.end_date for ti in watch) - min(ti.start_date for ti in watch)).total_seconds()
        states = sorted(str(ti.state) for ti in tis)
        from airflow.models.xcom import XComModel

        summary = next((XComModel.deserialize_value(x) for x in session.scalars(
            XComModel.get_many(run_id=run.run_id, dag_ids=dag.dag_id, task_ids="watch", key="summary"))),
            {"checkpoints": sum(1 for ti in tis if ti.task_id == "watch"), "counts": {},
             "alarm_count": sum(1 for ti in tis if ti.task_id == "watch" and str(ti.state) == "failed"),
             "seconds": float("nan")})
    server.shutdown()
    print("RESULT " + json.dumps({
        "task_instances": rows, "states": states, "run_seconds": run_seconds, "watch_seconds": watch_seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss_before_mb": rss_before,
        "summary": {k: summary[k] for k in ("checkpoints", "counts", "alarm_count", "remembered", "requests",
                                            "seconds") if k in summary},
        "alerts": len(received),
        "alarm_messages": sorted(str(a.get("message"))[:160] for a in received),
    }))


#: The design before (issue 21): one mapped ``WatermarkStallSensor`` task instance per checkpoint.
SENSOR_PER_CHECKPOINT_DAG = '''
import pendulum
from airflow.sdk import dag, get_current_context, task
from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY, monitor_checkpoints
from watermark_ops.airflow.sensors import WatermarkStallSensor


@dag(dag_id="watermark_monitor", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     max_active_runs=1, default_args={"retries": 0})
def watermark_monitor():
    @task(inlets=[CHECKPOINT_REGISTRY])
    def checkpoints() -> list[dict]:
        return monitor_checkpoints(get_current_context())

    WatermarkStallSensor.partial(task_id="watch", timeout=0, mode="reschedule", poke_interval=60,
                                 map_index_template="{{ task.checkpoint }}",
                                 inlets=[CHECKPOINT_REGISTRY]).expand_kwargs(checkpoints())


watermark_monitor()
'''


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_cycle(home: Path, config: Path, init_db: bool, concurrency: int, dag_file: Path | None = None,
              **env: str) -> dict:
    child_env = _env(
        AIRFLOW_HOME=str(home),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home / 'airflow.db'}",
        AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG=str(config),
        AIRFLOW__WATERMARK_OPS__MONITOR_CONCURRENCY=str(concurrency),
        **env,
    )
    child_env.pop("AIRFLOW__WATERMARK_OPS__CHECKPOINTS", None)
    home.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, __file__, "--cycle", str(home)] + (["--init-db"] if init_db else [])
                         + (["--dag-file", str(dag_file)] if dag_file else []),
                         env=child_env, capture_output=True, text=True)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        sys.stderr.write(out.stdout[-5000:] + out.stderr[-5000:])
        raise SystemExit(f"the monitor cycle failed (exit {out.returncode})")
    return json.loads(line.removeprefix("RESULT "))


def show(label: str, r: dict, alarms: int, requests: dict | None = None, floor_rate: float | None = None) -> None:
    s = r["summary"]
    print(f"  {label:<5} task instances {r['task_instances']} (goal <= {2 + alarms}); "
          f"watch {r['watch_seconds']:.1f} s (evaluations {s['seconds']:.1f} s), run {r['run_seconds']:.1f} s; "
          f"peak worker memory {r['peak_rss_mb']:.0f} MB (before the cycle {r['rss_before_mb']:.0f} MB); "
          f"alarms {s['alarm_count']}, alerts posted {r['alerts']}; remembered {s.get('remembered', 0)}")
    print(f"        counts {s['counts']}")
    if s["alarm_count"] != alarms:
        print("        UNEXPECTED alarms: " + "\n          ".join(r.get("alarm_messages") or []))
    reported = s.get("requests") or {}
    if reported:
        print(f"        reads reported by the monitor: {reported} "
              f"({sum(reported.values()) / max(1, s['checkpoints']):.1f} per checkpoint)")
    if requests is not None:
        total = sum(requests.values())
        line = (f"        S3 requests {total} {dict(sorted(requests.items()))} "
                f"({total / max(1, s['checkpoints']):.1f} per checkpoint)")
        if floor_rate:
            floor = total / floor_rate
            line += (f"; floor at {floor_rate:.0f} req/s: {floor:.1f} s, watch / floor "
                     f"{r['watch_seconds'] / floor:.2f}")
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", type=int, default=1000)
    parser.add_argument("--stalled", type=int, default=10)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per request at the S3 proxy")
    parser.add_argument("--concurrency", type=int, default=16, help="checkpoints evaluated at once")
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--s3-access", choices=["conn", "env"], default="conn",
                        help="conn: each checkpoint through an Airflow aws connection (conn_id); env: through "
                             "the worker's AWS environment (AWS_ENDPOINT_URL, ...), no conn_id")
    parser.add_argument("--rebuild-seed", action="store_true")
    parser.add_argument("--build-seed", help=argparse.SUPPRESS)
    parser.add_argument("--cycle", help=argparse.SUPPRESS)
    parser.add_argument("--init-db", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dag-file", help=argparse.SUPPRESS)
    parser.add_argument("--sensors", type=int, default=100,
                        help="checkpoints for the design before (one sensor task instance each); 0: skip")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)
    if args.build_seed:
        build_seed(Path(args.build_seed))
        return 0
    if args.cycle:
        cycle_child(args.cycle, args.init_db, Path(args.dag_file) if args.dag_file else None)
        return 0

    seed_folder = seed(args.rebuild_seed)
    work = Path(tempfile.mkdtemp(prefix="wmo-monitor-bench-"))
    try:
        local, bad = copies(seed_folder, work / "checkpoints", args.checkpoints, args.stalled)
        alarms = len(bad)
        files = sum(1 for _ in (work / "checkpoints").rglob("*") if _.is_file())
        print(f"monitor cycle: {args.checkpoints} checkpoints ({args.stalled} stalled, 1 unreadable; "
              f"{files} files), {args.concurrency} evaluated at once, in one dag.test() worker process")

        config = work / "local.json"
        config.write_text(monitor_config([str(p) for p in local], None))
        print("local folders:")
        for label, init in (("cold", True), ("warm", False)):
            show(label, run_cycle(work / "home-local", config, init, args.concurrency), alarms)

        if args.sensors:
            before(args, work, local)
        if not args.no_s3:
            s3(args, work, local, alarms)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def before(args: argparse.Namespace, work: Path, local: list[Path]) -> None:
    """The design before: one mapped sensor task instance per checkpoint, over the first ``--sensors``."""
    dags = work / "dags-before"
    dags.mkdir()
    (dags / "watermark_monitor.py").write_text(SENSOR_PER_CHECKPOINT_DAG)
    config = work / "before.json"
    config.write_text(monitor_config([str(p) for p in local[: args.sensors]], None))
    r = run_cycle(work / "home-before", config, True, args.concurrency, dag_file=dags / "watermark_monitor.py")
    per = r["run_seconds"] / args.sensors
    print(f"before (one WatermarkStallSensor task instance per checkpoint), {args.sensors} local checkpoints:")
    print(f"  task instances {r['task_instances']}; run {r['run_seconds']:.1f} s ({per:.2f} s per checkpoint, "
          f"about {per * args.checkpoints:.0f} s at {args.checkpoints}); peak worker memory {r['peak_rss_mb']:.0f} MB")


def s3(args: argparse.Namespace, work: Path, local: list[Path], alarms: int) -> None:
    sys.path.insert(0, str(PLUGINS))
    from watermark_ops.examples.s3server import DelayProxy, aws_connection, start_s3_server, upload_tree

    server = start_s3_server(log=work / "moto.log")
    proxy = None
    try:
        fs = server.filesystem()
        started = time.monotonic()
        uploaded = upload_tree(fs, work / "checkpoints", f"s3://{BUCKET}")
        print(f"S3 server (moto, {server.endpoint_url}), behind a proxy adding {args.delay * 1000:.0f} ms per "
              f"request: {uploaded} objects uploaded in {time.monotonic() - started:.0f} s")
        proxy = DelayProxy(server.endpoint_url, args.delay)
        rate = floor_rate(proxy, fs, args.concurrency)
        print(f"  floor: {rate:.0f} GET/s through the proxy at the monitor's concurrency")
        config = work / "s3.json"
        by_conn = args.s3_access == "conn"
        config.write_text(monitor_config([f"s3://{BUCKET}/{p.name}" for p in local], CONN_ID if by_conn else None))
        if by_conn:
            env = {f"AIRFLOW_CONN_{CONN_ID.upper()}": aws_connection(proxy.endpoint_url)}
        else:
            env = {"AWS_ENDPOINT_URL": proxy.endpoint_url, "AWS_ACCESS_KEY_ID": "testing",
                   "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        print(f"  access: {'an Airflow aws connection per checkpoint (conn_id)' if by_conn else 'the AWS environment'}")
        for label, init in (("cold", True), ("warm", False)):
            proxy.reset()
            result = run_cycle(work / "home-s3", config, init, args.concurrency, **env)
            show(label, result, alarms, dict(proxy.counts), rate)
    finally:
        if proxy is not None:
            proxy.close()
        server.stop()


def floor_rate(proxy, fs, concurrency: int, n: int = 2000) -> float:
    """GETs per second of small objects through ``proxy`` with ``concurrency`` threads (s3fs ``cat``)."""
    import s3fs
    from concurrent.futures import ThreadPoolExecutor

    reader = s3fs.S3FileSystem(skip_instance_cache=True, **proxy.storage_options(),
                               config_kwargs={"max_pool_connections": max(32, concurrency * 2)})
    paths = [p for p in fs.find(f"{BUCKET}/") if "/offsets/" in p][:n]
    paths = (paths * (n // max(1, len(paths)) + 1))[:n]
    reader.cat_file(paths[0])  # connect
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=concurrency * 2) as pool:
        list(pool.map(reader.cat_file, paths))
    return n / (time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
