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

The state store: each evaluation also keeps the checkpoint's state summary in its view (depth
``rows``, :mod:`watermark_ops.core.state.summary`: read only when the checkpoint has new batches,
so an unchanged checkpoint costs no request more) and each finding whose rule is in the
checkpoint's ``state_alarms`` (``[watermark_ops] state_alarms``, default ``state_unbounded`` and
``state_growing``; an entry's own list overrides it; thresholds ``growing_batches`` ... like the
stall's) is an alarm of its own: a mapped ``alarm`` task instance named ``<checkpoint>:
<rule>``, whose payload (what the webhook posts) carries the ``finding`` and the ``state_store``
summary. Such an alarm repeats every cycle while the finding holds (an unbounded state holds for
the life of the checkpoint): set the entry's ``"state_alarms": []`` once it is known and accepted.

One checkpoint's evaluation (:func:`evaluate_entry`) never hides another's: a checkpoint that
cannot be read (a corrupt offsets file, a missing connection, storage errors) becomes an alarm of
its own (``state`` None, ``unreadable`` in the counts, the message and problems naming the files);
a missing checkpoint with ``missing_ok`` is counted as ``missing`` and skipped (not an alarm).

Between cycles the monitor keeps each checkpoint's remembered view (:mod:`watermark_ops.core.view`)
in the asset state store of the checkpoint registry (its inlet), bundled: the views of every
watched checkpoint in a few keys (:class:`watermark_ops.airflow.memory.ViewBundle`,
``watermark_views:<i>/<n>``, read once and written once per cycle: a ``get`` per checkpoint would
cost an Execution API call each). A cycle on any worker reads only what changed
(:func:`watermark_ops.core.stall.evaluate_tail`:
``metadata`` and ``offsets/<head+1>`` by name, a stat of ``offsets/<head>`` and of the progress
log, no LIST), a constant, small number of requests per checkpoint whatever its history. A lost,
stale or unreadable view only costs a read of that checkpoint's window. The per-worker files of
earlier versions (``$AIRFLOW_HOME/watermark_ops/monitor_tails``) are migrated into the store at the
next cycle on that worker, then deleted (:func:`migrate_tail_files`).

Imports Airflow (``airflow.sdk``) only through the functions that need it: the DAG file imports
nothing of this module at parse time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable

