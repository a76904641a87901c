"""One driver per checkpoint: a lock beside the checkpoint that a second driver refuses to start on.

Two runs of one streaming query on one checkpoint at once corrupt it (both write ``offsets/N``,
both commit). ``max_active_runs=1`` guards one DAG; this guards the checkpoint itself, whoever
starts the driver (another DAG, a manual spark-submit, a test).

The lock is ``<checkpoint>.lock`` beside the checkpoint folder (like ``<checkpoint>.progress.jsonl``),
held with ``fcntl.flock`` for as long as the queries run. The kernel releases a ``flock`` when its
process dies, however it dies (SIGKILL included), so a lock left by a dead driver is never in the
way: the next driver takes it over and logs whose it was. The file holds the holder's pid, host,
start time (ISO-8601 UTC) and command line, for the error a second driver prints.

Only checkpoints on the local filesystem (a path or ``file://``) can be locked this way; on
HDFS or an object store :func:`checkpoint_lock` logs that it cannot lock and lets the run go on
(the DAG's ``max_active_runs=1`` is then the only guard). Pure Python: no pyspark.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

log = logging.getLogger("watermark_ops.spark")

__all__ = ["CheckpointInUse", "checkpoint_lock", "lock_path"]


class CheckpointInUse(RuntimeError):
    """Another live driver holds the checkpoint's lock; the message names it and the lock file."""


def lock_path(checkpoint: str) -> str | None:
    """``<checkpoint>.lock`` for a local checkpoint (a path or ``file://`` URL), None for another scheme."""
    text = str(checkpoint).rstrip("/")
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        return None
    return os.path.abspath(text) + ".lock"


@contextlib.contextmanager
def checkpoint_lock(checkpoint: str, holder: dict[str, Any] | None = None,
                    on_takeover: Callable[[dict[str, Any]], None] | None = None) -> Iterator[str | None]:
    """Hold the checkpoint's lock while the block runs; yields the lock file (None: not lockable).

    :param holder: more about this driver, recorded in the lock file (e.g. ``{"spark_connect": {"url",
        "session_id"}}``: where its queries run when it is a Spark Connect client).
    :param on_takeover: called with the previous holder's record (a dict) when the lock is taken over
        from a driver that is gone, before the block runs (e.g. to stop the queries a dead Connect
        client left on its server).
    :raises CheckpointInUse: when a live driver holds it (nothing is started then).
    """
    import fcntl

    path = lock_path(checkpoint)
    if path is None:
        log.warning("checkpoint %s is not on the local filesystem: it cannot be locked here, so only the "
                    "scheduler (max_active_runs=1) keeps a second run off it", checkpoint)
        yield None
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CheckpointInUse(
                f"checkpoint {checkpoint} is in use by another driver ({_holder(fd) or 'holder unknown'}; lock "
                f"{path}): two runs of one query on one checkpoint corrupt it. Wait for that run to end, or stop it."
            ) from None
        previous = _holder(fd)
        if previous:
            log.warning("taking over the lock of checkpoint %s from a driver that is gone (%s)", checkpoint, previous)
            record = _record(fd)
            if on_takeover is not None and record:
                on_takeover(record)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "started_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "argv": sys.argv,
            **(holder or {}),
        }).encode(), 0)
        try:
            yield path
        finally:
            os.ftruncate(fd, 0)  # an empty lock file: nobody holds it
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _record(fd: int) -> dict[str, Any] | None:
    """The lock file's JSON record, None when it is empty or not JSON."""
    try:
        record = json.loads(os.pread(fd, 65536, 0).decode("utf-8", errors="replace"))
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _holder(fd: int) -> str:
    """The holder recorded in the lock file, as text (empty when none)."""
    raw = os.pread(fd, 65536, 0).decode("utf-8", errors="replace").strip()
    try:
        info = json.loads(raw)
        return f"pid {info['pid']} on {info['host']}, started {info['started_at']}"
    except (ValueError, KeyError, TypeError):
        return raw[:200]
