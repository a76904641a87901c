"""The launcher: run a team's unmodified Structured Streaming script with the recorder attached.

::

    python -m watermark_ops.spark.launch [declarations] -- JOB.py [the job's own arguments]
    spark-submit [spark options] .../watermark_ops/spark/launch.py [declarations] -- JOB.py [arguments]

The job stays as it is: its argument parsing, ``SparkSession.builder...getOrCreate()``,
``readStream``, ``withWatermark``, its sinks, trigger and checkpoint locations, ``awaitTermination()``,
even a ``spark.stop()`` or ``sys.exit`` of its own. The launcher (what the run pattern,
``watermark_ops.airflow.run.watermarked_run(attach=True)``, gives spark-submit or the Spark Connect
operator as the application):

1. takes the declared checkpoint's lock (exit 3 when another driver holds it), and over Spark
   Connect (``--remote``) creates the client session the job's ``getOrCreate()`` then joins
   (``SPARK_REMOTE``), versions checked (exit 4) and the server reachable (exit 5);
2. attaches the recorder (:class:`watermark_ops.spark.attach.Attachment`) and runs the script as
   ``__main__`` (as ``runpy.run_path`` does: the script's folder first on ``sys.path``, ``sys.argv``
   its own; its globals kept, so its pre-watermark function is taken from the run, not re-imported);
   Before each query starts, its start check (:func:`watermark_ops.spark.restart.check_start`)
   compares it with what its checkpoint holds: a changed window duration, watermark delay or
   source path that the run does not accept (``--accept-changes``), or a change Spark would refuse,
   stops the run before the query starts (exit 7, ``EXIT_RESTART_REFUSED``);
3. waits for the queries it started, records their last batches (progress log beside each
   checkpoint, with the declared late rule on the declared checkpoint's query); a query that
   Spark refused to restart ends the run with exit 7 and its diagnosis
   (``<checkpoint>.diagnosis.json``); the diagnosis line is the driver log's last ERROR line;
4. with a declared pre-watermark function (``--pre-watermark module:function``), replays each of
   the run's batches in Spark through it (:mod:`watermark_ops.spark.replay`): the exact late rows
   of the job's own parsing, any file format (exit 6 when that replay fails: the run's data is
   committed, its ledger is not);
5. runs the exit handlers the script registered (``atexit``; once, the twin's not at all), stops
   the session, releases the locks and exits with the script's status (``run_driver``: the
   exit path that survives a killed spark-submit).

What the launcher needs and the job does not say is declared once, on the run pattern, and reaches
it as the flags below; the launcher records it in every progress record beside the checkpoint.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("watermark_ops.spark")

__all__ = ["EXIT_REPLAY_FAILED", "EXIT_WINDOW_MISMATCH", "main", "parse_launch_args"]

#: The exit status of a run whose queries finished but whose batches could not be replayed in Spark.
EXIT_REPLAY_FAILED = 6
#: The exit status of a run whose declared window disagrees with its query's plan (nothing started).
EXIT_WINDOW_MISMATCH = 8


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error told in one line on stderr (exit 2) instead of the usage and the error."""

    def error(self, message: str):  # noqa: D102 - argparse's
        self.exit(2, f"{self.prog}: error: {message} (--help lists the declarations)\n")


