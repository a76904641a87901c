"""Real checkpoints for the stall tests: every watermark state produced by real Spark.

Two writers, both restarted in-process on the shared ``spark`` fixture (each run is a real
restart of the query from its checkpoint) and both writing the progress log beside the checkpoint
(``watermark_ops.spark.ProgressRecorder``):

* the main job, ``spark_jobs/flight_windows.py`` over real flights of 2013 landed by
  ``watermark_ops.examples.flights.lander`` (null event times, an old backlog, a future-dated record);
* :class:`TwoInputStream`, a small purpose-built query for what the flights job cannot do: two
  JSON-lines file sources ``a`` and ``b``, each with its own ``withWatermark`` (delay 10 s),
  unioned, counted in 1-minute event-time windows (append mode, ``noop`` sink). Its event times
  are near the real clock (``base_ms`` = a few minutes before the stream was made), so its lag is
  minutes, not years: advancing, idle and the two-input stalls show without a backlog.

``spark.sql.streaming.multipleWatermarkPolicy`` is a session conf of the shared session:
``checkpoint_fixtures.session_conf`` sets it for one run and restores it.

Scenarios are built once per test process (``checkpoint_fixtures.built``; removed at exit) and
must not be modified by tests: :func:`copy_with_progress_log` gives a private copy of a
checkpoint and its progress log.
"""

from __future__ import annotations

import json
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pendulum

from tests.watermark_ops.checkpoint_fixtures import built, session_conf

POLICY_CONF = "spark.sql.streaming.multipleWatermarkPolicy"
NY = "America/New_York"


def now_ms() -> int:
    return int(pendulum.now("UTC").timestamp() * 1000)


def _restart(spark, frame, checkpoint: str, spark_trigger: str, run_tag: str) -> list[dict]:
    """Start ``frame`` (append, noop sink) from ``checkpoint``, wait, return this run's progress records."""
    from watermark_ops.spark import ProgressRecorder, apply_spark_trigger, progress_log_path

    recorder = ProgressRecorder(spark, run_tag, spark_trigger)
    writer = frame.writeStream.format("noop").outputMode("append").option("checkpointLocation", checkpoint)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # Trigger.Once is deprecated: used on purpose
        query = apply_spark_trigger(writer, spark_trigger).start()
    try:
        recorder.register(query, progress_log_path(checkpoint))
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
        recorder.flush(query)
        recorder.close()
    return recorder.records(query)


