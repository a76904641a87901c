"""Checkpoints for the audit tests: real ones written by the real main job, and hand-made files.

Real checkpoints come from ``spark_jobs/flight_windows.py`` (``flight_windows.run`` on the shared
``spark`` fixture: every run is a real restart of the query from its checkpoint) over real flights
landed by ``watermark_ops.examples.flights.lander.land_interval``, one UTC hour of 2013-01-01 per run. Building them
costs real Spark time, so each scenario is built once per test process (:func:`built`) and tests
copy it (:func:`copy_checkpoint`) before touching it.

Hand-made files cover what the installed Spark (4.2.0) does not write: offsets v2, commits v2/v3,
Spark 2.1 offsets without ``conf``, ``{}`` and bare ``v1`` commits, noise files, malformed files.
They are written through fsspec so that the same helpers serve the local and ``memory://`` tests.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pendulum

REPO = Path(__file__).resolve().parents[2]
FLIGHT_WINDOWS = REPO / "spark_jobs" / "flight_windows.py"
#: The first landed hour: flights that landed on 2013-01-01 from 12:00 UTC on (about 40-70 per hour).
FIRST_HOUR = pendulum.datetime(2013, 1, 1, 12, tz="UTC")
#: What Spark 4.2 freezes in ``conf`` at the first batch (a subset, enough for the rules).
DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}


# --------------------------------------------------------------------------------------------
# Real checkpoints


@dataclass
class JobDirs:
    """The folders of one job instance: landing, checkpoint, output (all under ``root``)."""

    root: Path

    @property
    def landing(self) -> Path:
        return self.root / "landing"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def output(self) -> Path:
        return self.root / "output"

    def config(self, **overrides: Any):
        """A ``flight_windows.JobConfig`` for these folders."""
        from flight_windows import JobConfig

        return JobConfig(landing=str(self.landing), checkpoint=str(self.checkpoint), output=str(self.output),
                         **overrides)


def land_hour(dirs: JobDirs, index: int) -> dict:
    """Land the real flights of hour ``FIRST_HOUR + index`` (one JSON-lines file)."""
    from watermark_ops.examples.flights.lander import land_interval

    start = FIRST_HOUR.add(hours=index)
    summary = land_interval(start, start.add(hours=1), str(dirs.landing))
    assert summary["records"] > 0, f"no flight landed in hour {index}"
    return summary


def run_job(spark, dirs: JobDirs, spark_trigger: str = "availableNow", **overrides: Any) -> dict:
    """One run (a restart) of the real main job on the shared session; returns ``flight_windows.run``'s result."""
    import flight_windows

    return flight_windows.run(spark, dirs.config(spark_trigger=spark_trigger, **overrides))[flight_windows.QUERY_NAME]


@contextmanager
def session_conf(spark, **conf: str):
    """Set SQL confs on the shared session (e.g. ``**{"spark.sql.streaming.minBatchesToRetain": "3"}``)
    and restore them after: the ``spark`` fixture is shared by every test."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def snapshot(checkpoint: Path, dest: Path) -> Path:
    """Copy what the auditor reads (``metadata``, ``offsets/``, ``commits/``) to ``dest``."""
    dest.mkdir(parents=True)
    for name in ("metadata", "offsets", "commits"):
        source = checkpoint / name
        if source.is_dir():
            shutil.copytree(source, dest / name)
        elif source.exists():
            shutil.copy2(source, dest / name)
    return dest


def copy_checkpoint(source: Path, dest: Path) -> Path:
    """A private copy of a built checkpoint (or snapshot) for a test to modify."""
    shutil.copytree(source, dest)
    return dest


_BUILT: dict[str, Any] = {}
_BUILD_ROOT: list[Path] = []


def built(name: str, builder: Callable[[Path], Any]) -> Any:
    """Build a scenario once per test process: ``builder(fresh folder)``'s result, cached by name."""
    if name not in _BUILT:
        if not _BUILD_ROOT:
            _BUILD_ROOT.append(Path(tempfile.mkdtemp(prefix="watermark-ops-checkpoints-")))
            atexit.register(shutil.rmtree, _BUILD_ROOT[0], True)
        folder = _BUILD_ROOT[0] / name
        folder.mkdir()
        _BUILT[name] = builder(folder)
    return _BUILT[name]


@dataclass
class RestartHistory:
    """A checkpoint after five runs: availableNow ×2, Trigger.Once, availableNow without new data, availableNow.

    :ivar checkpoint: the checkpoint folder (do not modify: copy it).
    :ivar runs: per run, ``flight_windows.run``'s result for the windows query (``query_id``,
        ``batches``: the progress records of the run).
    """

    dirs: JobDirs
    runs: list[dict]

    @property
    def checkpoint(self) -> Path:
        return self.dirs.checkpoint