def parse_launch_args(argv: list[str]) -> tuple[argparse.Namespace, str, list[str]]:
    """``[declarations] -- JOB.py [arguments]`` → ``(declarations, job script, its arguments)``.

    :raises SystemExit: 0 after printing the help (``--help``); 2 after one line on stderr for an
        unknown or invalid declaration or a missing script.
    """
    parser = _Parser(prog="python -m watermark_ops.spark.launch",
                                     description="Run a Structured Streaming script with the watermark-ops recorder.")
    parser.add_argument("--checkpoint", help="the checkpoint of the query the late rule is about (the job's own)")
    parser.add_argument("--run-tag", help="stamped on every progress record (the DAG's run id)")
    from watermark_ops.spark.recorder import add_data_interval_arguments, data_interval_of

    add_data_interval_arguments(parser)  # the DAG run's data interval, stamped on every progress record
    parser.add_argument("--window", help="the query's time window duration ('1 hour'), checked against its plan "
                                         "(the window, its slide and a session window's gap are read from the plan; "
                                         "a declaration that disagrees stops the run)")
    parser.add_argument("--event-time", help="the landed field the event time comes from (default: the column "
                                             "withWatermark is called on)")
    parser.add_argument("--watermark-column", help="the column withWatermark is called on, when the job has several")
    parser.add_argument("--pre-watermark", metavar="MODULE:FUNCTION",
                        help="the job's function from raw rows to the rows that enter withWatermark: each batch is "
                             "replayed through it in Spark after the run (exact late rows)")
    parser.add_argument("--reason-column", help="the column naming why a row is set aside (in the pre-watermark "
                                               "function's rows, or in the job's reject query)")
    parser.add_argument("--allowed-lateness", metavar="DURATION",
                        help="recover late rows whose window ended less than this before the watermark that dropped "
                             "them ('6 hours'): their windows are computed again and published as corrections")
    parser.add_argument("--corrections-path", help="where the corrections table goes (default <sink>_corrections)")
    parser.add_argument("--no-twin", dest="twin", action="store_false",
                        help="without --pre-watermark, do not run the job as its batch twin after the run (the "
                             "run's late rows are then unknown)")
    parser.add_argument("--partition-column", help="observe each batch's newest event time per value of this column")
    parser.add_argument("--partitions", help="the values of the partition column to keep apart (comma-separated)")
    parser.add_argument("--landing", help="the query's landing folder (chooses among several sources; an owed "
                                          "trailing batch is run with an empty file landed there)")
    parser.add_argument("--master", help="the Spark master when the job's builder and spark-submit set none")
    parser.add_argument("--accept-changes", default="", metavar="NAME[,NAME]",
                        help="changes of the job's queries that Spark accepts silently and this run accepts on purpose "
                             "(window_duration, watermark_delay, source_path): else the start check refuses them")
    parser.add_argument("--remote", metavar="URL", help="run on this Spark Connect server (sc://host:port)")
    parser.add_argument("--session-id", metavar="UUID", help="with --remote: the server-side session to use")
    parser.add_argument("--conf", dest="spark_conf", action="append", default=[], metavar="KEY=VALUE",
                        help="with --remote: a session conf (repeatable)")
    if "--" not in argv:
        parser.parse_args(argv)  # --help prints the help and exits 0; an unknown declaration exits 2
        parser.error("expected '-- JOB.py [its arguments]' after the declarations")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    rest = argv[split + 1:]
    if not rest:
        parser.error("expected the job script after '--'")
    if args.allowed_lateness:
        from watermark_ops.core.ledger.corrections import allowed_lateness_ms

        try:
            allowed_lateness_ms(args.allowed_lateness)
        except ValueError as exc:
            parser.error(f"--allowed-lateness: {exc}")
    try:
        args.data_interval = data_interval_of(args)
    except ValueError as exc:
        parser.error(f"--data-interval-start/--data-interval-end: {exc}")
    if args.partition_column and not args.partitions:
        parser.error("--partition-column needs --partitions (the values to keep apart)")
    from watermark_ops.core.state.restart import parse_accepted

    try:
        args.accept_changes = parse_accepted(args.accept_changes)
    except ValueError as exc:
        parser.error(f"--accept-changes: {exc}")
    return args, rest[0], rest[1:]


