"""The thresholds of the stall classification (:mod:`watermark_ops.core.stall`) and of the state
findings (:class:`StateThresholds`, :mod:`watermark_ops.core.state.rules`).

Durations are plain ``datetime.timedelta`` values (or None: that check is disabled); people give
them as seconds or ISO-8601 durations (``PT6H``), parsed by :func:`watermark_ops.core.times.duration`.
:meth:`Thresholds.to_dict` / :meth:`Thresholds.from_dict` are the JSON form (milliseconds) that an
Airflow trigger serializes.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from watermark_ops.core.times import duration, duration_ms

__all__ = ["AUTO", "DEFAULT_STATE_THRESHOLDS", "DEFAULT_THRESHOLDS", "StateThresholds", "Thresholds"]

#: ``max_chain`` judged from the checkpoint's own ``minDeltasForSnapshot`` (:class:`StateThresholds`).
AUTO = "auto"


@dataclass(frozen=True)
class Thresholds:
    """The thresholds of the classification (all durations are ``datetime.timedelta``).

    :ivar idle_after: no data batch for this long before the evaluation instant → ``idle``
        (default 15 minutes: a few triggers of a frequently scheduled job).
    :ivar max_idle: idle for longer than this → alarm (default 1 day; raise it above the
        schedule interval of a daily job, e.g. 26 hours). None: idleness never alarms.
    :ivar max_lag: the lag above this → ``lagging``: the end of the data interval the newest
        progress record was stamped with (else the latest batch time) minus the current watermark
        (default 6 hours: the job's delay threshold plus its schedule interval must fit under
        it). None: the check is disabled (a deliberate replay of old data).
    :ivar max_skew: the current watermark ahead of the latest batch time by more than this →
        ``jumped`` (default 5 minutes: well above clock skew between producers and the driver,
        well below a mistyped date). None: disabled.
    :ivar stall_window: two or more data batches spanning this much processing time without the
        watermark moving → ``stalled`` (default 1 hour). None: only ``stall_batches`` counts.
    :ivar stall_batches: this many data batches without the watermark moving → ``stalled``
        (a count, default 3).
    :ivar max_partition_skew: one partition of the input (e.g. a station or a region, from the
        progress log's ``event_time_max_ms_by_partition``) whose newest event time trails the
        leading partition's by more than this → a *warning* in the classification (not a state,
        not an alarm: :mod:`watermark_ops.core.stall`). Default 4 hours: above the skew an idle
        partition shows on ordinary days (quiet nights: the example pipeline's three partitions,
        replayed day by day over 2013, trail each other by up to 3.3 hours at the end of a run,
        by more than 2 hours on 15 days), far below a day's files arriving late. None: no warning
        (the skew is still reported as evidence).

    Each duration accepts what :func:`duration` accepts; values are normalised to plain
    ``timedelta`` (or None).

    :raises ValueError: for a bad value, naming the threshold.
    """

    idle_after: timedelta = timedelta(minutes=15)
    max_idle: timedelta | None = timedelta(days=1)
    max_lag: timedelta | None = timedelta(hours=6)
    max_skew: timedelta | None = timedelta(minutes=5)
    stall_window: timedelta | None = timedelta(hours=1)
    stall_batches: int = 3
    max_partition_skew: timedelta | None = timedelta(hours=4)

    def __post_init__(self) -> None:
        for item in fields(self):
            if item.name == "stall_batches":
                continue
            value = duration(getattr(self, item.name), item.name)
            if value is None and item.name == "idle_after":
                raise ValueError("idle_after: a duration is required (it defines idleness)")
            object.__setattr__(self, item.name, value)
        batches = self.stall_batches
        if isinstance(batches, str) and batches.strip().isdigit():
            batches = int(batches)
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
            raise ValueError(f"stall_batches: expected a whole number >= 1, got {self.stall_batches!r}")
        object.__setattr__(self, "stall_batches", batches)

    def to_dict(self) -> dict[str, int | str | None]:
        """JSON-ready: ``{"idle_after_ms", "max_idle_ms", "max_lag_ms", "max_skew_ms",
        "stall_window_ms", "max_partition_skew_ms", "stall_batches"}`` (ms ints, None when disabled)."""
        out: dict[str, int | None] = {
            f"{item.name}_ms": duration_ms(getattr(self, item.name)) for item in fields(self) if item.name != "stall_batches"
        }
        out["stall_batches"] = self.stall_batches
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Thresholds:
        """The inverse of :meth:`to_dict` (missing keys take the defaults).

        :raises ValueError: for an unknown key or a bad value.
        """
        known = {f"{item.name}_ms": item.name for item in fields(cls) if item.name != "stall_batches"}
        unknown = set(data) - set(known) - {"stall_batches"}
        if unknown:
            raise ValueError(f"unknown threshold keys {sorted(unknown)}; expected {sorted(known) + ['stall_batches']}")
        kwargs: dict[str, Any] = {}
        for key, name in known.items():
            if key in data:
                value = data[key]
                if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                    raise ValueError(f"{key}: expected milliseconds (int) or null, got {value!r}")
                kwargs[name] = None if value is None else timedelta(milliseconds=value)
        if "stall_batches" in data:
            kwargs["stall_batches"] = data["stall_batches"]
        return cls(**kwargs)


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class StateThresholds:
    """The thresholds of the state findings (counts of batches or versions; None disables a check).

    :ivar growing_batches: ``state_growing`` when an operator's rows rose over this many newest
        batches read while the watermark advanced and nothing was removed (default 10: a healthy
        window aggregation evicts at least once in ten batches unless its windows are longer than
        ten triggers; raise it for day-long windows on hourly runs).
    :ivar max_chain: ``state_never_compacted`` when a restart must replay more than this many
        delta or changelog files for one partition and store since the last snapshot. Default
        ``"auto"``: the checkpoint's own evidence, its ``spark.sql.streaming.stateStore.
        minDeltasForSnapshot`` (frozen in the offsets ``conf``, else Spark's default 10) plus
        :data:`watermark_ops.core.state.rules.COMPACTION_MARGIN` (5): a maintenance task that runs
        snapshots once that many deltas follow the last snapshot
        (:func:`watermark_ops.core.state.rules.compaction_limit`). A number fixes it.
    :ivar max_versions_over_retain: ``state_files_accumulating`` when a store keeps more versions
        than ``minBatchesToRetain`` plus this many (default 20: the maintenance task deletes what a
        snapshot no longer needs, so a healthy store keeps about ``minBatchesToRetain`` plus one
        snapshot interval).
    """

    growing_batches: int | None = 10
    max_chain: int | str | None = "auto"
    max_versions_over_retain: int | None = 20

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "max_chain" and isinstance(value, str) and value.strip().lower() == AUTO:
                object.__setattr__(self, item.name, AUTO)
                continue
            if isinstance(value, str):
                value = None if value.strip().lower() == "none" else int(value) if value.strip().isdigit() else value
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                also = " or 'auto'" if item.name == "max_chain" else ""
                raise ValueError(f"{item.name}: expected a whole number >= 1{also} or None, "
                                 f"got {getattr(self, item.name)!r}")
            object.__setattr__(self, item.name, value)

    def to_dict(self) -> dict[str, int | str | None]:
        """JSON-ready: every threshold by name."""
        return {item.name: getattr(self, item.name) for item in fields(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StateThresholds:
        """The inverse of :meth:`to_dict` (missing keys take the defaults).

        :raises ValueError: for an unknown key or a bad value.
        """
        known = {item.name for item in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown state threshold keys {sorted(unknown)}; expected {sorted(known)}")
        return cls(**data)


DEFAULT_STATE_THRESHOLDS = StateThresholds()
