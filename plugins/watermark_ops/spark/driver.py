"""The package's own way to write a job: shared flags, session, run and stop, queries run and recorded.

A job that does not want to be rewritten runs unchanged under the launcher
(:mod:`watermark_ops.spark.launch`); this module is the opt-in convenience the example jobs use:

* :func:`add_run_arguments`: the flags the run pattern passes (``--checkpoint``, ``--trigger``,
  ``--run-tag``, ...);
* :func:`execute`: the session from those flags (:func:`watermark_ops.spark.session.session_from_args`),
  the job's run, a bounded stop, and the exit statuses of :mod:`watermark_ops.spark.exits`;
* :func:`run_queries`: takes the one-driver-per-checkpoint lock, checks each query against what
  its checkpoint holds before starting any (:func:`watermark_ops.spark.restart.check_start`: a
  change the run does not accept refuses the run, nothing started), starts each query with its
  checkpoint and the Spark trigger, records every micro-batch into the progress log
  (:class:`watermark_ops.spark.recorder.ProgressRecorder`), and turns Spark's own refusal of a
  restart into a one-line diagnosis (:class:`watermark_ops.spark.restart.RestartRefused`).

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable

from watermark_ops.core.progress import progress_log_path
from watermark_ops.spark.exits import (
    EXIT_CHECKPOINT_IN_USE,
    EXIT_RESTART_REFUSED,
    EXIT_SERVER_LOST,
    EXIT_VERSION_MISMATCH,
)
from watermark_ops.spark.lock import CheckpointInUse, checkpoint_lock
from watermark_ops.spark.recorder import POLL_SECONDS, ProgressRecorder, add_data_interval_arguments, data_interval_of
from watermark_ops.spark.restart import RestartRefused, check_start, clear_diagnosis, diagnose_failure
from watermark_ops.spark.session import server_lost, session_from_args, stop_session
from watermark_ops.spark.trigger import SPARK_TRIGGERS, apply_spark_trigger, land_tick, owed_trailing_batch

log = logging.getLogger("watermark_ops.spark")

__all__ = ["add_run_arguments", "execute", "run_queries", "stop_orphans"]


def run_queries(spark, plans, spark_trigger: str, run_tag: str | None,
                tick_landing: str | None = None,
                late_rules: dict[str, dict[str, Any] | None] | None = None,
                accept_changes: Any = None,
                data_interval: dict[str, int] | None = None) -> list[tuple[Any, list[dict[str, Any]]]]:
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
    :param accept_changes: the silent changes of the queries the run accepts (``window_duration``,
        ``watermark_delay``, ``source_path``: a list or comma-separated text); None: what
        :func:`execute` was given (``--accept-changes``), else none.
    :param data_interval: the launching DAG run's ``{"start_ms", "end_ms"}`` (epoch ms UTC) stamped
        on every progress record; None: what :func:`execute` was given (``--data-interval-start``,
        ``--data-interval-end``), else none.
    :return: ``[(StreamingQuery, this run's progress records)]`` in the order of ``plans``.
    :raises checkpoint_lock.CheckpointInUse: when another driver holds a checkpoint's lock
        (``<checkpoint>.lock``, held for the whole run); no query is started then.
    :raises watermark_ops.spark.restart.RestartRefused: when a query's start check refused a
        change (no query is started), or Spark refused a restart (after the other queries were
        stopped and every finished batch recorded); the diagnosis is beside the checkpoint.
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
        if accept_changes is None:
            accept_changes = getattr(spark, "_watermark_ops_accept", ())
        if data_interval is None:
            data_interval = getattr(spark, "_watermark_ops_interval", None)
        return _run_locked(spark, plans, spark_trigger, run_tag, late_rules or {}, accept_changes, data_interval)


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
                late_rules: dict[str, dict[str, Any] | None], accept_changes: Any,
                data_interval: dict[str, int] | None = None) -> list[tuple[Any, list[dict[str, Any]]]]:
    from watermark_ops.spark.connect import is_connect_session

    # Every query is checked before any starts: a refused one leaves the others' checkpoints as they were.
    started_with = {name: check_start(frame, checkpoint, accept_changes, query_name=name, run_tag=run_tag).starting
                    for name, frame, checkpoint, _ in plans}
    remote = is_connect_session(spark)
    recorder = ProgressRecorder(spark, run_tag, spark_trigger, listen=not remote, data_interval=data_interval)
    queries = []
    waiting = None  # (name, checkpoint) of the query being waited for
    try:
        for name, frame, checkpoint, output in plans:
            waiting = (name, checkpoint)
            writer = frame.writeStream.queryName(name).option("checkpointLocation", checkpoint)
            if callable(output):  # the job sets the output mode and sink itself (e.g. foreachBatch)
                writer = output(writer)
            else:
                writer = writer.format("parquet").outputMode("append").option("path", output)
            query = apply_spark_trigger(writer, spark_trigger).start()
            shape = started_with.get(name)
            recorder.register(query, progress_log_path(checkpoint), late_rules.get(name),
                              started_with=shape.to_dict() if shape is not None else None)
            queries.append(query)
        for query, (name, _, checkpoint, _) in zip(queries, plans):
            waiting = (name, checkpoint)
            if remote:  # poll: each finished batch is recorded while the query runs, as the listener does
                while not query.awaitTermination(POLL_SECONDS):
                    recorder.flush(query)
            else:
                query.awaitTermination()
    except Exception as exc:
        if remote and server_lost(exc):
            queries = []  # nothing left to stop or read on a server that is gone
            raise
        diagnosis = diagnose_failure(exc, waiting[1] if waiting else None, query_name=waiting and waiting[0],
                                     run_tag=run_tag)
        if diagnosis is not None:
            raise RestartRefused(diagnosis) from exc
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
    for _, _, checkpoint, _ in plans:
        clear_diagnosis(checkpoint)  # this run of the checkpoint finished: an earlier refusal no longer holds
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
    ``--trigger`` (dest ``spark_trigger``), ``--run-tag``, ``--data-interval-start`` /
    ``--data-interval-end`` (the DAG run's data interval, stamped on every progress record by
    :func:`run_queries` under :func:`execute`), and ``--max-files-per-trigger``,
    ``--master``, ``--shuffle-partitions``, ``--accept-changes`` (the silent changes of the query the
    run accepts, comma-separated: ``window_duration``, ``watermark_delay``, ``source_path``); for the
    Connect launch ``--remote`` (``sc://`` URL), ``--session-id`` and ``--conf KEY=VALUE`` (dest ``spark_conf``)."""
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint location (local path or URI)")
    parser.add_argument("--trigger", dest="spark_trigger", choices=list(SPARK_TRIGGERS), default="availableNow",
                        help="Spark trigger: availableNow (default) or the deprecated once")
    parser.add_argument("--run-tag", help="stamped on every progress record (the DAG passes its run id)")
    add_data_interval_arguments(parser)
    parser.add_argument("--max-files-per-trigger", type=_optional_count,
                        help="the file source's maxFilesPerTrigger: several micro-batches per run "
                             "(empty or None: all new files in one)")
    parser.add_argument("--master", help="Spark master when not launched by spark-submit (e.g. local[2])")
    parser.add_argument("--accept-changes", default="", metavar="NAME[,NAME]",
                        help="changes of the query that Spark accepts silently and this run accepts on purpose "
                             "(window_duration, watermark_delay, source_path): else the start check refuses them")
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
        ``(EXIT_RESTART_REFUSED, None)`` when the start check or Spark refused a restart: the
        diagnosis line is the last ERROR line logged (after the session stopped);
        ``(EXIT_VERSION_MISMATCH, None)`` when the Connect server runs another Spark release;
        ``(EXIT_SERVER_LOST, None)`` when the Connect server cannot be reached or was lost mid-run.
    """
    from watermark_ops.core.state.restart import parse_accepted
    from watermark_ops.spark.connect import ConnectVersionMismatch

    remote = getattr(args, "remote", None)
    try:
        accepted = parse_accepted(getattr(args, "accept_changes", None))
    except ValueError as exc:
        log.error("not started: --accept-changes: %s", exc)
        return 2, None
    try:
        interval = data_interval_of(args)
    except ValueError as exc:
        log.error("not started: --data-interval-start/--data-interval-end: %s", exc)
        return 2, None
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
    spark._watermark_ops_accept = accepted  # run_queries' default
    spark._watermark_ops_interval = interval  # run_queries' default
    lost = False
    refused = None
    try:
        result = run(spark)
    except CheckpointInUse as exc:
        log.error("not started: %s", exc)
        return EXIT_CHECKPOINT_IN_USE, None
    except RestartRefused as exc:
        refused = exc.diagnosis
        if refused.spark_error:
            log.warning("Spark's error: %s", refused.spark_error)
        return EXIT_RESTART_REFUSED, None
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
        if refused is not None:  # the last ERROR line of the driver's log: the task log ends with it
            log.error("%s", refused.line)
    for name, info in result.items():
        log.info("%s (query %s): %d micro-batches this run", name, info["query_id"], len(info["batches"]))
    return 0, result
