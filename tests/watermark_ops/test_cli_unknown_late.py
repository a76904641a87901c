"""The terminal face of an unknown ledger: ``watermark-ops late`` and ``lateness`` on batches that have
no replay (a job attached with its own parsing and no pre-watermark function) say *unknown*, never
0, in text and JSON, and print a problem repeated per batch once, with its batch range."""

from __future__ import annotations

import json

import pytest

from tests.watermark_ops import ledger_fixtures as lf
from watermark_ops.terminal import cli

WHY = "declares no pre-watermark function"


@pytest.fixture
def unknown(tmp_path):
    checkpoint, _ = lf.build_unknown(tmp_path)
    return str(checkpoint)


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, " ".join(out.split()), err


def test_late_says_unknown_and_prints_the_repeated_problem_once(capsys, unknown):
    code, out, flat, err = run(capsys, "late", unknown)
    assert code == 2  # not a green ledger
    assert "late rows unknown: batches 0-2 not replayed; Spark counted 3 late partial aggregates" in flat
    assert "0 late rows" not in flat and "late rows of" not in flat and "0 set aside" not in flat
    assert out.count("unknown") >= 3 + 2  # each batch's cell, the caption, the reason
    assert flat.count(WHY) == 1  # the reason once, not once per batch
    assert "late rows unknown: batches 0-2 not replayed: cannot be exact in Python" in flat
    problems = [line for line in err.splitlines() if "not_exact" in line]
    assert len(problems) == 1 and problems[0].startswith("watermark-ops late: batches 0-2: not_exact: ")
    assert "(3 files, first file://" in problems[0]


def test_late_names_the_replayed_batches_figures_as_theirs_beside_the_unknown_ones(capsys, tmp_path):
    checkpoint, _ = lf.build(tmp_path)
    log = tmp_path / "ck.progress.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    records[0]["late_rule"] = {**records[0]["late_rule"], "inputs": lf.OWN_PARSING}  # batch 0: no replay
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, _, flat, err = run(capsys, "late", checkpoint)
    assert code == 2  # the batch's problem is an error, as any not_exact source's
    late = sum(len(ids) for ids in lf.LATE_IDS.values())
    assert f"late rows unknown: batch 0 not replayed; in the replayed batches 1-2: {late} late rows of 14 read" in flat
    assert "batch 0: not_exact: " in err
    document = json.loads(run(capsys, "late", checkpoint, "--json")[1])
    assert document["totals"]["rows_late"] is None and document["totals"]["rows_late_replayed"] == late
    assert document["totals"]["replayed_batch_ids"] == [1, 2] and document["batches_not_replayed"] == [0]


def test_late_json_says_unknown_never_0(capsys, unknown):
    code, out, _, _ = run(capsys, "late", unknown, "--json")
    document = json.loads(out)
    assert code == 2 and document["late_rows_known"] is False and document["totals"]["rows_late"] is None
    assert document["late_rows_unknown_reason"].startswith("batches 0-2 not replayed: ")
    assert [b["rows_late"] for b in document["batches"]] == [None, None, None]
    (group,) = document["problem_groups"]
    assert group["batches"] == "0-2" and group["text"].startswith("batches 0-2: not_exact: ")


def test_lateness_says_unknown_with_the_reason_once(capsys, unknown):
    code, out, flat, _ = run(capsys, "lateness", unknown)
    assert code == 0
    row = next(line for line in out.splitlines() if "day-1" in line and "│" in line)
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[4:7] == ["16", "unknown", "unknown"] and cells[7] == "3"  # input rows, late rows, rate, Spark's
    assert "late rows unknown for runs day-1: batches 0-2 not replayed: " in flat
    assert "recorded after each run" not in flat and WHY in flat
    code, out, _, _ = run(capsys, "lateness", unknown, "--json")
    (document_run,) = json.loads(out)["runs"]
    assert document_run["rows_late"] is None and document_run["drop_rate"] is None
    assert document_run["late_rows_known"] is False and "batches 0-2 not replayed" in document_run["late_rows_unknown_reason"]