def main(argv: list[str] | None = None) -> int:
    """Run the launcher (module docstring); returns the exit status."""
    from watermark_ops.spark.attach import Attachment
    from watermark_ops.spark.driver import stop_orphans
    from watermark_ops.spark.exits import (
        EXIT_CHECKPOINT_IN_USE,
        EXIT_RESTART_REFUSED,
        EXIT_SERVER_LOST,
        EXIT_VERSION_MISMATCH,
        hold_exit_handlers,
    )
    from watermark_ops.core.ledger.windows import WindowMismatch
    from watermark_ops.spark.lock import CheckpointInUse
    from watermark_ops.spark.restart import RestartRefused, clear_diagnosis
    from watermark_ops.spark.session import remote_session, server_lost, stop_session
    from watermark_ops.spark.trigger import tick_if_owed

    args, script, script_args = parse_launch_args(list(sys.argv[1:] if argv is None else argv))
    if not Path(script).is_file():  # a usage error: one line, as argparse's
        print(f"python -m watermark_ops.spark.launch: error: the job script {script} is not a file", file=sys.stderr)
        return 2
    script = str(Path(script).resolve())
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # launch.py run as a file
    sys.path.insert(0, str(Path(script).parent))
    remote, session = None, None
    if args.remote:
        from watermark_ops.spark.connect import ConnectVersionMismatch, with_session_id

        try:
            session = remote_session(args)
            remote = session._watermark_ops_remote
        except ConnectVersionMismatch as exc:
            log.error("not started: %s", exc)
            return EXIT_VERSION_MISMATCH
        except Exception as exc:
            if server_lost(exc):
                log.error("not started: the Spark Connect server %s cannot be reached: %s", args.remote, exc)
                return EXIT_SERVER_LOST
            raise
        os.environ["SPARK_REMOTE"] = with_session_id(args.remote, remote["session_id"])  # the job's getOrCreate joins it
    elif args.master:
        os.environ.setdefault("MASTER", args.master)
    partition = (args.partition_column, tuple(v.strip() for v in args.partitions.split(",") if v.strip())) \
        if args.partition_column else None
    attachment = Attachment(args.run_tag, lambda started, progress: _late_rule(args, attachment, started, progress),
                            lock_holder={"spark_connect": remote} if remote else None, on_takeover=stop_orphans,
                            partition=partition, accept_changes=args.accept_changes,
                            data_interval=args.data_interval, before_start=lambda ck, shape: _check_window(args, ck, shape))
    code = 0
    refused = None
    exit_handlers = hold_exit_handlers()  # the script's atexit handlers: run once, at the run's end
    try:
        if args.checkpoint:
            attachment.lock(args.checkpoint)
            tick_if_owed(args.landing, args.checkpoint)
        attachment.attach()
        namespace: dict[str, Any] = {}
        try:
            code = _run_script(script, script_args, namespace)
        finally:
            attachment.detach()
        code = _finish_queries(attachment, failed=code != 0) or code
        streamed = time.monotonic()
        if code == 0 and args.pre_watermark:
            code = _replay(args, attachment, script, namespace)
        elif code == 0 and args.checkpoint and args.twin:
            _twin(args, attachment, script, script_args)
            if attachment.queries:
                _timed(streamed - min(s.started_at for s in attachment.queries), time.monotonic() - streamed)
        if code == 0:
            for started in attachment.queries:
                clear_diagnosis(started.checkpoint)  # this run finished: an earlier refusal no longer holds
    except CheckpointInUse as exc:
        log.error("not started: %s", exc)
        return EXIT_CHECKPOINT_IN_USE
    except WindowMismatch as exc:
        log.error("not started: %s", exc)
        return EXIT_WINDOW_MISMATCH
    except RestartRefused as exc:
        refused = exc.diagnosis
        if refused.spark_error:
            log.warning("Spark's error: %s", refused.spark_error)
        _stop_started(attachment)
        return EXIT_RESTART_REFUSED
    except Exception as exc:  # noqa: BLE001 - reported; the exit status says what happened
        if remote and server_lost(exc):
            log.error("the Spark Connect server %s was lost during the run (down or restarted): %s. The checkpoint "
                      "is restartable: the next run re-runs the batch in flight", args.remote, exc)
            return EXIT_SERVER_LOST
        traceback.print_exc()
        code = code or 1
    finally:
        exit_handlers()
        attachment.release()
        session = attachment.spark or session
        if session is not None:
            stop_session(session)
        if refused is not None:  # the last ERROR line of the driver's log: the task log ends with it
            log.error("%s", refused.line)
    return code


