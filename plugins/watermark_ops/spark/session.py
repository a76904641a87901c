"""The driver's Spark session: a classic one of its own, or a Spark Connect client, and its stop.

* :func:`build_session`: a classic session with settings that suit a small machine (no UI, UTC,
  quiet console, shuffle partitions of 2 per local core unless spark-submit set them);
* :func:`session_from_args`: the session the run flags ask for (``--remote``: a Spark Connect client
  with a session id a supervisor can reach, :func:`watermark_ops.spark.connect.connect_session`);
* :func:`stop_session`: a bounded ``spark.stop()``; :func:`server_lost`: whether an error means the
  Connect server is gone; :func:`quiet_py4j`: the driver log carries the job's lines, not py4j's.

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("watermark_ops.spark")

__all__ = ["STOP_TIMEOUT_SECONDS", "build_session", "quiet_py4j", "remote_session", "server_lost",
           "session_from_args", "stop_session"]

#: How long (seconds) a driver waits for ``spark.stop()`` before it ends anyway.
STOP_TIMEOUT_SECONDS = 20.0


def build_session(app_name: str, master: str | None = None, shuffle_partitions: int | None = None,
                  extra_conf: dict[str, str] | None = None):
    """Build (or get) a SparkSession with settings that suit a small local machine.

    :param app_name: the Spark application name.
    :param master: ``local[2]`` etc.; ``None`` leaves it to spark-submit (or local[*]).
    :param shuffle_partitions: ``spark.sql.shuffle.partitions``; ``None`` keeps what spark-submit
        set, else 2 × the local cores. The default 200 made a small stateful job 4× slower here.
        Note that Spark freezes this value in the checkpoint at the first batch.
    :param extra_conf: further ``spark.*`` settings.
    :return: ``pyspark.sql.SparkSession``.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    conf = {
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
    }
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if shuffle_partitions is None and "spark.sql.shuffle.partitions" not in _submitted_conf(spark):
        spark.conf.set("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1)))
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _submitted_conf(spark) -> dict[str, str]:
    return dict(spark.sparkContext.getConf().getAll())


def session_from_args(app_name: str, args):
    """The session the flags ask for: a Spark Connect client with ``--remote`` (:func:`remote_session`),
    else a classic one (:func:`build_session`)."""
    if not getattr(args, "remote", None):
        return build_session(app_name, master=args.master, shuffle_partitions=args.shuffle_partitions)
    return remote_session(args)


def remote_session(args):
    """The Spark Connect client session of ``args.remote`` (``sc://host:port``): ``--session-id`` (or a
    fresh one, so that a supervisor can reach the session later), ``--conf KEY=VALUE`` items as session
    confs, ``--shuffle-partitions`` when the flags have it, UTC unless set. The session carries
    ``_watermark_ops_remote = {"url", "session_id"}``, which the checkpoint lock records.

    :raises ValueError: for a ``--conf`` item that is not ``KEY=VALUE``.
    :raises watermark_ops.spark.connect.ConnectVersionMismatch: client and server releases differ.
    """
    from watermark_ops.spark.connect import connect_session, new_session_id

    conf = {}
    for item in getattr(args, "spark_conf", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf expects KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    if getattr(args, "shuffle_partitions", None) is not None:
        conf["spark.sql.shuffle.partitions"] = str(args.shuffle_partitions)
    conf.setdefault("spark.sql.session.timeZone", "UTC")
    session_id = getattr(args, "session_id", None) or new_session_id()
    spark = connect_session(args.remote, session_id, conf)
    # Recorded in the checkpoint's lock, so that a later driver can stop what this one leaves behind.
    spark._watermark_ops_remote = {"url": args.remote, "session_id": session_id}
    return spark


def server_lost(exc: BaseException) -> bool:
    """True when ``exc`` says the Spark Connect server is unreachable or lost this client's state
    (gRPC UNAVAILABLE, a closed channel, a session or operation the restarted server does not know)."""
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in (
        "StatusCode.UNAVAILABLE", "UNAVAILABLE", "failed to connect", "Connection refused", "Socket closed",
        "INVALID_HANDLE", "SESSION_CHANGED", "SESSION_NOT_FOUND", "OPERATION_NOT_FOUND", "Channel closed",
        "RetriesExceeded"))


def stop_session(spark, timeout_seconds: float = STOP_TIMEOUT_SECONDS) -> bool:
    """``spark.stop()`` in a daemon thread, waited for at most ``timeout_seconds``.

    Over Spark Connect a stop can hang (a client-side listener's event stream on 4.2); the driver
    then ends anyway (:func:`exit_process` does not wait for threads).

    :return: True when the stop returned in time.
    """
    done = threading.Event()

    def stop() -> None:
        try:
            spark.stop()
        except Exception as exc:  # noqa: BLE001 - a lost server cannot be stopped; the run's outcome stands
            log.warning("spark.stop() failed: %s", exc)
        finally:
            done.set()

    threading.Thread(target=stop, name="spark-stop", daemon=True).start()
    if not done.wait(timeout_seconds):
        log.warning("spark.stop() did not return within %.0f s: ending the driver without it", timeout_seconds)
        return False
    return True


def quiet_py4j() -> None:
    """Keep py4j's INFO lines (a few dozen per run: gateway connections opened and closed, some
    logged from ``__del__``) out of the driver log, so that a task log carries the job's own lines."""
    for name in ("py4j", "py4j.java_gateway", "py4j.clientserver"):
        logging.getLogger(name).setLevel(logging.WARNING)
