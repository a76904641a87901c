"""The one evaluation the Airflow sensors and their trigger share: done, wait, fail or skip.

:func:`check` classifies a checkpoint (:func:`watermark_ops.core.stall.evaluate`) and decides,
for a goal, what a sensor does next. ``poke``, ``reschedule`` and the deferrable trigger all call
it, so the three modes cannot disagree.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from watermark_ops.core.stall import JUMPED, NO_WATERMARK, CheckpointMissing, Classification, evaluate
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS, Thresholds
from watermark_ops.core.times import iso_utc

__all__ = ["GOALS", "Check", "check", "check_tail", "decide"]

#: What the sensors wait for: a healthy watermark, or a watermark that reached a target instant.
GOALS = ("healthy", "reached")


@dataclass(frozen=True)
class Check:
    """One evaluation for a sensor or trigger.

    :ivar outcome: ``done`` (the sensor succeeds), ``wait`` (evaluate again later; the sensor
        fails when its timeout runs out), ``fail`` (fail now: waiting cannot help), ``skip``
        (missing checkpoint with ``missing_ok``).
    :ivar message: why, for the task log and the failure message.
    :ivar classification: None when the checkpoint does not exist.
    """

    outcome: str
    message: str
    classification: Classification | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"outcome", "message", "classification": Classification.to_dict() | None}``."""
        return {"outcome": self.outcome, "message": self.message,
                "classification": self.classification.to_dict() if self.classification else None}


def check(location: Any, *, goal: str = "healthy", thresholds: Thresholds = DEFAULT_THRESHOLDS,
          target_ms: int | None = None, missing_ok: bool = False, fail_on_jumped: bool = True,
          at: Any = None, storage_options: dict[str, Any] | None = None, filesystem: Any = None) -> Check:
    """Evaluate a checkpoint for a sensor: the same call in ``poke``, ``reschedule`` and the trigger.

    ``goal="healthy"`` (``WatermarkStallSensor``): not an alarm → ``done``; ``jumped`` → ``fail``
    (the watermark never goes back); another alarm → ``wait`` (it may heal: data for the idle
    input, the backlog caught up); a missing checkpoint → ``skip`` with ``missing_ok``, else ``fail``.

    ``goal="reached"`` (``WatermarkReachedSensor``): ``done`` when ``emitted_through_ms >=
    target_ms``: a committed batch ran with a watermark at or past the target, so append-mode
    windows ending at or before it are final *and in the sink*; ``jumped`` with ``fail_on_jumped``
    → ``fail`` (a future-dated record passes every target, but the rows still to come will be
    dropped: completeness is not proven); ``no_watermark`` → ``fail`` (a query without a watermark never
    reaches a target); else ``wait`` (also while the checkpoint does not exist, and for
    ``watermark_unknown``, which may still be a watermark not set yet).

    :param target_ms: the target instant, epoch ms UTC (required for ``reached``).
    :param storage_options: / filesystem: how to reach the checkpoint, as for
        :func:`watermark_ops.core.stall.evaluate` (``filesystem``: an fsspec filesystem, e.g. from
        :func:`watermark_ops.airflow.storage.checkpoint_filesystem`).
    :raises ValueError: for a bad goal or a missing target.
    :raises StallInputError: the checkpoint exists but cannot be classified (its head is unreadable).
    """
    if goal not in GOALS:
        raise ValueError(f"goal must be one of {GOALS}, got {goal!r}")
    if goal == "reached" and (isinstance(target_ms, bool) or not isinstance(target_ms, int)):
        raise ValueError(f"goal 'reached' needs target_ms (epoch ms UTC), got {target_ms!r}")
    try:
        c = evaluate(location, thresholds, at=at, storage_options=storage_options, filesystem=filesystem)
    except CheckpointMissing as exc:
        if goal == "reached":
            return Check("wait", f"{exc}: waiting for the job to create it")
        if missing_ok:
            return Check("skip", f"{exc} (missing_ok: the job has not run yet)")
        return Check("fail", f"{exc}: expected a Structured Streaming checkpoint")
    return decide(c, goal=goal, target_ms=target_ms, fail_on_jumped=fail_on_jumped)


