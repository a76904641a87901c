"""WatermarkWebhookNotifier: alerts received and checked by a real HTTP server on 127.0.0.1.

Two real paths deliver an alert: a sensor's ``on_failure_callback`` in a ``dag.test()`` run (the
Task SDK runs the callback with the failure's context), and a ``DeadlineAlert`` callback run the
way the triggerer runs it (Airflow's own ``CallbackTrigger`` imports the notifier, builds it with
the deadline's context and awaits it). The connection comes from the environment
(``AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK``), as a deployment would set it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pendulum
import pytest

from tests.watermark_ops import stall_fixtures as sf
from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier, webhook_request

pytestmark = pytest.mark.timeout(300)

CONN_ENV = "AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK"


def _head(checkpoint: str) -> tuple[int, dict]:
    offsets = {int(p.name): json.loads(p.read_text().splitlines()[1])
               for p in (Path(checkpoint) / "offsets").iterdir() if p.name.isdigit()}
    return max(offsets), offsets[max(offsets)]


def test_failure_callback_posts_the_sensors_classification(airflow_db, spark, monkeypatch):
    from airflow.sdk import DAG

    from watermark_ops.airflow.sensors import WatermarkStallSensor

    checkpoint = sf.backlog_then_future_record(spark).checkpoints["lagging"]
    head_id, head = _head(checkpoint)
    with sf.AlertServer() as server:
        monkeypatch.setenv(CONN_ENV, json.dumps({**json.loads(server.connection("/alerts", headers={"X-Team": "data"})),
                                                 "password": "s3cret"}))
        with DAG("notifier_on_failure", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
            WatermarkStallSensor(task_id="watch", checkpoint=checkpoint, on_failure_callback=WatermarkWebhookNotifier())
        run = sf.run_dag(dag)
        assert sf.task_states(run) == {("watch", -1): "failed"}
        (request,) = server.requests
    assert request["path"] == "/alerts"
    assert request["headers"]["authorization"] == "Bearer s3cret" and request["headers"]["x-team"] == "data"
    assert request["headers"]["content-type"] == "application/json"
    alert = request["body"]
    assert alert["source"] == "watermark-ops" and alert["event"] == "task_failure"
    assert alert["checkpoint"] == checkpoint and alert["state"] == "lagging" and alert["alarm"] is True
    # The watermark the next batch starts from: the head (the trailing batch) ran with it.
    assert alert["watermark_ms"] == head["batchWatermarkMs"]
    assert alert["watermark"] == pendulum.from_timestamp(head["batchWatermarkMs"] / 1000, tz="UTC").format("YYYY-MM-DD[T]HH:mm:ss[Z]")
    assert alert["lag_ms"] == head["batchTimestampMs"] - head["batchWatermarkMs"]
    assert alert["lag_basis"] == "wall_clock"  # the fixture's runs were not launched by the run pattern
    assert alert["latest_batch"]["batch_id"] == head_id and alert["latest_batch"]["timestamp_ms"] == head["batchTimestampMs"]
    assert (alert["dag_id"], alert["run_id"], alert["task_id"], alert["map_index"], alert["try_number"]) == (
        "notifier_on_failure", run.run_id, "watch", -1, 1)
    assert alert["reasons"][0].startswith("lagging: ") and alert["message"].startswith("unhealthy: alarm: ")
    assert alert["deadline"] is None


def test_deadline_callback_runs_like_the_triggerer_runs_it(spark, monkeypatch):
    """Airflow's CallbackTrigger imports the notifier by path, builds it with the deadline's simple
    context and awaits it: the async path, which classifies the checkpoint itself."""
    from airflow.sdk import AsyncCallback, DeadlineAlert, DeadlineReference
    from airflow.triggers.callback import CallbackTrigger
    from datetime import timedelta

    checkpoint = sf.backlog_then_future_record(spark).checkpoints["flights"]  # jumped
    kwargs = {"checkpoint": checkpoint, "endpoint": "/deadline", "thresholds": {"max_lag": None}}
    alert_def = DeadlineAlert(reference=DeadlineReference.DAGRUN_QUEUED_AT, interval=timedelta(minutes=45),
                              callback=AsyncCallback(WatermarkWebhookNotifier, kwargs=kwargs))
    assert alert_def.callback.path == "watermark_ops.airflow.notifiers.WatermarkWebhookNotifier"
    context = {"dag_run": {"dag_id": "flights_pipeline", "run_id": "scheduled__2013-01-03T05:00:00+00:00"},
               "deadline": {"id": "0193", "deadline_time": "2026-11-21T12:45:00+00:00"}}
    with sf.AlertServer() as server:
        monkeypatch.setenv(CONN_ENV, server.connection("/unused"))
        trigger = CallbackTrigger(callback_path=alert_def.callback.path,
                                  callback_kwargs={**alert_def.callback.kwargs, "context": context})

        async def events():
            return [event.payload async for event in trigger.run()]

        payloads = asyncio.run(events())
        (request,) = server.requests
    assert [p["state"] for p in payloads] == ["running", "success"], payloads
    assert request["path"] == "/deadline"
    alert = request["body"]
    assert alert["event"] == "deadline_missed" and alert["state"] == "jumped" and alert["alarm"] is True
    assert alert["checkpoint"] == checkpoint and alert["watermark_ms"] > alert["latest_batch"]["timestamp_ms"]
    assert (alert["dag_id"], alert["run_id"], alert["task_id"]) == ("flights_pipeline", context["dag_run"]["run_id"], None)
    assert alert["deadline"] == context["deadline"]


def test_a_webhook_error_is_raised_not_swallowed(spark, monkeypatch):
    checkpoint = sf.inputs_take_turns(spark).checkpoints["min"]
    with sf.AlertServer(status=500) as server:
        monkeypatch.setenv(CONN_ENV, server.connection())
        with pytest.raises(httpx.HTTPStatusError, match="500"):
            WatermarkWebhookNotifier(checkpoint=checkpoint)({})
        assert len(server.requests) == 1 and server.requests[0]["body"]["event"] == "notification"


def test_webhook_url_from_the_connection():
    from airflow.sdk import Connection

    plain = Connection(conn_id="a", conn_type="http", host="alerts.example.com", schema="https", port=8443,
                       extra=json.dumps({"endpoint": "hooks/wm", "headers": {"X-Team": "data"}}))
    assert webhook_request(plain) == ("https://alerts.example.com:8443/hooks/wm",
                                      {"Content-Type": "application/json", "X-Team": "data"})
    assert webhook_request(plain, endpoint="/other")[0] == "https://alerts.example.com:8443/other"
    whole = Connection(conn_id="b", conn_type="http", host="https://hooks.example.com/services/T0/B0", password="tok")
    url, headers = webhook_request(whole)
    assert url == "https://hooks.example.com/services/T0/B0" and headers["Authorization"] == "Bearer tok"
    with pytest.raises(ValueError, match="'c' has no host"):
        webhook_request(Connection(conn_id="c", conn_type="http"))
