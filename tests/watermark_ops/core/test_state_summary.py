"""The state store in the audit, ``status`` and the remembered view, on a real stateful checkpoint
(``state_store_fixtures``: a dedup no watermark can evict, written by real PySpark).

* the audit reports the state findings as warnings (never a violation) with the summary in
  ``state_store``; a state file that cannot be read makes it ``unreadable``, like any checkpoint file;
* a view reads the state once per head: an unchanged checkpoint costs no request more than a look
  without the state, new batches make it read again, a stateless checkpoint is never read again;
* the summary survives the view's JSON unchanged (a look at an unchanged checkpoint writes nothing).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops.state_store_fixtures import GROWING_BATCHES, copy_checkpoint
from watermark_ops.terminal.cli import main
from watermark_ops.core.advance import advance
from watermark_ops.core.audit import run_audit
from watermark_ops.core.thresholds import StateThresholds
from watermark_ops.core.view import View

pytestmark = pytest.mark.timeout(300)


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_the_audit_reports_the_state_findings_as_warnings_with_the_summary(state_checkpoints, capsys):
    checkpoint = state_checkpoints["dedupe_ids"]
    report = run_audit(checkpoint, state_thresholds=StateThresholds(growing_batches=GROWING_BATCHES))
    assert report.status == "ok" and report.exit_code == 0  # what will hurt, not a broken watermark rule
    state = {f.rule: f for f in report.findings if f.rule.startswith("state_")}
    assert sorted(state) == ["state_growing", "state_unbounded"]
    assert {f.severity for f in state.values()} == {"warning"}
    assert state["state_unbounded"].file == f"{checkpoint}/state/0" and "dropDuplicates" in state["state_unbounded"].message
    document = report.to_dict()["state_store"]
    (op,) = document["operators"]
    assert (op["name"], op["bounded_by_watermark"], op["rows"], op["rows_source"]) == ("dedupe", False, 32, "files")
    assert document["bounded"] is False and document["rows"] == 32 and document["chain_length"] == op["chain_length"] >= 4
    assert [f["code"] for f in document["findings"]] == ["state_unbounded", "state_growing"]

    code, audited = _json(capsys, ["audit", checkpoint, "--json"])  # default thresholds: 10 batches to grow
    assert code == 0 and [f["code"] for f in audited["state_store"]["findings"]] == ["state_unbounded"]
    code, status = _json(capsys, ["status", checkpoint, "--json", "--max-lag", "none"])
    assert code == 0 and status["state"] in ("advancing", "idle")  # the watermark's state, as before
    assert status["state_store"]["rows"] == 32 and status["state_store"]["bounded"] is False
    code, without = _json(capsys, ["audit", checkpoint, "--json", "--no-state-store"])
    assert without["state_store"] is None and not any(f["rule"].startswith("state_") for f in without["findings"])
    main(["status", checkpoint])
    text = capsys.readouterr().out
    assert "state store 1 operator, 32 rows" in text and "NOT bounded by a watermark" in text and "state_unbounded" in text


def test_a_state_file_that_cannot_be_read_makes_the_audit_unreadable(state_checkpoints, tmp_path):
    checkpoint = copy_checkpoint(state_checkpoints["dedupe_ids"], tmp_path / "cp")
    delta = max((Path(checkpoint) / "state" / "0" / "0").glob("*.delta"), key=lambda p: int(p.stem))
    delta.write_bytes(delta.read_bytes()[:-10])  # no lz4 end block: a restart fails to load it
    report = run_audit(checkpoint)
    assert report.status == "unreadable" and report.exit_code == 2
    (finding,) = [f for f in report.findings if f.rule == "unreadable"]
    assert finding.file == str(delta) and finding.severity == "error"


def _requests(view: View) -> dict:
    return {k: view.requests[k] for k in ("list", "get", "head")}


def test_a_view_reads_the_state_once_per_head(state_checkpoints, tmp_path):
    checkpoint = copy_checkpoint(state_checkpoints["dedupe_ids"], tmp_path / "cp")
    root = Path(checkpoint)
    head = max(int(p.name) for p in (root / "offsets").iterdir() if p.name.isdigit())
    kept = tmp_path / "newest"  # the newest batch, as if Spark had not written it yet
    kept.mkdir()
    newest = [root / "offsets" / str(head), root / "commits" / str(head),
              *(root / "state" / "0").glob(f"*/{head + 1}.delta")]
    for path in newest:
        target = kept / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, target)

    first = advance(checkpoint, None, newest=10, state_store="rows")
    assert first.state_store.head_batch_id == head - 1 and first.state_store.depth == "rows"
    assert first.state_store.findings()[0].rule == "state_unbounded"
    # unchanged: the same requests as a look without the state
    again = advance(checkpoint, first, newest=10, state_store="rows")
    plain = advance(checkpoint, first, newest=10)
    assert again.state_store == first.state_store and _requests(again) == _requests(plain)
    assert again.state_store.state.operators[0].batches[-1].batch_id == head - 1
    # remembered across processes: the view's JSON keeps it, equal (nothing to write)
    stored = View.from_dict(json.loads(json.dumps(again.to_dict())))
    assert stored == again and stored.state_store == again.state_store
    # deeper (the audit after a sensor's look): read again at the same head
    full = advance(checkpoint, stored, newest=10, state_store="full")
    assert full.state_store.depth == "full" and full.state_store.state.operators[0].chain_length == head
    assert _requests(full)["list"] > _requests(plain)["list"]
    # Spark writes the next batch: read again, by the one look that sees it
    for path in newest:
        shutil.move(kept / path.relative_to(root), path)
    moved = advance(checkpoint, full, newest=10, state_store="rows")
    assert moved.state_store.head_batch_id == head and moved.state_store.state.operators[0].batches[-1].batch_id == head
    assert advance(checkpoint, moved, newest=10, state_store="rows").state_store is moved.state_store


def test_a_stateless_checkpoint_is_read_for_its_state_once(tmp_path):
    root = tmp_path / "cp"
    chain = [(0, 1_000), (1_000, 2_000)]
    cf.handmade_checkpoint(str(root), chain)
    first = advance(str(root), None, newest=10, state_store="full")
    assert first.state_store.state.has_state_folder is False and first.state_store.document()["operators"] == []
    cf.handmade_checkpoint(str(root), chain + [(2_000, 3_000)])  # a new batch
    moved = advance(str(root), first, newest=10, state_store="full")
    plain = advance(str(root), first, newest=10)
    # not read again: the same state, said of the new head (as a full audit of the new head says it)
    assert moved.head_batch_id == 2 and moved.state_store.state is first.state_store.state
    assert moved.state_store.head_batch_id == 2 and moved.state_store.document()["read_at_batch_id"] == 2
    assert _requests(moved) == _requests(plain)  # nothing more: a stateless query never gains state