@dataclass
class TwoInputStream:
    """Two watermarked file sources ``a`` and ``b`` → union → 1-minute window counts (append).

    :ivar root: folder holding ``landing/a``, ``landing/b`` and the checkpoints.
    :ivar base_ms: event-time origin (epoch ms UTC): events are landed as seconds after it.
    """

    root: Path
    base_ms: int = field(default_factory=lambda: now_ms() - 10 * 60_000)
    delay: str = "10 seconds"
    _files: int = 0
    runs: int = 0

    def __post_init__(self) -> None:
        for source in "ab":
            (self.root / "landing" / source).mkdir(parents=True, exist_ok=True)

    def checkpoint(self, name: str = "checkpoint") -> str:
        return str(self.root / name)

    def land(self, source: str, seconds: list[int | None]) -> Path:
        """One JSON-lines file on input ``source`` with events at ``base_ms + s`` seconds (None: null event time)."""
        self._files += 1
        path = self.root / "landing" / source / f"part-{self._files:04d}.jsonl"
        lines = []
        for i, s in enumerate(seconds):
            event = None if s is None else pendulum.from_timestamp((self.base_ms + s * 1000) / 1000, tz="UTC").isoformat()
            lines.append(json.dumps({"id": self._files * 1000 + i, "input": source, "event_time": event}))
        tmp = path.with_name("." + path.name + ".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(path)
        return path

    def frame(self, spark):
        from pyspark.sql import functions as F

        def source(name: str):
            return (spark.readStream.schema("id BIGINT, input STRING, event_time STRING")
                    .json(str(self.root / "landing" / name))
                    .withColumn("ts", F.to_timestamp("event_time"))
                    .withWatermark("ts", self.delay))

        return source("a").unionByName(source("b")).groupBy(F.window("ts", "1 minute")).count()

    def run(self, spark, policy: str = "min", checkpoint: str = "checkpoint",
            spark_trigger: str = "availableNow") -> list[dict]:
        """One restart of the query on ``checkpoint`` under ``policy`` (frozen at its first batch)."""
        self.runs += 1
        with session_conf(spark, **{POLICY_CONF: policy}):
            return _restart(spark, self.frame(spark), self.checkpoint(checkpoint), spark_trigger, f"run-{self.runs}")


@dataclass
class FlightsJob:
    """The main job (``flight_windows``) in its own folders."""

    root: Path
    runs: int = 0

    def config(self, **overrides: Any):
        from flight_windows import JobConfig

        return JobConfig(landing=str(self.root / "landing"), checkpoint=str(self.root / "checkpoint"),
                         output=str(self.root / "output"), **overrides)

    @property
    def checkpoint(self) -> str:
        return str(self.root / "checkpoint")

    def land_day(self, day: int) -> dict:
        """Land the real flights that reached the stream on 2013-01-<day> (New York)."""
        from watermark_ops.examples.flights.lander import land_interval

        start = pendulum.datetime(2013, 1, day, tz=NY)
        return land_interval(start, start.add(days=1), str(self.root / "landing"))

    def day_events(self, day: int) -> list[dict]:
        from watermark_ops.examples.flights.lander import flight_events

        start = pendulum.datetime(2013, 1, day, tz=NY)
        return flight_events().events_reaching_stream(start, start.add(days=1))

    def land_events(self, name: str, events: list[dict]) -> dict:
        from watermark_ops.examples.flights.lander import write_jsonl_atomically

        return write_jsonl_atomically(str(self.root / "landing"), name, events)

    def run(self, spark, spark_trigger: str = "availableNow") -> dict:
        import flight_windows

        self.runs += 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            result = flight_windows.run(spark, self.config(spark_trigger=spark_trigger, run_tag=f"run-{self.runs}"))
        return result[flight_windows.QUERY_NAME]


# --------------------------------------------------------------------------------------------
# Scenarios, built once per test process


def copy_with_progress_log(checkpoint: str, dest: Path) -> str:
    """A private copy of a checkpoint folder and its progress log (``<checkpoint>.progress.jsonl``)."""
    from watermark_ops.examples.flights.settings import progress_log_path

    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(checkpoint, dest)
    log = Path(progress_log_path(checkpoint))
    if log.exists():
        shutil.copy2(log, progress_log_path(str(dest)))
    return str(dest)


@dataclass
class Built:
    """A built scenario: checkpoints by name, and the real instant right after each run (epoch ms)."""

    checkpoints: dict[str, str]
    after_run_ms: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def one_input_without_data(spark) -> Built:
    """Input ``a`` gets data in three runs, input ``b`` never does; the same landing read by two
    queries, one frozen under ``min``, one under ``max`` (checkpoints ``min`` and ``max``)."""

    def build(folder: Path) -> Built:
        stream = TwoInputStream(folder)
        out = Built({p: stream.checkpoint(p) for p in ("min", "max")})
        for k in range(3):
            stream.land("a", [60 * k, 60 * k + 30])
            for policy in ("min", "max"):
                stream.run(spark, policy, checkpoint=policy)
            out.after_run_ms.append(now_ms())
        return out

    return built("one_input_without_data", build)


def inputs_take_turns(spark) -> Built:
    """SPARK-50046 under ``min``: run 1 both inputs, runs 2-4 ``a``, ``b``, ``a`` (each restart sees one
    input), run 5 both again (the watermark rises), run 6 availableNow without new files (no
    batch), run 7 Trigger.Once without new files (a progress record of a trigger that ran no batch)."""

    def build(folder: Path) -> Built:
        stream = TwoInputStream(folder)
        out = Built({"min": stream.checkpoint()})
        plan = [("ab", "availableNow"), ("a", "availableNow"), ("b", "availableNow"), ("a", "availableNow"),
                ("ab", "availableNow"), ("", "availableNow"), ("", "once")]
        for k, (sources, spark_trigger) in enumerate(plan):
            for source in sources:
                stream.land(source, [60 * k + 5])
            out.extra.setdefault("records", []).append(stream.run(spark, "min", spark_trigger=spark_trigger))
            out.after_run_ms.append(now_ms())
        return out

    return built("inputs_take_turns", build)


def null_event_times(spark) -> Built:
    """The flights job: a day of real flights, then three runs whose new rows are only cancelled
    flights (null ``dep_time``, the event time): input keeps arriving, the watermark stays."""

    def build(folder: Path) -> Built:
        job = FlightsJob(folder)
        out = Built({"flights": job.checkpoint})
        job.land_day(1)
        job.run(spark)
        out.after_run_ms.append(now_ms())
        for day in (2, 3, 4):
            cancelled = [e for e in job.day_events(day) if e["status"] == "cancelled"]
            assert cancelled and all(e["dep_time"] is None for e in cancelled)
            job.land_events(f"cancelled_2013-01-{day:02d}.jsonl", cancelled)
            job.run(spark)
            out.after_run_ms.append(now_ms())
        return out

    return built("null_event_times", build)


def backlog_then_future_record(spark) -> Built:
    """The flights job over two days of 2013 (an old backlog: lagging by years against 2026
    processing time), snapshot ``lagging`` taken then; run 3 lands one future-dated flight
    (departure a week after the real now): the watermark jumps ahead of processing time."""

    def build(folder: Path) -> Built:
        job = FlightsJob(folder / "job")
        out = Built({"flights": job.checkpoint})
        for day in (1, 2):
            job.land_day(day)
            job.run(spark)
            out.after_run_ms.append(now_ms())
        out.checkpoints["lagging"] = copy_with_progress_log(job.checkpoint, folder / "lagging")
        real = next(e for e in job.day_events(3) if e["status"] == "landed")
        future = pendulum.now("UTC").add(days=7).replace(microsecond=0)
        record = dict(real, id=10_000_000, sched_dep_time=future.isoformat().replace("+00:00", "Z"),
                      dep_time=future.isoformat().replace("+00:00", "Z"),
                      arr_time=future.add(hours=3).isoformat().replace("+00:00", "Z"),
                      stream_time=future.add(hours=3).isoformat().replace("+00:00", "Z"))
        job.land_events("future_dated.jsonl", [record])
        job.run(spark)
        out.after_run_ms.append(now_ms())
        out.extra["future_ms"] = int(future.timestamp() * 1000)
        return out

    return built("backlog_then_future_record", build)


def stalled_two_inputs(spark, folder: Path) -> TwoInputStream:
    """A fresh (not cached) SPARK-50046 stall a test may heal: runs ``ab``, ``a``, ``b``, ``a``."""
    stream = TwoInputStream(folder)
    for k, sources in enumerate(("ab", "a", "b", "a")):
        for source in sources:
            stream.land(source, [60 * k + 5])
        stream.run(spark, "min")
    return stream


def heal(spark, stream: TwoInputStream) -> None:
    """Both inputs get newer data in one run: under ``min`` the watermark rises again."""
    for source in "ab":
        stream.land(source, [600])
    stream.run(spark, "min")


# --------------------------------------------------------------------------------------------
# Airflow: run an inline test DAG, read its results; a real webhook receiver


def register_dag(dag, unpause: bool = False) -> None:
    """Write a DAG defined in a test to the metadata DB (under the ``dags-folder`` bundle, as the DAG
    processor would); ``unpause`` it so that asset events queue runs of it."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.models.dag import DagModel
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    with create_session() as session:
        DagBundlesManager().sync_bundles_to_db(session=session)
    with create_session() as session:
        update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(),
                                         session=session)
    if unpause:
        with create_session() as session:
            session.get(DagModel, dag.dag_id).is_paused = False


def run_dag(dag, **test_kwargs):
    """``dag.test()`` for a DAG defined in a test (``dag.test()`` only runs DAGs serialized in the DB)."""
    register_dag(dag)
    return dag.test(**test_kwargs)


def task_states(run) -> dict[tuple[str, int], str]:
    """{(task id, map index): state} of a finished run."""
    return {(ti.task_id, ti.map_index): str(ti.state) for ti in run.get_task_instances()}


def xcoms(run) -> dict[tuple[str, int, str], Any]:
    """{(task id, map index, key): value} of a run."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        return {(x.task_id, x.map_index, x.key): XComModel.deserialize_value(x)
                for x in session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id))}


