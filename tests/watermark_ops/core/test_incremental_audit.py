"""An audit after a run reads only the new batches' files from the remembered view, and finds what a
full audit of the same files finds.

Real Spark checkpoints (``purged_history``: seven availableNow runs with ``minBatchesToRetain=3``, so
Spark purges old files as it writes new ones; then the checkpoint replaced by a new query) on the S3
API (the session's moto server), each run's files made to appear as Spark left them; every request
recorded by a proxy. After each run the audit with a state file (the terminal's memory) reads
``metadata`` and the new batches by name, and its report equals that of ``full=True`` (every file
read again) with the state file as it was before the audit. A watermark that went back in one run
is found by both, and forgotten by both once Spark purged that batch.
"""

from __future__ import annotations

import json
import urllib.parse

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops import object_storage_fixtures as osf
from watermark_ops.core.audit import run_audit
from watermark_ops.core.memory import StateFileMemory

REGRESSED_RUN = 3  # its data batch (id 6) starts below the watermark the batch before left


@pytest.fixture(scope="module")
def history(spark):
    return cf.purged_history(spark)


def _regressed(snapshot) -> dict[str, bytes]:
    """``offsets/6`` of the regressed run with its watermark set back by an hour (Spark's exact text)."""
    lines = (snapshot / "offsets" / "6").read_text().split("\n")
    metadata = json.loads(lines[1])
    metadata["batchWatermarkMs"] -= 3_600_000
    lines[1] = json.dumps(metadata, separators=(",", ":"))
    return {"offsets/6": "\n".join(lines).encode()}


def _as_found(fs, snapshot, url: str, edits: dict[str, bytes]) -> None:
    """The objects under ``url`` made what ``snapshot`` holds (``edits`` over it): new files
    written, purged ones deleted, as Spark leaves them after a run."""
    want = osf.s3_files(snapshot, url)
    for relative, data in edits.items():
        if f"{url}/{relative}" in want:
            want[f"{url}/{relative}"] = data
    fs.invalidate_cache()
    have = {f"s3://{p}" for p in fs.find(url.removeprefix("s3://"))}
    gone = sorted(have - set(want))
    if gone:
        fs.rm(gone)
    osf.upload(fs, want)


def test_an_audit_after_each_run_reads_the_new_batches_only_and_finds_what_a_full_audit_finds(
        history, s3_server, tmp_path):
    fs = s3_server.filesystem()
    bucket = osf.new_bucket(fs)
    url = f"s3://{bucket}/cp"
    proxy = osf.counting(s3_server)
    requests: list[tuple[str, str]] = []
    proxy.fail = lambda method, path: requests.append((method, urllib.parse.unquote(path))) or None
    state = tmp_path / "state.json"
    edits: dict[str, bytes] = {}
    try:
        reader = osf.proxied_filesystem(proxy)
        previous_head = None
        for index, snapshot in enumerate(history.snapshots[:-1]):
            if index == REGRESSED_RUN:
                edits = _regressed(snapshot)
            _as_found(fs, snapshot, url, edits)
            before = state.read_bytes() if state.exists() else None
            requests.clear()
            report = run_audit(url, StateFileMemory(state), filesystem=reader, now_ms=1)
            if before is None:
                assert report.reads["mode"] == "full" and report.status == "ok"
                previous_head = report.head_batch_id
                continue
            assert report.reads["mode"] == "incremental", index
            # Only the new batches' files (and the absent ones probed after them) are read: no
            # older batch file; no listing of the checkpoint or of commits/, only of offsets/ once
            # Spark purged (to learn the lowest batch left), besides s3fs's look for a "folder" of
            # the name of an object that is gone (the purged lowest one, the absent progress log).
            batch_files = [path for method, path in requests if method == "GET" and "?" not in path
                           and ("/offsets/" in path or "/commits/" in path)]
            assert batch_files and all(int(path.rsplit("/", 1)[1]) > previous_head for path in batch_files)
            assert {f"/{bucket}/cp/{log}/{i}" for i in report.added_batch_ids for log in ("offsets", "commits")} \
                <= set(batch_files)
            listed = [urllib.parse.parse_qs(path.partition("?")[2]).get("prefix", [""])[0]
                      for method, path in requests if method == "GET" and "list-type" in path]
            assert listed.count("cp/offsets/") <= 1
            assert all(p == "cp/offsets/" or p.startswith("cp/offsets/") and p.rstrip("/")[11:].isdigit()
                       or p == "cp.progress.jsonl/" for p in listed), listed
            # ...and the report is a full audit's of the same files, with the same memory.
            copy = tmp_path / f"state-before-run-{index}.json"
            copy.write_bytes(before)
            full = run_audit(url, StateFileMemory(copy), filesystem=fs, now_ms=1, full=True)
            assert full.reads["mode"] == "full" and full.reads["batch_files"] > report.reads["batch_files"]
            assert {**report.to_dict(), "reads": None} == {**full.to_dict(), "reads": None}, index
            rules = {f.rule for f in report.findings}
            if index == REGRESSED_RUN:  # the chain, the commit before it, and the memory all say so
                assert report.status == "violation" and {"watermark_regressed", "commit_offset_mismatch"} <= rules
            elif index > REGRESSED_RUN + 1:  # purged by Spark: no file left to say so
                assert report.status == "ok" and report.findings == ()
            previous_head = report.head_batch_id
        # The checkpoint replaced (a new query id): read everything again, the reset reported.
        _as_found(fs, history.snapshots[-1], url, {})
        report = run_audit(url, StateFileMemory(state), filesystem=reader, now_ms=1)
        assert report.reads["mode"] == "full"
        assert [(f.rule, f.severity) for f in report.findings] == [("checkpoint_reset", "error")]
    finally:
        proxy.close()


def test_the_terminal_says_what_it_read_and_full_reads_everything(tmp_path, capsys):
    from watermark_ops.terminal import cli

    root, state = tmp_path / "cp", tmp_path / "state.json"
    base = 1_357_000_000_000
    cf.handmade_checkpoint(str(root), [(base + i * 60_000, base + (i + 1) * 60_000) for i in range(5)])

    def audit(*flags: str) -> dict:
        assert cli.main(["audit", str(root), "--state", str(state), "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)

    assert audit()["reads"]["mode"] == "full"
    for i in (5, 6):  # a run: two more batches
        cf.put(str(root), f"offsets/{i}", cf.offsets_text(base + i * 60_000, 1_700_000_000_000 + i * 60_000))
        cf.put(str(root), f"commits/{i}", cf.commit_text(base + (i + 1) * 60_000))
    after = audit()
    assert after["reads"]["mode"] == "incremental" and after["reads"]["new_batches"] == 2
    assert after["reads"]["batch_files"] == 4 and after["added_batches"] == {"first": 5, "last": 6, "count": 2}
    again = audit("--full")
    assert again["reads"]["mode"] == "full" and again["reads"]["batch_files"] == 14
    assert again["findings"] == after["findings"] == [] and again["head_batch_id"] == 6
    assert cli.main(["audit", str(root), "--state", str(state)]) == 0
    out = capsys.readouterr().out
    assert "read 0 new batches" in out and "--full" in out and "Batches (7 in the logs)" in out
    # status reads what the same remembered view does not hold, as the sensors do
    assert cli.main(["status", str(root), "--state", str(state), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["head_batch_id"] == 6
    assert cli.main(["status", str(root), "--state", str(state)]) == 0
    assert f"read from the remembered view in {state}: 0 new batch files" in capsys.readouterr().out
