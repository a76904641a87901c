"""Completeness as partitioned asset events: one event per event-time partition the watermark closed.

:class:`WatermarkPartitionsOperator` reads a checkpoint's emitted-through watermark (the watermark
the latest committed micro-batch ran with: append-mode windows up to it are in the sink), asks the
pure core (:func:`watermark_ops.core.partitions.newly_closed`) which days (or UTC hours) are newly
closed, and emits one asset event per new partition with its ``partition_key`` (Airflow 3.2+
partitioned assets), so a DAG scheduled with ``PartitionedAssetTimetable`` gets one run per final
partition. What was announced is remembered in Airflow's asset state store (AIP-103), keyed by
checkpoint, so a retry, a restart or a re-run (clear) of the same interval announces nothing new.

Airflow source relied on (3.3.2, task SDK 1.3.2):

* ``airflow.sdk.execution_time.context.OutletEventAccessor.add_partitions`` and
  ``task_runner._serialize_outlet_events``: one event per partition key, all carrying the
  accessor's one ``extra`` dict; ``TaskInstance.register_asset_changes_in_db`` registers them
  when the task succeeds. A task that succeeds without partitions would emit one *unpartitioned*
  event (``extra=None``), which partition-aware consumers reject ("missing partition key", in
  ``AssetManager._queue_partitioned_dags``): with nothing new the task is skipped instead.
* ``AssetStateStoreAccessor.get``/``set`` (``context["asset_state_store"][asset]``): each ``set``
  is its own write, not part of the task's success; hence the claim / settle protocol of
  :class:`watermark_ops.core.partitions.AnnouncedPartitions`, settled against the asset's events
  read through ``context["inlet_events"][asset]`` (``AssetEventResult.partition_key``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, Sequence

from airflow.sdk import Asset, BaseOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException

from watermark_ops.airflow.memory import partitions_key_prefix, state_store_key
from watermark_ops.airflow.registry import add_registry_inlet, register_checkpoint
from watermark_ops.core.partitions import (
    DEFAULT_TIMEZONE,
    GRAINS,
    AnnouncedPartitions,
    Partition,
    PartitionMemoryError,
    newly_closed,
)
from watermark_ops.core.times import instant_ms, iso_utc, now_ms

__all__ = ["WatermarkPartitionsOperator"]

#: How far before a claim the settle step looks for its asset events (clock skew between worker and API server).
_SETTLE_MARGIN = timedelta(minutes=5)


class WatermarkPartitionsOperator(BaseOperator):
    """Emit one asset event per event-time partition (day or UTC hour) newly closed by the watermark.

    A partition ``[start_ms, end_ms)`` is closed once ``emitted_through_ms >= end_ms``
    (``Classification.emitted_through_ms``: the watermark the latest *committed* micro-batch ran
    with, so every append-mode window of the partition is in the sink; under ``Trigger.Once`` that
    is one run after the watermark passed, as its windows are written one run later). Partitions
    are counted from the one holding ``since``; each is announced once, in event-time order.

    On success: one event per new partition on ``asset`` with ``partition_key`` (``YYYY-MM-DD`` for
    a day in ``timezone``; ``YYYY-MM-DDTHH:00:00`` UTC for an hour). Airflow gives every event of one
    task the same ``extra``; it is ``{"checkpoint", "query_id", "grain", "timezone", "watermark_ms",
    "watermark", "emitted_through_ms", "emitted_through", "partitions": {key: {"start_ms", "end_ms",
    "start", "end", **partition_facts(partition)}}}`` (epoch ms UTC and ISO-8601 UTC), so a consumer
    reads its own partition's figures at ``extra["partitions"][dag_run.partition_key]``. The same
    document is returned (XCom ``return_value``) with ``"announced": [keys]``. Nothing new: the task
    is skipped (no event at all; see the module docstring).

    Exactly once: the announced keys are kept in the asset state store of ``asset`` under
    ``watermark_partitions:<grain>:<checkpoint>`` (:class:`AnnouncedPartitions`). The new keys are
    claimed as the last step before the task succeeds; the next evaluation settles the claim
    against the asset's events (keys without an event, a try that died between claim and success,
    are announced again). A new query id at the checkpoint (the checkpoint was replaced) starts a
    new memory, with a warning.

    :param checkpoint: the checkpoint location, local path or fsspec URL (templated).
    :param asset: the partitioned asset (added to the task's outlets, and to its inlets to read back
        its events).
    :param since: the first partition is the one holding this instant (templated; ISO-8601 text,
        aware datetime or epoch ms), e.g. the DAG's start date.
    :param grain: ``day`` (default) or ``hour``.
    :param timezone: the days' IANA time zone (default ``America/New_York``; hours are UTC).
    :param partition_facts: ``callable(Partition) -> dict`` of JSON values added to the partition's
        entry in ``extra["partitions"]`` (e.g. windows and late rows in the sink for that day); None: none.
    :param allowed_lateness: the job's allowed lateness (``"6 hours"``, :mod:`watermark_ops.core.ledger.corrections`):
        a partition is final only once the watermark is that far past its end, when its windows are
        emitted and the corrections of its recoverable late rows published (by the run that moved
        the watermark there); the ``extra`` adds ``allowed_lateness_ms`` and ``final_through_ms``.
        None: once its windows are emitted.
    :param fail_on_jumped: fail when the watermark jumped ahead of processing time (default True): a
        future-dated record passes every partition end, but on-time rows still to come will be
        dropped, so no partition is proven final.
    :param conn_id: the Airflow connection to read the checkpoint with (templated), e.g. an ``aws``
        connection for ``s3://`` (:func:`watermark_ops.airflow.storage.checkpoint_filesystem`); None:
        a local path, or a URL read through fsspec with ``storage_options`` and the environment.
    :param storage_options: with ``conn_id``, the provider's storage options; without, fsspec options.
    :raises AirflowFailException: jumped watermark, a malformed memory, a bad ``since``.
    :raises AirflowException: the checkpoint is missing or its head unreadable (retries apply).
    """

    template_fields: Sequence[str] = ("checkpoint", "since", "conn_id")
    ui_color = "#eef6e8"

    def __init__(self, *, checkpoint: str, asset: Asset, since: Any, grain: str = "day",
                 timezone: str = DEFAULT_TIMEZONE, partition_facts: Callable[[Partition], dict] | None = None,
                 fail_on_jumped: bool = True, storage_options: dict[str, Any] | None = None,
                 conn_id: str | None = None, allowed_lateness: str | None = None, **kwargs: Any) -> None:
        self.allowed_lateness_ms = 0
        if allowed_lateness:  # checked at DAG parse (ValueError); imported only when given
            from watermark_ops.core.ledger.corrections import allowed_lateness_ms

            self.allowed_lateness_ms = allowed_lateness_ms(allowed_lateness)
        if grain not in GRAINS:
            raise ValueError(f"grain must be one of {GRAINS}, got {grain!r}")
        for field in ("outlets", "inlets"):
            assets = list(kwargs.pop(field, None) or [])
            if asset not in assets:
                assets.append(asset)
            kwargs[field] = assets
        super().__init__(**kwargs)
        add_registry_inlet(self)
        self.checkpoint = checkpoint
        self.asset = asset
        self.since = since
        self.grain = grain
        self.timezone = timezone
        self.partition_facts = partition_facts
        self.fail_on_jumped = fail_on_jumped
        self.storage_options = storage_options
        self.conn_id = conn_id

    # -- memory ---------------------------------------------------------------------------------

    def memory_key(self) -> str:
        """``watermark_partitions:<grain>:<normalised checkpoint>`` (its SHA-256 when longer than 512)."""
        return state_store_key(partitions_key_prefix(self.grain), self.checkpoint)

    def _load(self, store: Any, query_id: str | None) -> AnnouncedPartitions:
        key = self.memory_key()
        try:
            raw = store.get(key, default=None)
            memory = None if raw is None else AnnouncedPartitions.from_dict(raw, f"asset state store key {key!r}")
        except PartitionMemoryError as exc:
            raise AirflowFailException(f"partition memory of {self.checkpoint} is malformed: {exc}") from exc
        if memory is None:
            return AnnouncedPartitions(query_id, self.grain, self.timezone)
        if memory.query_id is not None and query_id is not None and memory.query_id != query_id:
            self.log.warning("checkpoint %s has a new query id %s (announcements were remembered for %s): "
                             "a new query, a new memory", self.checkpoint, query_id, memory.query_id)
            return AnnouncedPartitions(query_id, self.grain, self.timezone)
        if memory.tz != self.timezone:
            raise AirflowFailException(f"partition memory of {self.checkpoint} was written for time zone "
                                       f"{memory.tz!r}, this task uses {self.timezone!r}: its days differ")
        return memory

    def _confirmed(self, context: Any, memory: AnnouncedPartitions, location: str) -> set[str]:
        """The pending keys whose asset events exist (read back through ``inlet_events``)."""
        claimed_at = memory.pending.get("claimed_at_ms")
        events = context["inlet_events"][self.asset]
        if isinstance(claimed_at, int):
            events = events.after(iso_utc(claimed_at - int(_SETTLE_MARGIN.total_seconds() * 1000)))
        wanted = set(memory.pending.get("keys", []))
        return {e.partition_key for e in events
                if e.partition_key in wanted and (e.extra or {}).get("checkpoint") in (self.checkpoint, location)}

    # -- execute --------------------------------------------------------------------------------

    def execute(self, context: Any) -> dict[str, Any]:
        register_checkpoint(context, self.checkpoint, asset=self.asset, conn_id=self.conn_id,
                            storage_options=self.storage_options)
        try:
            since_ms = instant_ms(self.since)
        except ValueError as exc:
            raise AirflowFailException(f"since of {self.task_id}: {exc}") from exc
        # The checkpoint reader and its classification: loaded when the task runs, not when the DAG parses.
        from watermark_ops.core.stall import JUMPED, CheckpointMissing, StallInputError, evaluate
        from watermark_ops.core.thresholds import Thresholds

        try:
            from watermark_ops.airflow.storage import checkpoint_filesystem

            fs = checkpoint_filesystem(self.checkpoint, self.conn_id, self.storage_options)
            c = evaluate(self.checkpoint, Thresholds(max_lag=None), filesystem=fs,
                         storage_options=None if fs is not None else self.storage_options)
        except (CheckpointMissing, StallInputError) as exc:
            raise AirflowException(f"cannot read the watermark of {self.checkpoint}: {exc}") from exc
        if c.state == JUMPED and self.fail_on_jumped:
            raise AirflowFailException(f"the watermark of {self.checkpoint} jumped ahead of processing time; "
                                       f"no partition is proven final: {c.summary()}")
        store = context["asset_state_store"][self.asset]
        remembered = self._load(store, c.query_id)
        memory = remembered
        if memory.pending:
            confirmed = self._confirmed(context, memory, c.location)
            memory = memory.settle(confirmed)
            lost = sorted(set(remembered.pending["keys"]) - confirmed)
            if lost:
                self.log.warning("claimed by %s without an asset event (that try did not succeed), announcing "
                                 "again: %s", remembered.pending.get("claimed_by"), lost)
        final_through = (c.emitted_through_ms - self.allowed_lateness_ms) if c.emitted_through_ms is not None else None
        new = newly_closed(final_through, memory.keys, since_ms=since_ms, grain=self.grain, tz=self.timezone)
        document = {
            "checkpoint": self.checkpoint, "query_id": c.query_id, "grain": self.grain, "timezone": self.timezone,
            "watermark_ms": c.watermark_ms, "watermark": iso_utc(c.watermark_ms),
            "emitted_through_ms": c.emitted_through_ms, "emitted_through": iso_utc(c.emitted_through_ms),
            "partitions": {},
        }
        if self.allowed_lateness_ms:
            document.update(allowed_lateness_ms=self.allowed_lateness_ms, final_through_ms=final_through,
                            final_through=iso_utc(final_through))
        if not new:
            if memory != remembered:
                store.set(self.memory_key(), memory.to_dict())
            message = (f"no {self.grain} newly closed: committed batches ran with watermark "
                       f"{iso_utc(c.emitted_through_ms) or 'none'}; announced so far: "
                       f"{list(memory.keys[-3:]) or 'none'}{' ...' if len(memory.keys) > 3 else ''}")
            context["ti"].xcom_push(key="return_value", value={**document, "announced": [], "message": message})
            raise AirflowSkipException(message)  # skipped: no event (an unpartitioned one would be rejected)
        for partition in new:
            entry = partition.to_dict()
            entry.pop("key")
            if self.partition_facts is not None:
                entry.update(self.partition_facts(partition) or {})
            document["partitions"][partition.key] = entry
        keys = [p.key for p in new]
        outlet = context["outlet_events"][self.asset]
        outlet.extra.update(document)
        outlet.add_partitions(keys)
        ti = context["ti"]
        claimed_by = f"{ti.dag_id}/{ti.run_id}/{ti.task_id}/{ti.try_number}"
        # Last step: the claim. The events are registered when the task succeeds right after it.
        store.set(self.memory_key(), memory.claim(keys, claimed_by, now_ms()).to_dict())
        self.log.info("announcing %d %s partition(s) closed by watermark %s: %s", len(keys), self.grain,
                      iso_utc(c.emitted_through_ms), keys)
        return {**document, "announced": keys}
