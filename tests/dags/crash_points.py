"""SIGKILL a running Spark driver at a chosen point of its run, from beside it, as a crash would.

A :class:`DriverKiller` thread watches one checkpoint while a DAG's spark-submit task runs and,
the first time the chosen point is reached, SIGKILLs every process whose command line names the
checkpoint (the spark-submit JVM that writes the logs, and the Python driver), then records what
the checkpoint looked like and what the audit said while the driver was dead. Points:

* ``before_offsets``: the driver holds the checkpoint's lock (``<checkpoint>.lock`` holds its pid:
  the session is up, the queries are about to start) and has written no new ``offsets/N``;
* ``in_flight``: a new ``offsets/N`` exists without ``commits/N`` (the batch is running);
* ``after_commit``: the run's first new ``commits/N`` (its data batch) exists, before the trailing
  no-data batch writes ``offsets/N+1`` (about 100 ms later on this machine: the watcher polls
  every few ms; the record says which point was actually reached).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

POINTS = ("before_offsets", "in_flight", "after_commit")


def batch_ids(folder: Path) -> set[int]:
    """The batch ids of a log folder (files named by a number), empty when it does not exist."""
    try:
        return {int(name) for name in os.listdir(folder) if name.isdigit()}
    except FileNotFoundError:
        return set()


def driver_processes(checkpoint: str) -> list[psutil.Process]:
    """The live processes started for this checkpoint: command lines with ``--checkpoint <checkpoint>``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        args = process.info["cmdline"] or []
        if any(a == "--checkpoint" and b == checkpoint for a, b in zip(args, args[1:])):
            found.append(process)
    return found


def _wait_dead(processes: list[psutil.Process], timeout_s: float) -> None:
    """Wait until every process has died (gone, or a zombie its parent has not reaped yet).

    Never ``wait()`` for them (``psutil.wait_procs``): under ``dag.test()`` the spark-submit JVM is
    a child of this very process, and reaping it here would steal its exit status from the
    operator's ``Popen.wait()``, which then reads 0 (ECHILD) and reports the killed run a success.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = []
        for process in processes:
            try:
                if process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return
        time.sleep(0.05)


@dataclass
class Crash:
    """What a kill left behind: the point reached, the processes killed, the logs and the audit then."""

    point: str
    reached: str = ""
    killed: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    commits: list[int] = field(default_factory=list)
    audit: dict = field(default_factory=dict)


class DriverKiller(threading.Thread):
    """Kill the checkpoint's driver once, at ``point`` (one of :data:`POINTS`); see the module docstring."""

    def __init__(self, checkpoint: str, point: str, timeout_s: float = 600.0):
        super().__init__(daemon=True)
        assert point in POINTS, point
        self.checkpoint, self.point, self.timeout_s = checkpoint, point, timeout_s
        self.crash = Crash(point)
        self._done = threading.Event()
        root = Path(checkpoint)
        self._offsets, self._commits, self._lock = root / "offsets", root / "commits", Path(checkpoint + ".lock")
        self._base_offsets, self._base_commits = batch_ids(self._offsets), batch_ids(self._commits)

    def stop(self) -> None:
        self._done.set()

    def _holder_pid(self) -> int | None:
        try:
            return json.loads(self._lock.read_text() or "null")["pid"]
        except (FileNotFoundError, ValueError, TypeError, KeyError):
            return None

    def _reached(self) -> bool:
        new_offsets = batch_ids(self._offsets) - self._base_offsets
        new_commits = batch_ids(self._commits) - self._base_commits
        if self.point == "before_offsets":
            pid = self._holder_pid()
            return pid is not None and psutil.pid_exists(pid) and not new_offsets
        if self.point == "in_flight":
            return any(n not in new_commits for n in new_offsets)
        return bool(new_commits)

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not self._done.is_set() and time.monotonic() < deadline:
            if self._reached():
                self._kill()
                return
            time.sleep(0.003)

    def _kill(self) -> None:
        from watermark_ops.core.audit import run_audit

        processes = driver_processes(self.checkpoint)
        # The JVM first: it is the one writing the offset and commit logs.
        for process in sorted(processes, key=lambda p: "java" not in p.info["cmdline"][0]):
            try:
                state = f"pid {process.pid} ppid {process.ppid()} {process.status()}"
                process.send_signal(signal.SIGKILL)
                self.crash.killed.append(f"{' '.join(process.info['cmdline'][:2])} ({state})")
            except psutil.NoSuchProcess:
                pass
        _wait_dead(processes, timeout_s=30)
        offsets, commits = batch_ids(self._offsets), batch_ids(self._commits)
        new_offsets, new_commits = offsets - self._base_offsets, commits - self._base_commits
        if not new_offsets:
            self.crash.reached = "before_offsets"
        elif new_offsets - new_commits:
            self.crash.reached = "in_flight" if not new_commits else "in_flight_after_commit"
        else:
            self.crash.reached = "after_commit"
        self.crash.offsets, self.crash.commits = sorted(offsets), sorted(commits)
        self.crash.audit = run_audit(self.checkpoint).to_dict()
