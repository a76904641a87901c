"""The audit memory: the JSON state file (local and memory://)."""

from __future__ import annotations

import json
import os
import uuid

import fsspec
import pytest

from watermark_ops.core.memory import (
    MemoryFormatError,
    RememberedHead,
    StateFileMemory,
    memory_key,
)

HEAD = RememberedHead("q-1", head_batch_id=41, watermark_ms=1_357_047_180_000, audited_at_ms=1_795_265_536_436)


def test_state_file_round_trip_keeps_other_checkpoints(tmp_path):
    path = tmp_path / "nested" / "state.json"
    memory = StateFileMemory(path)
    assert memory.load("/data/cp") is None  # no file yet: an empty memory
    memory.save("/data/cp", HEAD)
    memory.save("s3://bucket/other/", RememberedHead(None, 3, 0, 5))
    document = json.loads(path.read_text())
    assert document == {"version": 1, "checkpoints": {
        "/data/cp": HEAD.to_dict(),
        "s3://bucket/other": {"query_id": None, "head_batch_id": 3, "watermark_ms": 0, "audited_at_ms": 5}}}
    fresh = StateFileMemory(str(path))
    assert fresh.load("/data/cp/") == HEAD
    assert fresh.load("s3://bucket/other").query_id is None
    leftovers = sorted(name for name in os.listdir(path.parent) if name != "state.json")
    assert leftovers == ["state.json.lock"]  # the lock of concurrent audits stays; no temp file is left


def test_relative_and_absolute_local_paths_are_one_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    memory = StateFileMemory("state.json")
    memory.save("./cp", HEAD)
    assert StateFileMemory(tmp_path / "state.json").load(str(tmp_path / "cp")) == HEAD
    assert memory_key("./cp/") == str(tmp_path / "cp")
    assert memory_key("gs://b/cp/") == "gs://b/cp"


def test_state_file_on_the_memory_filesystem():
    location = f"memory://state-{uuid.uuid4().hex}/state.json"
    try:
        StateFileMemory(location).save("memory://cp", HEAD)
        assert StateFileMemory(location).load("memory://cp") == HEAD
    finally:
        fsspec.filesystem("memory").rm(location.rsplit("/", 1)[0], recursive=True)


@pytest.mark.parametrize("content, words", [
    ("{not json", "not JSON"),
    ('{"version": 1}', '"checkpoints"'),
    ('{"version": 7, "checkpoints": {}}', "version 7"),
    ('{"version": 1, "checkpoints": {"/cp": {"head_batch_id": "4", "watermark_ms": 1, "audited_at_ms": 1}}}',
     "head_batch_id must be an integer"),
    ('{"version": 1, "checkpoints": {"/cp": [1, 2]}}', "expected an object"),
])
def test_malformed_state_file_is_named_and_never_overwritten(tmp_path, content, words):
    path = tmp_path / "state.json"
    path.write_text(content)
    memory = StateFileMemory(path)
    with pytest.raises(MemoryFormatError) as raised:
        memory.load("/cp")
        memory.save("/cp", HEAD)
    assert str(path) in str(raised.value) and words in str(raised.value)
    assert path.read_text() == content