def restart_history(spark) -> RestartHistory:
    """The shared :class:`RestartHistory` (built on first use, about 15 s)."""

    def build(folder: Path) -> RestartHistory:
        dirs = JobDirs(folder)
        runs = []
        for index, spark_trigger, new_hour in ((0, "availableNow", True), (1, "availableNow", True),
                                               (2, "once", True), (3, "availableNow", False),
                                               (4, "availableNow", True)):
            if new_hour:
                land_hour(dirs, index)
            runs.append(run_job(spark, dirs, spark_trigger))
        return RestartHistory(dirs, runs)

    return built("restart_history", lambda folder: build(folder))


@dataclass
class PurgedHistory:
    """Snapshots of one checkpoint after each of seven availableNow runs with ``minBatchesToRetain=3``,
    then after the checkpoint was replaced (new query id) and run once.

    :ivar snapshots: one folder per run, oldest first, as an auditor would have found the
        checkpoint after that run; the last one is the replaced checkpoint.
    :ivar query_ids: the query id of each snapshot.
    """

    snapshots: list[Path]
    query_ids: list[str]


PURGE_RUNS = 7


def purged_history(spark) -> PurgedHistory:
    """The shared :class:`PurgedHistory` (built on first use, about 20 s)."""

    def build(folder: Path) -> PurgedHistory:
        dirs = JobDirs(folder / "job")
        snapshots, query_ids = [], []
        with session_conf(spark, **{"spark.sql.streaming.minBatchesToRetain": "3"}):
            for index in range(PURGE_RUNS):
                land_hour(dirs, index)
                query_ids.append(run_job(spark, dirs)["query_id"])
                snapshots.append(snapshot(dirs.checkpoint, folder / f"run{index}"))
            # The checkpoint replaced: a new query (new id) over the same landing folder.
            shutil.rmtree(dirs.checkpoint)
            shutil.rmtree(dirs.output)
            query_ids.append(run_job(spark, dirs)["query_id"])
            snapshots.append(snapshot(dirs.checkpoint, folder / "reset"))
        return PurgedHistory(snapshots, query_ids)

    return built("purged_history", build)


def progress_records(checkpoint: Path) -> list[dict]:
    """The job's progress log beside ``checkpoint`` (written by the job itself)."""
    from watermark_ops.spark import progress_log_path

    path = Path(progress_log_path(str(checkpoint)))
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class KilledRun:
    """A checkpoint whose driver (its own process) was SIGKILLed after ``offsets/N`` and before ``commits/N``.

    :ivar in_flight: N.
    :ivar after_kill: snapshot taken right after the kill (offsets N without commits N).
    """

    dirs: JobDirs
    in_flight: int
    after_kill: Path


def job_command(dirs: JobDirs, extra: list[str]) -> list[str]:
    """The main job as its own driver process (plain python, local[2]) on these folders, plus ``extra`` flags."""
    return [sys.executable, str(FLIGHT_WINDOWS), "--master", "local[2]", "--shuffle-partitions", "2",
            "--landing", str(dirs.landing), "--checkpoint", str(dirs.checkpoint), "--output", str(dirs.output),
            *extra]


def kill_in_flight(folder: Path, files: int = 12, timeout_s: float = 240.0) -> KilledRun:
    """Run the main job as its own driver (a subprocess) and SIGKILL it while a batch is in flight.

    ``files`` one-hour files are landed and read one per micro-batch (``--max-files-per-trigger 1``),
    so there are many batches; the parent polls the checkpoint every few ms and kills the driver
    (its whole process group: the JVM too) as soon as some ``offsets/N`` exists without
    ``commits/N``, N > 0.

    :raises AssertionError: when the job finished before a batch could be caught in flight.
    """
    dirs = JobDirs(folder)
    for index in range(files):
        land_hour(dirs, index)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log_path = folder / "driver.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(job_command(dirs, ["--max-files-per-trigger", "1"]), stdout=log,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
    offsets, commits = dirs.checkpoint / "offsets", dirs.checkpoint / "commits"
    deadline = time.monotonic() + timeout_s
    in_flight = None
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if offsets.is_dir():
                ids = [int(n) for n in os.listdir(offsets) if n.isdigit()]
                done = {int(n) for n in os.listdir(commits) if n.isdigit()} if commits.is_dir() else set()
                pending = [i for i in ids if i not in done and i > 0]
                if pending:
                    os.killpg(process.pid, signal.SIGKILL)
                    in_flight = max(pending)
                    break
            time.sleep(0.005)
    finally:
        if process.poll() is None and in_flight is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert in_flight is not None, f"no batch caught in flight; driver log: {log_path.read_text()[-2000:]}"
    return KilledRun(dirs, in_flight, snapshot(dirs.checkpoint, folder / "after_kill"))


