"""One monitor for many checkpoints: a whole cycle in one task, the alarms mapped to notifications.

The ``watermark_monitor`` DAG (``dags/watermark_monitor.py``) runs two tasks per cycle:

* ``watch`` (one task instance, the registry as inlet): :func:`watch_cycle` lists the known
  checkpoints (:func:`watermark_ops.airflow.registry.monitor_checkpoints`), evaluates them
  concurrently in a bounded thread pool (:func:`evaluate_checkpoints`; each checkpoint through its
  own ``conn_id`` / ``storage_options``, :func:`watermark_ops.airflow.storage.checkpoint_filesystem`)
  and returns the alarms in full (``return_value``: Airflow maps only over a task's return value);
  the counts per state go to the XCom ``summary``. Both stay small whatever the number of
  checkpoints: nothing of a healthy checkpoint is kept.
* ``alarm`` (mapped over that list: one task instance per alarm, one skipped instance when there
  is none): :func:`raise_alarm` names the checkpoint (the map index)
  and fails with :class:`watermark_ops.airflow.sensors.WatermarkAlarm`, whose payload the
  ``on_failure_callback`` (:class:`watermark_ops.airflow.notifiers.WatermarkWebhookNotifier`) posts.

So a cycle costs 2 task instances, or 1 plus one per alarm, whatever the number of
checkpoints (the issue 21 measurement: one sensor task instance per checkpoint cost 1.4 s of
scheduling each for about 2 ms of work).

One checkpoint's evaluation (:func:`evaluate_entry`) never hides another's: a checkpoint that
cannot be read (a corrupt offsets file, a missing connection, storage errors) becomes an alarm of
its own (``state`` None, ``unreadable`` in the counts, the message and problems naming the files);
a missing checkpoint with ``missing_ok`` is counted as ``missing`` and skipped (not an alarm).

Imports Airflow (``airflow.sdk``) only through the functions that need it: the DAG file imports
nothing of this module at parse time.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

__all__ = [
    "SUMMARY_KEY",
    "MONITOR_CONCURRENCY",
    "evaluate_checkpoints",
    "evaluate_entry",
    "raise_alarm",
    "summarize",
    "watch_cycle",
]

log = logging.getLogger(__name__)

#: Checkpoints evaluated at once by :func:`evaluate_checkpoints` (threads of one worker process).
#: Each evaluation's own concurrent reads are bounded by the core
#: (:data:`watermark_ops.core.checkpoint.MAX_CONCURRENT_READS`) and by the connection pool of the
#: filesystem shared by the checkpoints of one connection (``max_pool_connections``).
MONITOR_CONCURRENCY = 16
#: The XCom key of the ``watch`` task's summary (its ``return_value`` is the alarms, mapped over).
SUMMARY_KEY = "summary"
#: Counted outcomes besides the classification states (:data:`watermark_ops.core.stall.STATES`).
MISSING, UNREADABLE = "missing", "unreadable"


def _thresholds(entry: dict[str, Any]) -> Any:
    from watermark_ops.airflow.config import THRESHOLD_KEYS
    from watermark_ops.core.thresholds import Thresholds

    return Thresholds(**{k: entry[k] for k in THRESHOLD_KEYS if k in entry})


def _unreadable(entry: dict[str, Any], message: str, problems: Iterable[Any] = ()) -> dict[str, Any]:
    return {"location": entry["checkpoint"], "name": entry.get("name") or entry["checkpoint"], "state": None,
            "alarm": True, "outcome": "fail", "message": message, "problems": list(problems)}


def evaluate_entry(entry: dict[str, Any], *, at: Any = None) -> dict[str, Any]:
    """Evaluate one watched checkpoint; never raises.

    :param entry: one item of :func:`watermark_ops.airflow.registry.monitor_checkpoints`:
        ``{"checkpoint": location, "missing_ok": bool, "name"?: str, "conn_id"?: str,
        "storage_options"?: dict, <threshold>: value, ...}``.
    :param at: the evaluation instant (see :func:`watermark_ops.core.stall.evaluate`); default
        now, taken once the checkpoint's files are read.
    :return: ``{"counted": state | "missing" | "unreadable", "alarm": bool, "payload": dict | None}``;
        ``payload`` (for an alarm; None otherwise) is what a ``WatermarkStallSensor`` would push:
        the classification (:meth:`~watermark_ops.core.stall.Classification.to_dict`) plus
        ``outcome`` (``"fail"``), ``message`` and ``name``; for an unreadable checkpoint
        ``{"location", "name", "state": None, "alarm": True, "outcome": "fail", "message",
        "problems": [ReadProblem dict | str]}``.
    """
    from watermark_ops.core.stall import CheckpointMissing, StallInputError, evaluate

    location = entry["checkpoint"]
    name = entry.get("name") or location
    try:
        thresholds = _thresholds(entry)
        filesystem = _filesystem(entry)
        kwargs: dict[str, Any] = {"at": at, "storage_options": entry.get("storage_options")}
        if filesystem is not None:
            kwargs["filesystem"] = filesystem
        c = evaluate(location, thresholds, **kwargs)
    except CheckpointMissing as exc:
        if entry.get("missing_ok"):
            return {"counted": MISSING, "alarm": False, "payload": None}
        return {"counted": MISSING, "alarm": True,
                "payload": {**_unreadable(entry, f"{exc}: expected a Structured Streaming checkpoint"),
                            "problems": list(exc.problems)}}
    except StallInputError as exc:
        return {"counted": UNREADABLE, "alarm": True,
                "payload": _unreadable(entry, f"cannot classify the watermark: {exc}", exc.problems)}
    except Exception as exc:  # noqa: BLE001 - storage, connection, thresholds: this checkpoint alarms alone
        return {"counted": UNREADABLE, "alarm": True,
                "payload": _unreadable(entry, f"{location}: cannot classify the watermark: {exc!r}")}
    if c.healthy:
        return {"counted": c.state, "alarm": False, "payload": None}
    return {"counted": c.state, "alarm": True,
            "payload": {**c.to_dict(), "name": name, "outcome": "fail", "message": f"alarm: {c.summary()}"}}


def _filesystem(entry: dict[str, Any]) -> Any:
    """The entry's filesystem through its ``conn_id`` (None without one: the core resolves it)."""
    if not entry.get("conn_id"):
        return None
    from watermark_ops.airflow.storage import checkpoint_filesystem

    return checkpoint_filesystem(entry["checkpoint"], entry["conn_id"], entry.get("storage_options"))


