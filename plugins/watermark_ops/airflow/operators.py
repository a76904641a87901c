"""Airflow operators of watermark-ops: thin faces over the pure core.

``WatermarkAuditOperator`` audits a Structured Streaming checkpoint (:mod:`watermark_ops.core.audit`)
after a Spark run or on demand, and keeps the audit's memory (the remembered head, see
:mod:`watermark_ops.core.memory`) in Airflow 3.3's asset state store, on an asset that is an outlet of
the task, and the checkpoint's remembered view (:mod:`watermark_ops.core.view`) on the checkpoint
registry, shared with the sensors and the monitor: an audit after a run reads only the new batches.
"""

from __future__ import annotations

from typing import Any, Sequence

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from watermark_ops.airflow.memory import AssetStateStoreMemory
from watermark_ops.airflow.registry import add_registry_inlet, package_asset, register_checkpoint
from watermark_ops.core.memory import MemoryFormatError, ResetAcceptanceError, accept_reset
from watermark_ops.core.rules import ERROR, INFO, WARNING
from watermark_ops.render import DEFAULT_LIMIT, audit_report_text

#: The asset whose state store keeps the audit memory by default: one key per checkpoint
#: location (``watermark_audit:<location>``), so every audit task and DAG that audits the same
#: checkpoint shares one remembered head. Each successful audit also emits an event on it.
AUDIT_MEMORY_ASSET = package_asset("watermark_ops_audit_memory", "watermark-ops://audit-memory")


