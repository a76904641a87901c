"""Benchmark: the watermark overview at 1,000 checkpoints, locally through a real api-server and on
the S3 server behind a delaying proxy.

Local (a real ``airflow api-server`` on 127.0.0.1 with a SQLite DB and SimpleAuthManager, the
plugin as installed, ``[watermark_ops] overview_max_age = 0``: every view looks for changes):

* the first view of the overview JSON (every checkpoint read whole), a repeat view with no new
  batch (``metadata`` and one probe per checkpoint), the HTML page, a view after one new batch in
  10 checkpoints;
* ``--viewers`` concurrent viewers (each ``--rounds`` views in a row): latency p50 / p95, refreshes
  shared, and meanwhile the api-server's own health check (``/api/v2/monitor/health``, every
  50 ms) against its idle latency.

S3 (moto's server behind :class:`watermark_ops.examples.s3server.DelayProxy`, ``--delay`` per
request; s3fs through the proxy; :class:`watermark_ops.core.overview_cache.SharedOverview` called
with the filesystem directly, the face's object-store roots being another branch's work):

* the first evaluation and a repeat with no new batch, requests made by kind, against the floor:
  the same objects fetched with one concurrent ``fs.cat`` on the same server;
* ``--viewers`` concurrent viewers, p50 / p95.

Prints figures and ratios, asserts nothing. Usage::

    .venv/bin/python benchmarks/overview_benchmark.py [--checkpoints 1000] [--batches 50]
        [--s3-batches 5] [--delay 0.02] [--viewers 8] [--rounds 3] [--skip-local] [--skip-s3]
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
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_benchmark import PLUGINS, write_checkpoint  # noqa: E402

sys.path.insert(0, str(PLUGINS))

from watermark_ops.core.overview_cache import Job, SharedOverview  # noqa: E402
from watermark_ops.core.thresholds import Thresholds  # noqa: E402

THRESHOLDS = {"max_lag": None, "max_idle": None, "max_skew": None}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _write(root: Path, count: int, batches: int) -> list[Path]:
    started = time.monotonic()
    out = []
    for i in range(count):
        folder = root / f"cp{i:04d}"
        write_checkpoint(folder, batches)
        out.append(folder)
    print(f"  wrote {count} checkpoints of {batches} batches in {time.monotonic() - started:.1f} s")
    return out


def _append_batch(folder: Path) -> None:
    """One more committed batch (the same shape as ``write_checkpoint``'s)."""
    ids = sorted(int(p.name) for p in (folder / "offsets").iterdir() if p.name.isdigit())
    head = ids[-1]
    text = (folder / "offsets" / str(head)).read_text().splitlines()
    meta = json.loads(text[1])
    commit = json.loads((folder / "commits" / str(head)).read_text().splitlines()[1])
    meta["batchWatermarkMs"] = max(meta["batchWatermarkMs"], commit["nextBatchWatermarkMs"])
    meta["batchTimestampMs"] += 1_500
    (folder / "offsets" / str(head + 1)).write_text(f"v1\n{json.dumps(meta, separators=(',', ':'))}\n"
                                                    f"{{\"logOffset\":{head // 2 + 1}}}")
    (folder / "commits" / str(head + 1)).write_text(f"v1\n{{\"nextBatchWatermarkMs\":{meta['batchWatermarkMs']}}}")


# --------------------------------------------------------------------------------------------
# Local, through a real api-server


def _get(url: str, token: str, timeout: float = 600) -> tuple[float, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        body = reply.read()
    return time.monotonic() - started, body


def _health(base: str) -> float:
    started = time.monotonic()
    with urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=30) as reply:
        reply.read()
    return time.monotonic() - started


def local(args: argparse.Namespace, folder: Path) -> None:
    from watermark_ops.examples.browser import api_server, auth_environment

    print(f"Local: {args.checkpoints} checkpoints x {args.batches} batches, through a real api-server")
    root = folder / "checkpoints"
    checkpoints = _write(root, args.checkpoints, args.batches)
    config = folder / "monitor.json"
    config.write_text(json.dumps({"defaults": THRESHOLDS,
                                  "checkpoints": [{"checkpoint": str(c)} for c in checkpoints]}))
    home = folder / "airflow"
    home.mkdir()
    env = {**os.environ, **auth_environment(folder / "auth"),
           "AIRFLOW_HOME": str(home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
           "AIRFLOW__CORE__DAGS_FOLDER": str(folder / "dags"), "AIRFLOW__API__EXPOSE_CONFIG": "False",
           "AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS": json.dumps({"bench": str(root)}),
           "AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG": str(config), "AIRFLOW__WATERMARK_OPS__OVERVIEW_MAX_AGE": "0",
           "PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")])}
    (folder / "dags").mkdir()
    airflow = str(Path(sys.executable).parent / "airflow")
    subprocess.run([airflow, "db", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with api_server(env, folder / "api-server.log") as base:
        token = _token(base)
        url = f"{base}/watermark-ops/api/checkpoints"
        idle = [_health(base) for _ in range(20)]
        first, body = _get(url, token)
        document = json.loads(body)
        repeats = [_get(url, token)[0] for _ in range(3)]
        html = _get(f"{base}/watermark-ops/", token)[0]
        for c in checkpoints[:10]:
            _append_batch(c)
        grown = _get(url, token)[0]
        print(f"  overview_max_age 0 (every view looks for changes):")
        print(f"  overview JSON, first view:           {first:8.2f} s  ({document['total']} rows, "
              f"{document['problems']} problems, page of {len(document['checkpoints'])})")
        print(f"  repeat view, no new batch (median):  {statistics.median(repeats):8.2f} s  "
              f"(first / repeat {first / statistics.median(repeats):.0f}x)")
        print(f"  overview page (HTML), repeat:        {html:8.2f} s")
        print(f"  after one new batch in 10 of them:   {grown:8.2f} s")
        _concurrent(args, base, url, token, idle)
    env.pop("AIRFLOW__WATERMARK_OPS__OVERVIEW_MAX_AGE")
    with api_server(env, folder / "api-server-2.log") as base:
        token = _token(base)
        url = f"{base}/watermark-ops/api/checkpoints"
        idle = [_health(base) for _ in range(20)]
        first = _get(url, token)[0]
        print(f"  overview_max_age default (10 s): first view {first:.2f} s, then")
        _concurrent(args, base, url, token, idle)


def _token(base: str) -> str:
    request = urllib.request.Request(f"{base}/auth/token", data=json.dumps(
        {"username": "admin", "password": "admin"}).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())["access_token"]


def _concurrent(args: argparse.Namespace, base: str, url: str, token: str, idle: list[float]) -> None:
    """``--viewers`` threads, ``--rounds`` views each, and the health check every 50 ms meanwhile."""
    latencies: list[float] = []
    health: list[float] = []
    done = threading.Event()
    lock = threading.Lock()

    def viewer() -> None:
        for _ in range(args.rounds):
            seconds = _get(url, token)[0]
            with lock:
                latencies.append(seconds)

    def checker() -> None:
        while not done.is_set():
            health.append(_health(base))
            time.sleep(0.05)

    probe = threading.Thread(target=checker)
    probe.start()
    started = time.monotonic()
    threads = [threading.Thread(target=viewer) for _ in range(args.viewers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    done.set()
    probe.join()
    print(f"  {args.viewers} concurrent viewers x {args.rounds} views: p50 {_percentile(latencies, .5):.2f} s, "
          f"p95 {_percentile(latencies, .95):.2f} s, {len(latencies) / wall:.1f} views/s")
    print(f"  health check meanwhile: p50 {1000 * _percentile(health, .5):.0f} ms, p95 "
          f"{1000 * _percentile(health, .95):.0f} ms, max {1000 * max(health):.0f} ms "
          f"(idle: p50 {1000 * _percentile(idle, .5):.0f} ms, max {1000 * max(idle):.0f} ms; {len(health)} checks)")


# --------------------------------------------------------------------------------------------
# S3 server behind a delaying proxy


def s3(args: argparse.Namespace, folder: Path) -> None:
    import s3fs

    from watermark_ops.examples.s3server import DelayProxy, start_s3_server, upload_tree

    print(f"S3: {args.checkpoints} checkpoints x {args.s3_batches} batches on moto's server, "
          f"{1000 * args.delay:.0f} ms per request (SharedOverview with the filesystem)")
    root = folder / "s3-checkpoints"
    checkpoints = _write(root, args.checkpoints, args.s3_batches)
    for crc in root.rglob(".*.crc"):  # the local filesystem's .crc files are not what object storage holds
        crc.unlink()
    server = start_s3_server()
    proxy = None
    try:
        started = time.monotonic()
        uploaded = upload_tree(server.filesystem(), root, "s3://bench/cps")
        print(f"  uploaded {uploaded} objects in {time.monotonic() - started:.1f} s")
        proxy = DelayProxy(server.endpoint_url, args.delay)
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **proxy.storage_options(),
                               config_kwargs={"max_pool_connections": 64})
        jobs = [Job(key=c.name, location=f"s3://bench/cps/{c.name}", thresholds=Thresholds(**THRESHOLDS),
                    filesystem=fs) for c in checkpoints]
        shared = SharedOverview(max_age=0)

        def timed(action):
            proxy.reset()
            t0 = time.monotonic()
            result = action()
            return time.monotonic() - t0, dict(proxy.counts), result

        first, first_counts, evaluation = timed(lambda: shared.evaluate(jobs))
        bad = sum(1 for row in evaluation.rows.values() if row["error"])
        repeat, repeat_counts, _ = timed(lambda: shared.evaluate(jobs))
        head = args.s3_batches - 1
        gets = [p for c in checkpoints for p in (f"bench/cps/{c.name}/metadata", f"bench/cps/{c.name}/offsets/{head + 1}")]
        heads = [f"bench/cps/{c.name}/offsets/{head}" for c in checkpoints]
        every = [f"bench/cps/{c.relative_to(root).as_posix()}" for c in root.rglob("*") if c.is_file()]
        floor_repeat, floor_repeat_counts, _ = timed(lambda: _floor(fs, gets, heads))
        floor_first, floor_first_counts, _ = timed(lambda: _floor(fs, every, []))
        print(f"  first view:   {first:7.2f} s, requests {first_counts} ({sum(first_counts.values())}); "
              f"{bad} rows with an error")
        print(f"    floor: the {len(every)} objects (checkpoints and progress logs) fetched at once "
              f"{floor_first:.2f} s ({sum(floor_first_counts.values())} requests): first / floor {first / floor_first:.2f}x")
        print(f"  repeat view, no new batch: {repeat:6.2f} s, requests {repeat_counts} "
              f"({sum(repeat_counts.values())}: {sum(repeat_counts.values()) / len(jobs):.1f} per checkpoint, "
              f"no batch file read)")
        print(f"    floor: the same {len(gets)} GETs and {len(heads)} HEADs at once {floor_repeat:.2f} s "
              f"({sum(floor_repeat_counts.values())} requests): repeat / floor {repeat / floor_repeat:.2f}x")
        for max_age in (0, 10):
            shared.max_age = max_age
            shared.evaluate(jobs)  # a fresh start for this setting
            latencies: list[float] = []
            lock = threading.Lock()

            def viewer() -> None:
                for _ in range(args.rounds):
                    t0 = time.monotonic()
                    shared.evaluate(jobs)
                    with lock:
                        latencies.append(time.monotonic() - t0)

            before = shared.refreshes
            threads = [threading.Thread(target=viewer) for _ in range(args.viewers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            print(f"  {args.viewers} concurrent viewers x {args.rounds} views, overview_max_age {max_age}: p50 "
                  f"{_percentile(latencies, .5):.3f} s, p95 {_percentile(latencies, .95):.3f} s, "
                  f"{shared.refreshes - before} refreshes for {len(latencies)} views")
    finally:
        if proxy is not None:
            proxy.close()
        server.stop()


def _floor(fs, gets: list[str], heads: list[str]) -> None:
    """GET every object of ``gets`` (one plain GET each) and HEAD every one of ``heads``, all at
    once on s3fs's event loop: the least the same requests can cost on this server."""
    import asyncio

    from fsspec.asyn import sync

    fs.invalidate_cache()

    async def fetch(path: str) -> None:
        try:
            await fs._cat_file(path, max_concurrency=1)
        except FileNotFoundError:
            pass

    async def head(path: str) -> None:
        try:
            await fs._call_s3("head_object", Bucket=path.split("/", 1)[0], Key=path.split("/", 1)[1])
        except FileNotFoundError:
            pass

    async def everything() -> None:
        await asyncio.gather(*[fetch(p) for p in gets], *[head(p) for p in heads])

    sync(fs.loop, everything)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoints", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--s3-batches", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.02)
    parser.add_argument("--viewers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="wmo-overview-bench-"))
    try:
        if not args.skip_local:
            local(args, folder)
        if not args.skip_s3:
            s3(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