def evaluate_checkpoints(entries: list[dict[str, Any]], *, at: Any = None,
                         concurrency: int = MONITOR_CONCURRENCY) -> list[dict[str, Any]]:
    """:func:`evaluate_entry` for every entry, ``concurrency`` at a time (threads), in entry order.

    :raises ValueError: ``concurrency`` below 1.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
    if not entries:
        return []
    with ThreadPoolExecutor(max_workers=min(concurrency, len(entries)),
                            thread_name_prefix="watermark-monitor") as pool:
        return list(pool.map(lambda e: evaluate_entry(e, at=at), entries))


def summarize(results: list[dict[str, Any]], *, seconds: float | None = None) -> dict[str, Any]:
    """The cycle's summary: small whatever the number of checkpoints.

    :return: ``{"checkpoints": int (watched), "counts": {state | "missing" | "unreadable": int},
        "alarm_count": int, "alarms": [payload, ...] (in full, in watch order), "seconds": float | None
        (wall time of the evaluations)}``.
    """
    counts: dict[str, int] = {}
    for r in results:
        counts[r["counted"]] = counts.get(r["counted"], 0) + 1
    alarms = [r["payload"] for r in results if r["alarm"]]
    return {"checkpoints": len(results), "counts": dict(sorted(counts.items())), "alarm_count": len(alarms),
            "alarms": alarms, "seconds": None if seconds is None else round(seconds, 3)}


def watch_cycle(context: Any, *, concurrency: int = MONITOR_CONCURRENCY) -> list[dict[str, Any]]:
    """The ``watch`` task: list the known checkpoints now, evaluate them all, push the summary.

    :param context: the task's context (the registry, :data:`~watermark_ops.airflow.registry.CHECKPOINT_REGISTRY`,
        as inlet).
    :return: the alarms in full (the task's ``return_value``, which ``alarm`` is mapped over);
        :func:`summarize`'s summary without them (``alarms``: their locations) is pushed as the
        XCom :data:`SUMMARY_KEY`.
    :raises ValueError: for a bad ``[watermark_ops]`` configuration (the task fails, naming it).
    """
    from watermark_ops.airflow.registry import monitor_checkpoints

    entries = monitor_checkpoints(context)
    started = time.monotonic()
    results = evaluate_checkpoints(entries, concurrency=concurrency)
    summary = summarize(results, seconds=time.monotonic() - started)
    log.info("watched %d checkpoint(s) in %.1f s: %s; %d alarm(s)%s", summary["checkpoints"], summary["seconds"],
             summary["counts"], summary["alarm_count"],
             "".join(f"\n  {a['message']}" for a in summary["alarms"]))
    context["ti"].xcom_push(key=SUMMARY_KEY, value={**summary, "alarms": [a["location"] for a in summary["alarms"]]})
    return summary["alarms"]


def raise_alarm(context: Any, alarm: dict[str, Any]) -> None:
    """The ``alarm`` task: name the checkpoint (``context["checkpoint"]``, rendered by the task's
    ``map_index_template``), then fail with the alarm as the exception's payload.

    :raises watermark_ops.airflow.sensors.WatermarkAlarm: always (no retries: the evaluation is the
        ``watch`` task's).
    """
    from watermark_ops.airflow.sensors import WatermarkAlarm

    context["checkpoint"] = alarm.get("location")
    raise WatermarkAlarm(alarm.get("message") or f"{alarm.get('location')}: alarm", alarm)
