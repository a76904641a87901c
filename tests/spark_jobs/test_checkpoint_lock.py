"""One driver per checkpoint: the lock beside it, with real processes (and real Spark drivers)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from watermark_ops.spark import CheckpointInUse, checkpoint_lock, lock_path
from watermark_ops.spark import EXIT_CHECKPOINT_IN_USE
from tests.watermark_ops import checkpoint_fixtures as cf
from watermark_ops.core.audit import run_audit

pytestmark = pytest.mark.timeout(600)
SPARK_JOBS = Path(__file__).resolve().parents[2] / "spark_jobs"
HOLD = ("import sys, time; sys.path.insert(0, sys.argv[2]); from watermark_ops.spark import checkpoint_lock\n"
        "with checkpoint_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(600)\n")


def _holder(checkpoint: Path) -> subprocess.Popen:
    """Another process holding the lock of ``checkpoint`` (it prints ``held`` once it does)."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(checkpoint), str(SPARK_JOBS)],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_lock_path_beside_a_local_checkpoint_only(tmp_path):
    assert lock_path(str(tmp_path / "cp") + "/") == str(tmp_path / "cp") + ".lock"
    assert lock_path("file://" + str(tmp_path / "cp")) == str(tmp_path / "cp") + ".lock"
    assert lock_path("s3://bucket/cp") is None


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    checkpoint = tmp_path / "cp"
    holder = _holder(checkpoint)
    try:
        with pytest.raises(CheckpointInUse, match=rf"in use by another driver \(pid {holder.pid} on .*started"):
            with checkpoint_lock(str(checkpoint)):
                pass
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_killed_holder_is_taken_over(tmp_path, caplog):
    checkpoint = tmp_path / "cp"
    holder = _holder(checkpoint)
    holder.send_signal(signal.SIGKILL)  # dies holding it: no chance to clean up
    holder.wait()
    stale = json.loads(Path(lock_path(str(checkpoint))).read_text())
    assert stale["pid"] == holder.pid
    with caplog.at_level(logging.WARNING, logger="watermark_ops.spark"):
        with checkpoint_lock(str(checkpoint)) as path:
            assert json.loads(Path(path).read_text())["pid"] == os.getpid()
    assert f"from a driver that is gone (pid {holder.pid} on" in caplog.text
    assert Path(path).read_text() == ""  # released: nobody holds it


def test_a_checkpoint_elsewhere_is_not_locked(caplog):
    with caplog.at_level(logging.WARNING, logger="watermark_ops.spark"):
        with checkpoint_lock("s3://bucket/cp") as path:
            assert path is None
    assert "cannot be locked here" in caplog.text


def _spark_submit(dirs: cf.JobDirs, log: Path, extra: list[str]) -> subprocess.Popen:
    command = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
               "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.ui.showConsoleProgress=false",
               "--py-files", str(SPARK_JOBS / "flight_inputs.py"),
               *cf.job_command(dirs, extra)[1:]]
    command.remove("--master")  # job_command's own --master local[2]: spark-submit sets it here
    command.remove("local[2]")
    with open(log, "wb") as handle:
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)


def test_two_real_spark_submits_on_one_checkpoint(tmp_path):
    dirs = cf.JobDirs(tmp_path / "job")
    for index in range(16):
        cf.land_hour(dirs, index)
    first = _spark_submit(dirs, tmp_path / "first.log", ["--max-files-per-trigger", "1", "--run-tag", "first"])
    try:
        deadline = time.monotonic() + 300
        while not (dirs.checkpoint / "offsets" / "0").exists():  # the first driver runs its queries
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()[-3000:]
            time.sleep(0.2)
        second = _spark_submit(dirs, tmp_path / "second.log", ["--run-tag", "second"])
        assert second.wait(timeout=300) == EXIT_CHECKPOINT_IN_USE
        refused = (tmp_path / "second.log").read_text()
        assert f"checkpoint {dirs.checkpoint} is in use by another driver (pid" in refused
        assert first.poll() is None, "the first driver should still be running its micro-batches"
        assert first.wait(timeout=400) == 0, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        for process in (first,):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    report = run_audit(str(dirs.checkpoint))
    assert report.status == "ok" and report.in_flight_batch_id is None
    tags = {json.loads(line)["run_tag"] for line in Path(str(dirs.checkpoint) + ".progress.jsonl").read_text().splitlines()}
    assert tags == {"first"}  # the refused driver ran no batch