def restart_killed(spark, run: KilledRun) -> dict:
    """Restart the killed query on the shared session (a new driver for it, no limit per trigger):
    Spark re-runs the in-flight batch with its own offsets, then goes on."""
    return run_job(spark, run.dirs)


# --------------------------------------------------------------------------------------------
# Hand-made files (fsspec: local paths and memory:// alike)


def _fs(root: str):
    import fsspec

    return fsspec.core.url_to_fs(root)


def put(root: str, relative: str, content: bytes | str) -> str:
    """Write ``content`` to ``<root>/<relative>`` (folders created); returns the fs path."""
    fs, base = _fs(root)
    path = f"{base.rstrip('/')}/{relative}"
    parent = path.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    fs.pipe_file(path, content.encode() if isinstance(content, str) else content)
    return path


def offsets_text(watermark_ms: int, timestamp_ms: int = 1_700_000_000_000, *, version: int = 1,
                 conf: dict | None = None, sources: list[Any] | None = None, with_conf: bool = True,
                 source_ids: list[str] | None = None) -> str:
    """The text of an ``offsets/N`` file as ``OffsetSeqLog`` writes it (v1, or v2 of Spark 4.2+).

    :param sources: offsets, one per source (JSON-able; None writes ``-``); default ``[{"logOffset": 0}]``.
    :param with_conf: False writes a Spark 2.1 metadata line (no ``conf``).
    """
    metadata: dict[str, Any] = {"batchWatermarkMs": watermark_ms, "batchTimestampMs": timestamp_ms}
    if with_conf:
        metadata["conf"] = dict(DEFAULT_CONF if conf is None else conf)
    if version >= 2:
        metadata["sourceMetadataInfo"] = {}
    sources = [{"logOffset": 0}] if sources is None else sources
    lines = [f"v{version}", json.dumps(metadata, separators=(",", ":"))]
    for position, offset in enumerate(sources):
        text = "-" if offset is None else json.dumps(offset, separators=(",", ":"))
        if version >= 2:
            text = f"{(source_ids or [str(i) for i in range(len(sources))])[position]}:{text}"
        lines.append(text)
    return "\n".join(lines)


def commit_text(next_watermark_ms: int | None, *, version: int = 1, extra: dict | None = None,
                bare: bool = False) -> str:
    """The text of a ``commits/N`` file as ``CommitLog`` writes it.

    :param next_watermark_ms: None writes the pre-2.4 ``{}``.
    :param extra: more fields (``stateUniqueIds`` for v2, ``sinkMetadataMap`` for v3).
    :param bare: only the header line (``v1``), as very old files hold.
    """
    if bare:
        return f"v{version}"
    body: dict[str, Any] = {} if next_watermark_ms is None else {"nextBatchWatermarkMs": next_watermark_ms}
    body.update(extra or {})
    return f"v{version}\n" + json.dumps(body, separators=(",", ":"))


def handmade_checkpoint(root: str, chain: list[tuple[int, int | None]], *, first_batch: int = 0,
                        query_id: str | None = "7d1b2a3c-0000-4000-8000-000000000001",
                        timestamp_ms: int = 1_700_000_000_000) -> list[str]:
    """A checkpoint whose batch ``first_batch + i`` has offsets watermark ``chain[i][0]`` and commit
    ``chain[i][1]`` (None: no commit file, i.e. in flight). Source offsets count up by batch.

    :return: the fs paths written.
    """
    written = []
    if query_id is not None:
        written.append(put(root, "metadata", json.dumps({"id": query_id})))
    for position, (watermark_ms, next_ms) in enumerate(chain):
        batch_id = first_batch + position
        written.append(put(root, f"offsets/{batch_id}", offsets_text(
            watermark_ms, timestamp_ms + 60_000 * batch_id, sources=[{"logOffset": batch_id}])))
        if next_ms is not None:
            written.append(put(root, f"commits/{batch_id}", commit_text(next_ms)))
    return written


def add_noise(root: str, batch_ids: list[int]) -> None:
    """What storage adds beside batch files: ``.N.crc``, a temp file of an interrupted write, a checksum side file."""
    for batch_id in batch_ids:
        for log_name in ("offsets", "commits"):
            put(root, f"{log_name}/.{batch_id}.crc", b"crc\x00\x01")
    put(root, "offsets/.99.3f2a9c1e-1111-2222-3333-444455556666.tmp", "v1\n{\"batchWatermarkMs\":1}")
    put(root, "commits/5.checksum", "{\"checksum\": 1}")
    put(root, "offsets/_metadata", "not a batch")
