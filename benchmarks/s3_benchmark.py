"""Benchmark: checkpoints on object storage, against the floor of fetching the same objects.

Starts moto's standalone S3 server on 127.0.0.1 (:mod:`watermark_ops.examples.s3server`) behind a
:class:`~watermark_ops.examples.s3server.DelayProxy` that sleeps ``--delay`` (20 ms: a region's
round trip) per request and counts requests by kind, and uploads (directly to the server):

* a checkpoint of ``--batches`` (10,000) batches and one of 10, in the exact format Spark 4.2 writes
  (the writer of ``benchmarks/audit_benchmark.py``), each with its progress log beside it (S3A
  writes no ``.crc`` files: none uploaded);
* a ``--ledger-batches`` (100) batch checkpoint of a file source (``sources/0`` log compacted
  every 10 log offsets, as ``FileStreamSourceLog`` writes it), its progress log with the late
  rule of each batch, and its landed JSON-lines files (one per data batch).

Then measures through the proxy (one run each, after a warm-up of the connection pool; the pokes
are the median of ``--poke-repeat``, taking turns; the ledger, lateness and their floors the
median of ``--small-repeat`` rounds):

* **audit** of the big checkpoint (:func:`watermark_ops.core.audit.run_audit`, read + every rule)
  against the **floor**: ``fs.cat`` of the same objects (every ``offsets/N``, ``commits/N``,
  ``metadata`` and the progress log) with the same concurrency
  (:data:`~watermark_ops.core.checkpoint.MAX_CONCURRENT_READS` at once, botocore's pool as large);
  requests per audit by kind (LIST pages, GET, HEAD). Goal: audit / floor <= 1.2.
* **a status poke with a remembered tail** (:func:`watermark_ops.core.stall.evaluate_tail` with
  the tail of the previous poke, what the sensors keep) at ``--batches`` and at 10 batches: time
  and requests. Goal: time ratio <= 1.2, the same requests. For comparison, the poke without a
  memory (:func:`watermark_ops.core.stall.evaluate`: lists ``offsets/``).
* **the ledger** (:func:`watermark_ops.core.ledger.late_ledger`) and **lateness**
  (:func:`watermark_ops.core.lateness.lateness_report` with the landing folder) of the file-source
  checkpoint, each against the floor of fetching the objects it reads with the same concurrency.
  Goal: <= 1.5.

Moto's server is one Python process (about 280 requests a second on 2 cores): it bounds every
concurrent figure, so the floor is measured on the same server in the same run, and the ratios
are what to compare. Usage: ``.venv/bin/python benchmarks/s3_benchmark.py [--batches 10000]
[--delay 0.02] [--poke-repeat 15] [--ledger-batches 100]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from audit_benchmark import CONF, QUERY_ID, write_checkpoint  # noqa: E402

from watermark_ops.core.audit import run_audit  # noqa: E402
from watermark_ops.core.checkpoint import MAX_CONCURRENT_READS  # noqa: E402
from watermark_ops.core.lateness import lateness_report  # noqa: E402
from watermark_ops.core.ledger import late_ledger  # noqa: E402
from watermark_ops.core.stall import evaluate, evaluate_tail  # noqa: E402
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS  # noqa: E402
from watermark_ops.examples.s3server import DelayProxy, start_s3_server  # noqa: E402

HOUR = 3_600_000
T0 = 1_357_016_400_000  # 2013-01-01T05:00:00Z
RULE = {"kind": "window_end", "event_time": "dep_time", "window_ms": HOUR, "delay_threshold_ms": 2 * HOUR,
        "max_event_time_ahead_ms": None}
COMPACT_INTERVAL = 10


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _flight(flight_id: int, dep_ms: int, arrival_ms: int) -> str:
    """One landed flight as ``watermark_ops.examples.flights.lander`` writes it."""
    return json.dumps({"id": flight_id, "origin": ("EWR", "JFK", "LGA")[flight_id % 3], "dest": "ORD", "carrier": "UA",
                       "flight": flight_id % 2000, "tailnum": "N1", "status": "landed", "sched_dep_time": _iso(dep_ms),
                       "dep_time": _iso(dep_ms), "arr_time": _iso(dep_ms + 2 * HOUR), "dep_delay": 1.0,
                       "arr_delay": 2.0, "stream_time": _iso(arrival_ms)})


def write_file_source_checkpoint(root: Path, batches: int, landing_url: str) -> tuple[Path, Path]:
    """A ``batches``-batch checkpoint of a file source (a data batch, then its trailing no-data
    batch, per run), its progress log with the late rule, and the landing folder: one file of 50
    flights per data batch, some of them late. Returns ``(checkpoint, landing)``."""
    checkpoint, landing = root / "ck", root / "landing"
    for folder in ("offsets", "commits", "sources/0"):
        (checkpoint / folder).mkdir(parents=True)
    landing.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": QUERY_ID}))
    metadata_conf = json.dumps(CONF, separators=(",", ":"))
    entries: list[str] = []
    records = []
    watermark, timestamp, log_offset, flight_id = 0, 1_795_265_474_094, -1, 0
    for batch_id in range(batches):
        data = batch_id % 2 == 0
        if data:
            log_offset += 1
            hour = T0 + log_offset * HOUR
            lines = []
            for i in range(50):
                flight_id += 1
                late = i % 10 == 0 and watermark > 0  # every tenth flight departs behind the watermark
                lines.append(_flight(flight_id, (watermark - HOUR if late else hour + i * 60_000), hour + HOUR))
            name = f"flights_{log_offset:05d}.jsonl"
            (landing / name).write_text("\n".join(lines) + "\n")
            entries.append(json.dumps({"path": f"s3a://{landing_url.removeprefix('s3://')}/{name}",
                                       "timestamp": timestamp, "batchId": log_offset}))
            if (log_offset + 1) % COMPACT_INTERVAL == 0:
                (checkpoint / "sources" / "0" / f"{log_offset}.compact").write_text("v1\n" + "\n".join(entries))
            else:
                (checkpoint / "sources" / "0" / str(log_offset)).write_text("v1\n" + entries[-1])
        next_watermark = T0 + log_offset * HOUR - HOUR if data else watermark
        metadata = f'{{"batchWatermarkMs":{watermark},"batchTimestampMs":{timestamp},"conf":{metadata_conf}}}'
        (checkpoint / "offsets" / str(batch_id)).write_text(f"v1\n{metadata}\n{{\"logOffset\":{log_offset}}}")
        (checkpoint / "commits" / str(batch_id)).write_text(f"v1\n{{\"nextBatchWatermarkMs\":{next_watermark}}}")
        records.append({"query_id": QUERY_ID, "run_id": f"run-{batch_id // 2}", "run_tag": f"t{batch_id // 2}",
                        "batch_id": batch_id, "executed": True, "timestamp_ms": timestamp, "watermark_ms": watermark,
                        "input_rows": 50 if data else 0, "rows_dropped_by_watermark": 5 if data and watermark else 0,
                        "late_rule": RULE, "spark_version": "4.2.0",
                        "requested_conf": {"spark.sql.streaming.statefulOperator.allowMultiple": "false"},
                        "sources": [{"description": f"FileStreamSource[{landing_url}]", "input_rows": 50 if data else 0}]})
        watermark, timestamp = next_watermark, timestamp + 1_500
    Path(f"{checkpoint}.progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return checkpoint, landing


def upload(fs, local: Path, url: str, *, with_log: bool = True) -> list[str]:
    """Put every file under ``local`` (no ``.crc``) at ``url`` (and the progress log beside it); returns the keys."""
    files = {f"{url}/{p.relative_to(local).as_posix()}": p.read_bytes() for p in sorted(local.rglob("*"))
             if p.is_file() and not p.name.endswith(".crc")}
    log = Path(f"{local}.progress.jsonl")
    if with_log and log.exists():
        files[f"{url}.progress.jsonl"] = log.read_bytes()
    keys = list(files)
    for start in range(0, len(keys), 2000):
        fs.pipe({k: files[k] for k in keys[start:start + 2000]})
    return keys


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--ledger-batches", type=int, default=100)
    parser.add_argument("--delay", type=float, default=0.02, help="seconds per request at the proxy (default 0.02)")
    parser.add_argument("--poke-repeat", type=int, default=15, help="pokes measured per checkpoint (median)")
    parser.add_argument("--small-repeat", type=int, default=5, help="rounds of the ledger and lateness (median)")
    args = parser.parse_args(argv)

    import s3fs

    work = Path(tempfile.mkdtemp(prefix="s3-benchmark-"))
    server = start_s3_server(log=work / "moto.log")
    proxy = DelayProxy(server.endpoint_url, args.delay)
    try:
        direct = server.filesystem()
        direct.call_s3("create_bucket", Bucket="bench")
        started = time.perf_counter()
        write_checkpoint(work / "big", args.batches)
        write_checkpoint(work / "small", 10)
        ledger_ck, landing = write_file_source_checkpoint(work / "files", args.ledger_batches, "s3://bench/landing")
        big_keys = upload(direct, work / "big", "s3://bench/big")
        upload(direct, work / "small", "s3://bench/small")
        ledger_keys = upload(direct, ledger_ck, "s3://bench/files")
        landing_keys = upload(direct, landing, "s3://bench/landing", with_log=False)
        print(f"uploaded {len(big_keys)} objects ({args.batches} batches + progress log), a 10-batch checkpoint, and a "
              f"{args.ledger_batches}-batch file-source checkpoint with {len(landing_keys)} landed files, in "
              f"{time.perf_counter() - started:.0f} s; proxy delay {args.delay * 1000:.0f} ms per request, "
              f"concurrency {MAX_CONCURRENT_READS}")

        # One long-lived filesystem through the proxy, as a process keeps (botocore's pool raised).
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **proxy.storage_options(),
                               config_kwargs={"max_pool_connections": MAX_CONCURRENT_READS})

        fs.cat(big_keys[:MAX_CONCURRENT_READS], max_concurrency=1)  # warm-up: client, connection pool

        def floor_of(keys: list[str]):
            return lambda: fs.cat(keys, batch_size=MAX_CONCURRENT_READS, max_concurrency=1, on_error="raise")

        def counted(action) -> tuple[float, dict[str, int]]:
            proxy.reset()
            seconds = timed(action)
            return seconds, dict(sorted(proxy.counts.items()))

        # --- audit vs floor -----------------------------------------------------------------
        def audit():
            report = run_audit("s3://bench/big", filesystem=fs)
            assert report.status == "ok" and len(report.batches) == args.batches, report.findings[:3]

        audit_s, audit_requests = counted(audit)
        floor_s, floor_requests = counted(floor_of(big_keys))
        print(f"audit of {args.batches} batches: {audit_s:.1f} s, requests {audit_requests}")
        print(f"floor (cat of the same {len(big_keys)} objects, {MAX_CONCURRENT_READS} at once): {floor_s:.1f} s, "
              f"requests {floor_requests}")
        print(f"ratio audit / floor: {audit_s / floor_s:.2f}   (goal <= 1.2)")

        # --- a poke with a remembered tail: 10,000 vs 10 ----------------------------------------
        # The pokes take turns (big, small, big, ...) so that a change of load touches both alike.
        tails, seconds, requests = {}, {"big": [], "small": []}, {}
        for name in ("big", "small"):
            _, tails[name] = evaluate_tail(f"s3://bench/{name}", DEFAULT_THRESHOLDS, None, filesystem=fs)
        for _ in range(args.poke_repeat):
            for name in ("big", "small"):
                proxy.reset()
                started = time.perf_counter()
                _, tails[name] = evaluate_tail(f"s3://bench/{name}", DEFAULT_THRESHOLDS, tails[name], filesystem=fs)
                seconds[name].append(time.perf_counter() - started)
                requests[name] = dict(sorted(proxy.counts.items()))
        pokes = {}
        for name in ("big", "small"):
            cold_s, cold_requests = counted(lambda u=f"s3://bench/{name}": evaluate(u, DEFAULT_THRESHOLDS, filesystem=fs))
            pokes[name] = (statistics.median(seconds[name]), requests[name], cold_s, cold_requests)
        big, small = pokes["big"], pokes["small"]
        print(f"status poke with a remembered tail: {args.batches} batches {big[0]:.3f} s {big[1]}; "
              f"10 batches {small[0]:.3f} s {small[1]}")
        print(f"ratio poke@{args.batches} / poke@10: {big[0] / small[0]:.2f}   (goal <= 1.2); same requests: "
              f"{big[1] == small[1]}")
        print(f"  without a memory (lists offsets/): {args.batches} batches {big[2]:.3f} s {big[3]}; "
              f"10 batches {small[2]:.3f} s {small[3]}")

        # --- ledger and lateness vs floor --------------------------------------------------------
        def ledger():
            result = late_ledger("s3://bench/files", filesystem=fs)
            assert result.complete and result.totals()["rows_late"] > 0, result.problems[:3]

        def lateness():
            report = lateness_report("s3://bench/files", ["s3://bench/landing"], filesystem=fs)
            assert report.runs and report.inputs[0].files == len(landing_keys)

        ledger_objects = [k for k in ledger_keys] + landing_keys  # every object it reads
        lateness_objects = ["s3://bench/files.progress.jsonl"] + landing_keys
        # Medians of --small-repeat rounds, each reader beside its floor (a shared machine's load
        # touches both alike).
        runs: dict[str, list[float]] = {"ledger": [], "ledger floor": [], "lateness": [], "lateness floor": []}
        for _ in range(args.small_repeat):
            ledger_s, ledger_requests = counted(ledger)
            runs["ledger"].append(ledger_s)
            runs["ledger floor"].append(counted(floor_of(ledger_objects))[0])
            lateness_s, lateness_requests = counted(lateness)
            runs["lateness"].append(lateness_s)
            runs["lateness floor"].append(counted(floor_of(lateness_objects))[0])
        ledger_s, ledger_floor_s, lateness_s, lateness_floor_s = (
            statistics.median(runs[k]) for k in ("ledger", "ledger floor", "lateness", "lateness floor"))
        print(f"ledger of {args.ledger_batches} batches: {ledger_s:.2f} s, requests {ledger_requests}; floor "
              f"({len(ledger_objects)} objects) {ledger_floor_s:.2f} s; ratio {ledger_s / ledger_floor_s:.2f}   "
              f"(goal <= 1.5)")
        print(f"lateness with its landing folder: {lateness_s:.2f} s, requests {lateness_requests}; floor "
              f"({len(lateness_objects)} objects) {lateness_floor_s:.2f} s; ratio {lateness_s / lateness_floor_s:.2f}   "
              f"(goal <= 1.5)")
    finally:
        proxy.close()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