def _run_script(script: str, script_args: list[str], namespace: dict[str, Any]) -> int:
    """Run ``script`` as ``__main__`` with its own ``sys.argv`` (as ``runpy.run_path`` does), its
    globals kept in ``namespace`` even when it ends with ``sys.exit``; its exit status.

    :raises watermark_ops.spark.lock.CheckpointInUse: a query's checkpoint is held by another driver.
    :raises watermark_ops.spark.restart.RestartRefused: a query's start check refused its restart.
    """
    import builtins
    import types

    from watermark_ops.core.ledger.windows import WindowMismatch
    from watermark_ops.spark.lock import CheckpointInUse
    from watermark_ops.spark.restart import RestartRefused
    from watermark_ops.spark.twin import CannotTwin

    module = types.ModuleType("__main__")
    module.__dict__.update({"__file__": script, "__builtins__": builtins, "__loader__": None, "__spec__": None,
                            "__cached__": None})
    saved_argv, saved_main = sys.argv, sys.modules.get("__main__")
    sys.argv = [script, *script_args]
    sys.modules["__main__"] = module
    try:
        code = compile(Path(script).read_bytes(), script, "exec")
        exec(code, module.__dict__)  # noqa: S102 - running the team's own job script is the launcher's purpose
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except (CheckpointInUse, RestartRefused, CannotTwin, WindowMismatch):
        raise
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        sys.argv = saved_argv
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        namespace.update(module.__dict__)
    return 0


def _finish_queries(attachment, failed: bool) -> int:
    """Wait for the queries the script started (availableNow/once end by themselves; a query of any
    other trigger, or any query of a failed script, is stopped), then record their last batches.

    :return: 1 when a query ended with an exception, else 0.
    :raises watermark_ops.spark.restart.RestartRefused: when Spark refused a query's restart (after
        every query was waited for and recorded); its diagnosis is beside the checkpoint.
    """
    from watermark_ops.spark.recorder import POLL_SECONDS
    from watermark_ops.spark.restart import RestartRefused, diagnose_failure

    code = 0
    refused = None
    recorder = attachment.recorder
    for started in attachment.queries:
        query = started.query
        try:
            if query.isActive and (failed or started.spark_trigger not in ("availableNow", "once")):
                query.stop()
            while not query.awaitTermination(POLL_SECONDS):
                if recorder is not None:
                    recorder.flush(query)
        except Exception as exc:  # noqa: BLE001 - the query's own failure: reported, the others still recorded
            diagnosis = diagnose_failure(exc, started.checkpoint, query_name=started.name, run_tag=attachment.run_tag)
            if diagnosis is None:
                log.error("query %s (%s) failed: %s", started.name, query.id, exc)
            refused = refused or diagnosis
            code = 1
    for started in attachment.queries:
        if recorder is not None and started.checkpoint is not None:
            try:
                recorder.flush(started.query)
            except Exception as exc:  # noqa: BLE001 - a lost Connect server: what was recorded stays
                log.warning("query %s: could not read its last progress (%s)", started.query.id, exc)
    if recorder is not None:
        recorder.close()
    for started in attachment.queries:
        if started.checkpoint is not None:
            log.info("query %s (%s): recorded beside %s", started.name or Path(started.checkpoint).name,
                     started.query.id, started.checkpoint)
    if refused is not None:
        raise RestartRefused(refused)
    return code


def _stop_started(attachment) -> None:
    """Stop the queries the script started before one of its queries was refused (recorded as usual)."""
    try:
        if any(started.query.isActive for started in attachment.queries):
            _finish_queries(attachment, failed=True)
    except Exception as exc:  # noqa: BLE001 - the refusal is what the run reports
        log.warning("stopping the job's other queries after the refusal: %s", exc)


def _main_query(args: argparse.Namespace, attachment) -> Any:
    """The started query whose checkpoint is the declared one, None when none is."""
    from watermark_ops.spark.attach import same_location

    return next((s for s in attachment.queries if same_location(s.checkpoint, args.checkpoint)), None)


def _watermark(args: argparse.Namespace, attachment) -> tuple[str | None, str | None]:
    """``(column, delay threshold)`` of the job's ``withWatermark`` (the declared column's when several)."""
    calls = list(dict.fromkeys(attachment.watermarks))
    if args.watermark_column:
        return args.watermark_column, next((d for c, d in calls if c == args.watermark_column), None)
    if len({c for c, _ in calls}) > 1:
        log.warning("the job calls withWatermark on %s: declare --watermark-column; using %s",
                    sorted({c for c, _ in calls}), calls[0][0])
    return calls[0] if calls else (None, None)