class AlertServer:
    """A real HTTP server on 127.0.0.1 (a free port) that records every POST it receives.

    ``requests``: ``[{"path", "headers" (lower-case names), "body" (parsed JSON)}]``. ``status``:
    the HTTP status it answers with (200 unless a test wants an error).
    """

    def __init__(self, status: int = 200):
        self.status = status
        self.requests: list[dict[str, Any]] = []

    def __enter__(self) -> AlertServer:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                server.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                        "body": json.loads(raw or b"null")})
                self.send_response(server.status)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def connection(self, endpoint: str = "/alerts", **extra: Any) -> str:
        """The JSON of an Airflow connection (``AIRFLOW_CONN_<ID>``) pointing at this server."""
        return json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": self.port, "schema": "http",
                           "extra": {"endpoint": endpoint, **extra}})


def wait_for_trigger_row(classpath: str, checkpoint: str, timeout_s: float = 120.0) -> bool:
    """Block until the metadata DB holds a trigger of ``classpath`` watching ``checkpoint`` (the task
    deferred: the execution API wrote the trigger row); False on timeout."""
    import time

    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy import select

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with create_session() as session:
            for trigger in session.scalars(select(Trigger).where(Trigger.classpath == classpath)):
                if trigger.kwargs.get("checkpoint") == checkpoint:
                    return True
        time.sleep(0.2)
    return False


def log_values(checkpoint: str) -> dict[int, dict]:
    """{batch id: {"watermark_ms", "timestamp_ms", "sources", "next_ms"}} from offsets/N and commits/N."""
    root = Path(checkpoint)
    out = {}
    for path in (root / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            meta = json.loads(lines[1])
            out[int(path.name)] = {"watermark_ms": meta["batchWatermarkMs"], "timestamp_ms": meta["batchTimestampMs"],
                                   "sources": lines[2:], "next_ms": None}
    for path in (root / "commits").iterdir():
        if path.name.isdigit():
            out[int(path.name)]["next_ms"] = json.loads(path.read_text().splitlines()[1])["nextBatchWatermarkMs"]
    return dict(sorted(out.items()))
