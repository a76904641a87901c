"""The package's own way to write a job: shared flags, session, run and stop, queries run and recorded.

A job that does not want to be rewritten runs unchanged under the launcher
(:mod:`watermark_ops.spark.launch`); this module is the opt-in convenience the example jobs use:

* :func:`add_run_arguments`: the flags the run pattern passes (``--checkpoint``, ``--trigger``,
  ``--run-tag``, ...);
* :func:`execute`: the session from those flags (:func:`watermark_ops.spark.session.session_from_args`),
  the job's run, a bounded stop, and the exit statuses of :mod:`watermark_ops.spark.exits`;
* :func:`run_queries`: takes the one-driver-per-checkpoint lock, starts each query with its
  checkpoint and the Spark trigger, and records every micro-batch into the progress log
  (:class:`watermark_ops.spark.recorder.ProgressRecorder`).

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable

from watermark_ops.core.progress import progress_log_path
from watermark_ops.spark.exits import EXIT_CHECKPOINT_IN_USE, EXIT_SERVER_LOST, EXIT_VERSION_MISMATCH
from watermark_ops.spark.lock import CheckpointInUse, checkpoint_lock
from watermark_ops.spark.recorder import POLL_SECONDS, ProgressRecorder
from watermark_ops.spark.session import server_lost, session_from_args, stop_session
from watermark_ops.spark.trigger import SPARK_TRIGGERS, apply_spark_trigger, land_tick, owed_trailing_batch

log = logging.getLogger("watermark_ops.spark")

__all__ = ["add_run_arguments", "execute", "run_queries", "stop_orphans"]


def run_queries(spark, plans, spark_trigger: str, run_tag: str | None,
                tick_landing: str | None = None,
                late_rules: dict[str, dict[str, Any] | None] | None = None) -> list[tuple[Any, list[dict[str, Any]]]]:
    """Run (restart) streaming queries once with one Spark trigger, recording progress.

    :param plans: ``(name, streaming DataFrame, checkpoint, output)`` per query; each is started
        with ``queryName(name)`` and its checkpoint, and its batches are appended to
        ``<checkpoint>.progress.jsonl``. ``output`` is a path (an append-mode Parquet sink) or a
        function that takes that ``DataStreamWriter`` and returns it with its output mode and sink
        set (e.g. update mode through ``foreachBatch``).
    :param spark_trigger: ``"availableNow"`` or ``"once"`` (see :func:`apply_spark_trigger`).
    :param run_tag: stamped on every progress record (the DAG's run id).
    :param tick_landing: a folder every query reads; under availableNow, when a checkpoint's
        trailing no-data batch is owed (:func:`owed_trailing_batch`: the last driver died between
        a batch's commit and that batch), an empty tick file is landed there first
        (:func:`land_tick`), so that this run emits what the dead run did not.
    :param late_rules: ``{query name: late rule}`` (:func:`late_rule`) stamped on the query's
        progress records; a query not named gets null.
    :return: ``[(StreamingQuery, this run's progress records)]`` in the order of ``plans``.
    :raises checkpoint_lock.CheckpointInUse: when another driver holds a checkpoint's lock
        (``<checkpoint>.lock``, held for the whole run); no query is started then.
    :raises pyspark.errors.StreamingQueryException: when a query failed, after the other queries
        were stopped and every finished batch was recorded.
    """
    remote = getattr(spark, "_watermark_ops_remote", None)  # {"url", "session_id"} of a Connect client
    holder = {"spark_connect": remote} if remote else None
    with contextlib.ExitStack() as locks:
        for _, _, checkpoint, _ in plans:
            locks.enter_context(checkpoint_lock(checkpoint, holder, on_takeover=stop_orphans))
        if tick_landing and spark_trigger == "availableNow":
            for _, _, checkpoint, _ in plans:
                owed = owed_trailing_batch(checkpoint)
                if owed is not None:
                    path = land_tick(tick_landing, checkpoint, owed)
                    log.warning("checkpoint %s: batch %d was committed but the trailing no-data batch after it never "
                                "ran (its driver died); landed %s so that this run emits the windows it closes",
                                checkpoint, owed, path)
        return _run_locked(spark, plans, spark_trigger, run_tag, late_rules or {})


def stop_orphans(previous: dict[str, Any]) -> None:
    """On taking over the lock of a dead driver that ran on a Spark Connect server: stop the queries it
    left running in its server-side session (its task was killed with no chance to stop them), so
    that Spark does not refuse this run as a second active run of the checkpoint."""
    remote = previous.get("spark_connect")
    if not (isinstance(remote, dict) and remote.get("url") and remote.get("session_id")):
        return
    from watermark_ops.spark.connect import stop_session_queries

    try:
        stopped = stop_session_queries(remote["url"], remote["session_id"])
    except Exception as exc:  # noqa: BLE001 - a server that is gone holds no query
        log.warning("could not stop the queries of the dead driver's session %s: %s", remote["session_id"], exc)
        return
    if stopped:
        log.warning("stopped %d queries the dead driver left on %s (session %s): %s", len(stopped), remote["url"],
                    remote["session_id"], stopped)


def _run_locked(spark, plans, spark_trigger: str, run_tag: str | None,
                late_rules: dict[str, dict[str, Any] | None]) -> list[tuple[Any, list[dict[str, Any]]]]:
    from watermark_ops.spark.connect import is_connect_session

    remote = is_connect_session(spark)
    recorder = ProgressRecorder(spark, run_tag, spark_trigger, listen=not remote)
    queries = []
    try:
        for name, frame, checkpoint, output in plans:
            writer = frame.writeStream.queryName(name).option("checkpointLocation", checkpoint)
            if callable(output):  # the job sets the output mode and sink itself (e.g. foreachBatch)
                writer = output(writer)
            else:
                writer = writer.format("parquet").outputMode("append").option("path", output)
            query = apply_spark_trigger(writer, spark_trigger).start()
            recorder.register(query, progress_log_path(checkpoint), late_rules.get(name))
            queries.append(query)
        if remote:  # poll: each finished batch is recorded while the query runs, as the listener does
            for query in queries:
                while not query.awaitTermination(POLL_SECONDS):
                    recorder.flush(query)
        else:
            for query in queries:
                query.awaitTermination()
    except Exception as exc:
        if remote and server_lost(exc):
            queries = []  # nothing left to stop or read on a server that is gone
        raise
    finally:
        for query in queries:
            try:
                if query.isActive:
                    query.stop()
                recorder.flush(query)
            except Exception as exc:  # a lost Connect server: the query's own error is the one raised
                if not remote:
                    raise
                log.warning("query %s: could not stop it or read its last progress (%s)", query.id, exc)
        recorder.close()
    return [(query, recorder.records(query)) for query in queries]


def _optional_count(text: str) -> int | None:
    """A positive whole number, or None for ``""``/``"None"`` (what an unset DAG Param renders)."""
    if text.strip() in ("", "None", "null"):
        return None
    value = int(text)
    if value < 1:
        raise ValueError(f"expected a positive count, got {text!r}")
    return value


def add_run_arguments(parser) -> None:
    """The command-line flags every job shares, which the run pattern
    (``watermark_ops.airflow.run.watermarked_run``) passes: ``--checkpoint`` (required),
    ``--trigger`` (dest ``spark_trigger``), ``--run-tag``, and ``--max-files-per-trigger``,
    ``--master``, ``--shuffle-partitions``; for the Connect launch ``--remote`` (``sc://`` URL),
    ``--session-id`` and ``--conf KEY=VALUE`` (dest ``spark_conf``)."""
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint location (local path or URI)")
    parser.add_argument("--trigger", dest="spark_trigger", choices=list(SPARK_TRIGGERS), default="availableNow",
                        help="Spark trigger: availableNow (default) or the deprecated once")
    parser.add_argument("--run-tag", help="stamped on every progress record (the DAG passes its run id)")
    parser.add_argument("--max-files-per-trigger", type=_optional_count,
                        help="the file source's maxFilesPerTrigger: several micro-batches per run "
                             "(empty or None: all new files in one)")
    parser.add_argument("--master", help="Spark master when not launched by spark-submit (e.g. local[2])")
    parser.add_argument("--shuffle-partitions", type=int,
                        help="spark.sql.shuffle.partitions (default: 2 per local core; frozen in the checkpoint)")
    parser.add_argument("--remote", metavar="URL",
                        help="run on a Spark Connect server (sc://host:port) instead of a Spark application of its own")
    parser.add_argument("--session-id", metavar="UUID",
                        help="with --remote: the server-side session to use (a supervisor stops its queries "
                             "when it kills this driver)")
    parser.add_argument("--conf", dest="spark_conf", action="append", default=[], metavar="KEY=VALUE",
                        help="with --remote: a session conf (repeatable), as spark-submit's --conf")


def execute(app_name: str, args, run: Callable[[Any], dict]) -> tuple[int, dict | None]:
    """Build the session from the shared flags, call ``run(spark)``, stop the session.

    With ``--remote`` the session is a Spark Connect client (:func:`watermark_ops.spark.connect.connect_session`,
    versions checked first); otherwise a Spark application of its own (:func:`build_session`). The
    stop is bounded (:func:`stop_session`).

    :param run: returns ``{query name: {"query_id", "batches", ...}}`` (logged per query).
    :return: ``(0, result)``; ``(1, None)`` after logging the query's exception;
        ``(EXIT_CHECKPOINT_IN_USE, None)`` when another driver holds the checkpoint (logged);
        ``(EXIT_VERSION_MISMATCH, None)`` when the Connect server runs another Spark release;
        ``(EXIT_SERVER_LOST, None)`` when the Connect server cannot be reached or was lost mid-run.
    """
    from watermark_ops.spark.connect import ConnectVersionMismatch

    remote = getattr(args, "remote", None)
    try:
        spark = session_from_args(app_name, args)
    except ConnectVersionMismatch as exc:
        log.error("not started: %s", exc)
        return EXIT_VERSION_MISMATCH, None
    except Exception as exc:
        if remote and server_lost(exc):
            log.error("not started: the Spark Connect server %s cannot be reached: %s", remote, exc)
            return EXIT_SERVER_LOST, None
        raise
    lost = False
    try:
        result = run(spark)
    except CheckpointInUse as exc:
        log.error("not started: %s", exc)
        return EXIT_CHECKPOINT_IN_USE, None
    except Exception as exc:  # the query's exception, then a non-zero exit
        if remote and server_lost(exc):
            lost = True
            log.error("the Spark Connect server %s was lost during the run (down or restarted): %s. The checkpoint "
                      "is restartable: the next run re-runs the batch in flight", remote, exc)
            return EXIT_SERVER_LOST, None
        log.error("streaming query failed: %s", exc)
        return 1, None
    finally:
        if not lost:
            stop_session(spark)
    for name, info in result.items():
        log.info("%s (query %s): %d micro-batches this run", name, info["query_id"], len(info["batches"]))
    return 0, result
