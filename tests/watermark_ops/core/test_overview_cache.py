"""Incremental overview rows (:mod:`watermark_ops.core.overview_cache`): a repeat view with no new
batch reads no batch file; new batches are read by name and audited with the one before them; the
row equals a whole read's row (:func:`watermark_ops.core.overview.overview_row`) after every change;
a changed query id or a rewind starts over; one evaluation serves concurrent viewers."""

from __future__ import annotations

import json
import shutil
import threading

import pytest
from fsspec.implementations.local import LocalFileSystem

from tests.watermark_ops import checkpoint_fixtures as cf
from watermark_ops.core.overview import overview_row
from watermark_ops.core.overview_cache import Job, SharedOverview, advance, row_of
from watermark_ops.core.stall import recent_batches
from watermark_ops.core.thresholds import Thresholds

BASE = 1_357_000_000_000
MINUTE = 60_000
THRESHOLDS = Thresholds(max_lag=None, max_idle=None, max_skew=None)
NEWEST = recent_batches(THRESHOLDS)
AT = 1_700_000_000_000 + 10_000 * MINUTE


class CountingFS(LocalFileSystem):
    """The local filesystem, counting what is asked of it: files read (``cat_file``: hits and misses
    apart) and folders listed."""

    cachable = False

    def __init__(self):
        super().__init__()
        self.counts = {"get": 0, "missing": 0, "list": 0, "batch_files": 0}

    def cat_file(self, path, start=None, end=None, **kwargs):
        try:
            data = super().cat_file(path, start=start, end=end, **kwargs)
        except FileNotFoundError:
            self.counts["missing"] += 1
            raise
        self.counts["get"] += 1
        if "/offsets/" in path or "/commits/" in path:
            self.counts["batch_files"] += 1
        return data

    def ls(self, path, detail=True, **kwargs):
        self.counts["list"] += 1
        return super().ls(path, detail=detail, **kwargs)

    def reset(self):
        self.counts = dict.fromkeys(self.counts, 0)


def _chain(n: int, start: int = 0) -> list[tuple[int, int | None]]:
    return [(BASE + i * MINUTE, BASE + (i + 1) * MINUTE) for i in range(start, start + n)]


def _add(root, first: int, chain) -> None:
    """Append batches ``first..`` of ``chain`` (no metadata rewrite)."""
    for position, (watermark, next_watermark) in enumerate(chain):
        batch_id = first + position
        cf.put(str(root), f"offsets/{batch_id}", cf.offsets_text(watermark, 1_700_000_000_000 + MINUTE * batch_id,
                                                                  sources=[{"logOffset": batch_id}]))
        if next_watermark is not None:
            cf.put(str(root), f"commits/{batch_id}", cf.commit_text(next_watermark))


def _record(batch_id: int) -> str:
    """One progress-log line of batch ``batch_id`` (the fields the classification reads)."""
    return json.dumps({"batch_id": batch_id, "query_id": "7d1b2a3c-0000-4000-8000-000000000001",
                       "run_id": "r1", "num_input_rows": 10, "timestamp": "2023-11-14T22:13:20.000Z"}) + "\n"


def _same_as_whole_read(memory, location) -> dict:
    row = row_of(memory, THRESHOLDS, at_ms=AT)
    assert row == overview_row(location, THRESHOLDS, at_ms=AT)
    return row


def test_a_repeat_view_reads_no_batch_file_and_new_batches_are_read_by_name(tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), _chain(300))
    fs = CountingFS()
    memory = advance(str(root), None, newest=NEWEST, filesystem=fs)
    assert memory.reads["mode"] == "full" and fs.counts["batch_files"] == 600 and fs.counts["list"] >= 3
    assert memory.window.head_batch_id == 299 and len(memory.window.batches) == NEWEST
    _same_as_whole_read(memory, str(root))

    fs.reset()
    again = advance(str(root), memory, newest=NEWEST, filesystem=fs)
    assert fs.counts == {"get": 1, "missing": 1, "list": 0, "batch_files": 0}  # metadata + offsets/300 probed
    assert again.reads == {"mode": "incremental", "batch_files": 0, "requests": 3}
    assert row_of(again, THRESHOLDS, at_ms=AT) == row_of(memory, THRESHOLDS, at_ms=AT)

    _add(root, 300, _chain(20, 300))
    fs.reset()
    grown = advance(str(root), again, newest=NEWEST, filesystem=fs)
    assert fs.counts["list"] == 0 and fs.counts["batch_files"] == 40  # only the 20 new batches' files
    assert grown.reads["mode"] == "incremental" and grown.window.head_batch_id == 319
    row = _same_as_whole_read(grown, str(root))
    assert row["head_batch_id"] == 319 and row["findings"] == 0


