"""core.tail: a poke follows the newest batches by name from the remembered head, no listing.

On a real Spark-written checkpoint (``restart_history``: five restarts of ``flight_windows``), in
a local folder and on the S3 API (the session's moto server, requests counted by a proxy):
a follow after new batches is exactly a fresh bounded read; a follow with nothing new lists
nothing and costs the same requests at 10 batches as at 300; a reset (new query id), a purge
(seen with the batch Spark purges it for) and a rewind fall back to a listing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops import object_storage_fixtures as osf
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.stall import evaluate, evaluate_tail, recent_batches
from watermark_ops.core.tail import Tail, follow
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS

WINDOW = 3


@pytest.fixture(scope="module")
def history(spark):
    return cf.restart_history(spark)


def _remove_batches(checkpoint: Path, ids: list[int], commits_only: list[int] = ()) -> None:
    for batch_id in ids:
        for log in ("offsets", "commits"):
            for name in (str(batch_id), f".{batch_id}.crc"):
                (checkpoint / log / name).unlink(missing_ok=True)
    for batch_id in commits_only:
        for name in (str(batch_id), f".{batch_id}.crc"):
            (checkpoint / "commits" / name).unlink(missing_ok=True)


def _roundtrip(tail: Tail) -> Tail:
    """What a face keeps between pokes: the tail as JSON text, read back."""
    return Tail.from_dict(json.loads(json.dumps(tail.to_dict())))


def test_a_follow_after_new_batches_is_a_fresh_bounded_read(history, tmp_path):
    full = history.checkpoint
    ids = osf.offsets_ids(full)
    assert len(ids) >= 7
    checkpoint = cf.copy_checkpoint(full, tmp_path / "cp")
    # Earlier: the last three batches not written yet, the one before them in flight (offsets, no commit).
    _remove_batches(checkpoint, ids[-3:], commits_only=[ids[-4]])
    first = follow(str(checkpoint), None, newest=WINDOW)
    assert first.requests["listed"] and first.checkpoint == read_checkpoint(str(checkpoint), newest=WINDOW)
    assert first.checkpoint.in_flight_batch_id == ids[-4]
    shutil.rmtree(checkpoint)
    cf.copy_checkpoint(full, checkpoint)  # Spark committed the in-flight batch and ran three more

    second = follow(str(checkpoint), _roundtrip(first), newest=WINDOW)

    assert not second.requests["listed"] and second.requests["list"] == 0
    fresh = read_checkpoint(str(checkpoint), newest=WINDOW)
    assert second.checkpoint == fresh
    assert second.checkpoint.head_batch_id == ids[-1] and second.checkpoint.unread_batches == len(ids) - WINDOW
    assert second.checkpoint.in_flight_batch_id is None and second.query_id == history.runs[0]["query_id"]
    # and the same classification as a full evaluate of the same files, at the same instant
    at = fresh.batches[-1].timestamp_ms + 60_000
    classification, tail = evaluate_tail(str(checkpoint), DEFAULT_THRESHOLDS, _roundtrip(first), at=at)
    assert classification.to_dict() == evaluate(str(checkpoint), DEFAULT_THRESHOLDS, at=at).to_dict()
    assert tail.newest == recent_batches(DEFAULT_THRESHOLDS) and tail.requests["listed"]  # another window: listed


def test_a_file_with_a_problem_in_the_window_is_read_again(history, tmp_path):
    """A half-written file a poke saw may be whole at the next poke (and a good one may break):
    the follow reads the window's troubled files again, as a fresh bounded read would."""
    ids = osf.offsets_ids(history.checkpoint)
    checkpoint = cf.copy_checkpoint(history.checkpoint, tmp_path / "cp")
    commit = checkpoint / "commits" / str(ids[-2])
    whole = commit.read_bytes()
    commit.write_bytes(whole[:4])  # caught while being written
    first = follow(str(checkpoint), None, newest=WINDOW)
    assert len(first.checkpoint.problems) == 1 and first.checkpoint.problems[0].batch_id == ids[-2]
    commit.write_bytes(whole)
    healed = follow(str(checkpoint), _roundtrip(first), newest=WINDOW)
    assert not healed.requests["listed"] and healed.checkpoint.problems == ()
    assert healed.checkpoint == read_checkpoint(str(checkpoint), newest=WINDOW)
    (checkpoint / "offsets" / str(ids[-1])).write_bytes(b"v1\n{")  # the head's offsets changed: list
    broken = follow(str(checkpoint), healed, newest=WINDOW)
    assert broken.requests["listed"] and broken.checkpoint == read_checkpoint(str(checkpoint), newest=WINDOW)


