"""WatermarkTrigger: kwargs validated before serializing, and run() driven to its one event with asyncio.

Checkpoints are real (``stall_fixtures``). To prove that the trigger's blocking fsspec I/O runs off
the event loop, a test reads the checkpoint through a filesystem whose reads block until the
event loop itself releases them: were the I/O on the loop's thread, the loop could never release it.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from pathlib import Path

import pendulum
import pytest
from fsspec.implementations.local import LocalFileSystem

from tests.watermark_ops import stall_fixtures as sf
from watermark_ops.core import stall
from watermark_ops.core.thresholds import Thresholds
from watermark_ops.airflow.triggers import EVENT_STATUSES, WatermarkTrigger

pytestmark = pytest.mark.timeout(300)


async def _one_event(trigger: WatermarkTrigger) -> tuple[dict, int]:
    """Drive run() to exhaustion: (the first event's payload, how many events it yielded)."""
    events = [event async for event in trigger.run()]
    return events[0].payload, len(events)


# --------------------------------------------------------------------------------------------
# kwargs


def test_serialize_round_trip_through_airflow_serde():
    from airflow.sdk.serde import deserialize, serialize

    trigger = WatermarkTrigger(checkpoint="s3://bucket/ck", goal="reached", target_ms=1357084800000,
                               thresholds=Thresholds(max_lag=None).to_dict(), poll_interval=5,
                               timeout=pendulum.duration(minutes=10), storage_options={"anon": True})
    classpath, kwargs = trigger.serialize()
    assert classpath == "watermark_ops.airflow.triggers.WatermarkTrigger"
    assert type(kwargs["timeout"]) is timedelta and kwargs["timeout"] == timedelta(minutes=10)  # not pendulum
    # What the task runner sends to the triggerer, and what the triggerer rebuilds.
    rebuilt_kwargs = deserialize(serialize(kwargs))
    rebuilt = WatermarkTrigger(**rebuilt_kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert rebuilt.thresholds["max_lag_ms"] is None and rebuilt.thresholds["max_idle_ms"] == 86_400_000


@pytest.mark.parametrize("kwargs, error, match", [
    ({"timeout": 60}, TypeError, "timeout must be a datetime.timedelta"),
    ({"timeout": timedelta(seconds=-1)}, ValueError, "timeout must not be negative"),
    ({"goal": "complete"}, ValueError, "goal must be one of"),
    ({"goal": "reached"}, TypeError, "target_ms"),
    ({"goal": "reached", "target_ms": "2013-01-02"}, TypeError, "target_ms"),
    ({"poll_interval": 0}, ValueError, "poll_interval"),
    ({"thresholds": {"max_lag": "PT6H"}}, ValueError, "unknown threshold keys"),
    ({"thresholds": {"max_lag_ms": "PT6H"}}, ValueError, "max_lag_ms: expected milliseconds"),
    ({"checkpoint": ""}, TypeError, "checkpoint"),
    ({"storage_options": "anon"}, TypeError, "storage_options"),
])
def test_bad_kwargs_fail_before_serializing(kwargs, error, match):
    with pytest.raises(error, match=match):
        WatermarkTrigger(**{"checkpoint": "/ck", **kwargs})


# --------------------------------------------------------------------------------------------
# run() to its event


def test_decided_checkpoints_fire_at_the_first_poll(spark, tmp_path):
    turns = sf.inputs_take_turns(spark).checkpoints["min"]
    jumped = sf.backlog_then_future_record(spark).checkpoints["flights"]
    lagging = sf.backlog_then_future_record(spark).checkpoints["lagging"]
    healthy = Thresholds(max_idle=timedelta(days=3650)).to_dict()

    payload, count = asyncio.run(_one_event(WatermarkTrigger(checkpoint=turns, thresholds=healthy)))
    assert (payload["status"], payload["polls"], count) == ("done", 1, 1)
    assert payload["classification"]["state"] in ("advancing", "idle") and payload["checkpoint"] == turns

    payload, _ = asyncio.run(_one_event(WatermarkTrigger(checkpoint=jumped, timeout=timedelta(minutes=5))))
    assert payload["status"] == "fail" and payload["classification"]["state"] == "jumped"

    emitted = stall.evaluate(lagging).emitted_through_ms
    payload, _ = asyncio.run(_one_event(WatermarkTrigger(checkpoint=lagging, goal="reached", target_ms=emitted)))
    assert payload["status"] == "done" and payload["classification"]["emitted_through_ms"] == emitted

    missing = str(tmp_path / "not-yet")
    payload, _ = asyncio.run(_one_event(WatermarkTrigger(checkpoint=missing, missing_ok=True)))
    assert payload["status"] == "skip" and payload["classification"] is None
    assert {"done", "fail", "skip"} <= set(EVENT_STATUSES)


def test_waits_then_fires_timeout_with_the_last_classification(spark):
    stalled = sf.one_input_without_data(spark).checkpoints["min"]
    trigger = WatermarkTrigger(checkpoint=stalled, poll_interval=0.2, timeout=timedelta(seconds=1))
    payload, count = asyncio.run(_one_event(trigger))
    assert payload["status"] == "timeout" and count == 1
    assert payload["polls"] >= 2  # it polled again before giving up
    assert payload["classification"]["state"] == "stalled"
    assert payload["message"].startswith("still waiting after 0:00:01: alarm: ")


def test_unreadable_head_fires_an_error_event(spark, tmp_path):
    copy = sf.copy_with_progress_log(sf.inputs_take_turns(spark).checkpoints["min"], tmp_path / "ck")
    head = max(int(p.name) for p in (Path(copy) / "offsets").iterdir() if p.name.isdigit())
    (Path(copy) / "offsets" / str(head)).write_text("v9\n{}\n{}\n")
    payload, count = asyncio.run(_one_event(WatermarkTrigger(checkpoint=copy)))
    assert payload["status"] == "error" and count == 1
    assert f"offsets/{head}" in payload["message"] and "maximum supported offset log version is v2" in payload["message"]


# --------------------------------------------------------------------------------------------
# Blocking I/O off the event loop; a stall healing while the trigger polls


class GatedFileSystem(LocalFileSystem):
    """The local filesystem under ``gatedfile://``, whose file reads call ``on_read(path)`` first
    (in the thread doing the I/O): a test uses it to hold a poll until the event loop releases it."""

    protocol = ("gatedfile",)
    on_read = None

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path)
        if path.startswith("gatedfile://"):
            path = path[len("gatedfile://"):]
        return super()._strip_protocol(path)

    def cat_file(self, path, start=None, end=None, **kwargs):
        hook = type(self).on_read
        if hook is not None:
            hook(self._strip_protocol(path))
        return super().cat_file(path, start=start, end=end, **kwargs)


def test_heals_while_polling_without_blocking_the_event_loop(spark, tmp_path):
    """Poll 1 sees the stall (it lists and remembers the tail); every read of poll 2 (which follows
    the tail: no listing) blocks in its worker thread until the event loop has healed the stall (a
    real Spark run, awaited in another thread) and opened the gate; poll 2 then fetches the new
    batches by name and is done."""
    import fsspec

    fsspec.register_implementation("gatedfile", GatedFileSystem, clobber=True)
    stream = sf.stalled_two_inputs(spark, tmp_path / "turns")
    root = stream.checkpoint()
    assert stall.evaluate(root).state == "stalled"

    trigger = WatermarkTrigger(checkpoint="gatedfile://" + root, poll_interval=0.1, timeout=timedelta(minutes=5))
    second_poll_waiting = threading.Event()
    gate = threading.Event()

    def on_read(path: str) -> None:
        if not path.startswith(root + "/") or trigger._tail is None:  # poll 1 (it sets the tail) reads freely
            return
        second_poll_waiting.set()
        if not gate.wait(timeout=120):  # only the event loop opens it
            raise TimeoutError("the event loop never opened the gate: the trigger blocked it")

    async def scenario():
        task = asyncio.create_task(_one_event(trigger))
        while not second_poll_waiting.is_set():  # the loop keeps running while poll 2 is held
            await asyncio.sleep(0.05)
        await asyncio.to_thread(sf.heal, spark, stream)
        gate.set()
        return await task

    GatedFileSystem.on_read = on_read
    try:
        payload, count = asyncio.run(scenario())
    finally:
        GatedFileSystem.on_read = None
    assert (payload["status"], payload["polls"], count) == ("done", 2, 1)
    assert payload["classification"]["state"] == "advancing"
    assert payload["classification"]["latest_data_batch"]["inputs_advanced"] == [0, 1]
