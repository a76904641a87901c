"""The run pattern: one scheduled, restartable run of a watermarked Spark job, as one TaskGroup.

What every DAG that runs a Structured Streaming job as ``availableNow`` (or ``once``) restarts
needs before and after its Spark run, wired once::

    preflight              will the restart work? go / warn / no_go (``airflow.restart.preflight_gate``):
      │                    no_go fails here, with the reason, the file and the recipe: nothing launched
    submit (SparkSubmitOperator, or with launch="connect" SparkConnectRunOperator on a Spark Connect
            server: the job, --checkpoint, --trigger, --run-tag {{ run_id }}, the data interval); a restart the driver's
            start check or Spark refused fails it with the driver's one-line diagnosis
      ├─▶ collect_progress   this run's micro-batches, last watermark, quarantined rows, lateness advice
      ├─▶ late_ledger        every row this run's batches dropped as late, and the balance
      │                      rows in = aggregated + late + quarantined   (``core.ledger.reconcile_run``)
      │      └─▶ check_run  fails a run that set aside most of its rows, or aggregated none, naming
      │                     the top reason and one example record; warns (or, with fail_on_unknown_late,
      │                     fails) when the run's late rows are unknown (``core.ledger.judge_run``)
      ├─▶ announce_corrections  with ``allowed_lateness``: an asset event naming the windows the
      │                     run corrected (its late rows recovered); skipped when it corrected none
      └─▶ audit_checkpoint   the watermark never went backwards (``WatermarkAuditOperator``)
             ├─▶ state_checkpoint  rows per stateful operator, watermark bound, chain, state findings
             └─▶ complete    optional completeness gate (``WatermarkReachedSensor``), after a passed audit ─┐
                             late_ledger ───────────────────────────────────────────────────────────────────┴─▶ announce
                             optional: one partitioned asset event per closed partition
                             (``WatermarkPartitionsOperator``)

:func:`watermarked_run` builds it inside the current DAG and returns the ``TaskGroup``, so a DAG
chains its own tasks before and after it (``land() >> run >> report()``). The job is either

* a team's **unmodified** script (``attach=True``): the application becomes the package's launcher
  (``watermark_ops/spark/launch.py``, :mod:`watermark_ops.spark.launch`) and the script its argument
  after ``--``; the script keeps its own arguments, session, trigger, sinks and checkpoint
  locations. What the recorder needs and the job does not say is declared here, once: the
  checkpoint of the query the ledger is about, its window, the landed event-time field, the
  pre-watermark function whose Spark replay makes the late rows exact for the job's own parsing,
  the column naming why a row is set aside, the partition column; or
* a script written with the package's opt-in helpers, which parses the shared flags
  (``watermark_ops.spark.add_run_arguments``: ``--checkpoint``, ``--trigger``, ``--run-tag``,
  ``--data-interval-start``/``--data-interval-end``, ``--max-files-per-trigger``) and runs its
  queries through ``watermark_ops.spark.run_queries``.

Either way the recorder stamps the DAG run's data interval on every progress record, so the
watermark's lag is judged against the end of the interval the run processed
(:mod:`watermark_ops.core.freshness`): a backfill of old data is on time for its interval.

Either way the progress log the tasks after it read lies beside the checkpoint.

Every checkpoint a run pattern touches is registered (``watermark_ops.airflow.registry``) with
its DAG, landing folders and ledger sink, so the UI's pages and the monitor list it with no
configuration file. Cheap at parse time: nothing here reads a file or imports pyspark; the tasks
import the core when they run.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import Any, Callable, Sequence

from airflow.sdk import Asset, TaskGroup, task

from watermark_ops.airflow.operators import WatermarkAuditOperator
from watermark_ops.airflow.restart import DiagnosedSparkSubmitOperator
from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY

__all__ = ["DEFAULT_TASK_IDS", "LAUNCHES", "default_corrections_asset", "launcher_path", "watermarked_run"]

#: Task ids inside the group (prefixed with the group id unless ``prefix_group_id=False``).
DEFAULT_TASK_IDS = {
    "preflight": "preflight",
    "submit": "spark_submit",
    "collect": "collect_progress",
    "ledger": "late_ledger",
    "check": "check_run",
    "audit": "audit_checkpoint",
    "state": "state_checkpoint",
    "complete": "complete",
    "announce": "announce_partitions",
    "corrections": "announce_corrections",
}
SPARK_TRIGGERS = ("availableNow", "once")
#: How the job's driver runs: a Spark application per run (spark-submit), or a client of a Spark Connect server.
LAUNCHES = ("submit", "connect")
#: The run's identity, passed to the launcher and to a helpers job alike: its run id and its data interval
#: (rendered "None" for a run without one: the recorder then stamps none).
RUN_FLAGS = ("--run-tag", "{{ run_id }}", "--data-interval-start", "{{ data_interval_start }}",
             "--data-interval-end", "{{ data_interval_end }}")
#: The share of a run's input rows that may be set aside before its check fails (``core.ledger``'s default).
MAX_QUARANTINE_RATE = 0.5


def launcher_path() -> str:
    """The launcher's file (``watermark_ops/spark/launch.py`` of the installed package): what
    spark-submit runs for ``attach=True``. Found without importing the Spark side."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spark", "launch.py")


