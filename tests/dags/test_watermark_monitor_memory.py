"""The monitor's memory between cycles: each checkpoint's remembered view in the store every face
shares (the registry asset's state store in Airflow; here the in-process back-end of the same
interface). The per-worker tail files of earlier versions ($AIRFLOW_HOME/watermark_ops/monitor_tails)
are migrated into the store, never silently ignored, and deleted."""

from __future__ import annotations

import hashlib
import json
import logging

from tests.watermark_ops import checkpoint_fixtures as cf

BASE = 1_357_000_000_000
MINUTE = 60_000


def _tail_file(folder, location: str, conn_id: str | None, tail: dict) -> None:
    """A tail file as earlier versions of the monitor wrote it (``TailCache``)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(f"{conn_id or ''}|{location}".encode()).hexdigest()
    (folder / f"{name}.json").write_text(json.dumps({"location": location, "conn_id": conn_id, "tail": tail}))


def test_tail_files_of_earlier_versions_are_migrated_into_the_store_and_deleted(tmp_path, caplog):
    from watermark_ops.airflow.monitor import evaluate_checkpoints, migrate_tail_files
    from watermark_ops.core.tail import follow
    from watermark_ops.core.view import InProcessViews, load_view

    roots = [tmp_path / f"q{i}" for i in range(3)]
    for root in roots:
        cf.handmade_checkpoint(str(root), [(BASE + i * MINUTE, BASE + (i + 1) * MINUTE) for i in range(4)])
    folder = tmp_path / "home" / "watermark_ops" / "monitor_tails"
    old = follow(str(roots[0]), None, newest=100).to_dict()
    old["format"] = 1  # what earlier versions wrote: the window alone
    for key in ("head_size", "audit", "progress", "state"):
        old.pop(key)
    _tail_file(folder, str(roots[0]), None, old)
    _tail_file(folder, str(roots[1]), None, {"format": 1, "checkpoint": {"batches": "not a tail"}})  # broken
    _tail_file(folder, "/no/longer/watched", None, old)
    entries = [{"checkpoint": str(root), "missing_ok": False, "max_idle": "P3650D", "max_lag": None}
               for root in roots]
    memory = InProcessViews()

    with caplog.at_level(logging.WARNING):
        assert migrate_tail_files(memory, entries, folder) == 1
    assert not folder.exists()  # every file read (or named in the log) and deleted, the folder too
    assert any(str(roots[1]) in r.getMessage() and "not migrated" in r.getMessage() for r in caplog.records)
    migrated = load_view(memory, str(roots[0]))
    assert migrated.window.head_batch_id == 3 and migrated.audit is None

    results = evaluate_checkpoints(entries, memory=memory, concurrency=2)
    assert [r["remembered"] for r in results] == [True, False, False]
    assert results[0]["requests"]["listed"] == 0  # moved on from the migrated view, no listing
    assert len(memory) == 3


def test_a_view_that_cannot_be_read_only_costs_a_read(tmp_path, caplog):
    from watermark_ops.airflow.monitor import evaluate_entry

    root = tmp_path / "q"
    cf.handmade_checkpoint(str(root), [(BASE, BASE + MINUTE)])

    class Broken:
        def load(self, location):
            return None

        def load_view_entry(self, location):
            return {"format": 2, "checkpoint": "broken"}

        def save_view_entry(self, location, view):
            raise OSError("store unavailable")

    with caplog.at_level(logging.WARNING):
        result = evaluate_entry({"checkpoint": str(root), "max_idle": "P3650D", "max_lag": None}, memory=Broken())
    assert result["counted"] in ("advancing", "idle") and result["requests"]["listed"] == 1
    assert "ignored" in caplog.text and "not remembered" in caplog.text