def _sources_of(progress: dict[str, Any], attachment, landing: str | None) -> list[Any]:
    """The captured reader settings of each source of a query's progress, in plan order (by the path
    its description names: ``FileStreamSource[file:/landing]``); None for a source not captured."""
    from watermark_ops.spark.attach import same_location

    found = []
    for entry in progress.get("sources") or []:
        text = str(entry.get("description") or "")
        path = text[text.find("[") + 1:text.rfind("]")] if "[" in text else None
        match = [s for s in attachment.sources if same_location(s.path, path)]
        if not match and len(attachment.sources) == 1:
            match = attachment.sources
        if len(match) > 1 and landing:
            match = [s for s in match if same_location(s.path, landing)] or match
        found.append(match[-1] if match else None)
    return found


def _late_rule(args: argparse.Namespace, attachment, started, progress: dict[str, Any]) -> dict[str, Any] | None:
    """The declared checkpoint's query's late rule, with what the launcher saw of the job (its
    reader settings, its watermark column and delay); None for the job's other queries."""
    from watermark_ops.core.ledger.rule import late_rule
    from watermark_ops.spark.attach import same_location

    if not same_location(started.checkpoint, args.checkpoint):
        return None
    column, delay = _watermark(args, attachment)
    if column is None:
        log.warning("query %s: no withWatermark seen: recorded without a late rule", started.name)
        return None
    field = args.event_time or column
    from watermark_ops.core.ledger.windows import window_of

    window = window_of(started.started_with, args.window, f"query {started.name or started.checkpoint}")
    rule = late_rule(window.kind, field, delay or "0 seconds", **window.late_rule_arguments())
    inputs = []
    for source in _sources_of(progress, attachment, args.landing):
        if source is None:
            inputs.append({"event_time": field, "schema": {}, "required": {}, "parsing": "job", "format": "unknown"})
            continue
        inputs.append({"event_time": field, "schema": {}, "required": {}, "parsing": "job", "format": source.format,
                       "schema_ddl": source.schema_ddl(), "options": dict(source.options),
                       "pre_watermark": args.pre_watermark, "reason_column": args.reason_column,
                       "watermark_column": column})
    if len(inputs) > 1:
        rule["event_time"] = [field] * len(inputs)
    if inputs:
        rule["inputs"] = inputs
    return rule


def _check_window(args: argparse.Namespace, checkpoint: str, shape: Any) -> None:
    """Before the declared checkpoint's query starts: a declared window that disagrees with its plan
    stops the run (:class:`~watermark_ops.core.ledger.windows.WindowMismatch`, one line)."""
    from watermark_ops.core.ledger.windows import window_of
    from watermark_ops.spark.attach import same_location

    if shape is not None and same_location(checkpoint, args.checkpoint):
        log.info("the query's window, read from its plan: %s", window_of(shape.to_dict(), args.window, checkpoint))


def _pre_watermark_function(spec: str, script: str, namespace: dict[str, Any]) -> Callable[[Any], Any]:
    """``module:function`` → the function: the script's own (``module`` its file name's stem) from the
    globals its run left, so an unguarded script is not run twice; another module imported from the
    script's folder.

    :raises ValueError: for another form, or a name that is not a function of the module.
    """
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"--pre-watermark expects MODULE:FUNCTION, got {spec!r}")
    if module == Path(script).stem:
        function = namespace.get(name)
    else:
        function = getattr(importlib.import_module(module), name, None)
    if not callable(function):
        raise ValueError(f"--pre-watermark {spec}: {module} has no function {name}")
    return function