def _accepted(accept_changes: Sequence[str] | str | None) -> str | None:
    """The ``--accept-changes`` value: names checked now when literal (a template is checked by the driver)."""
    if accept_changes is None or (isinstance(accept_changes, (list, tuple)) and not accept_changes):
        return None
    if isinstance(accept_changes, str) and "{{" in accept_changes:
        return accept_changes
    from watermark_ops.core.state.restart import parse_accepted

    return ",".join(parse_accepted(accept_changes)) or None


def _declarations(checkpoint: str, window: str | None, event_time: str | None, watermark_column: str | None,
                  pre_watermark: str | None, reason_column: str | None, partition_column: str | None,
                  partitions: Sequence[str] | None, landings: list[str], accepted: str | None = None,
                  allowed_lateness: str | None = None, corrections_path: str | None = None) -> list[str]:
    """The launcher's flags (:func:`watermark_ops.spark.launch.parse_launch_args`) for the declarations."""
    args = ["--checkpoint", checkpoint, *RUN_FLAGS]
    if accepted:
        args.append(f"--accept-changes={accepted}")
    for flag, value in (("--window", window), ("--event-time", event_time), ("--watermark-column", watermark_column),
                        ("--pre-watermark", pre_watermark), ("--reason-column", reason_column),
                        ("--partition-column", partition_column), ("--allowed-lateness", allowed_lateness),
                        ("--corrections-path", corrections_path)):
        if value:
            args += [flag, value]
    if partitions:
        args += ["--partitions", ",".join(str(p) for p in partitions)]
    if len(landings) == 1:
        args += ["--landing", landings[0]]
    return args


def _check_allowed_lateness(allowed_lateness: str | None, corrections_path: str | None) -> None:
    """Check the corrections' declarations when the DAG is parsed (no I/O; the interval's reader is
    imported only when one is given, a template is left to the launcher).

    :raises ValueError: for an interval that is not one ('6 hours'), or a corrections path without an
        allowed lateness (the window it corrects is read from the job's plan).
    """
    if corrections_path and not allowed_lateness:
        raise ValueError("corrections_path needs allowed_lateness (the late rows whose windows are corrected)")
    if not allowed_lateness:
        return
    if "{{" not in str(allowed_lateness):
        from watermark_ops.core.ledger.corrections import allowed_lateness_ms

        allowed_lateness_ms(allowed_lateness)