def test_the_tail_survives_json_and_stays_small(history):
    tail = follow(str(history.checkpoint), None, newest=WINDOW)
    text = json.dumps(tail.to_dict())
    assert Tail.from_dict(json.loads(text)) == tail
    assert len(text) < 1_000 * WINDOW  # the conf once, file names implied: well under a KB a batch
    with pytest.raises(ValueError, match="format"):
        Tail.from_dict({"format": 99})

    # a window wider than the whole history (the sensors' 100 batches on a young query)
    wide = follow(str(history.checkpoint), None, newest=100)
    again = follow(str(history.checkpoint), _roundtrip(wide), newest=100)
    assert not again.requests["listed"] and again.checkpoint == read_checkpoint(str(history.checkpoint), newest=100)


def test_on_s3_a_follow_after_new_batches_lists_nothing_and_equals_a_bounded_read(history, s3_server):
    fs = s3_server.filesystem()
    bucket = osf.new_bucket(fs)
    url = f"s3://{bucket}/cp"
    files = osf.s3_files(history.checkpoint, url)
    ids = osf.offsets_ids(history.checkpoint)
    later = {k: v for k, v in files.items() if any(k.endswith(f"/{log}/{i}") for i in ids[-2:]
                                                    for log in ("offsets", "commits"))}
    osf.upload(fs, {k: v for k, v in files.items() if k not in later})
    proxy = osf.counting(s3_server)
    try:
        watcher = osf.proxied_filesystem(proxy)  # one long-lived filesystem, as a triggerer keeps
        first = follow(url, None, newest=WINDOW, filesystem=watcher)
        assert first.checkpoint.head_batch_id == ids[-3]
        osf.upload(fs, later)
        proxy.reset()

        second = follow(url, _roundtrip(first), newest=WINDOW, filesystem=watcher)

        assert proxy.counts["LIST"] == 0 and second.requests["list"] == 0
        assert second.checkpoint == read_checkpoint(url, newest=WINDOW, filesystem=s3_server.filesystem())
        assert second.checkpoint.head_batch_id == ids[-1]
    finally:
        proxy.close()


def test_on_s3_a_poke_with_nothing_new_costs_the_same_at_10_and_300_batches(history, s3_server):
    fs = s3_server.filesystem()
    bucket = osf.new_bucket(fs)
    small, large = f"s3://{bucket}/small", f"s3://{bucket}/large"
    files = osf.s3_files(history.checkpoint, small)
    ids = osf.offsets_ids(history.checkpoint)
    # The large one: the real files renumbered up to batch 299 (what a long-lived query holds).
    template = {log: {i: files[f"{small}/{log}/{i}"] for i in ids if f"{small}/{log}/{i}" in files}
                for log in ("offsets", "commits")}
    big = {f"{large}/metadata": files[f"{small}/metadata"]}
    for batch_id in range(300):
        source = ids[min(batch_id, len(ids) - 1)]
        for log in ("offsets", "commits"):
            if source in template[log]:
                big[f"{large}/{log}/{batch_id}"] = template[log][source]
    osf.upload(fs, {**files, **big})
    proxy = osf.counting(s3_server)
    try:
        watcher = osf.proxied_filesystem(proxy)
        counts = {}
        for url in (small, large):
            tail = follow(url, None, newest=WINDOW, filesystem=watcher)
            proxy.reset()
            again = follow(url, _roundtrip(tail), newest=WINDOW, filesystem=watcher)
            counts[url] = dict(proxy.counts)
            assert again.checkpoint == tail.checkpoint and not again.requests["listed"]
        assert counts[small] == counts[large] and "LIST" not in counts[small]
        assert sum(counts[small].values()) <= 6
    finally:
        proxy.close()