class WatermarkAuditOperator(BaseOperator):
    """Audit a Spark Structured Streaming checkpoint: prove that its watermark never moved backwards.

    Reads ``offsets/`` and ``commits/`` (no JVM; any fsspec location), applies the rules of
    :mod:`watermark_ops.core.audit` against the head remembered by the previous audit, remembers the new
    head in the asset state store of ``memory_asset``, logs the same table as
    ``watermark-ops audit`` and pushes the report (:meth:`AuditReport.to_dict`, the ``--json``
    shape) to XCom as ``return_value``, also when the task then fails.

    * violation (an error finding): the task fails without retries (``AirflowFailException``);
      in soft mode it only logs the errors as warnings and succeeds;
    * unreadable checkpoint or file (and nothing violated): the task fails with retries
      (``AirflowException``: storage may be back on the next try); soft mode warns;
    * warnings are logged, info findings (the in-flight batch, an accepted reset) too.

    The state store: the audit also reads the stateful operators' state when the checkpoint has
    new batches (:mod:`watermark_ops.core.state.summary`) and adds the state findings to its own
    as warnings (``state_unbounded``, ``state_growing``, ``state_never_compacted``,
    ``state_files_accumulating``: logged, never a failure; a state file that cannot be read is
    ``unreadable``, as any checkpoint file); the XCom's ``state_store`` is the summary (operators,
    rows now, bounded or not, the chain a restart replays) and the log shows it under the table.

    A deliberate checkpoint reset (the checkpoint deleted and the query started again: a new query
    id in ``metadata``) is a ``checkpoint_reset`` violation unless it was accepted beforehand. With
    ``accept_reset`` (the reason, e.g. ``"OPS-123: checkpoint deleted after a state schema
    change"``), the task first records in the memory that the change from the remembered query id
    to the one the checkpoint has now is accepted (:func:`watermark_ops.core.memory.accept_reset`;
    by: the DAG run's triggering user and the task), then audits: the reset is reported as
    ``reset_accepted`` (info) and the audit passes. Give it per run (a Param or ``dag_run.conf``,
    it is templated), not as a constant: every reset the task sees while it is set is accepted.
    With no reset to accept (same query id, nothing remembered), it only logs that.

    :param checkpoint: the checkpoint folder, a local path or fsspec URL (templated), e.g.
        ``s3://bucket/checkpoints/orders_windows``.
    :param conn_id: the Airflow connection to read it with (templated), e.g. an ``aws`` connection
        for ``s3://`` (endpoint, credentials, region): the filesystem behind
        ``ObjectStoragePath(checkpoint, conn_id=conn_id)``
        (:func:`watermark_ops.airflow.storage.checkpoint_filesystem`). None: a local path, or a URL
        read through fsspec with ``storage_options`` and the worker's environment.
    :param memory_asset: the asset whose state store keeps the remembered head (added to the
        task's outlets); default :data:`AUDIT_MEMORY_ASSET`; None audits without memory.
    :param soft: soft mode: never fail on findings, only warn.
    :param storage_options: with ``conn_id``, the provider's storage options (for S3: botocore
        ``config_kwargs``, e.g. ``{"max_pool_connections": 64}``); without, fsspec storage options.
    :param table_limit: the newest batches shown in the log table (0: all).
    :param accept_reset: the reason a checkpoint reset seen by this run is accepted (templated);
        None or empty: none is.
    :param full: read every file of the checkpoint again instead of the new batches only (for a
        suspected old file changed by hand); the memory is updated as after any audit.
    :param state_store: read the state store and report it (default True).
    :param state_thresholds: :class:`~watermark_ops.core.thresholds.StateThresholds` or its dict
        (e.g. ``{"growing_batches": 24, "max_chain": 50}``); default the defaults.

    What is read: with a remembered view of the checkpoint (the previous audit's, a sensor's, the
    monitor's; :mod:`watermark_ops.core.view`), only ``metadata``, the new batches' files by name
    and the progress log's new lines; the findings are those of a full audit of the same files
    (the log says which: ``read N new batches`` or ``read everything``, and the XCom's ``reads``).
    """

    template_fields: Sequence[str] = ("checkpoint", "accept_reset", "conn_id")
    ui_color = "#e8f4fd"

    def __init__(self, *, checkpoint: str, memory_asset: Asset | None = AUDIT_MEMORY_ASSET, soft: bool = False,
                 storage_options: dict[str, Any] | None = None, table_limit: int = DEFAULT_LIMIT,
                 accept_reset: str | None = None, conn_id: str | None = None, full: bool = False,
                 state_store: bool = True, state_thresholds: Any = None, **kwargs: Any) -> None:
        if memory_asset is not None:
            outlets = list(kwargs.pop("outlets", None) or [])
            if memory_asset not in outlets:
                outlets.append(memory_asset)
            kwargs["outlets"] = outlets
        super().__init__(**kwargs)
        add_registry_inlet(self)
        self.checkpoint = checkpoint
        self.memory_asset = memory_asset
        self.soft = soft
        self.storage_options = storage_options
        self.table_limit = table_limit
        self.accept_reset = accept_reset
        self.conn_id = conn_id
        self.full = full
        self.state_store = bool(state_store)
        from watermark_ops.core.thresholds import StateThresholds

        self.state_thresholds = (state_thresholds if isinstance(state_thresholds, StateThresholds)
                                 else StateThresholds.from_dict(dict(state_thresholds or {})))  # validated at parse time

    def _reading(self) -> dict[str, Any]:
        """``filesystem=`` / ``storage_options=`` for the core: the connection's filesystem when
        ``conn_id`` is set (:func:`watermark_ops.airflow.storage.checkpoint_filesystem`), else the
        fsspec options."""
        from watermark_ops.airflow.storage import checkpoint_filesystem

        fs = checkpoint_filesystem(self.checkpoint, self.conn_id, self.storage_options)
        return {"filesystem": fs, "storage_options": None if fs is not None else self.storage_options}

    def _views(self, context: Any) -> Any:
        """The registry asset's accessor, where the remembered views are kept (shared with the
        sensors and the monitor); the memory asset's own when the registry is not reachable."""
        from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY

        try:
            return context["asset_state_store"][CHECKPOINT_REGISTRY]
        except Exception as exc:  # noqa: BLE001 - the views then live beside the heads
            self.log.warning("no asset state store for the registry (the view is kept with the audit memory): %r", exc)
            return None

    def _accept_reset(self, memory: AssetStateStoreMemory, context: Any) -> None:
        """Record the acceptance of the reset to the checkpoint's current query id (see the class docstring)."""
        from watermark_ops.core.checkpoint import read_checkpoint

        query_id = read_checkpoint(self.checkpoint, **self._reading(), newest=1).query_id
        ti = context["ti"]
        by = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}"
        user = getattr(context.get("dag_run"), "triggering_user_name", None)
        if user:
            by = f"{user} via {by}"
        try:
            head = accept_reset(memory, self.checkpoint, query_id, why=str(self.accept_reset), by=by)
        except ResetAcceptanceError as exc:
            self.log.info("accept_reset given, nothing to accept: %s", exc)
            return
        acceptance = head.accepted_reset
        self.log.warning("checkpoint reset of %s accepted: query id %s -> %s, %s", self.checkpoint,
                         acceptance.from_query_id, acceptance.to_query_id, acceptance.describe())

    def execute(self, context) -> dict[str, Any]:
        register_checkpoint(context, self.checkpoint, asset=self.memory_asset, conn_id=self.conn_id,
                            storage_options=self.storage_options)
        memory = None
        if self.memory_asset is not None:
            memory = AssetStateStoreMemory(context["asset_state_store"][self.memory_asset], views=self._views(context))
        try:
            if memory is not None and self.accept_reset and str(self.accept_reset).strip():
                self._accept_reset(memory, context)
            from watermark_ops.airflow.read_progress import logged_progress

            with logged_progress(self.checkpoint, logger=self.log):  # a line every few seconds of a long read
                from watermark_ops.core.audit import run_audit  # the reader and the rules: at run time only

                report = run_audit(self.checkpoint, memory, full=bool(self.full), state_store=self.state_store,
                                   state_thresholds=self.state_thresholds, **self._reading())
        except MemoryFormatError as exc:
            raise AirflowFailException(f"audit memory of {self.checkpoint} is malformed: {exc}") from exc
        self.log.info("Watermark audit of %s\n%s", self.checkpoint, audit_report_text(report, limit=self.table_limit))
        for finding in report.by_severity(WARNING) + report.by_severity(INFO):
            log = self.log.warning if finding.severity == WARNING else self.log.info
            log("%s: %s (batch %s, %s): %s", finding.severity, finding.rule, finding.batch_id, finding.file,
                finding.message)
        result = report.to_dict()
        from watermark_ops.airflow.metrics import emit_audit

        emit_audit(self.checkpoint, self.dag_id, report.findings, result.get("state_store"))
        if report.status == "ok":
            return result
        errors = "; ".join(f"{f.rule} (batch {f.batch_id}): {f.message}" for f in report.by_severity(ERROR))
        summary = f"watermark audit of {self.checkpoint}: {report.status}: {errors}"
        if self.soft:
            self.log.warning("soft mode, not failing: %s", summary)
            return result
        context["ti"].xcom_push(key="return_value", value=result)
        if report.status == "violation":
            raise AirflowFailException(summary)
        raise AirflowException(summary)