__all__ = [
    "SUMMARY_KEY",
    "MONITOR_CONCURRENCY",
    "evaluate_checkpoints",
    "evaluate_entry",
    "legacy_tail_folder",
    "migrate_tail_files",
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


def _state_thresholds(entry: dict[str, Any]) -> Any:
    from watermark_ops.airflow.config import STATE_THRESHOLD_KEYS
    from watermark_ops.core.thresholds import StateThresholds

    return StateThresholds(**{k: entry[k] for k in STATE_THRESHOLD_KEYS if k in entry})


def _state_alarms(entry: dict[str, Any], default: Iterable[str] | None) -> tuple[str, ...]:
    """The state rules this entry alarms on: its own ``state_alarms``, else ``default``, else
    :data:`watermark_ops.airflow.config.DEFAULT_STATE_ALARMS`."""
    from watermark_ops.airflow.config import DEFAULT_STATE_ALARMS, state_alarm_rules

    if "state_alarms" in entry:
        return state_alarm_rules(list(entry["state_alarms"] or []), entry["checkpoint"])
    return DEFAULT_STATE_ALARMS if default is None else tuple(default)


def _state_payloads(entry: dict[str, Any], name: str, view: Any, rules: tuple[str, ...]) -> tuple[list, Any]:
    """``(alarm payloads, state document)``: one alarm per finding of the view's state summary whose
    rule is in ``rules``."""
    summary = getattr(view, "state_store", None)
    if summary is None:
        return [], None
    from watermark_ops.core.state.summary import finding_document

    thresholds = _state_thresholds(entry)
    found = summary.findings(thresholds)
    document = summary.document(thresholds, found)
    location = entry["checkpoint"]
    return [{"location": location, "name": name, "kind": "state_store", "state": None, "alarm": True,
             "outcome": "fail", "rule": f.rule, "finding": finding_document(f), "state_store": document,
             "message": f"{name}: {f.rule}: {f.message}"} for f in found if f.rule in rules], document


def _restart_payloads(entry: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """One alarm while a restart of the entry's checkpoint stands refused (its diagnosis file,
    removed by the next run that succeeds); none otherwise, or when the file cannot be reached."""
    from watermark_ops.core.state.diagnosis import refused_restart

    try:
        refused = refused_restart(entry["checkpoint"], filesystem=_filesystem(entry),
                                  storage_options=entry.get("storage_options"))
    except Exception as exc:  # noqa: BLE001 - a connection problem is the watermark evaluation's alarm
        log.warning("%s: the diagnosis of a refused restart cannot be read (%r)", entry["checkpoint"], exc)
        return []
    if refused is None:
        return []
    return [{"location": entry["checkpoint"], "name": name, "kind": "restart_refused", "state": None, "alarm": True,
             "outcome": "fail", "refused_restart": refused, "message": f"{name}: {refused['line']}"}]


def _unreadable(entry: dict[str, Any], message: str, problems: Iterable[Any] = ()) -> dict[str, Any]:
    name = entry.get("name") or entry["checkpoint"]
    return {"location": entry["checkpoint"], "name": name, "state": None, "alarm": True, "outcome": "fail",
            "message": message if name == entry["checkpoint"] else f"{name}: {message}", "problems": list(problems)}


def legacy_tail_folder() -> Path:
    """``$AIRFLOW_HOME/watermark_ops/monitor_tails`` (``~/airflow`` when ``AIRFLOW_HOME`` is unset):
    where earlier versions kept one JSON file per watched checkpoint on each worker."""
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return Path(home) / "watermark_ops" / "monitor_tails"


def migrate_tail_files(memory: Any, entries: Iterable[dict[str, Any]], folder: str | os.PathLike | None = None) -> int:
    """Move this worker's per-checkpoint tail files of earlier versions into ``memory`` (the
    registry's asset state store): each file of a watched checkpoint becomes its remembered view
    when the store holds none yet; every file is then deleted, and the folder once empty.

    A file is ``<sha256 of "conn_id|location">.json`` holding ``{"location", "conn_id", "tail":
    Tail.to_dict()}``; one that cannot be read is logged and deleted (it only saved a read).

    :return: how many views were migrated.
    """
    from watermark_ops.core.view import View, ViewFormatError

    where = Path(folder) if folder is not None else legacy_tail_folder()
    try:
        names = sorted(os.listdir(where))
    except OSError:
        return 0
    watched = {hashlib.sha256(f"{e.get('conn_id') or ''}|{e['checkpoint']}".encode()).hexdigest(): e["checkpoint"]
               for e in entries}
    migrated = 0
    for name in names:
        path = where / name
        location = watched.get(name.removesuffix(".json"))
        if location is not None and name.endswith(".json"):
            try:
                record = json.loads(path.read_text())
                view = View.from_dict(record["tail"])
                if memory.load_view_entry(location) is None:
                    memory.save_view_entry(location, view)
                    migrated += 1
            except (OSError, ValueError, KeyError, TypeError, ViewFormatError) as exc:
                log.warning("monitor tail file %s of %s not migrated (%r): the next cycle reads it", path, location, exc)
        try:
            os.remove(path)
        except OSError as exc:
            log.warning("monitor tail file %s not deleted: %r", path, exc)
    try:
        where.rmdir()
    except OSError:
        pass
    if migrated:
        log.info("migrated %d remembered tail(s) of %s into the asset state store", migrated, where)
    return migrated


def evaluate_entry(entry: dict[str, Any], *, at: Any = None, memory: Any = None,
                   state_alarms: Iterable[str] | None = None) -> dict[str, Any]:
    """Evaluate one watched checkpoint; never raises.

    :param entry: one item of :func:`watermark_ops.airflow.registry.monitor_checkpoints`:
        ``{"checkpoint": location, "missing_ok": bool, "name"?: str, "conn_id"?: str,
        "storage_options"?: dict, <threshold>: value, ...}``.
    :param at: the evaluation instant (see :func:`watermark_ops.core.stall.evaluate`); default
        now, taken once the checkpoint's files are read.

    The decision is the sensors' (:func:`watermark_ops.core.checks.check_tail`, goal ``healthy``):
    ``done`` → healthy; ``skip`` (missing with ``missing_ok``) → counted ``missing``; ``wait``
    (stalled, lagging, idle too long) and ``fail`` (jumped; missing without ``missing_ok``) → an
    alarm; a checkpoint whose head cannot be classified (``StallInputError``) or read at all → an
    ``unreadable`` alarm.
    :param memory: where the views are kept (:class:`watermark_ops.airflow.memory.ViewBundle` on
        the registry asset, or any store of :func:`watermark_ops.core.view.load_view`); None: a
        read of the window, nothing remembered.
    :param state_alarms: the state rules that alarm (the entry's ``state_alarms`` overrides);
        None: ``state_unbounded`` and ``state_growing``; empty: the state is not read.
    :return: ``{"counted": state | "missing" | "unreadable", "alarm": bool, "payload": dict | None,
        "requests": {"list": n, "get": n, "head": n, "listed": 0 | 1} | None (what the read of the
        checkpoint's logs cost, :attr:`watermark_ops.core.view.View.requests`; the progress log not
        counted), "remembered": bool (a previous view was found), "state_alarms": [payload] (one
        per state finding alarmed on: ``{"location", "name", "kind": "state_store", "state": None,
        "alarm": True, "outcome": "fail", "rule", "finding", "state_store", "message"}``),
        "restart_alarms": [payload] (one while a refused restart stands, until a run succeeds:
        ``{"location", "name", "kind": "restart_refused", "state": None, "alarm": True, "outcome":
        "fail", "refused_restart": :func:`~watermark_ops.core.state.diagnosis.refused_restart`,
        "message": "<name>: <the diagnosis line>"}``)}``;
        ``payload`` (for an alarm of the watermark; None otherwise) is what a
        ``WatermarkStallSensor`` would push: the classification
        (:meth:`~watermark_ops.core.stall.Classification.to_dict`) plus ``outcome`` (``"fail"``),
        ``message`` and ``name`` (the registry's ``<DAG id> / <query>`` or the configured name, else the
        location; the message starts with it); for an unreadable checkpoint ``{"location", "name", "state": None,
        "alarm": True, "outcome": "fail", "message", "problems": [ReadProblem dict | str]}``.
    """
    from watermark_ops.core.checks import check_tail
    from watermark_ops.core.stall import StallInputError

    from watermark_ops.core.view import load_view, save_view

    location = entry["checkpoint"]
    name = entry.get("name") or location
    previous = None
    if memory is not None:
        try:
            previous = load_view(memory, location)
        except Exception as exc:  # noqa: BLE001 - the memory only saves reads: never the cycle's failure
            log.warning("%s: the remembered view cannot be loaded (%r): read again", location, exc)
    out: dict[str, Any] = {"requests": None, "remembered": previous is not None, "state_alarms": [],
                           "restart_alarms": _restart_payloads(entry, name)}
    try:
        rules = _state_alarms(entry, state_alarms)
        kwargs: dict[str, Any] = {"goal": "healthy", "thresholds": _thresholds(entry),
                                  "missing_ok": bool(entry.get("missing_ok")), "at": at,
                                  "storage_options": entry.get("storage_options"), "filesystem": _filesystem(entry),
                                  "state_store": "rows" if rules else None}
        try:
            result, view = check_tail(location, previous, **kwargs)
        except StallInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - the memory must never cost more than a full read
            if previous is None:
                raise
            log.warning("%s: moving the remembered view on failed (%r): read again", location, exc)
            out["remembered"] = False
            result, view = check_tail(location, None, **kwargs)
        if view is not None:
            out["requests"] = {k: int(v) for k, v in view.requests.items()}
            out["state_alarms"], out["state_store"] = _state_payloads(entry, name, view, rules)
            if memory is not None:
                try:
                    save_view(memory, location, view, previous=previous)
                except Exception as exc:  # noqa: BLE001 - the next cycle reads the window again
                    log.warning("%s: the view is not remembered (%r)", location, exc)
    except StallInputError as exc:
        return {**out, "counted": UNREADABLE, "alarm": True,
                "payload": _unreadable(entry, f"cannot classify the watermark: {exc}", exc.problems)}
    except Exception as exc:  # noqa: BLE001 - storage, connection, thresholds: this checkpoint alarms alone
        return {**out, "counted": UNREADABLE, "alarm": True,
                "payload": _unreadable(entry, f"{location}: cannot classify the watermark: {exc!r}")}
    c = result.classification
    if c is not None:
        from watermark_ops.airflow.metrics import emit_classification

        dag_ids = entry.get("dag_ids") or []  # the DAG that registered the checkpoint, else the monitor's
        emit_classification(location, dag_ids[0] if dag_ids else entry.get("monitor_dag_id"),
                            {"state": c.state, "watermark_ms": c.watermark_ms, "lag_ms": c.lag_ms,
                             "lag_basis": c.lag_basis})
    counted = c.state if c is not None else MISSING
    if result.outcome in ("done", "skip"):  # healthy, or missing with missing_ok
        return {**out, "counted": counted, "alarm": False, "payload": None}
    # "wait" (stalled, lagging, idle too long: the sensor would fail once its timeout of 0 ran out)
    # or "fail" (jumped, or a missing checkpoint without missing_ok): an alarm, as the sensor's XCom.
    base = c.to_dict() if c is not None else _unreadable(entry, result.message)
    message = result.message if name == location else f"{name}: {result.message}"
    return {**out, "counted": counted, "alarm": True,
            "payload": {**base, "name": name, "outcome": "fail", "message": message,
                        "state_store": out.get("state_store")}}


def _filesystem(entry: dict[str, Any]) -> Any:
    """The entry's filesystem through its ``conn_id`` (None without one: the core resolves it)."""
    if not entry.get("conn_id"):
        return None
    from watermark_ops.airflow.storage import checkpoint_filesystem

    return checkpoint_filesystem(entry["checkpoint"], entry["conn_id"], entry.get("storage_options"))


def evaluate_checkpoints(entries: list[dict[str, Any]], *, at: Any = None, memory: Any = None,
                         concurrency: int = MONITOR_CONCURRENCY,
                         state_alarms: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """:func:`evaluate_entry` for every entry, ``concurrency`` at a time (threads), in entry order,
    each through ``memory`` (where the views are kept; shared by the threads), with ``state_alarms``.

    :raises ValueError: ``concurrency`` below 1.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency!r}")
    if not entries:
        return []
    # One filesystem per connection, built before the threads start (else each thread builds its own).
    seen = set()
    for e in entries:
        key = (str(e["checkpoint"]).split("://", 1)[0], e.get("conn_id"), json.dumps(e.get("storage_options"), sort_keys=True))
        if e.get("conn_id") and key not in seen:
            seen.add(key)
            try:
                _filesystem(e)
            except Exception:  # noqa: BLE001 - reported by that checkpoint's own evaluation
                pass
    with ThreadPoolExecutor(max_workers=min(concurrency, len(entries)),
                            thread_name_prefix="watermark-monitor") as pool:
        results = list(pool.map(lambda e: evaluate_entry(e, at=at, memory=memory, state_alarms=state_alarms), entries))
    return results


def summarize(results: list[dict[str, Any]], *, seconds: float | None = None) -> dict[str, Any]:
    """The cycle's summary: small whatever the number of checkpoints.

    :return: ``{"checkpoints": int (watched), "counts": {state | "missing" | "unreadable": int},
        "alarm_count": int, "alarms": [payload, ...] (in full, in watch order: a checkpoint's
        watermark alarm, then its state alarms, then its refused restart), "state_alarm_count": int, "remembered": int
        (checkpoints whose previous tail was found), "requests": {"list": n, "get": n, "head": n,
        "listed": checkpoints that had to list} (summed over the checkpoints whose read reported them), "seconds": float | None (wall time of
        the evaluations)}``.
    """
    counts: dict[str, int] = {}
    requests: dict[str, int] = {}
    for r in results:
        counts[r["counted"]] = counts.get(r["counted"], 0) + 1
        for kind, n in (r.get("requests") or {}).items():
            requests[kind] = requests.get(kind, 0) + n
    alarms = [a for r in results for a in ([r["payload"]] if r["alarm"] else []) + list(r.get("state_alarms") or ())
              + list(r.get("restart_alarms") or ())]
    return {"checkpoints": len(results), "counts": dict(sorted(counts.items())), "alarm_count": len(alarms),
            "alarms": alarms, "state_alarm_count": sum(len(r.get("state_alarms") or ()) for r in results), "remembered": sum(1 for r in results if r.get("remembered")),
            "requests": dict(sorted(requests.items())), "seconds": None if seconds is None else round(seconds, 3)}


def watch_cycle(context: Any, *, concurrency: int | None = None) -> list[dict[str, Any]]:
    """The ``watch`` task: list the known checkpoints now, evaluate them all, push the summary.

    :param context: the task's context (the registry, :data:`~watermark_ops.airflow.registry.CHECKPOINT_REGISTRY`,
        as inlet).
    :param concurrency: checkpoints evaluated at once; default ``[watermark_ops] monitor_concurrency``,
        else :data:`MONITOR_CONCURRENCY`.
    :return: the alarms in full (the task's ``return_value``, which ``alarm`` is mapped over);
        :func:`summarize`'s summary without them (``alarms``: their locations) is pushed as the
        XCom :data:`SUMMARY_KEY`.
    :raises ValueError: for a bad ``[watermark_ops]`` configuration (the task fails, naming it).
    """
    from watermark_ops.airflow.memory import ViewBundle
    from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY, monitor_checkpoints

    from watermark_ops.airflow.config import configured_state_alarms

    dag_id = getattr(context.get("ti"), "dag_id", None)  # the metrics' DAG of a checkpoint no DAG registered
    entries = [{**e, "monitor_dag_id": dag_id} for e in monitor_checkpoints(context)]
    state_alarms = configured_state_alarms()
    if concurrency is None:
        from airflow.sdk.configuration import conf

        concurrency = conf.getint("watermark_ops", "monitor_concurrency", fallback=MONITOR_CONCURRENCY)
    memory = None
    try:
        memory = ViewBundle(context["asset_state_store"][CHECKPOINT_REGISTRY], (e["checkpoint"] for e in entries))
        memory.read()
    except Exception as exc:  # noqa: BLE001 - without a store every cycle reads each window
        log.warning("no asset state store for the remembered views (every cycle reads each window): %r", exc)
        memory = None
    if memory is not None:
        migrate_tail_files(memory, entries)
    started = time.monotonic()
    results = evaluate_checkpoints(entries, memory=memory, concurrency=concurrency, state_alarms=state_alarms)
    if memory is not None:
        try:
            memory.flush()
        except Exception as exc:  # noqa: BLE001 - the next cycle reads the windows again
            log.warning("the remembered views were not written (the next cycle reads each window): %r", exc)
    summary = summarize(results, seconds=time.monotonic() - started)
    log.info("watched %d checkpoint(s) in %.1f s (%d remembered; requests %s): %s; %d alarm(s)%s",
             summary["checkpoints"], summary["seconds"], summary["remembered"], summary["requests"],
             summary["counts"], summary["alarm_count"],
             "".join(f"\n  {a['message']}" for a in summary["alarms"]))
    context["ti"].xcom_push(key=SUMMARY_KEY, value={**summary, "alarms": [a["location"] for a in summary["alarms"]]})
    return summary["alarms"]


def raise_alarm(context: Any, alarm: dict[str, Any]) -> None:
    """The ``alarm`` task: name the checkpoint (``context["checkpoint"]``, rendered by the task's
    ``map_index_template``: its name, ``<DAG id> / <query>`` for a registered one, else its
    location; ``<name>: <rule>`` for a state alarm, ``<name>: restart refused`` for a refused restart),
    then fail with the alarm as the exception's payload.

    :raises watermark_ops.airflow.sensors.WatermarkAlarm: always (no retries: the evaluation is the
        ``watch`` task's).
    """
    from watermark_ops.airflow.sensors import WatermarkAlarm

    named = alarm.get("name") or alarm.get("location")
    context["checkpoint"] = (f"{named}: {alarm['rule']}" if alarm.get("kind") == "state_store" else
                             f"{named}: restart refused" if alarm.get("kind") == "restart_refused" else named)
    raise WatermarkAlarm(alarm.get("message") or f"{alarm.get('location')}: alarm", alarm)
