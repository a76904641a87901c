"""A poke's cost does not grow with the history: the bounded read, shown by behaviour, not timing.

``status``, :func:`watermark_ops.core.stall.evaluate` and :func:`watermark_ops.core.checks.check`
(the sensors and the trigger) read the newest batches only (``read_recent``) and the end of the
progress log (``read_progress_tail``). Proofs here: old files that are garbage, or that cannot be
read at all, do not stop a poke (they are never opened); a filesystem that counts what is opened
sees the same number of files for 150 and for 1,000 batches; the progress log's old lines are not
parsed. The audit still reads everything. Checkpoints are written here in the exact format Spark
4.2 writes (as ``benchmarks/audit_benchmark.py`` does).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem

from watermark_ops.terminal import cli
from watermark_ops.core.audit import run_audit
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.checks import check
from watermark_ops.core.progress import read_progress_log, read_progress_tail
from watermark_ops.core.stall import RECENT_BATCHES, STALLED, classify, evaluate, read_recent
from watermark_ops.core.status import CheckpointStatus
from watermark_ops.core.thresholds import Thresholds
from watermark_ops.core.times import iso_utc

QUERY = "5d9a862d-487d-41b1-ac75-1f104fb133ae"
CONF = {"spark.sql.streaming.multipleWatermarkPolicy": "min", "spark.sql.shuffle.partitions": "2"}
MINUTE = 60_000


def write_checkpoint(root: Path, batches: int, *, end_ms: int, moves_until: int | None = None) -> int:
    """``batches`` committed data batches, one second apart, the last at ``end_ms``; the watermark
    moves by a minute in every batch below ``moves_until`` (default: every batch), then stays.
    Returns the first batch's time (epoch ms UTC)."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    (root / "metadata").write_text(json.dumps({"id": QUERY}))
    first_ms = end_ms - (batches - 1) * 1000
    watermark = end_ms - 30 * MINUTE - min(batches, moves_until or batches) * MINUTE
    for batch_id in range(batches):
        moved = moves_until is None or batch_id < moves_until
        next_watermark = watermark + (MINUTE if moved else 0)
        metadata = json.dumps({"batchWatermarkMs": watermark, "batchTimestampMs": first_ms + batch_id * 1000,
                               "conf": CONF}, separators=(",", ":"))
        (root / "offsets" / str(batch_id)).write_text(f'v1\n{metadata}\n{{"logOffset":{batch_id}}}')
        (root / "commits" / str(batch_id)).write_text(f'v1\n{{"nextBatchWatermarkMs":{next_watermark}}}')
        watermark = next_watermark
    return first_ms


def progress_line(batch_id: int, timestamp_ms: int, query_id: str = QUERY) -> str:
    return json.dumps({"query_id": query_id, "run_id": "r1", "batch_id": batch_id, "timestamp_ms": timestamp_ms,
                       "executed": True, "input_rows": 10,
                       "sources": [{"description": "FileStreamSource[landing]", "input_rows": 10}]}) + "\n"


