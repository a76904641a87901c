"""Watermark alerts through Airflow's notifier framework: a JSON POST to a webhook.

:class:`WatermarkWebhookNotifier` posts one JSON alert to the URL of an Airflow connection. Use
it as a task's or a DAG's ``on_failure_callback`` (sync :meth:`~WatermarkWebhookNotifier.notify`),
or as the callback of a ``DeadlineAlert`` (async :meth:`~WatermarkWebhookNotifier.async_notify`,
run in the triggerer).

Where the classification comes from: the failing task's exception when it is a
:class:`watermark_ops.airflow.sensors.WatermarkAlarm` (what the sensor saw), else, when ``checkpoint``
is given, a fresh evaluation (:func:`watermark_ops.core.stall.evaluate`) at the moment of the alert.

The connection (default id ``watermark_ops_webhook``; its type ``watermark_ops_webhook`` is this
provider's, :class:`watermark_ops.airflow.hooks.WatermarkWebhookHook`; an ``http`` connection works too)::

    AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK='{"conn_type": "watermark_ops_webhook", "host": "alerts.example.com",
        "schema": "https", "extra": {"endpoint": "/hooks/watermarks", "headers": {"X-Team": "data"}}}'

URL = ``<schema or https>://<host>[:<port>]`` (or ``host`` itself when it holds a whole URL)
followed by the ``endpoint`` (the notifier's, else the connection extra's). A password, when
set, is sent as ``Authorization: Bearer <password>``; ``extra.headers`` are added as they are.

The JSON alert::

    {"source": "watermark-ops", "event": "task_failure" | "deadline_missed" | "notification",
     "checkpoint": str | null, "name": str | null,   # its location, and what it is called: <DAG id> / <query>
     "state": "stalled" | ... | null, "alarm": bool | null,
     "outcome": str | null, "message": str,
     "watermark": "2013-01-03T01:56:00Z" | null, "watermark_ms": int | null,
     "lag_ms": int | null, "lag_basis": "data_interval" | "wall_clock" | null,  # lag to the run's data
     "idle_ms": int | null,                 # interval end, or to the latest batch time (core.freshness)
     "latest_batch": {"batch_id": int, "timestamp_ms": int, "time": str} | null,
     "reasons": [str], "hints": [str],
     "kind": "watermark" | "state_store", "finding": {"code", "rule", "severity", "batch_id", "file",
     "message"} | null (a state alarm's: state_unbounded, state_growing, ...), "state_store": {...} | null,
     "dag_id": str | null, "run_id": str | null, "task_id": str | null, "map_index": int | null,
     "try_number": int | null, "deadline": {"id", "deadline_time"} | null}

Alternatives from Airflow's providers, when a chat or mail alert is wanted instead of a webhook:
``airflow.providers.slack.notifications.slack_webhook.SlackWebhookNotifier`` (package
``apache-airflow-providers-slack``, not installed here) and
``airflow.providers.smtp.notifications.smtp.SmtpNotifier`` (``apache-airflow-providers-smtp``,
installed with Airflow): both are ``BaseNotifier`` s used the same way; their message text can
template ``{{ ti.xcom_pull(task_ids=ti.task_id) }}`` to include the classification the sensor
pushed.

A ``DeadlineAlert`` for a pipeline run that overruns (the DAG-level ``deadline`` argument; the
notifier runs in the triggerer, so it needs only plain kwargs)::

    from datetime import timedelta
    from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference
    from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier

    deadline = DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(minutes=45),   # the run should be done 45 minutes after it was queued
        callback=AsyncCallback(
            WatermarkWebhookNotifier,
            kwargs={"checkpoint": "s3://lake/checkpoints/orders_windows",
                    "thresholds": {"max_lag": None}},    # a replay of old data: lag is the backlog
        ),
    )
    # @dag(..., deadline=deadline)
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from airflow.sdk import BaseHook, BaseNotifier

__all__ = ["DEFAULT_WEBHOOK_CONN_ID", "WatermarkWebhookNotifier", "webhook_request"]

#: The Airflow connection holding the webhook URL, unless another is given.
DEFAULT_WEBHOOK_CONN_ID = "watermark_ops_webhook"


def webhook_request(conn: Any, endpoint: str | None = None) -> tuple[str, dict[str, str]]:
    """The URL and headers of a webhook connection (see the module docstring).

    :param conn: an Airflow ``Connection``.
    :param endpoint: path appended to the base URL; default the connection extra's ``endpoint``.
    :raises ValueError: when the connection has no host.
    """
    extra = conn.extra_dejson or {}
    host = (conn.host or "").strip()
    if not host:
        raise ValueError(f"connection {conn.conn_id!r} has no host: expected the webhook's host or URL")
    if "://" in host:
        base = host
    else:
        base = f"{conn.schema or 'https'}://{host}" + (f":{conn.port}" if conn.port else "")
    path = endpoint if endpoint is not None else extra.get("endpoint") or ""
    url = base.rstrip("/") + ("/" + path.lstrip("/") if path else "")
    headers = {"Content-Type": "application/json"}
    headers.update({str(k): str(v) for k, v in (extra.get("headers") or {}).items()})
    if conn.password:
        headers["Authorization"] = f"Bearer {conn.password}"
    return url, headers


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


class WatermarkWebhookNotifier(BaseNotifier):
    """Post a JSON watermark alert to a webhook URL taken from an Airflow connection.

    :param webhook_conn_id: the connection holding the URL (templated; default ``watermark_ops_webhook``).
    :param checkpoint: the checkpoint to classify when the failure is not a ``WatermarkAlarm``
        (e.g. a deadline callback, or the Spark task's own failure) (templated).
    :param thresholds: :class:`watermark_ops.core.thresholds.Thresholds` fields for that evaluation, as
        plain values (``{"max_lag": "PT6H", "max_idle": None}``; see :func:`watermark_ops.core.times.duration`).
    :param endpoint: path appended to the connection's URL (templated; default the connection
        extra's ``endpoint``).
    :param request_timeout: seconds to wait for the webhook.
    :raises httpx.HTTPStatusError: when the webhook answers with an error status (the callback
        runner logs it); :raises ValueError: for a connection without host.
    """

    template_fields: Sequence[str] = ("webhook_conn_id", "checkpoint", "endpoint")

    def __init__(self, *, webhook_conn_id: str = DEFAULT_WEBHOOK_CONN_ID, checkpoint: str | None = None,
                 thresholds: dict[str, Any] | None = None, endpoint: str | None = None,
                 request_timeout: float = 10.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # ``context`` when built by a DeadlineAlert callback
        self.webhook_conn_id = webhook_conn_id
        self.checkpoint = checkpoint
        self.thresholds = thresholds or {}
        self.endpoint = endpoint
        self.request_timeout = request_timeout

    # -- the alert ---------------------------------------------------------------------------

    def _classification(self, context: Any) -> dict[str, Any] | None:
        payload = getattr(context.get("exception"), "payload", None)
        if isinstance(payload, dict) and "outcome" in payload:
            return payload
        if not self.checkpoint:
            return None
        from watermark_ops.core.stall import StallInputError, evaluate
        from watermark_ops.core.thresholds import Thresholds

        try:
            return evaluate(self.checkpoint, Thresholds(**self.thresholds)).to_dict()
        except StallInputError as exc:
            return {"location": self.checkpoint, "state": None, "message": str(exc)}

    def build_alert(self, context: Any) -> dict[str, Any]:
        """The JSON alert for ``context`` (a task context, or a deadline callback's simple context).

        Classifies the checkpoint (blocking file I/O) when the exception carries no classification.
        """
        ti = context.get("ti")
        dag_run = context.get("dag_run")
        exception = context.get("exception")
        c = self._classification(context) or {}
        latest = c.get("latest_batch") or None
        if "deadline" in context:
            event = "deadline_missed"
        elif exception is not None:
            event = "task_failure"
        else:
            event = "notification"
        message = c.get("message") or (str(exception) if exception is not None else "")
        if event == "deadline_missed" and not message:
            message = f"deadline {_get(context.get('deadline'), 'deadline_time')} missed"
        return {
            "source": "watermark-ops",
            "event": event,
            "checkpoint": c.get("location") or self.checkpoint,
            "name": c.get("name") or c.get("location") or self.checkpoint,
            "state": c.get("state"),
            "alarm": c.get("alarm"),
            "outcome": c.get("outcome"),
            "message": message,
            "watermark": c.get("watermark"),
            "watermark_ms": c.get("watermark_ms"),
            "lag_ms": c.get("lag_ms"),
            "lag_basis": c.get("lag_basis"),
            "idle_ms": c.get("idle_ms"),
            "latest_batch": None if not latest else {
                "batch_id": latest.get("batch_id"), "timestamp_ms": latest.get("timestamp_ms"), "time": latest.get("time"),
            },
            "reasons": list(c.get("reasons") or []),
            "hints": list(c.get("hints") or []),
            "kind": c.get("kind") or "watermark",
            "finding": c.get("finding"),
            "state_store": c.get("state_store"),
            "dag_id": _get(ti, "dag_id") or _get(dag_run, "dag_id") or _get(context.get("dag"), "dag_id"),
            "run_id": _get(ti, "run_id") or _get(dag_run, "run_id"),
            "task_id": _get(ti, "task_id"),
            "map_index": _get(ti, "map_index"),
            "try_number": _get(ti, "try_number"),
            "deadline": _jsonable(context.get("deadline")),
        }

    # -- delivery ----------------------------------------------------------------------------

    def notify(self, context: Any) -> None:
        """Post the alert (sync: task and DAG callbacks)."""
        import httpx

        alert = self.build_alert(context)
        url, headers = webhook_request(BaseHook.get_connection(self.webhook_conn_id), self.endpoint)
        response = httpx.post(url, json=alert, headers=headers, timeout=self.request_timeout)
        response.raise_for_status()
        self.log.info("watermark alert (%s, %s) posted to %s: HTTP %s", alert["event"], alert["state"], url,
                      response.status_code)

    async def async_notify(self, context: Any) -> None:
        """Post the alert (async: ``DeadlineAlert`` callbacks in the triggerer); file I/O off the event loop."""
        import httpx

        alert = await asyncio.to_thread(self.build_alert, context)
        conn = await BaseHook.aget_connection(self.webhook_conn_id)
        url, headers = webhook_request(conn, self.endpoint)
        async with httpx.AsyncClient(timeout=self.request_timeout) as client:
            response = await client.post(url, json=alert, headers=headers)
        response.raise_for_status()
        self.log.info("watermark alert (%s, %s) posted to %s: HTTP %s", alert["event"], alert["state"], url,
                      response.status_code)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