def test_findings_of_new_batches_add_to_the_remembered_ones(tmp_path):
    root = tmp_path / "cp"
    chain = _chain(10)
    chain[4] = (BASE, BASE + MINUTE)  # batch 4's watermark below batch 3's: a regression
    cf.handmade_checkpoint(str(root), chain)
    memory = advance(str(root), None, newest=NEWEST)
    first = _same_as_whole_read(memory, str(root))
    assert first["audit_status"] == "violation" and "watermark_regressed" in first["rules"]

    # An in-flight batch 10, then its commit, then batch 11 whose offsets disagree with commits/10.
    _add(root, 10, [(BASE + 20 * MINUTE, None)])
    memory = advance(str(root), memory, newest=NEWEST)
    row = _same_as_whole_read(memory, str(root))
    assert row["in_flight_batch"] == 10 and "in_flight_batch" in row["rules"]
    _add(root, 10, [(BASE + 20 * MINUTE, BASE + 21 * MINUTE)])
    _add(root, 11, [(BASE + 25 * MINUTE, BASE + 26 * MINUTE)])
    memory = advance(str(root), memory, newest=NEWEST)
    assert memory.reads["mode"] == "incremental"
    row = _same_as_whole_read(memory, str(root))
    assert row["in_flight_batch"] is None and "in_flight_batch" not in row["rules"]
    assert {"watermark_regressed", "commit_offset_mismatch"} <= set(row["rules"])

    # A hole: batch 13 without batch 12.
    _add(root, 13, [(BASE + 26 * MINUTE, BASE + 27 * MINUTE)])
    memory = advance(str(root), memory, newest=NEWEST)
    assert memory.window.head_batch_id == 11  # offsets/12 is missing: the probe stops there, as Spark would
    _add(root, 12, [(BASE + 26 * MINUTE, BASE + 26 * MINUTE)])
    memory = advance(str(root), memory, newest=NEWEST)
    _same_as_whole_read(memory, str(root))


def test_a_new_query_id_or_a_rewind_reads_everything_again(tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), _chain(5) + [(BASE + 5 * MINUTE, None)])
    memory = advance(str(root), None, newest=NEWEST)
    # Replaced: another query at the same place (fewer batches).
    shutil.rmtree(root)
    cf.handmade_checkpoint(str(root), _chain(3), query_id="7d1b2a3c-0000-4000-8000-0000000000ff")
    replaced = advance(str(root), memory, newest=NEWEST)
    assert replaced.reads["mode"] == "full" and replaced.query_id.endswith("ff")
    assert _same_as_whole_read(replaced, str(root))["head_batch_id"] == 2
    # Rewound: the committed head's files deleted (an older copy restored).
    (root / "offsets" / "2").unlink()
    (root / "commits" / "2").unlink()
    older = advance(str(root), replaced, newest=NEWEST)
    assert older.reads["mode"] == "full" and older.window.head_batch_id == 1
    _add(root, 2, _chain(1, 2))
    replaced = advance(str(root), older, newest=NEWEST)
    assert replaced.reads["mode"] == "incremental" and replaced.window.head_batch_id == 2
    # Rewound: the in-flight head's offsets file deleted.
    _add(root, 3, [(BASE + 3 * MINUTE, None)])
    grown = advance(str(root), replaced, newest=NEWEST)
    assert grown.window.in_flight_batch_id == 3
    (root / "offsets" / "3").unlink()
    rewound = advance(str(root), grown, newest=NEWEST)
    assert rewound.reads["mode"] == "full" and rewound.window.head_batch_id == 2
    # Gone: the row says so, and the next view reads again.
    shutil.rmtree(root)
    gone = advance(str(root), rewound, newest=NEWEST)
    assert gone.reads["mode"] == "full" and row_of(gone, THRESHOLDS, missing_ok=True)["error"].startswith("not run yet")


def test_the_progress_log_record_of_the_head_is_picked_up_after_its_commit(tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), _chain(4))
    log = tmp_path / "cp.progress.jsonl"

    log.write_text("".join(_record(i) for i in range(3)))
    memory = advance(str(root), None, newest=NEWEST)
    assert [r["batch_id"] for r in memory.progress.records] == [0, 1, 2]
    with log.open("a") as handle:
        handle.write(_record(3))
    memory = advance(str(root), memory, newest=NEWEST)
    assert [r["batch_id"] for r in memory.progress.records] == [0, 1, 2, 3]
    _same_as_whole_read(memory, str(root))


def test_concurrent_viewers_share_one_evaluation(tmp_path):
    roots = []
    for i in range(6):
        root = tmp_path / f"cp{i}"
        cf.handmade_checkpoint(str(root), _chain(20))
        roots.append(str(root))
    fs = CountingFS()
    shared = SharedOverview(max_age=60, workers=3)
    jobs = [Job(key=r, location=r, thresholds=THRESHOLDS, filesystem=fs) for r in roots]
    barrier = threading.Barrier(8)
    results = []

    def view():
        barrier.wait()
        results.append(shared.evaluate(jobs))

    threads = [threading.Thread(target=view) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert shared.refreshes == 1 and all(r is results[0] for r in results)
    assert fs.counts["batch_files"] == 6 * 40 and set(results[0].rows) == set(roots)
    fs.reset()
    assert shared.evaluate(jobs) is results[0] and fs.counts["get"] == 0  # within max_age: nothing read
    again = shared.evaluate(jobs, max_age=0)
    assert shared.refreshes == 2 and again.reads["incremental"] == 6 and fs.counts["batch_files"] == 0


def test_a_checkpoint_that_raises_is_its_own_row(tmp_path):
    good = tmp_path / "good"
    cf.handmade_checkpoint(str(good), _chain(3))

    class Broken(LocalFileSystem):
        cachable = False

        def ls(self, path, detail=True, **kwargs):
            raise PermissionError(f"denied: {path}")

    shared = SharedOverview(failed_row=lambda job, exc: {"location": job.location, "error": repr(exc)})
    rows = shared.evaluate([Job("good", str(good), THRESHOLDS),
                            Job("bad", str(tmp_path / "bad"), THRESHOLDS, filesystem=Broken())]).rows
    assert rows["good"]["error"] is None and rows["good"]["head_batch_id"] == 2
    assert "denied" in rows["bad"]["error"]


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])


