"""The run pattern's restart tasks: the preflight gate before the launch, the state check after the
audit, and the launch that fails with the driver's one-line diagnosis.

* :func:`preflight_gate` (task ``preflight``, before the launch): the restart preflight of the
  checkpoint (:func:`watermark_ops.core.state.preflight.preflight`) with the confs the run will
  request and the runtime Spark version. ``no_go`` fails the task (no retry: the files will not
  mend themselves) before anything is launched, its first log line and its exception the reason,
  the file that proves it and the recipe (:func:`~watermark_ops.core.state.preflight.verdict_line`);
  ``warn`` passes with each warning logged; a brand-new checkpoint (no folder yet) is ``go``. The
  XCom is the ``watermark-ops preflight --json`` document plus ``line``.
* :func:`state_check` (task ``state_checkpoint``, after the audit): the state of the checkpoint and
  its findings, the ``watermark-ops state --json`` document as XCom; the findings are warnings in
  the log, never a failure (module :func:`state_check` says why).
* :class:`DiagnosedSparkSubmitOperator`: the provider's ``SparkSubmitOperator`` whose failure, when
  the driver refused the restart (exit 7, ``EXIT_RESTART_REFUSED``), is the diagnosis line the
  driver wrote beside the checkpoint (:func:`watermark_ops.core.state.diagnosis.read_diagnosis`),
  raised without retries; any other failure is the provider's own. The Connect launch's operator
  does the same (:mod:`watermark_ops.airflow.connect`). It holds the spark-submit arguments and
  runs a ``SparkSubmitOperator`` built from them when it executes, so that a DAG file that uses it
  (every run pattern with ``launch="submit"``) parses without importing the Spark provider, its
  hook, ``requests`` and ``tenacity`` (issue 36: DAG files import nothing heavy).

Every read takes the checkpoint's Airflow connection (``conn_id``: object storage) like the other tasks.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Sequence

from airflow.sdk import BaseOperator

__all__ = ["DiagnosedSparkSubmitOperator", "preflight_gate", "refused_line", "runtime_spark_version", "state_check"]


def runtime_spark_version() -> str | None:
    """The Spark release this worker launches with: the installed ``pyspark`` (spark-submit's), else
    ``pyspark-client`` (a Spark Connect client runs against a server of its own release: the
    launch checks it); None when neither is installed. Read from the package metadata: no pyspark import."""
    from importlib.metadata import PackageNotFoundError, version

    for package in ("pyspark", "pyspark-client"):
        try:
            return version(package)
        except PackageNotFoundError:
            continue
    return None


def _reading(checkpoint: str, conn_id: str | None, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    from watermark_ops.airflow.storage import checkpoint_filesystem

    fs = checkpoint_filesystem(checkpoint, conn_id, storage_options)
    return {"filesystem": fs, "storage_options": None if fs is not None else storage_options}


def preflight_gate(checkpoint: str, conf: dict[str, Any] | None = None, spark_version: str | None = None, *,
                   conn_id: str | None = None, storage_options: dict[str, Any] | None = None,
                   logger: Any = None, context: Any = None) -> dict[str, Any]:
    """Run the restart preflight of ``checkpoint`` as a gate (module docstring).

    :param conf: the confs the run requests (spark-submit ``--conf`` or the Connect session's),
        rendered; values are compared as text with the checkpoint's frozen ones.
    :param spark_version: the runtime Spark (None: :func:`runtime_spark_version`).
    :param context: the task's context: a ``no_go`` document is pushed as its XCom before the task fails.
    :return: ``{"location", "verdict", "head_batch_id", "spark_version", "requested_conf",
        "findings": [...], "line"}``.
    :raises airflow.sdk.exceptions.AirflowFailException: ``no_go``, with :func:`verdict_line`.
    """
    import logging

    from airflow.sdk.exceptions import AirflowFailException

    from watermark_ops.core.checkpoint import read_checkpoint
    from watermark_ops.core.progress import progress_log_path, read_progress_log
    from watermark_ops.core.state.preflight import NO_GO, WARN, preflight, verdict_line
    from watermark_ops.core.state.reader import read_state
    from watermark_ops.render.state import preflight_document

    log = logger or logging.getLogger("watermark_ops.airflow")
    where = _reading(checkpoint, conn_id, storage_options)
    version = spark_version or runtime_spark_version()
    requested = {str(k): str(v) for k, v in (conf or {}).items() if v is not None}
    read = read_checkpoint(checkpoint, **where)
    try:
        records = read_progress_log(progress_log_path(read.location), **where).records
    except OSError:
        records = []
    state = read_state(checkpoint, checkpoint=read, progress_records=records, **where)
    report = preflight(read, state, requested, version, records)
    line = verdict_line(report)
    document = {**preflight_document(report), "line": line}
    if report.verdict == NO_GO:
        log.error("%s", line)
    elif report.verdict == WARN:
        log.warning("%s", line)
    else:
        log.info("%s", line)
    for finding in report.findings:
        if finding.level != "info" or finding.code != "new_checkpoint":
            log.info("%s %s [%s]: %s (do: %s)", finding.level, finding.code, finding.file, finding.message,
                     finding.recipe)
    if report.verdict == NO_GO:
        if context is not None:
            context["ti"].xcom_push(key="return_value", value=document)
            from watermark_ops.airflow.metrics import emit_refused_restarts

            emit_refused_restarts(checkpoint, context["ti"].dag_id, 1, by="preflight")
        raise AirflowFailException(line)
    return document


def state_check(checkpoint: str, *, conn_id: str | None = None, storage_options: dict[str, Any] | None = None,
                thresholds: Any = None, logger: Any = None) -> dict[str, Any]:
    """The state of ``checkpoint`` after the run, and its findings (module docstring).

    Never fails on a finding: the run's data is committed, a retry cannot change the state, and an
    unbounded or never compacted state is a property of the query or of how it is run, to be fixed
    in the job or its confs (each finding says how); the monitor alarms on ``state_unbounded`` and
    ``state_growing``, and an unreadable state file stops the next run at its preflight gate
    (``no_go``, with the file and the recipe). It fails (with retries) only when the checkpoint
    cannot be read at all.

    :return: the ``watermark-ops state --json`` document: ``operators`` (each with ``rows``, the
        rows held per batch read, newest last, ``bounded_by_watermark``, ``chain_length``, ...) and
        ``findings`` (``code``, ``severity``, ``file``, ``message``).
    """
    import logging

    from watermark_ops.core.state.reader import read_state
    from watermark_ops.core.state.rules import state_findings
    from watermark_ops.render.state import state_document

    log = logger or logging.getLogger("watermark_ops.airflow")
    state = read_state(checkpoint, **_reading(checkpoint, conn_id, storage_options))
    findings = state_findings(state, thresholds) if thresholds is not None else state_findings(state)
    for op in state.operators:
        rows = op.rows[-1] if op.rows else None
        log.info("operator %s %s (%s, %d partitions x %d stores): %s rows held after batch %s, bounded by "
                 "watermark: %s, chain %d (snapshot %s)", op.operator_id, op.name, op.provider, op.partitions,
                 max(len(op.stores), 1), rows, op.batches[-1].batch_id if op.batches else None,
                 op.bounded_by_watermark, op.chain_length, op.snapshot_version)
    if not state.operators:
        log.info("%s holds no state (a stateless query, or no batch yet)", checkpoint)
    for finding in findings:
        (log.error if finding.severity == "error" else log.warning)(
            "%s %s [%s]: %s", finding.severity, finding.rule, finding.file, finding.message)
    return state_document(state, findings)


def refused_line(checkpoints: Iterable[str], conn_id: str | None = None, run_tag: str | None = None,
                 since_ms: int | None = None) -> str | None:
    """The diagnosis line of a refused restart of one of ``checkpoints`` written by this run (its
    run tag, or written since ``since_ms``), None when none was."""
    from watermark_ops.core.state.diagnosis import read_diagnosis

    for checkpoint in checkpoints:
        if not checkpoint:
            continue
        try:
            diagnosis = read_diagnosis(checkpoint, **_reading(checkpoint, conn_id, None))
        except Exception:  # noqa: BLE001 - the launch's own failure stands
            continue
        if diagnosis is None:
            continue
        fresh = (run_tag is not None and diagnosis.run_tag == run_tag) or (
            since_ms is not None and diagnosis.timestamp_ms is not None and diagnosis.timestamp_ms >= since_ms - 5000)
        if fresh:
            return diagnosis.line
    return None


#: ``SparkSubmitOperator.template_fields`` (apache-airflow-providers-apache-spark 5.x): the
#: arguments :class:`DiagnosedSparkSubmitOperator` templates as the provider does (a test keeps it in
#: step with the installed provider).
SUBMIT_TEMPLATE_FIELDS = ("application", "conf", "files", "py_files", "jars", "driver_class_path", "packages",
                          "exclude_packages", "keytab", "principal", "proxy_user", "name", "application_args",
                          "env_vars", "post_submit_commands", "properties_file")


class DiagnosedSparkSubmitOperator(BaseOperator):
    """``SparkSubmitOperator`` that fails with the driver's diagnosis line when the restart was
    refused (module docstring), without retries.

    Every keyword argument of ``SparkSubmitOperator`` is accepted and passed to it when the task
    runs (``application``, ``conf``, ``conn_id``, ``application_args``, ``py_files``, ...); those it
    templates (:data:`SUBMIT_TEMPLATE_FIELDS`) are attributes here, templated the same way. The
    provider is imported only in :meth:`execute`: a DAG file using this operator parses without it.

    :param diagnosis_checkpoints: the checkpoints of the job's queries (templated).
    :param checkpoint_conn_id: the Airflow connection to read them with (object storage).
    """

    template_fields: Sequence[str] = (*SUBMIT_TEMPLATE_FIELDS, "diagnosis_checkpoints")
    ui_color = "#FF9933"  # SparkSubmitOperator's

    def __init__(self, *, diagnosis_checkpoints: Sequence[str] = (), checkpoint_conn_id: str | None = None,
                 **kwargs: Any) -> None:
        import inspect

        own = set(inspect.signature(BaseOperator.__init__).parameters) - {"self", "kwargs"}
        submit = {k: kwargs.pop(k) for k in list(kwargs) if k not in own}
        super().__init__(**kwargs)
        self._submit_given = sorted(k for k in submit if k in SUBMIT_TEMPLATE_FIELDS)
        for field_name in SUBMIT_TEMPLATE_FIELDS:
            setattr(self, field_name, submit.pop(field_name, None))
        self._submit_other = submit  # the untemplated ones: conn_id, deploy_mode, executor_memory, ...
        self._submit: Any = None
        self.diagnosis_checkpoints = list(diagnosis_checkpoints)
        self.checkpoint_conn_id = checkpoint_conn_id

    def _spark_submit(self) -> Any:
        """The provider's ``SparkSubmitOperator`` with this task's id and (rendered) arguments."""
        from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

        arguments = {**self._submit_other, **{k: getattr(self, k) for k in self._submit_given}}
        return SparkSubmitOperator(task_id=self.task_id, **arguments)

    def execute(self, context: Any) -> Any:
        from airflow.sdk.exceptions import AirflowException, AirflowFailException

        started = int(time.time() * 1000)
        self._submit = self._spark_submit()
        # its own execute, unwrapped: this task runs it (the Task SDK's safeguard would log that a
        # nested operator was executed outside the task runner)
        execute = getattr(type(self._submit).execute, "__wrapped__", type(self._submit).execute)
        try:
            return execute(self._submit, context)
        except AirflowException as exc:
            line = refused_line(self.diagnosis_checkpoints, self.checkpoint_conn_id, context.get("run_id"), started)
            if line is None:
                raise
            self.log.error("%s", line)
            from watermark_ops.airflow.metrics import emit_refused_restarts

            emit_refused_restarts(self.diagnosis_checkpoints[0], self.dag_id, 1, by="driver")
            raise AirflowFailException(line) from exc

    def on_kill(self) -> None:
        """Kill the spark-submit the running task started (the provider's ``on_kill``)."""
        if self._submit is not None:
            self._submit.on_kill()
