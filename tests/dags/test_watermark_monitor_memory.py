"""The monitor's memory between cycles (watermark_ops.airflow.monitor.TailCache): one JSON file per
checkpoint and connection, written only when the tail changed, pruned of unwatched checkpoints; a
lost or broken file only costs a full read."""

from __future__ import annotations

import json


def test_the_memory_is_kept_per_checkpoint_and_connection(tmp_path):
    from watermark_ops.airflow.monitor import TailCache

    cache = TailCache(tmp_path / "tails")
    assert cache.load("s3://b/q1", "aws_a") is None  # nothing yet: a full read
    tail = {"location": "s3://b/q1", "query_id": "q", "newest": 100, "head": 7, "requests": {"get": 5}}
    assert cache.store("s3://b/q1", "aws_a", tail) is True
    assert cache.load("s3://b/q1", "aws_a") == tail
    assert cache.load("s3://b/q1", "aws_b") is None and cache.load("s3://b/q1", None) is None  # another endpoint
    # The same tail but for what its last read cost: nothing written.
    path = next((tmp_path / "tails").iterdir())
    before = path.stat().st_mtime_ns
    assert cache.store("s3://b/q1", "aws_a", {**tail, "requests": {"get": 2}}, previous=tail) is False
    assert path.stat().st_mtime_ns == before
    assert cache.store("s3://b/q1", "aws_a", {**tail, "head": 8}, previous=tail) is True
    assert cache.load("s3://b/q1", "aws_a")["head"] == 8


def test_a_broken_memory_is_ignored_and_unwatched_ones_are_pruned(tmp_path):
    from watermark_ops.airflow.monitor import TailCache

    cache = TailCache(tmp_path / "tails")
    for name in ("q1", "q2", "q3"):
        cache.store(f"/data/{name}", None, {"location": f"/data/{name}", "head": 1})
    broken = tmp_path / "tails" / f"{TailCache.key('/data/q2', None)}.json"
    broken.write_text('{"location": "/data/q2", "tail": {"head"')  # a worker killed mid-write elsewhere
    assert cache.load("/data/q2", None) is None
    other = tmp_path / "tails" / f"{TailCache.key('/data/q3', None)}.json"
    other.write_text(json.dumps({"location": "/data/elsewhere", "conn_id": None, "tail": {}}))
    assert cache.load("/data/q3", None) is None  # a file that is not this checkpoint's
    assert cache.prune([("/data/q1", None)]) == 2
    assert [p.name for p in (tmp_path / "tails").iterdir()] == [f"{TailCache.key('/data/q1', None)}.json"]
    assert cache.load("/data/q1", None) == {"location": "/data/q1", "head": 1}


def test_an_unwritable_memory_never_fails_the_cycle(tmp_path):
    from watermark_ops.airflow.monitor import TailCache

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = TailCache(blocker / "tails")
    assert cache.store("/data/q1", None, {"head": 1}) is False
    assert cache.load("/data/q1", None) is None and cache.prune([]) == 0
