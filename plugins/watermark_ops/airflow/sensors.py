"""Airflow sensors over a checkpoint's watermark: thin faces over :mod:`watermark_ops.core.stall`.

* :class:`WatermarkStallSensor` succeeds while the watermark is healthy and fails (alerting
  through ``on_failure_callback``, e.g. :class:`watermark_ops.airflow.notifiers.WatermarkWebhookNotifier`)
  when it is ``stalled``, ``lagging``, ``jumped`` or idle too long.
* :class:`WatermarkReachedSensor` waits until the watermark reaches a target instant (e.g. the end
  of the data interval): append-mode results for the interval are then final and in the sink. It
  records the watermark as metadata (``extra``) on an Airflow Asset, so that downstream DAGs can be
  scheduled on completeness (``schedule=[asset]``; the event's ``extra`` carries the watermark).

Both support ``mode="poke"``, ``mode="reschedule"`` and ``deferrable=True``
(:class:`watermark_ops.airflow.triggers.WatermarkTrigger` polls in the triggerer). The three share one
evaluation, :func:`watermark_ops.core.checks.check`, whose outcome decides: ``done`` → success;
``wait`` → evaluate again after ``poke_interval`` until ``timeout`` runs out, then fail;
``fail`` → fail at once (a jumped watermark never goes back); ``skip`` → skipped.

Every evaluation reads the checkpoint through :func:`watermark_ops.core.checks.check_tail` from the
checkpoint's remembered view (:class:`watermark_ops.core.view.View`): a poke on an unchanged
checkpoint lists nothing and makes the same few requests at 10 or 10,000 batches. The view is kept
in the task's process between pokes (``mode="poke"``), in the trigger between its polls (deferrable),
and in the asset state store of :data:`watermark_ops.airflow.registry.CHECKPOINT_REGISTRY` (an inlet
of every sensor) under ``watermark_view:<checkpoint>`` (:class:`watermark_ops.airflow.memory.AssetStateStoreMemory`)
for the next process: the next poke of ``mode="reschedule"``, the next DAG run, the monitor and
the audit operator, which read and move on the same view.

A checkpoint on object storage is read through an Airflow connection (``conn_id``, e.g. an ``aws``
connection for ``s3://``): :func:`watermark_ops.airflow.storage.checkpoint_filesystem`.

Every evaluation's result is pushed to XCom as ``return_value`` (also when the task then fails):
the classification (:meth:`watermark_ops.core.stall.Classification.to_dict`) plus ``outcome``,
``message`` and ``state_store``: the stateful operators' state summary with its findings
(:meth:`watermark_ops.core.state.summary.StateSummary.document`: operators, rows now, bounded by
a watermark or not; ``state_unbounded``, ``state_growing``), read at depth ``rows`` when the
checkpoint has new batches and remembered in the view (``state_store=False``: not read, None).
The state never fails a sensor unless asked: ``fail_on_state=["state_unbounded"]`` fails the task
(outcome ``fail``, at once: a state no watermark evicts does not heal by waiting) when such a
finding exists. A failure raises :class:`WatermarkAlarm` (no retries: evaluating the same files
again gives the same answer), which carries that payload for notifiers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Sequence

from airflow.sdk import Asset, BaseSensorOperator, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from watermark_ops.airflow.registry import add_registry_inlet, register_checkpoint
from watermark_ops.core.state.rules import state_options
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS, StateThresholds, Thresholds
from watermark_ops.core.times import instant_ms, iso_utc

if TYPE_CHECKING:  # the checkpoint reader and its classification load when a sensor pokes, not at parse
    from watermark_ops.core.checks import Check

__all__ = ["WatermarkAlarm", "WatermarkReachedSensor", "WatermarkStallSensor"]

_D = DEFAULT_THRESHOLDS


class WatermarkAlarm(AirflowFailException):
    """The watermark is unhealthy (or did not reach its target): the task fails without retries.

    :ivar payload: what the sensor pushed to XCom (classification, ``outcome``, ``message``);
        :class:`watermark_ops.airflow.notifiers.WatermarkWebhookNotifier` reads it from the context's
        ``exception``.
    """

    def __init__(self, message: str, payload: dict[str, Any] | None = None):
        super().__init__(message)
        self.payload = payload or {}


def _payload(location: str, outcome: str, message: str, classification: dict[str, Any] | None,
             state_store: dict[str, Any] | None = None) -> dict[str, Any]:
    base = classification or {"location": location, "state": None}
    return {**base, "outcome": outcome, "message": message, "state_store": state_store}


class _WatermarkSensor(BaseSensorOperator):
    """What both sensors share: thresholds, the evaluation, and how each outcome ends the task."""

    template_fields: Sequence[str] = ("checkpoint", "conn_id")
    goal = "healthy"

    def __init__(self, *, checkpoint: str, idle_after: Any = _D.idle_after, max_idle: Any = _D.max_idle,
                 max_lag: Any = _D.max_lag, max_skew: Any = _D.max_skew, stall_window: Any = _D.stall_window,
                 stall_batches: int = _D.stall_batches, max_partition_skew: Any = _D.max_partition_skew,
                 missing_ok: bool = False,
                 storage_options: dict[str, Any] | None = None, conn_id: str | None = None,
                 deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 state_store: bool = True, fail_on_state: Sequence[str] = (),
                 state_thresholds: StateThresholds | dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        add_registry_inlet(self)
        self.checkpoint = checkpoint
        self.state_store = bool(state_store)
        self.fail_on_state, self.state_thresholds = state_options(fail_on_state, state_thresholds, self.state_store)
        # Validated here, at DAG parse time for static values and at mapping time for mapped ones.
        self.thresholds = Thresholds(idle_after=idle_after, max_idle=max_idle, max_lag=max_lag, max_skew=max_skew,
                                     stall_window=stall_window, stall_batches=stall_batches,
                                     max_partition_skew=max_partition_skew)
        self.missing_ok = missing_ok
        self.storage_options = storage_options
        self.conn_id = conn_id
        self.deferrable = deferrable
        self._last: dict[str, Any] | None = None
        self._state_document: dict[str, Any] | None = None  # the last evaluation's state summary
        self._tail: Any = None  # the view the last poke left (View), kept between pokes in this process
        self._loaded: Any = None  # the view as stored, to write only what changed
        self._tail_memory: Any = None

    # -- the one evaluation -------------------------------------------------------------------

    def _target_ms(self) -> int | None:
        return None

    def _memory(self, context: Any) -> Any:
        """The views kept on the registry asset's state store, or None (no store here)."""
        if self._tail_memory is None and context is not None:
            from watermark_ops.airflow.memory import AssetStateStoreMemory
            from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY

            try:
                self._tail_memory = AssetStateStoreMemory(None, views=context["asset_state_store"][CHECKPOINT_REGISTRY])
            except Exception as exc:  # the view is an optimisation: without a store, pokes list
                self.log.warning("no asset state store for the remembered view (pokes will list): %r", exc)
        return self._tail_memory

    def _check(self, context: Any = None) -> Check:
        """One evaluation from the remembered view (:func:`check_tail`); remembers the new view."""
        from watermark_ops.airflow.storage import checkpoint_filesystem
        from watermark_ops.core.checks import check_tail
        from watermark_ops.core.stall import StallInputError
        from watermark_ops.core.state.summary import state_outcome
        from watermark_ops.core.view import load_view, save_view

        memory = self._memory(context)
        if self._tail is None and memory is not None:
            try:
                self._tail = self._loaded = load_view(memory, self.checkpoint)
            except Exception as exc:
                self.log.warning("remembered view of %s not read (this poke lists): %r", self.checkpoint, exc)
        fs = checkpoint_filesystem(self.checkpoint, self.conn_id, self.storage_options)
        try:
            result, tail = check_tail(self.checkpoint, self._tail, goal=self.goal, thresholds=self.thresholds,
                                      target_ms=self._target_ms(), missing_ok=self.missing_ok,
                                      fail_on_jumped=getattr(self, "fail_on_jumped", True), filesystem=fs,
                                      storage_options=None if fs is not None else self.storage_options,
                                      state_store="rows" if self.state_store else None)
        except StallInputError as exc:  # a corrupt or unreadable head: storage may recover, retries apply
            raise AirflowException(f"cannot classify the watermark of {self.checkpoint}: {exc}") from exc
        result, self._state_document = state_outcome(result, tail, self.fail_on_state, self.state_thresholds)
        if self._state_document is not None and self._state_document["findings"]:
            self.log.warning("state store of %s: %s", self.checkpoint,
                             "; ".join(f"{f['code']}: {f['message']}" for f in self._state_document["findings"]))
        self._tail = tail
        if tail is not None:
            counts = {k: n for k, n in tail.requests.items() if isinstance(n, int) and not isinstance(n, bool)}
            self.log.info("read %s (%s): %s", self.checkpoint,
                          "listed" if tail.requests.get("listed") else "from the remembered view, no listing",
                          ", ".join(f"{n} {kind.upper()}" for kind, n in sorted(counts.items())) or "nothing")
            if memory is not None:
                try:
                    save_view(memory, self.checkpoint, tail, previous=self._loaded)
                    self._loaded = tail
                except Exception as exc:
                    self.log.warning("view of %s not remembered (the next process lists): %r", self.checkpoint, exc)
        return result

    def _settle(self, context: Any, outcome: str, message: str, classification: dict[str, Any] | None,
                state_store: Any = False) -> Any:
        """End (or continue) the task for one outcome; returns the XCom value on ``done``, None on
        ``wait``. ``state_store``: the state summary's document (default: the last evaluation's)."""
        payload = _payload(self.checkpoint, outcome, message, classification,
                           self._state_document if state_store is False else state_store)
        self._last = payload
        from watermark_ops.airflow.metrics import emit_classification

        emit_classification(self.checkpoint, self.dag_id, classification)  # watermark, lag, stall state
        if outcome == "wait":
            self.log.info("not yet: %s", message)
            return None
        if outcome == "done":  # returned: pushed as return_value by the task runner
            self.log.info("%s", message)
            self._on_done(context, payload)
            return payload
        context["ti"].xcom_push(key="return_value", value=payload)
        if outcome == "skip":
            raise AirflowSkipException(message)
        raise WatermarkAlarm(message, payload)

    def _on_done(self, context: Any, payload: dict[str, Any]) -> None:
        """Hook for the reached sensor (asset metadata)."""

    def _waited_too_long(self, context: Any) -> WatermarkAlarm:
        """The alarm once ``timeout`` ran out on ``wait`` (at once with ``timeout`` 0); pushes the last evaluation."""
        last = self._last or _payload(self.checkpoint, "wait", "no evaluation", None, self._state_document)
        waited = f" after waiting {self.timeout:g} s" if self.timeout > 0 else ""
        message = f"{'unhealthy' if self.goal == 'healthy' else 'target not reached'}{waited}: {last['message']}"
        payload = {**last, "outcome": "fail", "message": message}
        context["ti"].xcom_push(key="return_value", value=payload)
        return WatermarkAlarm(message, payload)

    # -- poke and reschedule ------------------------------------------------------------------

    def poke(self, context: Any) -> bool | PokeReturnValue:
        result = self._check(context)
        classification = result.classification.to_dict() if result.classification else None
        if result.outcome == "wait" and self.timeout <= 0:
            self._settle(context, "wait", result.message, classification)
            raise self._waited_too_long(context)
        value = self._settle(context, result.outcome, result.message, classification)
        return PokeReturnValue(is_done=result.outcome == "done", xcom_value=value)

    def execute(self, context: Any) -> Any:
        register_checkpoint(context, self.checkpoint, asset=getattr(self, "asset", None),
                            thresholds=self.thresholds if self.goal == "healthy" else None, conn_id=self.conn_id,
                            storage_options=self.storage_options)
        if self.deferrable:
            return self._execute_deferrable(context)
        try:
            return super().execute(context)
        except AirflowSensorTimeout as exc:
            raise self._waited_too_long(context) from exc

    # -- deferrable ---------------------------------------------------------------------------

    def _execute_deferrable(self, context: Any) -> Any:
        result = self._check(context)  # decided already? then no trip through the triggerer
        classification = result.classification.to_dict() if result.classification else None
        if result.outcome != "wait":
            return self._settle(context, result.outcome, result.message, classification)
        self._settle(context, "wait", result.message, classification)
        if self.timeout <= 0:
            raise self._waited_too_long(context)
        timeout = timedelta(seconds=self.timeout)
        # Imported here: only a deferral needs it, and DAG files that import the sensors stay cheap to parse.
        from watermark_ops.airflow.triggers import WatermarkTrigger

        self.defer(
            trigger=WatermarkTrigger(
                checkpoint=self.checkpoint, goal=self.goal, thresholds=self.thresholds.to_dict(),
                target_ms=self._target_ms(), missing_ok=self.missing_ok,
                fail_on_jumped=getattr(self, "fail_on_jumped", True), poll_interval=self.poke_interval,
                timeout=timeout, storage_options=self.storage_options, conn_id=self.conn_id,
                state_store=self.state_store, fail_on_state=list(self.fail_on_state),
                state_thresholds=self.state_thresholds.to_dict(),
            ),
            method_name="execute_complete",
            # The trigger fires its own "timeout" event with the last classification; this
            # deferral timeout (a plain timedelta) only bounds a trigger that never fires.
            timeout=timeout + timedelta(seconds=self.poke_interval + 60),
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """Resume after the trigger's one event (see :data:`watermark_ops.airflow.triggers.EVENT_STATUSES`)."""
        status, message = event.get("status"), event.get("message", "")
        if status == "error":
            raise AirflowException(f"cannot classify the watermark of {self.checkpoint}: {message}")
        self._state_document = event.get("state_store")
        if status == "timeout":
            self._last = _payload(self.checkpoint, "wait", message, event.get("classification"), self._state_document)
            raise self._waited_too_long(context)
        return self._settle(context, status, message, event.get("classification"))


class WatermarkStallSensor(_WatermarkSensor):
    """Succeed while a checkpoint's watermark is healthy; fail when it is stalled, lagging, jumped or idle too long.

    One evaluation (:func:`watermark_ops.core.checks.check`, goal ``healthy``) per poke, in ``poke``,
    ``reschedule`` or deferrable mode: healthy (``advancing``, ``idle`` within ``max_idle``, and the
    states of a query without a watermark, ``no_watermark`` and ``watermark_unknown``, which never
    alarm) → success, the classification and evidence in XCom; ``jumped`` → fails at once (the watermark
    never goes back); ``stalled``, ``lagging`` or idle too long → evaluated again every
    ``poke_interval`` while ``timeout`` lasts (a grace period for a stall to heal), then fails
    with :class:`WatermarkAlarm`. With the default ``timeout`` of 0 the first unhealthy evaluation
    fails the task: the right setting for a monitor DAG that runs every few minutes.

    :param checkpoint: the checkpoint location, local path or fsspec URL (templated).
    :param idle_after: no data batch for this long → idle (``timedelta``, seconds, or ISO-8601
        duration text such as ``"PT15M"``; default 15 minutes).
    :param max_idle: idle longer than this → alarm (default 1 day; None: never).
    :param max_lag: lag above this → lagging (default 6 hours; None: off): the end of the run's data
        interval stamped on the newest progress record, else the latest batch time, − watermark.
    :param max_skew: watermark ahead of the latest batch time by more → jumped (default 5 minutes; None: off).
    :param stall_window: data batches spanning this long without a watermark move → stalled (default 1 hour).
    :param stall_batches: this many data batches without a watermark move → stalled (default 3).
    :param max_partition_skew: a partition trailing the leading one's newest event time by more →
        a warning in the classification (XCom ``warnings``), never a failure (default 4 hours; None: off).
    :param missing_ok: skip (instead of fail) when the checkpoint does not exist yet.
    :param conn_id: the Airflow connection to read the checkpoint with (templated), e.g. an ``aws``
        connection for ``s3://``: the filesystem behind ``ObjectStoragePath(checkpoint, conn_id=...)``
        (:func:`watermark_ops.airflow.storage.checkpoint_filesystem`), also in the triggerer; None:
        a local path, or a URL read through fsspec with ``storage_options`` and the environment.
    :param storage_options: with ``conn_id``, the provider's storage options (for S3: botocore
        ``config_kwargs``); without, fsspec storage options.
    :param deferrable: wait in the triggerer (:class:`watermark_ops.airflow.triggers.WatermarkTrigger`);
        default ``[operators] default_deferrable``.
    :param timeout: grace period while unhealthy, ``timedelta`` or seconds (default 0: fail at once).
    :param poke_interval: seconds between evaluations (default 60).
    :param state_store: read the stateful operators' state when the checkpoint has new batches
        (depth ``rows``: which operators, whether a watermark bounds them, rows per batch) and push
        its summary and findings in the XCom's ``state_store`` (default True).
    :param fail_on_state: state rules that fail the task when found, e.g. ``["state_unbounded"]``
        (a dedup or join no watermark can evict); default none: the state is reported, never a
        failure (the ``watermark_monitor`` DAG alarms on ``state_unbounded`` and ``state_growing``).
    :param state_thresholds: :class:`~watermark_ops.core.thresholds.StateThresholds` (or its dict,
        e.g. ``{"growing_batches": 24}``) for the state findings; default Spark-derived defaults.
    """

    goal = "healthy"
    ui_color = "#fdecea"

    def __init__(self, *, timeout: Any = 0, **kwargs: Any) -> None:
        super().__init__(timeout=timeout, **kwargs)


class WatermarkReachedSensor(_WatermarkSensor):
    """Wait until the watermark reaches a target instant; record it on an Asset for downstream DAGs.

    Done when a *committed* batch ran with a watermark at or past ``target``
    (``Classification.emitted_through_ms``): append-mode windows ending at or before the target
    are then final and written to the sink. With ``availableNow`` that is right after the run that
    moved the watermark (its trailing no-data batch runs with it); with ``Trigger.Once`` one run
    later. A ``jumped`` watermark fails the task (``fail_on_jumped``): a future-dated record passes
    every target, but the on-time rows still to come will be dropped, so completeness is not proven.

    On success the asset event's ``extra`` is ``{"checkpoint", "watermark_ms", "watermark",
    "emitted_through_ms", "emitted_through", "target_ms", "target", "state", "latest_batch_id",
    "latest_batch_time", "evaluated_at"}`` (ms epoch UTC and ISO-8601 UTC). A downstream DAG with
    ``schedule=[asset]`` reads it from ``triggering_asset_events``.

    :param checkpoint: the checkpoint location (templated).
    :param target: the target instant (templated), e.g. ``"{{ data_interval_end }}"``: ISO-8601
        text (no offset: UTC), an aware datetime, or epoch ms.
    :param asset: the Asset to record the watermark on (added to the task's outlets); None: no event.
    :param fail_on_jumped: fail when the watermark jumped ahead of processing time (default True).
    :param allowed_lateness: the job's allowed lateness (``"6 hours"``, :mod:`watermark_ops.core.ledger.corrections`):
        the target counts as reached only once the watermark is that far past it, when no late row
        can correct a window ending at or before it any more (its corrections are published by the
        run that moved the watermark there); the event's ``extra`` adds ``allowed_lateness_ms`` and
        ``final_through_ms`` (the target plus it). None: the target itself.
    :param deferrable: wait in the triggerer.
    :param timeout: how long to wait (``timedelta`` or seconds; default Airflow's sensor default).

    The thresholds (``max_skew`` matters here; the others only shape the recorded state),
    ``conn_id``, ``storage_options``, ``state_store``, ``fail_on_state`` and ``state_thresholds``
    are those of :class:`WatermarkStallSensor`.
    """

    template_fields: Sequence[str] = ("checkpoint", "target")
    goal = "reached"
    ui_color = "#e8f6ea"

    def __init__(self, *, target: Any, asset: Asset | None = None, fail_on_jumped: bool = True,
                 allowed_lateness: str | None = None, **kwargs: Any) -> None:
        self.allowed_lateness_ms = 0
        if allowed_lateness:  # checked at DAG parse (ValueError); imported only when given
            from watermark_ops.core.ledger.corrections import allowed_lateness_ms

            self.allowed_lateness_ms = allowed_lateness_ms(allowed_lateness)
        if asset is not None:
            outlets = list(kwargs.pop("outlets", None) or [])
            if asset not in outlets:
                outlets.append(asset)
            kwargs["outlets"] = outlets
        super().__init__(**kwargs)
        self.target = target
        self.asset = asset
        self.fail_on_jumped = fail_on_jumped

    def _target_ms(self) -> int:
        """The instant the watermark must reach: the target plus the allowed lateness (epoch ms UTC)."""
        return self._given_target_ms() + self.allowed_lateness_ms

    def _given_target_ms(self) -> int:
        try:
            return instant_ms(self.target)
        except ValueError as exc:
            raise AirflowFailException(f"target of {self.task_id}: {exc}") from exc

    def _on_done(self, context: Any, payload: dict[str, Any]) -> None:
        if self.asset is None:
            return
        target_ms = self._given_target_ms()
        latest = payload.get("latest_batch") or {}
        extra = {
            "checkpoint": self.checkpoint,
            "watermark_ms": payload.get("watermark_ms"),
            "watermark": payload.get("watermark"),
            "emitted_through_ms": payload.get("emitted_through_ms"),
            "emitted_through": payload.get("emitted_through"),
            "target_ms": target_ms,
            "target": iso_utc(target_ms),
            "state": payload.get("state"),
            "latest_batch_id": latest.get("batch_id"),
            "latest_batch_time": latest.get("time"),
            "evaluated_at": payload.get("evaluated_at"),
        }
        if self.allowed_lateness_ms:
            extra.update(allowed_lateness_ms=self.allowed_lateness_ms, final_through_ms=self._target_ms())
        context["outlet_events"][self.asset].extra.update(extra)