def test_on_s3_a_reset_a_purge_and_a_rewind_fall_back_to_a_listing(history, s3_server):
    fs = s3_server.filesystem()
    url = osf.uploaded_checkpoint(fs, history.checkpoint)
    ids = osf.offsets_ids(history.checkpoint)
    newest = {f"{url}/{log}/{ids[-1]}": fs.cat_file(f"{url}/{log}/{ids[-1]}") for log in ("offsets", "commits")}
    fs.rm(list(newest))  # held back: the batch Spark writes next
    reader = s3_server.filesystem()
    tail = follow(url, None, newest=WINDOW, filesystem=reader)

    # Spark's purge (minBatchesToRetain) removed the oldest batch as it wrote the next one: the
    # remembered lowest batch is gone, offsets/ is listed again.
    fs.pipe(newest)
    fs.rm([f"{url}/offsets/{ids[0]}", f"{url}/commits/{ids[0]}"])
    purged = follow(url, tail, newest=WINDOW, filesystem=reader)
    assert purged.requests["listed"] and purged.checkpoint == read_checkpoint(url, newest=WINDOW, filesystem=reader)
    assert purged.checkpoint.lowest_offsets_batch_id == ids[1]

    # A rewind: the head's files deleted by hand (a restart from an earlier batch).
    fs.rm([f"{url}/offsets/{ids[-1]}", f"{url}/commits/{ids[-1]}"])
    rewound = follow(url, purged, newest=WINDOW, filesystem=reader)
    assert rewound.requests["listed"] and rewound.checkpoint.head_batch_id == ids[-2]

    # A reset: the checkpoint replaced by a new query's (a new id in metadata).
    fs.pipe_file(f"{url}/metadata", osf.json_bytes({"id": "00000000-0000-4000-8000-00000000beef"}))
    reset = follow(url, rewound, newest=WINDOW, filesystem=reader)
    assert reset.requests["listed"] and reset.query_id == "00000000-0000-4000-8000-00000000beef"
    assert reset.checkpoint == read_checkpoint(url, newest=WINDOW, filesystem=reader)


def test_on_s3_a_sensor_poke_with_a_memory_is_four_requests(history, s3_server):
    """evaluate_tail, the poke a sensor that remembers calls: ``metadata`` and the probe
    ``offsets/<head+1>`` (two GETs), a HEAD of ``offsets/<head>`` (still there, the same ETag) and
    one of the unchanged progress log (read and parsed at the first poke only). The same probe as
    the overview's (one probe in the package since the remembered view): before it, the tail also
    read the head's and the lowest offsets and ``commits/<head+1>`` (five GETs)."""
    fs = s3_server.filesystem()
    url = osf.uploaded_checkpoint(fs, history.checkpoint)
    at = read_checkpoint(str(history.checkpoint)).batches[-1].timestamp_ms + 60_000
    proxy = osf.counting(s3_server)
    try:
        watcher = osf.proxied_filesystem(proxy)
        first, tail = evaluate_tail(url, DEFAULT_THRESHOLDS, None, at=at, filesystem=watcher)
        proxy.reset()
        again, tail = evaluate_tail(url, DEFAULT_THRESHOLDS, _roundtrip(tail), at=at, filesystem=watcher)
        assert dict(proxy.counts) == {"GET": 2, "HEAD": 2}
        assert again.to_dict() == first.to_dict() == evaluate(url, DEFAULT_THRESHOLDS, at=at, filesystem=fs).to_dict()
        assert again.inputs and again.history["batches_read"] == len(osf.offsets_ids(history.checkpoint))
    finally:
        proxy.close()