def watermarked_run(
    group_id: str,
    *,
    application: str,
    checkpoint: str,
    landings: Sequence[str] = (),
    application_args: Sequence[str] = (),
    spark_trigger: str = "availableNow",
    max_files_per_trigger: int | str | None = None,
    quarantine_checkpoint: str | None = None,
    late_sink: str | None = None,
    complete_target: str | None = None,
    complete_asset: Asset | None = None,
    complete_kwargs: dict[str, Any] | None = None,
    partition_asset: Asset | None = None,
    partition_since: Any = None,
    partition_grain: str = "day",
    partition_timezone: str = "UTC",
    partition_facts: Callable[[Any], dict] | None = None,
    conn_id: str = "spark_default",
    launch: str = "submit",
    connect_conn_id: str = "spark_connect_default",
    py_files: str | None = None,
    conf: dict[str, Any] | None = None,
    env_vars: dict[str, Any] | None = None,
    spark_submit_kwargs: dict[str, Any] | None = None,
    lateness: bool = True,
    attach: bool = False,
    window: str | None = None,
    event_time: str | None = None,
    watermark_column: str | None = None,
    pre_watermark: str | None = None,
    reason_column: str | None = None,
    partition_column: str | None = None,
    partitions: Sequence[str] | None = None,
    allowed_lateness: str | None = None,
    corrections_path: str | None = None,
    corrections_asset: Asset | None = None,
    max_quarantine_rate: float = MAX_QUARANTINE_RATE,
    fail_on_unknown_late: bool = False,
    preflight: bool = True,
    spark_version: str | None = None,
    accept_changes: Sequence[str] | str | None = None,
    state_check: bool = True,
    checkpoint_conn_id: str | None = None,
    task_ids: dict[str, str] | None = None,
    prefix_group_id: bool = True,
) -> TaskGroup:
    """Build the run pattern's TaskGroup in the DAG being defined (call it inside ``with DAG`` / ``@dag``).

    :param group_id: the TaskGroup's id.
    :param application: the job script (or jar) given to spark-submit; with ``attach``, the team's
        unmodified script, run by the package's launcher.
    :param checkpoint: the query's checkpoint location (local path or fsspec/Hadoop URI), read by
        every task after the run (templated); passed to the job as ``--checkpoint`` (with
        ``attach``: to the launcher, the job being given its own location in ``application_args``).
    :param landings: the landing folders of the query's inputs (one per source, in plan order):
        the lateness advice reads them; the late-row ledger finds them in the checkpoint's source log.
    :param application_args: the job's own arguments, before the run pattern's
        (``--checkpoint``, ``--trigger``, ``--run-tag {{ run_id }}``, ``--data-interval-start`` /
        ``--data-interval-end`` (``{{ data_interval_start }}`` / ``{{ data_interval_end }}``),
        ``--max-files-per-trigger``).
    :param spark_trigger: ``"availableNow"`` (default) or ``"once"``, or a template rendering to one
        (e.g. ``"{{ params.spark_trigger }}"``).
    :param max_files_per_trigger: the file source's ``maxFilesPerTrigger`` (several micro-batches
        per run); None: the job's default (all files in one batch).
    :param quarantine_checkpoint: the checkpoint of the job's quarantine query (its ``quarantine``
        observed metrics count the rows kept aside); default ``<checkpoint>_quarantine``, absent = 0 rows.
    :param late_sink: a folder where the ledger writes the late rows (``batch=<N>.jsonl``); None: XCom only.
    :param complete_target: the completeness gate's target instant (templated, e.g.
        ``"{{ data_interval_start }}"``); None: no gate.
    :param complete_asset: the asset the gate records completeness on (extra ``watermark_ms``, ...).
    :param complete_kwargs: further ``WatermarkReachedSensor`` arguments (thresholds, mode, timeout,
        ``on_failure_callback``); default: reschedule mode, 60 s pokes, 1 h timeout, no retries.
    :param partition_asset: a partitioned asset: one event per partition the emitted-through
        watermark newly closed (``WatermarkPartitionsOperator``); None: no announcements.
    :param partition_since: the first partition's instant (templated); required with ``partition_asset``.
    :param partition_grain: ``"day"`` or ``"hour"``.
    :param partition_timezone: the days' IANA time zone.
    :param partition_facts: ``callable(Partition) -> dict`` added to each partition's event extra.
    :param conn_id: the Spark connection of the submit launch (``spark_default``).
    :param launch: ``"submit"`` (default): a Spark application per run (``SparkSubmitOperator``);
        ``"connect"``: the same job script as a thin client on a long-lived Spark Connect server
        (:class:`watermark_ops.airflow.connect.SparkConnectRunOperator`: ``--remote``, a session id
        whose queries are stopped when the task is killed or times out; ``conf`` becomes session
        confs, ``py_files`` is not needed: the client imports the job's modules itself).
    :param connect_conn_id: the ``spark_connect`` connection of the connect launch
        (``spark_connect_default``; ``SparkConnectHook``).
    :param py_files: comma-separated ``--py-files`` (e.g. the job's own modules, or the built
        ``watermark-ops`` wheel for a cluster whose Python does not have it installed).
    :param conf: spark-submit ``--conf`` values (templated).
    :param env_vars: spark-submit's environment.
    :param spark_submit_kwargs: further ``SparkSubmitOperator`` arguments (``execution_timeout``,
        ``name``, ``retries``, ...).
    :param lateness: add the lateness advice (drop rate per run, delay threshold per target) to
        ``collect_progress`` (the landing folders' event times, or the Spark replay's).
    :param attach: run ``application`` unchanged under the launcher (module docstring): its trigger,
        sinks and checkpoint locations stay its own (``spark_trigger`` and ``max_files_per_trigger``
        are then the job's business and not passed).
    :param window: the query's time window duration (``"1 hour"``), checked against the job's plan:
        the launcher reads the window from the plan (tumbling, sliding with its slide and start
        offset, or a session window's gap: :mod:`watermark_ops.core.ledger.windows`) and a declared
        one that disagrees stops the run; None: the plan's (no window in the plan: late rows are those
        whose event time was behind the watermark, as for deduplication and joins). With ``attach``.
    :param event_time: the landed field the event time comes from (default: the column the job
        calls ``withWatermark`` on). With ``attach``.
    :param watermark_column: that column, when the job calls ``withWatermark`` on several.
    :param pre_watermark: ``"module:function"``: the job's function from its raw rows to the rows
        that enter ``withWatermark`` (its own parsing); each batch of the run is replayed through it
        in Spark after the run, which makes the late rows exact for any format. With ``attach``.
    :param reason_column: that function's column naming why a row is set aside (null: the row
        enters the watermark); rows it filters out are counted as ``filtered_by_job``.
    :param partition_column: / partitions: the column whose values share one watermark (e.g. a
        station), and its values: each batch's newest event time per value is recorded (the skew).
    :param allowed_lateness: ``"6 hours"``: after each run, the late rows whose window ended less than
        this before the watermark that dropped them are recovered: the launcher computes their windows
        again from every row and writes each changed group as a correction beside the sink
        (``<sink>_corrections/run_key=<run>/``) and to ``<checkpoint>.corrections.jsonl``; later rows
        stay final drops (:mod:`watermark_ops.core.ledger.corrections`). Checked when the DAG is
        parsed (a Spark interval of whole units; a template is checked by the launcher). Needs
        ``attach``; the windows corrected are the plan's (tumbling, sliding, session: a session's
        correction retracts the sessions it replaces). The completeness gate and the partition announcements then wait
        until the watermark is that far past a target or a partition's end: its windows are emitted
        and their corrections published. None: no corrections.
    :param corrections_path: where the corrections table goes (default ``<sink>_corrections``);
        with ``allowed_lateness``.
    :param corrections_asset: with ``allowed_lateness``, the asset a run that corrected something
        updates (task ``announce_corrections``, skipped when the run corrected nothing: no event), its
        ``extra`` naming the windows: ``{"corrected_windows": [{"window_start_ms", "window_end_ms",
        "keys"}], "run", "checkpoint", "corrections", "late_rows"}`` (epoch ms UTC), so a DAG scheduled
        on it redoes exactly those; default :func:`default_corrections_asset` of the checkpoint (a
        templated checkpoint needs one given).
    :param max_quarantine_rate: ``check_run`` fails a run that set aside more than this share of its
        input rows, or aggregated none of them, naming the top reason and one example record.
    :param fail_on_unknown_late: ``check_run`` fails a run whose late rows cannot be known (a batch
        of the run the ledger could not replay: e.g. a job attached with its own parsing and no
        ``pre_watermark``, which has no Spark replay records), naming the batches and why. Default
        False: such a run passes with a warning in the task log; either way its XComs say
        ``late_rows_known`` false and ``rows_late`` None, never 0.
    :param preflight: run the restart preflight before the launch (task ``preflight``,
        :func:`watermark_ops.airflow.restart.preflight_gate`): ``no_go`` fails it with the reason,
        the file and the recipe, and nothing is launched; ``warn`` passes, logged. Default on.
    :param spark_version: the Spark release the run uses, for the preflight's log-version checks
        (default: the worker's installed ``pyspark``, else ``pyspark-client``).
    :param accept_changes: changes of the query that Spark accepts silently and this run accepts on
        purpose, else the driver's start check refuses the run (exit 7) before the query starts:
        ``"window_duration"``, ``"watermark_delay"``, ``"source_path"`` (a list, or comma-separated
        text; templated, e.g. ``"{{ params.accept_changes }}"``). Give it for the run that makes the
        change: the next run compares with what this one started. Passed to the launcher
        (``--accept-changes``) or to a helpers job (``--accept-changes``, read by ``execute``).
    :param state_check: read the state after the audit (task ``state_checkpoint``,
        :func:`watermark_ops.airflow.restart.state_check`): rows per operator, watermark bound,
        chain; its findings are warnings, never a failure. Default on.
    :param checkpoint_conn_id: the Airflow connection the preflight, the audit, the state check and
        the submit task's diagnosis read the checkpoint with (object storage: ``s3://``, ...); None:
        a local path, or fsspec with the worker's environment.
    :param task_ids: renames of :data:`DEFAULT_TASK_IDS` entries.
    :param prefix_group_id: prefix the task ids with ``group_id`` (Airflow's default).
    :return: the ``TaskGroup``; its roots are the submit task, its leaves the tasks after it.
    :raises ValueError: for a literal ``spark_trigger`` other than availableNow/once, a partition
        asset without ``partition_since``, a templated checkpoint with ``allowed_lateness`` and no
        ``corrections_asset``, a ``launch`` other than submit/connect, an
        ``accept_changes`` name that is not a silent change, or an ``allowed_lateness`` that is not
        an interval (or given without ``window``).
    """
    if launch not in LAUNCHES:
        raise ValueError(f"launch must be one of {LAUNCHES}, got {launch!r}")
    if "{{" not in spark_trigger and spark_trigger not in SPARK_TRIGGERS:
        raise ValueError(f"spark_trigger must be one of {SPARK_TRIGGERS} (or a template), got {spark_trigger!r}")
    if partition_asset is not None and partition_since is None:
        raise ValueError("partition_asset needs partition_since (the first partition's instant)")
    declared = {"window": window, "event_time": event_time, "watermark_column": watermark_column,
                "pre_watermark": pre_watermark, "reason_column": reason_column, "partition_column": partition_column,
                "allowed_lateness": allowed_lateness, "corrections_path": corrections_path}
    if not attach and any(declared.values()):
        raise ValueError(f"{sorted(k for k, v in declared.items() if v)} are declarations for an unmodified job: "
                         "they need attach=True")
    _check_allowed_lateness(allowed_lateness, corrections_path)
    if allowed_lateness and corrections_asset is None:
        if "{{" in str(checkpoint):
            raise ValueError("a templated checkpoint with allowed_lateness needs corrections_asset (the asset its "
                             "corrections are announced on)")
        corrections_asset = default_corrections_asset(checkpoint)
    if bool(partition_column) != bool(partitions):
        raise ValueError("partition_column and partitions go together (the column and the values to keep apart)")
    if not 0 <= max_quarantine_rate <= 1:
        raise ValueError(f"max_quarantine_rate must be a share between 0 and 1, got {max_quarantine_rate!r}")
    ids = {**DEFAULT_TASK_IDS, **(task_ids or {})}
    landings = [str(folder) for folder in landings]
    accepted = _accepted(accept_changes)
    if attach:
        args = [*_declarations(checkpoint, window, event_time, watermark_column, pre_watermark, reason_column,
                               partition_column, partitions, landings, accepted, allowed_lateness,
                               corrections_path), "--", application,
                *application_args]
        application = launcher_path()
        if launch == "submit":  # the driver log: the job's lines and Spark's warnings, not every INFO line
            conf = {"spark.log.level": "WARN", "spark.ui.showConsoleProgress": "false", **(conf or {})}
    else:
        args = [*application_args, "--checkpoint", checkpoint, "--trigger", spark_trigger, *RUN_FLAGS]
        if max_files_per_trigger not in (None, ""):
            # One token, so that a template rendering to nothing ("" / "None": all files) reaches the job as such.
            args.append(f"--max-files-per-trigger={max_files_per_trigger}")
        if accepted:
            args.append(f"--accept-changes={accepted}")
    submit_kwargs = {"execution_timeout": timedelta(minutes=30), "name": group_id, **(spark_submit_kwargs or {})}
    # Where the driver writes a refused restart's diagnosis: each query's checkpoint the run pattern knows.
    diagnosed = [checkpoint, quarantine_checkpoint or f"{str(checkpoint).rstrip('/')}_quarantine"]

    with TaskGroup(group_id, prefix_group_id=prefix_group_id) as group:
        if launch == "connect":
            from watermark_ops.airflow.connect import SparkConnectRunOperator

            submit_kwargs.pop("name", None)  # spark-submit's application name; a Connect run has none
            submit = SparkConnectRunOperator(
                task_id=ids["submit"], application=application, application_args=args, conn_id=connect_conn_id,
                conf=conf, env_vars=env_vars, diagnosis_checkpoints=diagnosed, checkpoint_conn_id=checkpoint_conn_id,
                **submit_kwargs,
            )
        else:
            submit = DiagnosedSparkSubmitOperator(
                task_id=ids["submit"], application=application, application_args=args, conn_id=conn_id,
                py_files=py_files, conf=conf, env_vars=env_vars, diagnosis_checkpoints=diagnosed,
                checkpoint_conn_id=checkpoint_conn_id, **submit_kwargs,
            )

        if preflight:
            @task(task_id=ids["preflight"], retries=0)
            def preflight_task(checkpoint: str, conf: dict | None) -> dict:
                """Will the restart work? go / warn / no_go, with the reason, the file and the recipe; no_go
                fails here and nothing is launched (``watermark_ops.airflow.restart.preflight_gate``)."""
                from airflow.sdk import get_current_context

                from watermark_ops.airflow.restart import preflight_gate

                return preflight_gate(checkpoint, conf, spark_version, conn_id=checkpoint_conn_id,
                                      context=get_current_context())

            preflight_task(checkpoint, conf) >> submit

        # The locations reach the task functions as arguments, so Airflow renders them (templated).
        @task(task_id=ids["collect"], multiple_outputs=True)
        def collect_progress(checkpoint: str, quarantine_checkpoint: str | None, landings: list[str],
                             run_id=None) -> dict:
            """This run's micro-batches (batch ids, watermarks, windows emitted), last watermark, rows kept
            aside, the rows late and the drop rate (rows late / rows in, from the ledger; None when the
            ledger is not complete), Spark's late partial aggregates apart, and (with ``lateness``) the
            delay-threshold advice."""
            from airflow.sdk import get_current_context

            from watermark_ops.airflow.metrics import emit_watermark
            from watermark_ops.core.run_figures import collect_run

            # One ledger read makes every figure: the run's, each batch's and the lateness report's run.
            report = collect_run(checkpoint, run_id, quarantine_checkpoint, landings, lateness=lateness)
            emit_watermark(checkpoint, get_current_context()["ti"].dag_id, report.get("last_watermark_ms"))
            return report

        @task(task_id=ids["ledger"], multiple_outputs=True, inlets=[CHECKPOINT_REGISTRY])
        def late_ledger(checkpoint: str, quarantine_checkpoint: str | None, landings: list[str],
                        late_sink: str | None, run_id=None) -> dict:
            """Every row this run's batches dropped as late, recovered from the checkpoint and the landed
            files (Spark counts only late groups); ``balanced``: rows in = aggregated + late + quarantined;
            with an allowed lateness, late = recovered (corrected) + dropped for good (``balance`` logged).
            Registers the checkpoint with its landing folders and ledger sink (the UI and the monitor list it)."""
            from airflow.sdk import get_current_context

            from watermark_ops.airflow.metrics import emit_ledger
            from watermark_ops.airflow.registry import record_late_rows, register_checkpoint
            from watermark_ops.core.ledger import reconcile_run

            context = get_current_context()
            register_checkpoint(context, checkpoint, landings=landings, late_sink=late_sink)
            run = reconcile_run(checkpoint, run_id, quarantine_checkpoint, sink=late_sink)
            record_late_rows(context, checkpoint, run)  # the overview's "late rows not corrected"
            logging.getLogger(__name__).info("run %s: %s", run_id, run["balance"])
            emit_ledger(checkpoint, context["ti"].dag_id, run)  # late, recovered, dropped for good, corrections
            return run

        @task(task_id=ids["check"])
        def check_run(run: dict) -> dict:
            """Fail a run that set aside more than ``max_quarantine_rate`` of its input rows, or aggregated
            none (the message names the top reason and one example record); a run whose late rows are
            unknown (a batch not replayed) is a logged warning, a failure with ``fail_on_unknown_late``
            (the judgement: ``watermark_ops.core.ledger.judge_run``)."""
            import logging

            from airflow.sdk.exceptions import AirflowFailException

            from watermark_ops.core.ledger import judge_run

            verdict = judge_run(run, max_quarantine_rate, fail_on_unknown_late)
            for warning in verdict["warnings"]:
                logging.getLogger(__name__).warning("%s", warning)
            if verdict["failure"]:
                raise AirflowFailException(verdict["failure"])
            return verdict

        audit = WatermarkAuditOperator(task_id=ids["audit"], checkpoint=checkpoint, conn_id=checkpoint_conn_id)
        ledger = late_ledger(checkpoint, quarantine_checkpoint, landings, late_sink)
        check_run(ledger)
        submit >> [collect_progress(checkpoint, quarantine_checkpoint, landings), ledger, audit]

        if state_check:
            @task(task_id=ids["state"])
            def state_checkpoint(checkpoint: str) -> dict:
                """The state after the run: rows per stateful operator and batch, whether a watermark bounds
                it, the chain a restart replays, and the state findings (warnings in the log, never a
                failure: ``watermark_ops.airflow.restart.state_check``)."""
                from watermark_ops.airflow.restart import state_check

                return state_check(checkpoint, conn_id=checkpoint_conn_id)

            audit >> state_checkpoint(checkpoint)

        gate = None
        if complete_target is not None:
            options = {"mode": "reschedule", "poke_interval": 60, "timeout": timedelta(hours=1), "retries": 0,
                       **(complete_kwargs or {})}
            from watermark_ops.airflow.sensors import WatermarkReachedSensor  # only a run with a gate pays for it

            gate = WatermarkReachedSensor(task_id=ids["complete"], checkpoint=checkpoint, target=complete_target,
                                          asset=complete_asset, allowed_lateness=allowed_lateness, **options)
            # after the audit: completeness is announced only for a checkpoint whose watermark the audit
            # passed, and the two looks share the checkpoint's remembered view in one order on every run
            audit >> gate
        if partition_asset is not None:
            from watermark_ops.airflow.partitions import WatermarkPartitionsOperator

            announce = WatermarkPartitionsOperator(
                task_id=ids["announce"], checkpoint=checkpoint, asset=partition_asset, since=partition_since,
                grain=partition_grain, timezone=partition_timezone, partition_facts=partition_facts, retries=2,
                allowed_lateness=allowed_lateness,
            )
            [ledger, *([gate] if gate is not None else [])] >> announce
        if allowed_lateness:
            @task(task_id=ids["corrections"], outlets=[corrections_asset])
            def announce_corrections(checkpoint: str, run_id=None) -> dict:
                """Announce this run's corrections on the corrections asset (``extra``: the corrected
                windows, the run, the checkpoint); skipped, with no event, when the run corrected nothing."""
                from airflow.sdk import get_current_context
                from airflow.sdk.exceptions import AirflowSkipException

                from watermark_ops.core.ledger.corrections import read_corrections
                from watermark_ops.core.ledger.recovered import corrections_event

                corrections, problems = read_corrections(checkpoint)
                for problem in problems:
                    logging.getLogger(__name__).warning("%s", problem)
                extra = corrections_event(checkpoint, run_id, corrections)
                if extra is None:  # an event would tell a consumer to redo nothing
                    raise AirflowSkipException(f"run {run_id} corrected no window of {checkpoint}")
                get_current_context()["outlet_events"][corrections_asset].extra.update(extra)
                return extra

            submit >> announce_corrections(checkpoint)
    return group


def default_corrections_asset(checkpoint: str) -> Asset:
    """The default asset of a checkpoint's corrections: named ``corrections of <checkpoint>``, its URI
    the corrections log's (``file:///abs/ck.corrections.jsonl`` for a local path, the URL's own
    scheme otherwise). No I/O (a relative path is made absolute against the current folder)."""
    location = str(checkpoint).rstrip("/")
    if "://" not in location:
        location = "file://" + os.path.abspath(location)
    return Asset(name=f"corrections of {str(checkpoint).rstrip('/')}", uri=location + ".corrections.jsonl")


