"""The Airflow trigger behind the deferrable watermark sensors (runs in the triggerer).

:class:`WatermarkTrigger` polls a checkpoint with the same evaluation the sensors use in
``poke`` and ``reschedule`` mode (:func:`watermark_ops.core.checks.check`) until it is decided, then
yields exactly one :class:`~airflow.triggers.base.TriggerEvent`. Reading a checkpoint is blocking
fsspec I/O (listings and reads, possibly over the network): it runs in a worker thread
(``asyncio.to_thread``) so that the triggerer's event loop, shared by every trigger, never
blocks; between polls the trigger waits with ``asyncio.sleep``.

Each poll moves on the remembered view the previous one left (:func:`watermark_ops.core.checks.check_tail`,
:mod:`watermark_ops.core.view`, kept in the trigger between polls): after the first poll, an unchanged checkpoint costs a constant
number of requests (no listing) whatever its history, and a new ``offsets/N`` / ``commits/N`` is
fetched by name, so the triggerer (a long-lived process whose filesystem, and its listing cache,
outlives every trigger) sees it. A checkpoint on object storage is read through an Airflow
connection (``conn_id``): the filesystem is built in the worker thread, in the triggerer, with
:func:`watermark_ops.airflow.storage.checkpoint_filesystem` (no credentials travel in the kwargs).

Its kwargs are plain values (strings, numbers, a dict of millisecond thresholds, a
``datetime.timedelta``), validated when the trigger is built, i.e. in the worker when the sensor
defers, not later in the triggerer: bad values fail the task with a clear message instead of a
trigger that cannot be deserialized.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from watermark_ops.core.checks import GOALS, check_tail
from watermark_ops.core.thresholds import Thresholds

__all__ = ["EVENT_STATUSES", "WatermarkTrigger"]

#: The ``status`` of the one event: the evaluation's outcome (``done``, ``fail``, ``skip``), or
#: ``timeout`` (still ``wait`` when ``timeout`` ran out), or ``error`` (the checkpoint could not
#: be read or classified; ``message`` says why, naming the file).
EVENT_STATUSES = ("done", "fail", "skip", "timeout", "error")


class WatermarkTrigger(BaseTrigger):
    """Poll a checkpoint until :func:`watermark_ops.core.checks.check` is decided, then fire one event.

    :param checkpoint: the checkpoint location (local path or fsspec URL).
    :param goal: ``healthy`` (``WatermarkStallSensor``) or ``reached`` (``WatermarkReachedSensor``).
    :param thresholds: :meth:`watermark_ops.core.thresholds.Thresholds.to_dict` (milliseconds); default thresholds when None.
    :param target_ms: the target instant for ``reached``, epoch ms UTC.
    :param missing_ok: ``healthy``: a missing checkpoint is ``skip`` rather than ``fail``.
    :param fail_on_jumped: ``reached``: a jumped watermark is ``fail``.
    :param poll_interval: seconds between polls (> 0).
    :param timeout: how long to poll while the outcome is ``wait`` before firing ``timeout``: a
        plain ``datetime.timedelta`` (a pendulum ``Duration`` is converted: pendulum durations do not
        survive serialization under the real executor). Counted from when the trigger starts
        running, so a triggerer restart starts it again; the task's own deferral timeout (set by
        the sensor) bounds the whole wait.
    :param storage_options: with ``conn_id``, the provider's storage options; without, fsspec
        storage options (plain JSON values).
    :param conn_id: the Airflow connection to read the checkpoint with (e.g. an ``aws`` connection),
        looked up in the triggerer; None: local, or fsspec with ``storage_options`` and the environment.
    :param state_store: / fail_on_state: / state_thresholds: as for the sensors
        (:class:`watermark_ops.airflow.sensors.WatermarkStallSensor`; thresholds as
        :meth:`~watermark_ops.core.thresholds.StateThresholds.to_dict`): the state summary is read
        at depth ``rows`` when the checkpoint has new batches, a finding in ``fail_on_state`` fires ``fail``.
    :raises TypeError: / :raises ValueError: for a kwarg of the wrong type or value.

    Event payload: ``{"status": one of EVENT_STATUSES, "message": str, "checkpoint": str,
    "polls": int, "classification": Classification.to_dict() | None, "state_store":
    StateSummary.document() | None}``.
    """

    def __init__(self, *, checkpoint: str, goal: str = "healthy", thresholds: dict[str, Any] | None = None,
                 target_ms: int | None = None, missing_ok: bool = False, fail_on_jumped: bool = True,
                 poll_interval: float = 60.0, timeout: timedelta = timedelta(hours=1),
                 storage_options: dict[str, Any] | None = None, conn_id: str | None = None,
                 state_store: bool = True, fail_on_state: list[str] | None = None,
                 state_thresholds: dict[str, Any] | None = None) -> None:
        super().__init__()
        if not isinstance(checkpoint, str) or not checkpoint.strip():
            raise TypeError(f"checkpoint must be a non-empty string (a path or fsspec URL), got {checkpoint!r}")
        if goal not in GOALS:
            raise ValueError(f"goal must be one of {GOALS}, got {goal!r}")
        if goal == "reached" and (isinstance(target_ms, bool) or not isinstance(target_ms, int)):
            raise TypeError(f"goal 'reached' needs target_ms as epoch milliseconds (int), got {target_ms!r}")
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) or poll_interval <= 0:
            raise ValueError(f"poll_interval must be a positive number of seconds, got {poll_interval!r}")
        if not isinstance(timeout, timedelta):
            raise TypeError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__} {timeout!r}")
        if timeout < timedelta(0):
            raise ValueError(f"timeout must not be negative, got {timeout!r}")
        if storage_options is not None and not isinstance(storage_options, dict):
            raise TypeError(f"storage_options must be a dict, got {storage_options!r}")
        if conn_id is not None and (not isinstance(conn_id, str) or not conn_id.strip()):
            raise TypeError(f"conn_id must be an Airflow connection id (a non-empty string), got {conn_id!r}")
        self.thresholds = Thresholds.from_dict(thresholds or {}).to_dict()  # validated, normalised
        self.checkpoint = checkpoint
        self.goal = goal
        self.target_ms = target_ms
        self.missing_ok = bool(missing_ok)
        self.fail_on_jumped = bool(fail_on_jumped)
        self.poll_interval = float(poll_interval)
        self.timeout = timedelta(seconds=timeout.total_seconds())  # plain, never a pendulum Duration
        self.storage_options = storage_options
        self.conn_id = conn_id
        from watermark_ops.core.state.summary import state_options

        self.state_store = bool(state_store)
        rules, thresholds = state_options(fail_on_state, state_thresholds, self.state_store)  # validated
        self.fail_on_state, self.state_thresholds = list(rules), thresholds.to_dict()
        self._state_document: dict[str, Any] | None = None
        self._tail: Any = None  # the view the last poll left (watermark_ops.core.view.View), this process only

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """``("watermark_ops.airflow.triggers.WatermarkTrigger", kwargs)``: the kwargs rebuild an equal trigger."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "checkpoint": self.checkpoint,
                "goal": self.goal,
                "thresholds": dict(self.thresholds),
                "target_ms": self.target_ms,
                "missing_ok": self.missing_ok,
                "fail_on_jumped": self.fail_on_jumped,
                "poll_interval": self.poll_interval,
                "timeout": self.timeout,
                "storage_options": self.storage_options,
                "conn_id": self.conn_id,
                "state_store": self.state_store,
                "fail_on_state": list(self.fail_on_state),
                "state_thresholds": dict(self.state_thresholds),
            },
        )

    def _check(self):
        """One poll, in a worker thread: the filesystem (from ``conn_id``), then :func:`check_tail`
        from the view the previous poll left; remembers the new view."""
        from watermark_ops.airflow.storage import checkpoint_filesystem
        from watermark_ops.core.state.summary import state_outcome
        from watermark_ops.core.thresholds import StateThresholds

        fs = checkpoint_filesystem(self.checkpoint, self.conn_id, self.storage_options)
        result, self._tail = check_tail(
            self.checkpoint, self._tail, goal=self.goal, thresholds=Thresholds.from_dict(self.thresholds),
            target_ms=self.target_ms, missing_ok=self.missing_ok, fail_on_jumped=self.fail_on_jumped,
            filesystem=fs, storage_options=None if fs is not None else self.storage_options,
            state_store="rows" if self.state_store else None)
        result, self._state_document = state_outcome(result, self._tail, self.fail_on_state,
                                                     StateThresholds.from_dict(self.state_thresholds))
        return result

    def _event(self, status: str, message: str, polls: int, result=None) -> TriggerEvent:
        classification = result.classification.to_dict() if result is not None and result.classification else None
        return TriggerEvent({"status": status, "message": message, "checkpoint": self.checkpoint, "polls": polls,
                             "classification": classification, "state_store": self._state_document})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll (blocking I/O in a thread) until decided or ``timeout``; yield one event."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout.total_seconds()
        polls = 0
        while True:
            polls += 1
            try:
                result = await asyncio.to_thread(self._check)
            except Exception as exc:  # unreadable head, storage errors: reported, the task decides
                self.log.warning("watermark check of %s failed: %s", self.checkpoint, exc)
                yield self._event("error", f"{type(exc).__name__}: {exc}", polls)
                return
            if result.outcome != "wait":
                yield self._event(result.outcome, result.message, polls, result)
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                yield self._event("timeout", f"still waiting after {self.timeout}: {result.message}", polls, result)
                return
            self.log.info("poll %d of %s: %s", polls, self.checkpoint, result.message)
            await asyncio.sleep(min(self.poll_interval, remaining))
