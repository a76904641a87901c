"""The package's metrics: every name, kind, unit, tag and derivation in one table, and the
``emit_*`` functions the tasks call with the figures they already have.

Metrics go through Airflow's own ``airflow.sdk.observability.stats`` (the ``Stats`` Airflow's task
runner uses for ``ti.start`` / ``ti.finish``): the deployment's ``[metrics]`` settings route them to
StatsD (``statsd_on``; tags as InfluxDB-style ``name,tag=value`` with ``statsd_influxdb_enabled``,
or DogStatsD with ``statsd_datadog_enabled``) or OpenTelemetry (``otel_on``), prefixed by
``statsd_prefix`` / ``otel_prefix`` (``airflow.`` by default). With none of them on, ``Stats`` is
Airflow's no-op logger: nothing is sent, nothing is computed beyond a few dict look-ups.

Only task code emits (the run pattern's ``preflight``, ``spark_submit``, ``collect_progress``,
``late_ledger`` and ``audit_checkpoint``: :class:`~watermark_ops.airflow.operators.WatermarkAuditOperator`;
the sensors, the monitor's ``watch``): calls made in the scheduler or the API server are dropped by some
Airflow 3.x releases. No function here reads a checkpoint: each takes the plain figures its task
computed, and sends a few datagrams (one per metric, one per stateful operator for ``state_rows``).

Every metric is tagged ``checkpoint`` (the checkpoint folder's name, :func:`checkpoint_tag`) and
``dag_id`` (the DAG of the task that emitted it; for the monitor, the DAG that registered the
checkpoint when the registry knows it). The table :data:`METRICS` is what ``docs/metrics.md``
lists (``tests/watermark_ops/airflow/test_metrics.py`` checks the page against it and receives every
metric over UDP from a real DAG run).

Stall state as a number (:data:`STALL_STATE_VALUES`, higher is worse among the first five):
``advancing`` 0, ``idle`` 1, ``lagging`` 2, ``stalled`` 3, ``jumped`` 4; a query with no watermark
``no_watermark`` 5 and ``watermark_unknown`` 6 (never alarms). A state-alert rule is then
``2 <= stall_state <= 4``.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Iterable, Mapping, NamedTuple

__all__ = ["METRICS", "STALL_STATE_VALUES", "Metric", "checkpoint_tag", "emit_audit", "emit_classification",
           "emit_ledger", "emit_refused_restarts", "emit_watermark", "metric_names"]

log = logging.getLogger(__name__)

PREFIX = "watermark_ops"


class Metric(NamedTuple):
    """One row of the metric table.

    :ivar name: the metric's name before the deployment's prefix, ``watermark_ops.<what>_<unit>``.
    :ivar kind: ``"gauge"`` (the value now) or ``"counter"`` (increments, summed by the backend).
    :ivar unit: what one unit of the value is (``s``, ``rows``, ...).
    :ivar tags: the tag names besides ``checkpoint`` and ``dag_id``.
    :ivar meaning: what it says and how the value is derived (the docs' table shows it).
    :ivar emitted_by: the tasks that send it.
    """

    name: str
    kind: str
    unit: str
    tags: tuple[str, ...]
    meaning: str
    emitted_by: str


#: Tags on every metric.
COMMON_TAGS = ("checkpoint", "dag_id")

WATERMARK = f"{PREFIX}.watermark_epoch_s"
LAG = f"{PREFIX}.lag_s"
STATE_ROWS = f"{PREFIX}.state_rows"
STALL_STATE = f"{PREFIX}.stall_state"
LATE_ROWS = f"{PREFIX}.late_rows"
RECOVERED_ROWS = f"{PREFIX}.late_rows_recovered"
DROPPED_ROWS = f"{PREFIX}.late_rows_dropped"
CORRECTIONS = f"{PREFIX}.corrections"
AUDIT_FINDINGS = f"{PREFIX}.audit_findings"
REFUSED_RESTARTS = f"{PREFIX}.restarts_refused"

#: Every metric the package sends (the docs' table is checked against it).
METRICS: tuple[Metric, ...] = (
    Metric(WATERMARK, "gauge", "s (epoch seconds, UTC)", (),
           "The query's event-time watermark: the checkpoint's newest batch watermark (offsets log) / 1000.",
           "collect_progress, sensors, monitor"),
    Metric(LAG, "gauge", "s", ("basis",),
           "How far the watermark is behind: the end of the run's data interval minus the watermark "
           "(basis data_interval), or the evaluation instant minus the watermark (basis wall_clock), / 1000.",
           "sensors, monitor"),
    Metric(STATE_ROWS, "gauge", "rows", ("operator",),
           "Rows a stateful operator holds after its newest batch (state store summary); one per operator, "
           "tag operator = <operator id>_<operator name>.",
           "audit_checkpoint (WatermarkAuditOperator)"),
    Metric(STALL_STATE, "gauge", "state number", ("state",),
           "The watermark's classification as a number: advancing 0, idle 1, lagging 2, stalled 3, jumped 4, "
           "no_watermark 5, watermark_unknown 6 (tag state: its name).",
           "sensors, monitor"),
    Metric(LATE_ROWS, "counter", "rows", (),
           "Rows the run's batches dropped as late (the late-row ledger's rows_late; unknown: not sent).",
           "late_ledger"),
    Metric(RECOVERED_ROWS, "counter", "rows", (),
           "Late rows a correction holds (allowed lateness: rows_late_recovered).", "late_ledger"),
    Metric(DROPPED_ROWS, "counter", "rows", (),
           "Late rows dropped for good: beyond the allowed lateness (rows_late_dropped).", "late_ledger"),
    Metric(CORRECTIONS, "counter", "windows", (),
           "Corrections the run published: windows its recovered late rows changed (the ledger's corrections).",
           "late_ledger"),
    Metric(AUDIT_FINDINGS, "counter", "findings", ("severity",),
           "The audit's findings by severity (error, warning, info); each severity is sent, 0 included.",
           "audit_checkpoint (WatermarkAuditOperator)"),
    Metric(REFUSED_RESTARTS, "counter", "restarts", ("by",),
           "Restarts refused, once per refusal: by the preflight (no_go: nothing launched; tag by=preflight) or "
           "by the driver's start check or Spark (exit 7 with its diagnosis; tag by=driver).",
           "preflight, spark_submit"),
)

#: The stall state's number (:data:`watermark_ops.core.classification.STATES`); unknown names: not sent.
STALL_STATE_VALUES: dict[str, int] = {"advancing": 0, "idle": 1, "lagging": 2, "stalled": 3, "jumped": 4,
                                      "no_watermark": 5, "watermark_unknown": 6}
#: Audit finding severities always sent (0 when none), in :mod:`watermark_ops.core.rules`' words.
SEVERITIES = ("error", "warning", "info")

_BAD_TAG_CHARS = re.compile(r"[^A-Za-z0-9_.\-/]")


def metric_names() -> list[str]:
    """The names of :data:`METRICS`, in table order (without the deployment's prefix)."""
    return [m.name for m in METRICS]


def checkpoint_tag(location: str) -> str:
    """A checkpoint's ``checkpoint`` tag: its folder's name (the last path segment of the local path
    or URL), with characters a StatsD tag cannot carry (``,`` ``=`` ``:`` ``|`` ``#`` spaces ...)
    replaced by ``_``. E.g. ``s3://lake/ck/orders_windows/`` → ``orders_windows``."""
    name = str(location).rstrip("/").rsplit("/", 1)[-1] or str(location)
    return _BAD_TAG_CHARS.sub("_", name)


def _tag(value: Any) -> str:
    return _BAD_TAG_CHARS.sub("_", str(value))


def _stats() -> Any:
    """Airflow's ``Stats`` (a no-op unless ``[metrics] statsd_on`` / ``otel_on``). ``airflow.sdk.serde``
    initialises it from the ``[metrics]`` settings when imported, as every task process does."""
    import airflow.sdk.serde  # noqa: F401 - initialises Stats with the deployment's backend
    from airflow.sdk.observability.stats import Stats

    return Stats


def _tags(location: str, dag_id: str | None, **more: Any) -> dict[str, str]:
    tags = {"checkpoint": checkpoint_tag(location), "dag_id": _tag(dag_id or "none")}
    tags.update({k: _tag(v) for k, v in more.items()})
    return tags


def _safely(fn):
    """A metric never fails a task: a backend error is logged and the task goes on."""
    def wrapper(*args: Any, **kwargs: Any) -> int:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - metrics are best effort
            log.warning("watermark-ops metrics not sent (%s): %r", fn.__name__, exc)
            return 0
    wrapper.__name__, wrapper.__doc__ = fn.__name__, fn.__doc__
    return wrapper


@_safely
def emit_watermark(location: str, dag_id: str | None, watermark_ms: int | None) -> int:
    """Send ``watermark_ops.watermark_epoch_s``: ``watermark_ms`` (epoch ms UTC) / 1000.

    :param location: the checkpoint (local path or URL; tagged by its folder's name).
    :param dag_id: the emitting task's DAG.
    :param watermark_ms: the watermark, epoch ms UTC; None (or 0: never set): nothing is sent.
    :return: the number of metrics sent (0 or 1).
    """
    if not watermark_ms:
        return 0
    _stats().gauge(WATERMARK, watermark_ms / 1000, tags=_tags(location, dag_id))
    return 1


@_safely
def emit_classification(location: str, dag_id: str | None, classification: Mapping[str, Any] | None) -> int:
    """Send the watermark, the lag and the stall state of a classification.

    :param classification: :meth:`watermark_ops.core.classification.Classification.to_dict`'s shape
        (``state``, ``watermark_ms`` epoch ms, ``lag_ms`` ms, ``lag_basis`` ``"data_interval"`` |
        ``"wall_clock"``); None (a missing checkpoint): nothing is sent.
    :return: the number of metrics sent (0 to 3): ``watermark_epoch_s`` (watermark_ms / 1000),
        ``lag_s`` (lag_ms / 1000, tag ``basis``), ``stall_state`` (:data:`STALL_STATE_VALUES`, tag ``state``).
    """
    if not classification:
        return 0
    sent = emit_watermark(location, dag_id, classification.get("watermark_ms"))
    stats = _stats()
    if classification.get("lag_ms") is not None:
        stats.gauge(LAG, classification["lag_ms"] / 1000,
                    tags=_tags(location, dag_id, basis=classification.get("lag_basis") or "wall_clock"))
        sent += 1
    state = classification.get("state")
    if state in STALL_STATE_VALUES:
        stats.gauge(STALL_STATE, STALL_STATE_VALUES[state], tags=_tags(location, dag_id, state=state))
        sent += 1
    return sent


@_safely
def emit_ledger(location: str, dag_id: str | None, run: Mapping[str, Any]) -> int:
    """Send a run's late rows, recovered rows, rows dropped for good and corrections (counters).

    :param run: :func:`watermark_ops.core.ledger.reconcile_run`'s result: ``rows_late``,
        ``rows_late_recovered``, ``rows_late_dropped``, ``corrections`` (counts; None: unknown, or no
        allowed lateness declared: that metric is not sent).
    :return: the number of metrics sent (0 to 4).
    """
    stats = _stats()
    sent = 0
    for name, key in ((LATE_ROWS, "rows_late"), (RECOVERED_ROWS, "rows_late_recovered"),
                      (DROPPED_ROWS, "rows_late_dropped"), (CORRECTIONS, "corrections")):
        value = run.get(key)
        if value is not None:
            stats.incr(name, int(value), tags=_tags(location, dag_id))
            sent += 1
    return sent


@_safely
def emit_audit(location: str, dag_id: str | None, findings: Iterable[Any],
               state_store: Mapping[str, Any] | None) -> int:
    """Send an audit's findings by severity (counters, each severity, 0 included) and the state rows
    per stateful operator (gauges).

    :param findings: the report's findings (objects with ``severity``, or dicts with ``"severity"``).
    :param state_store: :meth:`watermark_ops.core.state.summary.StateSummary.document`'s shape
        (``operators``: ``[{"operator_id", "name", "rows": int | None}]``); None: not read, no gauge.
    :return: the number of metrics sent.
    """
    counts = dict.fromkeys(SEVERITIES, 0)
    for finding in findings:
        severity = finding.get("severity") if isinstance(finding, Mapping) else getattr(finding, "severity", None)
        counts[str(severity)] = counts.get(str(severity), 0) + 1
    stats = _stats()
    for severity, n in counts.items():
        stats.incr(AUDIT_FINDINGS, n, tags=_tags(location, dag_id, severity=severity))
    sent = len(counts)
    for op in (state_store or {}).get("operators") or ():
        if op.get("rows") is not None:
            stats.gauge(STATE_ROWS, int(op["rows"]),
                        tags=_tags(location, dag_id, operator=f"{op.get('operator_id')}_{op.get('name')}"))
            sent += 1
    return sent


@_safely
def emit_refused_restarts(location: str, dag_id: str | None, refused: int, *, by: str) -> int:
    """Send ``watermark_ops.restarts_refused`` (counter) by ``refused`` restarts, as the task that
    refused (or saw the driver refuse) the restart fails: one count per refusal.

    :param refused: refusals to count (0: nothing is sent).
    :param by: ``"preflight"`` (the restart gate's no_go) or ``"driver"`` (the driver's exit 7).
    :return: the number of metrics sent (0 or 1).
    """
    if refused <= 0:
        return 0
    _stats().incr(REFUSED_RESTARTS, int(refused), tags=_tags(location, dag_id, by=by))
    return 1