def test_an_in_flight_head_is_watched_through_its_commit_alone(tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), _chain(5) + [(BASE + 5 * MINUTE, None)])
    fs = CountingFS()
    memory = advance(str(root), None, newest=NEWEST, filesystem=fs)
    fs.reset()
    again = advance(str(root), memory, newest=NEWEST, filesystem=fs)
    # metadata read; commits/5 and offsets/6 probed; offsets/5 checked to exist, not read
    assert fs.counts["batch_files"] == 0 and fs.counts["get"] == 1 and fs.counts["missing"] == 2
    assert again.window.in_flight_batch_id == 5
    _add(root, 5, [(BASE + 5 * MINUTE, BASE + 6 * MINUTE)])
    fs.reset()
    landed = advance(str(root), again, newest=NEWEST, filesystem=fs)
    assert fs.counts["batch_files"] == 1  # commits/5 only
    assert _same_as_whole_read(landed, str(root))["in_flight_batch"] is None


def test_on_a_real_s3_api_a_repeat_view_is_two_gets_and_a_new_batch_is_seen(s3_server, tmp_path):
    """Through s3fs (whose listings never expire by default) and a counting proxy: the first view
    lists, a repeat view is ``metadata`` plus one probe (no LIST, no batch file), and a batch
    written after the first listing is found."""
    from watermark_ops.examples.s3server import DelayProxy, upload_tree

    local = tmp_path / "cp"
    cf.handmade_checkpoint(str(local), _chain(30))
    direct = s3_server.filesystem()
    upload_tree(direct, local, "s3://overview-cache/cp")
    direct.pipe_file("overview-cache/cp.progress.jsonl", "".join(_record(i) for i in range(30)).encode())
    proxy = DelayProxy(s3_server.endpoint_url)
    try:
        fs = s3_server.filesystem(client_kwargs={"endpoint_url": proxy.endpoint_url, "region_name": "us-east-1"})
        memory = advance("s3://overview-cache/cp", None, newest=NEWEST, filesystem=fs)
        assert memory.reads["mode"] == "full" and memory.window.head_batch_id == 29
        assert proxy.counts["LIST"] >= 1
        proxy.reset()
        again = advance("s3://overview-cache/cp", memory, newest=NEWEST, filesystem=fs)
        # metadata and offsets/30 read (the latter missing), offsets/29 still there (HEAD): no LIST
        assert dict(proxy.counts) == {"GET": 2, "HEAD": 1} and again.reads["batch_files"] == 0
        direct.pipe({"overview-cache/cp/offsets/30": cf.offsets_text(BASE + 30 * MINUTE, 1_700_000_000_000 + 30 * MINUTE,
                                                                     sources=[{"logOffset": 30}]).encode(),
                     "overview-cache/cp/commits/30": cf.commit_text(BASE + 31 * MINUTE).encode(),
                     "overview-cache/cp.progress.jsonl": "".join(_record(i) for i in range(31)).encode()})
        proxy.reset()
        grown = advance("s3://overview-cache/cp", again, newest=NEWEST, filesystem=fs)
        assert grown.window.head_batch_id == 30 and grown.reads["mode"] == "incremental"
        assert proxy.counts["LIST"] == 0
        assert [r["batch_id"] for r in grown.progress.records][-2:] == [29, 30]  # the log's end, read again
        row = row_of(grown, THRESHOLDS, at_ms=AT)
        assert row["head_batch_id"] == 30 and row["findings"] == 0 and row["error"] is None
    finally:
        proxy.close()


def test_a_stale_evaluation_is_served_at_once_while_one_refresh_runs_in_the_background(tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), _chain(3))
    shared = SharedOverview(max_age=0, max_stale=3600)
    jobs = [Job("cp", str(root), THRESHOLDS)]
    first = shared.evaluate(jobs)
    _add(root, 3, _chain(1, 3))
    assert shared.evaluate(jobs) is first  # served at once; a refresh started behind it
    fresh = shared.evaluate(jobs, max_stale=0)  # too old for this caller: waits for a refresh (the running one)
    assert fresh.rows["cp"]["head_batch_id"] == 3 and fresh is not first
    assert shared.refreshes >= 2 and shared.background_refreshes >= 1