def test_twenty_parallel_audits_share_one_state_file_and_lose_no_entry(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from tests.watermark_ops import checkpoint_fixtures as cf

    state = tmp_path / "state.json"
    roots = []
    for i in range(20):
        root = tmp_path / f"cp{i}"
        cf.handmade_checkpoint(str(root), [(0, 1000 * i), (1000 * i, 1000 * i + 1)])
        roots.append(root)
    script = ("import sys; from watermark_ops.core.audit import run_audit; "
              "from watermark_ops.core.memory import StateFileMemory; "
              "sys.exit(run_audit(sys.argv[1], StateFileMemory(sys.argv[2])).exit_code)")
    plugins = str(Path(__file__).resolve().parents[3] / "plugins")
    env = dict(os.environ, PYTHONPATH=plugins)
    audits = [subprocess.Popen([sys.executable, "-c", script, str(root), str(state)], env=env) for root in roots]
    assert [audit.wait(timeout=120) for audit in audits] == [0] * 20
    document = json.loads(state.read_text())  # never half-written
    assert sorted(document["checkpoints"]) == sorted(memory_key(root) for root in roots)
    for i, root in enumerate(roots):
        assert StateFileMemory(state).load(str(root)).watermark_ms == 1000 * i + 1
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------------------------
# Accepting a deliberate checkpoint reset


def _restart_from_scratch(spark, dirs):
    """Delete the checkpoint and the sink (the file sink's own log would skip the new batch ids), run again."""
    import shutil

    from tests.watermark_ops import checkpoint_fixtures as cf

    shutil.rmtree(dirs.checkpoint)
    shutil.rmtree(dirs.output)
    return cf.run_job(spark, dirs)


def test_an_accepted_reset_passes_the_next_audit_and_an_acceptance_hides_no_other_reset(spark, tmp_path):
    from tests.watermark_ops import checkpoint_fixtures as cf
    from watermark_ops.core.audit import run_audit
    from watermark_ops.core.checkpoint import read_checkpoint
    from watermark_ops.core.memory import ResetAcceptanceError, accept_reset

    dirs = cf.JobDirs(tmp_path / "job")
    cf.land_hour(dirs, 0)
    first = cf.run_job(spark, dirs)
    checkpoint = str(dirs.checkpoint)
    memory = StateFileMemory(tmp_path / "state.json")
    with pytest.raises(ResetAcceptanceError, match="no audit is remembered"):
        accept_reset(memory, checkpoint, first["query_id"], why="OPS-1", by="ana")
    assert run_audit(checkpoint, memory).status == "ok"
    with pytest.raises(ResetAcceptanceError, match="no reset to accept"):
        accept_reset(memory, checkpoint, first["query_id"], why="OPS-1", by="ana")

    # Deleted on purpose and started again: a new query id in metadata (StreamMetadata), batch ids from 0.
    second = _restart_from_scratch(spark, dirs)
    new_id = read_checkpoint(checkpoint, newest=1).query_id
    assert new_id == second["query_id"] != first["query_id"]
    with pytest.raises(ResetAcceptanceError, match="say why"):
        accept_reset(memory, checkpoint, new_id, why="  ", by="ana")
    head = accept_reset(memory, checkpoint, new_id, why="OPS-1: state schema changed", by="ana", at_ms=1_795_000_000_000)
    assert head.query_id == first["query_id"]  # the old head stays remembered, for the record
    assert head.accepted_reset.to_dict() == {
        "from_query_id": first["query_id"], "to_query_id": new_id, "by": "ana", "why": "OPS-1: state schema changed",
        "at_ms": 1_795_000_000_000, "at": "2026-11-18T11:06:40Z"}
    assert json.loads((tmp_path / "state.json").read_text())["checkpoints"][checkpoint]["accepted_reset"]["by"] == "ana"

    report = run_audit(checkpoint, StateFileMemory(tmp_path / "state.json"))
    assert report.status == "ok" and report.exit_code == 0
    (accepted,) = [f for f in report.findings if f.rule == "reset_accepted"]
    assert accepted.severity == "info" and accepted.file == f"{checkpoint}/metadata"
    assert first["query_id"] in accepted.message and new_id in accepted.message
    assert "accepted by ana at 2026-11-18T11:06:40Z: OPS-1: state schema changed" in accepted.message
    assert not [f for f in report.findings if f.rule in ("checkpoint_reset", "rewound", "watermark_regressed")]
    kept = StateFileMemory(tmp_path / "state.json").load(checkpoint)
    assert kept.query_id == new_id and kept.accepted_reset == head.accepted_reset  # kept while the query is the accepted one

    # Another reset: the acceptance was for the second query id, not for this third one.
    third = _restart_from_scratch(spark, dirs)
    report = run_audit(checkpoint, StateFileMemory(tmp_path / "state.json"))
    assert report.status == "violation"
    (reset,) = [f for f in report.findings if f.severity == "error"]
    assert reset.rule == "checkpoint_reset" and third["query_id"] in reset.message
    assert f"was for query id {new_id}, not this one" in reset.message
    assert StateFileMemory(tmp_path / "state.json").load(checkpoint).accepted_reset is None


def test_a_malformed_acceptance_is_a_clear_error(tmp_path):
    path = tmp_path / "state.json"
    entry = {**HEAD.to_dict(), "accepted_reset": {"from_query_id": "q-1", "to_query_id": 7, "by": "a", "why": "w",
                                                   "at_ms": 1}}
    path.write_text(json.dumps({"version": 1, "checkpoints": {"/data/cp": entry}}))
    with pytest.raises(MemoryFormatError, match=r"entry '/data/cp'.*accepted_reset.to_query_id must be a string"):
        StateFileMemory(path).load("/data/cp")


def test_a_state_file_of_an_earlier_version_is_read_then_completed_with_the_view(tmp_path):
    """A state file whose entry holds only the head (and an acceptance): its head is what the memory
    rules compare with; the next audit reads everything once and adds the view; then incremental."""
    from tests.watermark_ops import checkpoint_fixtures as cf
    from watermark_ops.core.audit import run_audit

    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000)], query_id="7d1b2a3c-0000-4000-8000-00000000000a")
    path = tmp_path / "state.json"
    acceptance = {"from_query_id": "7d1b2a3c-0000-4000-8000-000000000009",
                  "to_query_id": "7d1b2a3c-0000-4000-8000-00000000000a", "by": "ana", "why": "OPS-1", "at_ms": 1}
    old = {"query_id": "7d1b2a3c-0000-4000-8000-00000000000a", "head_batch_id": 1, "watermark_ms": 9000,
           "audited_at_ms": 5, "accepted_reset": acceptance}
    path.write_text(json.dumps({"version": 1, "checkpoints": {str(root): old}}))

    report = run_audit(str(root), StateFileMemory(path))
    assert report.reads["mode"] == "full" and report.status == "ok"
    assert report.remembered.head_batch_id == 1 and report.added_batch_ids == ()
    entry = json.loads(path.read_text())["checkpoints"][str(root)]
    assert entry["accepted_reset"] == {**acceptance, "at": "1970-01-01T00:00:00.001Z"} and entry["view"]["format"] == 2
    assert json.loads(path.read_text())["version"] == 1  # earlier versions still read it (they ignore "view")
    assert run_audit(str(root), StateFileMemory(path)).reads["mode"] == "incremental"