class CountingFileSystem(LocalFileSystem):
    """The real local filesystem, counting the files it reads."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: list[str] = []

    def cat_file(self, path, start=None, end=None, **kwargs):
        self.read.append(path)
        return super().cat_file(path, start=start, end=end, **kwargs)


class Located:
    """A location with its own filesystem, as an Airflow ``ObjectStoragePath`` is (``fs``, ``path``)."""

    def __init__(self, fs, path):
        self.fs, self.path = fs, path

    def __str__(self) -> str:
        return self.path


def test_garbage_and_unreadable_old_files_do_not_stop_a_poke(tmp_path, capsys):
    root = tmp_path / "cp"
    end_ms = 1_795_000_000_000
    write_checkpoint(root, 400, end_ms=end_ms)
    for batch_id in range(0, 250):  # old history: garbage, binary, or not a file at all
        (root / "offsets" / str(batch_id)).write_bytes(b"\x00\xffnot a log file")
        (root / "commits" / str(batch_id)).write_text("v9\n{")
    for batch_id in range(250, 260):
        (root / "offsets" / str(batch_id)).unlink()
        (root / "offsets" / str(batch_id)).mkdir()  # opening it fails (root ignores chmod 000)

    c = evaluate(str(root), at=end_ms + 1000)
    assert c.state != STALLED and c.problems == ()  # no bad file was opened
    assert c.latest_batch.batch_id == 399 and c.last_move["batch_id"] == 399
    assert c.history["complete"] is False and c.history["batches_read"] == RECENT_BATCHES
    assert c.history["unread_batches"] == 300 and c.history["first_batch_id"] == 300

    status = CheckpointStatus.of(read_recent(str(root)))
    assert status.exit_code == 0 and status.problems == ()
    assert (status.head_batch_id, status.lowest_batch_id, status.unread_batches) == (399, 0, 300)

    assert cli.main(["status", "--json", str(root)]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["problems"] == [] and document["classification"]["history"]["unread_batches"] == 300
    assert check(str(root), at=end_ms + 1000).outcome == "done"

    # The audit still reads and checks every file.
    unreadable = {f.file for f in run_audit(str(root)).findings if f.rule == "unreadable"}
    assert str(root / "offsets" / "0") in unreadable and str(root / "offsets" / "255") in unreadable


def test_files_opened_do_not_grow_with_the_history(tmp_path):
    opened = {}
    for batches in (150, 1000):
        root = tmp_path / f"cp{batches}"
        end_ms = 1_795_000_000_000
        write_checkpoint(root, batches, end_ms=end_ms)
        fs = CountingFileSystem(skip_instance_cache=True)
        result = check(Located(fs, str(root)), at=end_ms)
        assert result.outcome == "done" and result.classification.latest_batch.batch_id == batches - 1
        opened[batches] = sorted(fs.read)
    assert len(opened[150]) == len(opened[1000]) == 2 * RECENT_BATCHES + 1  # offsets, commits, metadata
    assert not any(path.endswith(("/offsets/0", "/commits/0")) for path in opened[1000])
    # Without the bound, the reader reads every file (what the audit does).
    fs = CountingFileSystem(skip_instance_cache=True)
    assert len(read_checkpoint(str(tmp_path / "cp1000"), filesystem=fs).batches) == 1000
    assert len(fs.read) == 2 * 1000 + 1


def test_a_watermark_flat_over_the_batches_read_says_so(tmp_path):
    root = tmp_path / "cp"
    end_ms = 1_795_000_000_000
    first_ms = write_checkpoint(root, 300, end_ms=end_ms, moves_until=50)  # moved in batches 0..49, flat since
    thresholds = Thresholds(max_lag=None)

    bounded = evaluate(str(root), thresholds, at=end_ms)
    assert bounded.state == STALLED and bounded.last_move is None
    assert (f"in the 100 newest batches read (200 older batches not read, since batch 200 at "
            f"{iso_utc(first_ms + 200_000)})") in bounded.reasons[0]
    assert bounded.history["first_batch_ms"] == first_ms + 200_000
    # Read whole, the same checkpoint tells where the watermark last moved.
    whole = classify(read_checkpoint(str(root)), (), thresholds, end_ms)
    assert whole.state == STALLED and whole.last_move["batch_id"] == 49 and whole.history["complete"] is True
    assert "since batch 49" in whole.reasons[0]


def test_a_past_instant_widens_the_read_to_the_batches_before_it(tmp_path):
    root = tmp_path / "cp"
    end_ms = 1_795_000_000_000
    first_ms = write_checkpoint(root, 500, end_ms=end_ms)
    at_ms = first_ms + 120_000  # batch 120's time
    checkpoint = read_recent(str(root), at_ms=at_ms)
    assert sum(1 for b in checkpoint.batches if b.timestamp_ms <= at_ms) >= RECENT_BATCHES
    c = evaluate(str(root), at=at_ms)
    assert c.latest_batch.batch_id == 120 and c.problems == ()
    assert len(read_recent(str(root)).batches) == RECENT_BATCHES  # at now: never widened


def test_the_progress_log_is_read_from_its_end(tmp_path):
    log = tmp_path / "cp.progress.jsonl"
    lines = ["garbage from a crashed writer\n"] + [progress_line(i, 1000 * i) for i in range(5000)]
    log.write_text("".join(lines))

    tail = read_progress_tail(str(log), 4900, query_id=QUERY)
    assert [r["batch_id"] for r in tail.records] == list(range(4900, 5000))
    assert tail.problems == [] and tail.complete  # the garbage at the start was never parsed
    assert 0 < tail.start_offset and log.stat().st_size - tail.start_offset < 2 * 128 * 1024

    # A record of another query (an earlier checkpoint at the same path) ends the read too.
    log.write_text("".join([progress_line(i, i, "old-query") for i in range(5000)]
                           + [progress_line(i, 10_000 + i) for i in range(3)]))
    tail = read_progress_tail(str(log), 0, query_id=QUERY)
    assert [r["batch_id"] for r in tail.records] == [0, 1, 2] and tail.complete
    # At the byte limit, the read stops and says so.
    tail = read_progress_tail(str(log), 0, query_id=None, max_bytes=4096)
    assert not tail.complete and len(tail.records) < 5000
    # The whole read is unchanged: every line, numbered.
    whole = read_progress_log(str(log))
    assert len(whole.records) == 5003 and whole.start_offset == 0


def test_a_bad_line_in_the_tail_is_reported_with_its_byte_offset(tmp_path):
    log = tmp_path / "cp.progress.jsonl"
    head = "".join(progress_line(i, i) for i in range(3000))
    log.write_text(head + "{cut\n" + progress_line(3000, 3000))
    tail = read_progress_tail(str(log), 2990)
    assert tail.problems == [f"{log}: line at byte {len(head)}: expected one JSON object per line "
                             f"(Expecting property name enclosed in double quotes)"]
    small = tmp_path / "small.progress.jsonl"
    small.write_text(progress_line(0, 0) + "{cut\n")
    assert read_progress_tail(str(small), 0).problems[0].startswith(f"{small}:2: ")


def test_newest_must_be_positive(tmp_path):
    write_checkpoint(tmp_path / "cp", 3, end_ms=1_795_000_000_000)
    with pytest.raises(ValueError, match="newest"):
        read_checkpoint(str(tmp_path / "cp"), newest=0)
    assert len(read_checkpoint(str(tmp_path / "cp"), newest=2).batches) == 2


@pytest.mark.parametrize("backend", ["local", "memory"])
def test_a_bounded_read_holds_what_a_whole_read_holds_for_its_batches(tmp_path, backend):
    root = tmp_path / "cp"
    write_checkpoint(root, 130, end_ms=1_795_000_000_000)
    (root / "commits" / "129").unlink()  # the head is in flight
    (root / "commits" / "120").unlink()  # a hole in the commit log
    location = str(root)
    if backend == "memory":
        import uuid

        import fsspec

        location = f"memory://bounded-{uuid.uuid4().hex}"
        memory = fsspec.filesystem("memory")
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            memory.pipe_file(f"{location}/{path.relative_to(root)}", path.read_bytes())
    whole, bounded = read_checkpoint(location), read_checkpoint(location, newest=20)
    assert bounded.problems == () and bounded.unread_batches == 110 and not bounded.complete
    assert [b.batch_id for b in bounded.batches] == list(range(110, 130))
    assert [(b.batch_id, b.watermark_ms, b.next_watermark_ms, b.committed, b.offsets_file, b.commit_file)
            for b in bounded.batches] == [
        (b.batch_id, b.watermark_ms, b.next_watermark_ms, b.committed, b.offsets_file, b.commit_file)
        for b in whole.batches[110:]]
    assert bounded.in_flight_batch_id == whole.in_flight_batch_id == 129
    assert bounded.next_watermark_ms == whole.next_watermark_ms
    assert CheckpointStatus.of(bounded).lowest_batch_id == CheckpointStatus.of(whole).lowest_batch_id == 0
