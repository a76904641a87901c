"""Benchmark: a sensor's poke on object storage at 10,000 batches against 10, from the remembered view.

Writes two checkpoints in the exact format Spark writes (``audit_benchmark.write_checkpoint``: the
offset and commit logs, ``metadata``, the progress log beside it; the local ``.crc`` files are not
uploaded, as S3 has none) of ``--batches`` and of 10 batches, copies them to moto's S3 server
(:func:`watermark_ops.examples.s3server.start_s3_server`, a child process on 127.0.0.1 stopped by its
PID at the end), and reads them through :class:`~watermark_ops.examples.s3server.DelayProxy` with
``--delay`` seconds per request (default 0.02: a region's round trip), which counts the requests
by kind (LIST, GET, HEAD).

The poke is the sensor's own: ``WatermarkStallSensor._check`` with ``conn_id`` set (an ``aws``
connection to the proxy, from the environment; the filesystem is Airflow's,
:func:`watermark_ops.airflow.storage.checkpoint_filesystem`), exactly what ``poke``, a reschedule
and the trigger's poll call. Each sensor pokes once to learn the view (that first poke lists the
logs), then ``--repeat`` times on the unchanged checkpoint; printed per size: the first poke's
requests and time, and the median later poke's requests and time. Then the ratios the issue sets
goals for: time at ``--batches`` / time at 10 (goal <= 1.2) and the request counts (goal: equal).

A script, not a test: timings vary with the machine and its load; compare figures of one run.

Usage: ``.venv/bin/python benchmarks/poke_benchmark.py [--batches 10000] [--delay 0.02] [--repeat 7]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "plugins"))
sys.path.insert(0, str(HERE))

from audit_benchmark import write_checkpoint  # noqa: E402

BUCKET = "poke-benchmark"


def upload(fs, local: Path, url: str) -> int:
    """Copy a checkpoint folder (no ``.crc`` side files) and its progress log to ``url``; returns the count."""
    files = {f"{url}/{p.relative_to(local).as_posix()}": p.read_bytes()
             for p in sorted(local.rglob("*")) if p.is_file() and not p.name.endswith(".crc")}
    files[f"{url}.progress.jsonl"] = Path(f"{local}.progress.jsonl").read_bytes()
    names = list(files)
    for start in range(0, len(names), 2000):  # bounded batches: moto is one process
        fs.pipe({name: files[name] for name in names[start:start + 2000]})
    fs.invalidate_cache()
    return len(files)


def poke_figures(url: str, conn_id: str, proxy, repeat: int) -> dict:
    """The first poke (no view) and ``repeat`` later pokes of one sensor: requests and seconds."""
    from watermark_ops.airflow.sensors import WatermarkStallSensor

    sensor = WatermarkStallSensor(task_id="poke", checkpoint=url, conn_id=conn_id, max_idle="P3650D")

    def poke() -> tuple[dict, float]:
        proxy.reset()
        started = time.perf_counter()
        result = sensor._check(None)
        seconds = time.perf_counter() - started
        assert result.outcome in ("done", "wait"), result.message
        return dict(sorted(proxy.counts.items())), seconds

    first, first_s = poke()
    later = [poke() for _ in range(repeat)]
    counts = [c for c, _ in later]
    return {"first": first, "first_s": first_s, "later": counts[-1], "same_each_time": all(c == counts[0] for c in counts),
            "later_s": statistics.median(s for _, s in later)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds the proxy waits per request")
    parser.add_argument("--repeat", type=int, default=7, help="pokes measured per size after the first")
    args = parser.parse_args(argv)

    from watermark_ops.examples.s3server import DelayProxy, aws_connection, start_s3_server

    folder = Path(tempfile.mkdtemp(prefix="poke-benchmark-"))
    os.environ.setdefault("AIRFLOW_HOME", str(folder / "airflow"))
    server = start_s3_server(log=folder / "moto.log")
    proxy = None
    try:
        fs = server.filesystem()
        fs.call_s3("create_bucket", Bucket=BUCKET)
        urls = {}
        for batches in (args.batches, 10):
            local = folder / f"checkpoint-{batches}"
            write_checkpoint(local, batches)
            urls[batches] = f"s3://{BUCKET}/checkpoints/job-{batches}"
            started = time.perf_counter()
            count = upload(fs, local, urls[batches])
            print(f"{urls[batches]}: {batches} batches, {count} objects uploaded in {time.perf_counter() - started:.0f} s")
        proxy = DelayProxy(server.endpoint_url, delay_s=args.delay)
        os.environ["AIRFLOW_CONN_POKE_BENCHMARK"] = aws_connection(proxy.endpoint_url)
        figures = {batches: poke_figures(url, "poke_benchmark", proxy, args.repeat) for batches, url in urls.items()}
    finally:
        if proxy is not None:
            proxy.close()
        server.stop()
        import shutil

        shutil.rmtree(folder, ignore_errors=True)

    print(f"a WatermarkStallSensor poke through conn_id, S3 server behind a {args.delay * 1000:.0f} ms proxy "
          f"(requests by kind; seconds; later: median of {args.repeat}):")
    for batches, f in figures.items():
        print(f"  {batches:>6} batches  first poke (lists, no view): {f['first']} {f['first_s']:.3f} s")
        print(f"  {batches:>6} batches  poke from the view:          {f['later']} {f['later_s']:.3f} s"
              f"{'' if f['same_each_time'] else ' (counts varied between pokes)'}")
    big, small = figures[args.batches], figures[10]
    ratio = big["later_s"] / small["later_s"]
    print(f"poke from the view, {args.batches} vs 10 batches: time ratio {ratio:.2f} (goal <= 1.2), "
          f"requests {sum(big['later'].values())} vs {sum(small['later'].values())} "
          f"({'the same' if big['later'] == small['later'] else 'DIFFERENT'}; goal: the same)")
    print(f"first poke (listing), {args.batches} vs 10 batches: time ratio {big['first_s'] / small['first_s']:.2f}, "
          f"requests {sum(big['first'].values())} vs {sum(small['first'].values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