def _replay(args: argparse.Namespace, attachment, script: str, namespace: dict[str, Any]) -> int:
    """Replay the declared query's batches of this run through the job's pre-watermark function."""
    from watermark_ops.spark.replay import replay_run

    started = _main_query(args, attachment)
    if started is None:
        log.error("the job started no query on the declared checkpoint %s: nothing to replay (queries: %s)",
                  args.checkpoint, [s.checkpoint for s in attachment.queries])
        return EXIT_REPLAY_FAILED
    try:
        records = attachment.recorder.records(started.query)
        batch_ids = [r["batch_id"] for r in records if r.get("executed")]
        if not batch_ids:
            return 0
        sources = [s for s in _sources_of(records[-1], attachment, args.landing) if s is not None]
        if len(sources) != 1:
            raise ValueError(f"the replay reads one file source per query; the query has {len(sources)} known ones")
        column, _ = _watermark(args, attachment)
        replay_run(attachment.spark, started.checkpoint, batch_ids, sources[0],
                   _pre_watermark_function(args.pre_watermark, script, namespace), column, args.reason_column,
                   query_id=str(started.query.id), run_tag=args.run_tag)
    except Exception as exc:  # noqa: BLE001 - the run's data is committed; its ledger is what failed
        traceback.print_exc()
        log.error("the run's batches %s could not be replayed through %s: %s (the ledger names them as not "
                  "replayed)", [r.get("batch_id") for r in attachment.recorder.records(started.query)],
                  args.pre_watermark, exc)
        return EXIT_REPLAY_FAILED
    return 0


def _twin(args: argparse.Namespace, attachment, script: str, script_args: list[str]) -> None:
    """The run's late rows from the job's batch twin (:mod:`watermark_ops.spark.twin`): the script run
    again over the run's files with the stream APIs answered by batch ones, every batch in one Spark
    job; with ``--allowed-lateness`` the same job computes again the windows its recoverable late rows
    can fall in (:mod:`watermark_ops.spark.corrections`). Never fails the run (its data is
    committed): a job that cannot be twinned is named in one line, and each of its batches gets a
    record saying why, so every face calls its late rows unknown."""
    from watermark_ops.core.ledger.corrections import allowed_lateness_ms, files_for_windows
    from watermark_ops.core.ledger.plan import plan_batches
    from watermark_ops.core.ledger.replayed import read_replay_log, replay_log_path, replay_record
    from watermark_ops.spark.corrections import window_parts, window_range
    from watermark_ops.spark.recorder import append_json_lines
    from watermark_ops.spark.twin import CannotTwin, run_twin
    from watermark_ops.spark.twin_ledger import twin_records

    started = _main_query(args, attachment)
    if started is None or attachment.recorder is None:
        return
    records = attachment.recorder.records(started.query)
    batch_ids = [r["batch_id"] for r in records if r.get("executed")]
    if not batch_ids:
        return
    query_id = str(started.query.id)
    _, plans, problems = plan_batches(started.checkpoint, batch_ids)
    for problem in problems:
        log.warning("twin of %s: %s: %s", started.checkpoint, problem.file, problem.message)
    plans = [p for p in plans if p.ok]
    if not plans:
        return
    sources = [s for s in _sources_of(records[-1], attachment, args.landing) if s is not None]
    main_path = sources[0].path if len(sources) == 1 else None
    files = [uri for plan in plans for _, uri in plan.files]
    rule = plans[0].rule
    allowed, extent = allowed_lateness_ms(args.allowed_lateness), rule.window_ms or rule.gap_ms
    span = window_range(plans, allowed, extent, rule.kind == "session") if allowed and extent else None
    if span is not None:  # the earlier files whose rows the windows to correct may hold
        events = (span[0], span[2] if rule.kind == "session" else span[1])
        files += [f for f in files_for_windows(read_replay_log(started.checkpoint)[0], [events]) if f not in files]

    def files_for(location: str | None) -> list[str]:
        from watermark_ops.spark.attach import same_location

        return files if main_path is None or same_location(location, main_path) else []

    column, _ = _watermark(args, attachment)
    extra, shape, main, emitted = [], None, None, []
    try:
        if column is None:
            raise CannotTwin("the job called no withWatermark during the run")
        twin = run_twin(lambda: _run_script(script, script_args, {}), files_for, len(attachment.queries))
        main = twin.query_for(started.checkpoint)
        if main is None:
            raise CannotTwin(f"the job's batch twin started no query on {started.checkpoint}; declare pre_watermark "
                             "instead")
        parts = []
        if span is not None:
            try:
                parts, shape, emitted = window_parts(attachment.spark, main, rule, *span)
            except CannotTwin as exc:
                log.warning("no corrections for this run: %s", exc)
        made, extra = twin_records(attachment.spark, plans, twin, main, column, args.reason_column, query_id=query_id,
                                   run_tag=args.run_tag, source=sources[0] if len(sources) == 1 else None,
                                   extra_parts=parts)
        extra += emitted  # what the sink holds, when the driver read it itself
    except CannotTwin as exc:
        log.warning("late rows unknown for batches %s: the job cannot be twinned: %s", batch_ids, exc)
        from watermark_ops.core.ledger.plan import tally

        made = []
        for plan in plans:
            record = replay_record(tally(plan, [], "spark", rows_read=0), query_id, args.run_tag, [],
                                   [f"not twinned: {exc}"])
            record["method"] = "twin"
            made.append(record)
    except Exception as exc:  # noqa: BLE001 - the run's data is committed; its ledger is what failed
        traceback.print_exc()
        log.warning("late rows unknown for batches %s: the job's batch twin failed: %s", batch_ids, exc)
        return
    for record in made:
        if allowed:
            record["allowed_lateness_ms"] = allowed  # the faces: no correction yet is 0 recovered, not unknown
    append_json_lines(replay_log_path(started.checkpoint), made)
    for record in made:
        log.info("batch %d from the job's batch twin: %d rows read, %d set aside, %d aggregated, %d late%s",
                 record["batch_id"], record["rows_read"], sum(record["rows_quarantined"].values()),
                 record["rows_aggregated"], len(record["late_rows"]),
                 f"; NOT EXACT: {'; '.join(record['problems'])}" if record["problems"] else "")
    if shape is not None and not any(r["problems"] for r in made):
        _correct(args, attachment, started.checkpoint, made, extra, shape, main, allowed,
                 (max(p.watermark_ms or 0 for p in plans), max(p.batch_id for p in plans)))


