"""The state findings: pure functions of a read :class:`~watermark_ops.core.state.reader.CheckpointState`.

Each finding is a :class:`watermark_ops.core.rules.Finding` (rule, severity, batch id, file,
message), the shape of the audit's findings; the message ends with what to do. Names (stable:
alerts and dashboards key on them) and why they hold:

* ``state_unbounded`` (warning): no watermark can ever evict the operator's state, so it grows
  with every new key for the life of the query: a ``dropDuplicates`` whose keys hold no event-time
  column with a watermark, an aggregation likewise, a stream-stream join with a watermark on one
  side only (then neither side is evicted, ``StreamingSymmetricHashJoinHelper``) or none. Told by
  the state schema (key fields carrying ``spark.watermarkDelayMs``) and the operator metadata
  (:func:`watermark_ops.core.state.metadata.read_state_metadata`).
* ``state_growing`` (warning): an operator's rows rose over the newest ``growing_batches``
  batches read while the watermark advanced and nothing was removed: the watermark moves but does
  not evict (a window or delay threshold longer than expected, an event-time column that is not in
  the state key, a bug).
* ``state_never_compacted`` (warning): a restart must replay more delta or changelog files for one
  partition and store than the checkpoint's maintenance task would ever let accumulate: more than
  its ``minDeltasForSnapshot`` plus :data:`COMPACTION_MARGIN` (:func:`compaction_limit`), with no
  snapshot since. Spark writes snapshots and
  deletes old state files only in its maintenance task (``StateStore.MaintenanceTask``), which
  first runs one ``spark.sql.streaming.stateStore.maintenanceInterval`` (default 60 s) after the
  JVM loads its first state store: a driver that lives less than that, an availableNow run per
  spark-submit, never compacts, and every restart replays every delta since version 1.
* ``state_files_accumulating`` (warning): a store keeps more versions than
  ``minBatchesToRetain`` plus ``max_versions_over_retain``: old state files are not being deleted
  (the same maintenance task deletes them).
* ``unreadable`` (error): a state file that could not be read or parsed (truncated, corrupt, an
  unknown codec), or a folder that could not be listed; the file is named.

Thresholds: :class:`watermark_ops.core.thresholds.StateThresholds`.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from typing import Any

from watermark_ops.core.rules import ERROR, WARNING, Finding, unreadable
from watermark_ops.core.thresholds import AUTO, DEFAULT_STATE_THRESHOLDS, StateThresholds

__all__ = ["COMPACTION_MARGIN", "DEFAULT_MIN_DELTAS_FOR_SNAPSHOT", "MAINTENANCE_RECIPE", "MIN_DELTAS_CONF",
           "STATE_RULES", "compaction_limit", "min_deltas_for_snapshot", "state_files_accumulating",
           "state_findings", "state_growing", "state_never_compacted", "state_options", "state_unbounded"]

#: The SQL conf of how many deltas (changelogs) follow a snapshot before the next one.
MIN_DELTAS_CONF = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
#: Spark's default of :data:`MIN_DELTAS_CONF` (``SQLConf.STATE_STORE_MIN_DELTAS_FOR_SNAPSHOT``).
DEFAULT_MIN_DELTAS_FOR_SNAPSHOT = 10
#: Files beyond ``minDeltasForSnapshot`` a healthy store may still replay: the maintenance task
#: runs once per ``maintenanceInterval``, so a store whose batches come faster than that reaches a
#: few more versions before the task snapshots it; a chain longer than both is evidence that the
#: task never ran on it (5: a minute's interval covers 5 batches of 12 s).
COMPACTION_MARGIN = 5

#: Every state rule with its severity.
STATE_RULES: dict[str, str] = {
    "state_unbounded": WARNING,
    "state_growing": WARNING,
    "state_never_compacted": WARNING,
    "state_files_accumulating": WARNING,
    "unreadable": ERROR,
}

#: What compacts the state: said by ``state_never_compacted`` and ``state_files_accumulating``.
MAINTENANCE_RECIPE = (
    "Spark snapshots the state and deletes old state files only in its maintenance task, which first runs "
    "one spark.sql.streaming.stateStore.maintenanceInterval (default 60 s) after the driver loads its first "
    "state store: a driver that lives less than that (an availableNow run per spark-submit) never compacts. "
    "Fix: set spark.sql.streaming.stateStore.maintenanceInterval below the time a run keeps its state stores "
    "loaded (seconds, far less than the run: e.g. 1s), so that the task runs while they are loaded, or run the query on a long-lived Spark Connect server "
    "whose maintenance task keeps running between runs; a snapshot is written once more than "
    "spark.sql.streaming.stateStore.minDeltasForSnapshot (default 10) versions follow the last one")


def _op(op: Any) -> str:
    return f"operator {op.operator_id} ({op.name or 'unnamed'})"


def _newest_batch(op: Any) -> int | None:
    return op.target_version - 1 if op.target_version else None


def state_unbounded(state: Any) -> list[Finding]:
    """One finding per operator whose state no watermark can evict (``bounded_by_watermark`` False)."""
    out = []
    for op in state.operators:
        if op.bounded_by_watermark is False:
            rows = next((b.rows for b in reversed(op.batches) if b.rows is not None), None)
            held = f"; it holds {rows} rows" if rows is not None else ""
            out.append(Finding("state_unbounded", WARNING, _newest_batch(op), op.folder,
                               f"{_op(op)}: {op.bound_reason}{held}. Fix: bound it by event time (a watermark and "
                               f"the event-time column in the keys: dropDuplicates([..., event time]) or "
                               f"dropDuplicatesWithinWatermark; a watermark on both join inputs and a time-range "
                               f"join condition), then start from a new checkpoint"))
    return out


def state_growing(state: Any, thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS) -> list[Finding]:
    """Rows rising over the newest ``growing_batches`` batches with rows while the watermark
    advanced and nothing was removed."""
    n = thresholds.growing_batches
    if n is None:
        return []
    out = []
    for op in state.operators:
        known = [b for b in op.batches if b.rows is not None]
        window = known[-n:]
        if len(window) < n:
            continue
        first, last = window[0], window[-1]
        watermarks = [b.watermark_ms for b in window if b.watermark_ms is not None]
        if (last.rows > first.rows and all((b.removed or 0) == 0 for b in window)
                and len(watermarks) >= 2 and watermarks[-1] > watermarks[0]):
            out.append(Finding("state_growing", WARNING, last.batch_id, op.folder,
                               f"{_op(op)}: rows rose from {first.rows} (batch {first.batch_id}) to {last.rows} "
                               f"(batch {last.batch_id}) over {len(window)} batches while the watermark advanced "
                               f"from {watermarks[0]} to {watermarks[-1]} ms and no row was removed: the watermark "
                               f"does not evict this state. Check that the event-time column with the watermark is "
                               f"in the state key (a window or the event time itself) and that the window and "
                               f"delay threshold are what you expect"))
    return out


def min_deltas_for_snapshot(conf: dict[str, str] | None) -> tuple[int, bool]:
    """``(minDeltasForSnapshot, frozen)``: the value in the checkpoint's offsets ``conf`` (the head
    batch's; ``frozen`` True) when it froze one, else Spark's default 10 (``frozen`` False)."""
    raw = (conf or {}).get(MIN_DELTAS_CONF)
    if raw is not None and str(raw).strip().isdigit() and int(raw) >= 1:
        return int(raw), True
    return DEFAULT_MIN_DELTAS_FOR_SNAPSHOT, False


def compaction_limit(conf: dict[str, str] | None, max_chain: int | str | None = AUTO) -> int | None:
    """The longest chain (delta or changelog files a restart replays for one partition and store)
    a store whose maintenance task runs can reach; a longer one is ``state_never_compacted``.

    ``max_chain`` a number: that number; None: never. ``"auto"`` (the default): the checkpoint's
    ``minDeltasForSnapshot`` (:func:`min_deltas_for_snapshot`) plus :data:`COMPACTION_MARGIN`, which
    is when Spark's maintenance task would have snapshotted it:

    * HDFS-backed provider (``HDFSBackedStateStoreProvider.doMaintenance`` -> ``doSnapshot``): a
      snapshot once more than ``minDeltasForSnapshot`` delta files follow the last snapshot
      (``deltaFilesForLastVersion.size > storeConf.minDeltasForSnapshot``);
    * RocksDB with changelog checkpointing (``RocksDB.shouldCreateSnapshot``, uploaded by the same
      maintenance task): once ``V - lastSnapshotVersion >= minDeltasForSnapshot``.

    So with Spark's defaults (10 + 5) a chain of 16 files is flagged and one of 12 is not.
    """
    if max_chain != AUTO:
        return max_chain  # type: ignore[return-value]
    return min_deltas_for_snapshot(conf)[0] + COMPACTION_MARGIN


def state_never_compacted(state: Any, thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS) -> list[Finding]:
    """Chains longer than :func:`compaction_limit` files for one partition and store (the
    threshold ``max_chain``: ``"auto"`` judges from the checkpoint's ``minDeltasForSnapshot``)."""
    k = compaction_limit(state.conf, thresholds.max_chain)
    if k is None:
        return []
    deltas, frozen = min_deltas_for_snapshot(state.conf)
    why = (f"more than {k}, where Spark snapshots once {deltas} follow the last snapshot "
           f"(minDeltasForSnapshot {deltas}, {'as the checkpoint froze it' if frozen else 'Spark default'}; "
           f"margin {COMPACTION_MARGIN})" if thresholds.max_chain == AUTO else f"more than {k}")
    out = []
    for op in state.operators:
        if op.chain_length <= k:
            continue
        longest = max(op.chains, key=lambda c: len(c.replay) + len(c.missing), default=None)
        first = longest.replay[0].path if longest is not None and longest.replay else op.folder
        since = ("no snapshot was ever written" if op.snapshot_version is None
                 else f"the newest snapshot is version {op.snapshot_version}")
        kind = "changelog" if op.changelog else "delta"
        out.append(Finding("state_never_compacted", WARNING, _newest_batch(op), first,
                           f"{_op(op)}: a restart replays {op.chain_length} {kind} files for one partition and store "
                           f"({op.partitions} partitions x {len(op.stores)} stores), {why}: {since}, so the "
                           f"maintenance task never ran on it. {MAINTENANCE_RECIPE}"))
    return out


def state_files_accumulating(state: Any, thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS) -> list[Finding]:
    """Stores keeping more versions than ``minBatchesToRetain`` plus ``max_versions_over_retain``."""
    slack = thresholds.max_versions_over_retain
    if slack is None:
        return []
    keep = state.min_batches_to_retain
    out = []
    for op in state.operators:
        if op.versions_kept > keep + slack:
            out.append(Finding("state_files_accumulating", WARNING, _newest_batch(op), op.folder,
                               f"{_op(op)}: a store keeps {op.versions_kept} versions (versions {op.oldest_version} to "
                               f"{op.latest_version}, {op.files_on_disk} files, {op.bytes_on_disk} bytes) where "
                               f"minBatchesToRetain is {keep}: old state files are not deleted. {MAINTENANCE_RECIPE}"))
    return out


def state_findings(state: Any, thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS) -> list[Finding]:
    """Every state rule over a read state, then one ``unreadable`` per problem (listing, metadata,
    state file)."""
    problems = list(state.problems) + [p for op in state.operators for p in op.problems]
    return [*state_unbounded(state), *state_growing(state, thresholds), *state_never_compacted(state, thresholds),
            *state_files_accumulating(state, thresholds), *unreadable(problems)]


def state_options(fail_on_state: Any, state_thresholds: Any, state_store: bool) -> tuple[tuple[str, ...], StateThresholds]:
    """The sensors' and their trigger's state options (``fail_on_state``, ``state_thresholds``,
    ``state_store``: :class:`watermark_ops.airflow.sensors.WatermarkStallSensor`), validated:
    ``(rules to fail on, thresholds)``.

    :raises ValueError: an unknown rule (naming the known ones), ``fail_on_state`` without
        ``state_store``, or a bad threshold.
    """
    rules = (fail_on_state,) if isinstance(fail_on_state, str) else tuple(fail_on_state or ())
    unknown = sorted(set(rules) - set(STATE_RULES))
    if unknown:
        raise ValueError(f"fail_on_state: unknown state rules {unknown}; expected some of {sorted(STATE_RULES)}")
    if rules and not state_store:
        raise ValueError("fail_on_state needs state_store=True (the state is not read otherwise)")
    if isinstance(state_thresholds, StateThresholds):
        return rules, state_thresholds
    return rules, StateThresholds.from_dict(dict(state_thresholds or {}))