def decide(c: Classification, *, goal: str = "healthy", target_ms: int | None = None,
           fail_on_jumped: bool = True) -> Check:
    """The outcome for one classification of an existing checkpoint (see :func:`check`, which
    reads and then calls this; :func:`check_tail` does the same from a remembered view)."""
    if goal == "healthy":
        if c.healthy:
            return Check("done", f"{'no alarm' if c.state == NO_WATERMARK else 'healthy'}: {c.summary()}", c)
        if c.state == JUMPED:
            return Check("fail", f"alarm: {c.summary()}", c)
        return Check("wait", f"alarm: {c.summary()}", c)
    if c.state == JUMPED and fail_on_jumped:
        return Check("fail", f"the watermark jumped ahead of processing time, completeness is not proven: {c.summary()}", c)
    if c.state == NO_WATERMARK:
        return Check("fail", f"this query has no watermark, so no target is ever reached (completeness by watermark "
                             f"does not apply): {c.summary()}", c)
    emitted = c.emitted_through_ms
    if emitted is not None and emitted >= target_ms:
        return Check("done", f"reached: batches committed with watermark {iso_utc(emitted)} >= target "
                             f"{iso_utc(target_ms)} ({c.location})", c)
    return Check("wait", f"not reached: committed batches ran with watermark {iso_utc(emitted) or 'none'} "
                         f"< target {iso_utc(target_ms)} (next batch starts from {iso_utc(c.watermark_ms) or 'none'}; "
                         f"{c.state}) ({c.location})", c)


def _missing(exc: Exception, goal: str, missing_ok: bool) -> Check:
    if goal == "reached":
        return Check("wait", f"{exc}: waiting for the job to create it")
    if missing_ok:
        return Check("skip", f"{exc} (missing_ok: the job has not run yet)")
    return Check("fail", f"{exc}: expected a Structured Streaming checkpoint")


def check_tail(location: Any, previous: Any = None, *, goal: str = "healthy",
               thresholds: Thresholds = DEFAULT_THRESHOLDS, target_ms: int | None = None, missing_ok: bool = False,
               fail_on_jumped: bool = True, at: Any = None, filesystem: Any = None,
               storage_options: dict[str, Any] | None = None, state_store: str | None = None) -> tuple[Check, Any]:
    """:func:`check` from the checkpoint's remembered view (:func:`watermark_ops.core.stall.evaluate_tail`):
    what the sensors, the trigger and the monitor call on every poke, keeping the view between pokes.

    With ``previous`` (the :class:`watermark_ops.core.view.View` of the last poke) a poke on an
    unchanged checkpoint lists nothing: it reads ``metadata`` and ``offsets/<head+1>`` by name and
    stats ``offsets/<head>``, a constant number of requests whatever the history; without one (or
    one that no longer matches) it reads the newest batches, as :func:`check` does.

    :param previous: the last poke's view, or None.
    :param filesystem: an fsspec filesystem to read ``location`` with (a path on it), or None.
    :param state_store: keep the view's state summary to this depth (``rows`` | ``full``), read
        when the head moved (:mod:`watermark_ops.core.state.summary`); None: carried as it is.
    :return: ``(Check, View | None)``: the same outcome :func:`check` gives for the same files, and
        the view to remember for the next poke (None when the checkpoint does not exist).
    :raises ValueError: / :raises StallInputError: as :func:`check`.
    """
    from watermark_ops.core.stall import evaluate_tail

    if goal not in GOALS:
        raise ValueError(f"goal must be one of {GOALS}, got {goal!r}")
    if goal == "reached" and (isinstance(target_ms, bool) or not isinstance(target_ms, int)):
        raise ValueError(f"goal 'reached' needs target_ms (epoch ms UTC), got {target_ms!r}")
    try:
        c, view = evaluate_tail(location, thresholds, previous, at=at, filesystem=filesystem,
                                storage_options=storage_options, state_store=state_store)
    except CheckpointMissing as exc:
        return _missing(exc, goal, missing_ok), None
    return decide(c, goal=goal, target_ms=target_ms, fail_on_jumped=fail_on_jumped), view