def _timed(streaming_s: float, after_s: float) -> None:
    """Log what the ledger and corrections cost against the run's streaming time (from its first
    query's start to its queries' end): one line that ``make bench`` reads."""
    log.info("late rows and corrections: %.2f s after %.2f s of streaming (%.2fx the run's streaming time)",
             after_s, streaming_s, after_s / streaming_s if streaming_s > 0 else float("nan"))


def _correct(args: argparse.Namespace, attachment, checkpoint: str, made: list[dict[str, Any]], rows: list[Any],
             shape: Any, query, allowed_ms: int, closed: tuple[int, int] | None = None) -> None:
    """Publish the run's corrections (:mod:`watermark_ops.spark.corrections`); never fails the run: a
    window that cannot be corrected is named in one line and its late rows stay in the ledger.

    The corrections' run (and their folder's ``run_key``) is the run tag; a launch without one (by
    hand) is its own run: the declared query's ``runId`` for this start, so no launch replaces
    another's corrections, while a rerun of a tagged run (an Airflow run) replaces that run's."""
    from watermark_ops.core.ledger.corrections import read_corrections
    from watermark_ops.spark.corrections import corrections_from, write_corrections

    started = _main_query(args, attachment)
    run = args.run_tag or (str(started.query.runId) if started is not None else None)
    try:
        earlier = read_corrections(checkpoint)[0] if shape.session else []
        corrections = corrections_from(rows, shape, made, allowed_ms, run, earlier, *(closed or (None, None)))
        folder = write_corrections(attachment.spark, corrections, query, checkpoint, args.corrections_path,
                                   shape.table_names)
    except Exception as exc:  # noqa: BLE001 - the run's data and ledger stand; its corrections are what failed
        traceback.print_exc()
        log.warning("no corrections for this run: %s", exc)
        return
    log.info("corrections: %d windows and groups corrected%s", len(corrections),
             f", written to {folder}" if folder else "")


if __name__ == "__main__":
    from watermark_ops.spark.exits import run_driver

    run_driver(main)
