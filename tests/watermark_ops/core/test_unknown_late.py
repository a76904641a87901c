"""An unknown ledger is never green: a run whose batches have no replay (a job attached with its own
parsing and no pre-watermark function) has *unknown* late rows in every core result, never 0, with
the reason; a problem repeated per batch is one group with its batch range; the run pattern's check
warns about such a run, or fails it with ``fail_on_unknown_late``. On ``ledger_fixtures.build_unknown``."""

from __future__ import annotations

import json

import pytest

from tests.watermark_ops import ledger_fixtures as lf
from watermark_ops.core.ledger import (
    group_problems,
    id_ranges,
    judge_run,
    late_ledger,
    problem_lines,
    reconcile_run,
    with_ledger_rows,
)
from watermark_ops.core.log_formats import ReadProblem

WHY = "declares no pre-watermark function"
HINT = 'declare pre_watermark="module:function" on the run pattern'


@pytest.fixture
def unknown(tmp_path):
    checkpoint, _ = lf.build_unknown(tmp_path)
    return str(checkpoint)


def test_the_ledger_of_batches_without_a_replay_says_unknown_never_0(unknown):
    ledger = late_ledger(unknown)
    document = json.loads(json.dumps(ledger.to_dict()))
    assert document["late_rows_known"] is False and document["complete"] is False
    assert document["batches_not_replayed"] == [0, 1, 2]
    assert document["totals"]["rows_late"] is None and document["totals"]["rows_aggregated"] is None
    assert document["totals"]["late_rows_known"] is False
    assert [(b["rows_late"], b["rows_read"]) for b in document["batches"]] == [(None, None)] * 3
    reason = document["late_rows_unknown_reason"]
    assert reason.startswith("batches 0-2 not replayed: cannot be exact in Python: the job parses its csv input")
    assert WHY in reason and HINT in reason
    # Spark's own count is known without a replay: kept apart, never taken for rows.
    assert document["totals"]["late_partial_aggregates_spark"] == 3


def test_a_problem_repeated_per_batch_is_one_group_with_its_batch_range(unknown):
    ledger = late_ledger(unknown)
    assert len(ledger.problems) == 3  # one per batch, as found
    (group,) = ledger.to_dict()["problem_groups"]
    assert group["kind"] == "not_exact" and group["batch_ids"] == [0, 1, 2] and group["batches"] == "0-2"
    assert group["text"].startswith("batches 0-2: not_exact: cannot be exact in Python")
    assert group["text"].endswith("(3 files, first " + group["files"][0] + ")")
    assert group["files"][0].endswith("flights_0.jsonl") and len(group["files"]) == 3


def test_replay_records_that_say_why_they_are_not_exact_are_one_problem(unknown, tmp_path):
    """The launcher writes a record per batch saying why it could not replay it (a job that cannot
    be twinned): the run's late rows are unknown, and the reason is said once for all its batches."""
    records = [{"query_id": "5d9a862d-0000-4000-8000-000000000001", "batch_id": k, "replayed_by": "spark",
                "files": [f"file://{tmp_path}/landing/flights_{k}.jsonl"], "rows_read": 0, "late_rows": [],
                "problems": ["not twinned: the job called no withWatermark during the run"]} for k in range(3)]
    (tmp_path / "ck.replay.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    run = reconcile_run(unknown, "day-1")
    assert run["rows_late"] is None and run["late_rows_known"] is False
    assert run["late_rows_unknown_reason"] == ("batches 0-2 not replayed: the Spark replay was not exact: "
                                               "not twinned: the job called no withWatermark during the run")
    assert run["problems"] == [f"batches 0-2: replay_log: {unknown}: the Spark replay was not exact: not twinned: "
                               "the job called no withWatermark during the run"]


def test_grouping_keeps_distinct_problems_apart_and_names_ranges_with_gaps():
    same = [ReadProblem("not_exact", f"file:///landing/part_{i}.csv", "cannot be exact", i) for i in range(54)]
    one_file = [ReadProblem("no_late_rule", "/ck.progress.jsonl", "no late rule", i) for i in (3, 4, 9)]
    lines = problem_lines([*same, *one_file, ReadProblem("unreadable", "/ck/offsets/7", "I/O error", None),
                           ReadProblem("replay_log", "/ck", "batch 60: other files", 60)])
    assert lines == ["batches 0-53: not_exact: cannot be exact (54 files, first file:///landing/part_0.csv)",
                     "batches 3-4, 9: no_late_rule: /ck.progress.jsonl: no late rule",
                     "unreadable: /ck/offsets/7: I/O error",
                     "batch 60: replay_log: /ck: other files"]  # its "batch 60: " said once
    assert [g["batches"] for g in group_problems(same[:1])] == ["0"]
    assert id_ranges([7, 0, 1, 2, 3, 3]) == "0-3, 7" and id_ranges([]) == ""


def test_the_run_s_balance_and_progress_say_unknown_with_the_reason(unknown):
    run = json.loads(json.dumps(reconcile_run(unknown, "day-1")))
    assert run["rows_in"] == 16 and run["batch_ids"] == [0, 1, 2]
    assert run["rows_late"] is None and run["rows_aggregated"] is None and run["drop_rate"] is None
    assert run["late_by_partition"] is None and run["worst_late_by_ms"] is None
    assert run["late_rows_known"] is False and run["balanced"] is False
    assert run["late_rows_unknown_reason"].startswith("batches 0-2 not replayed: ") and HINT in run["late_rows_unknown_reason"]
    (problem,) = run["problems"]  # once, with its range: not once per batch
    assert problem.startswith("batches 0-2: not_exact: ")
    # collect_progress's figures, from the same ledger.
    report = with_ledger_rows({"batch_ids": [0, 1, 2], "input_rows": 16, "quarantined_by_reason": {}},
                              late_ledger(unknown, [0, 1, 2]))
    assert report["rows_late"] is None and report["drop_rate"] is None and report["late_rows_known"] is False
    assert report["late_rows_unknown_reason"] == run["late_rows_unknown_reason"]
    # A run that executed no batch dropped nothing: known, 0.
    empty = with_ledger_rows({"batch_ids": [], "input_rows": 0, "quarantined_by_reason": {}}, None)
    assert (empty["rows_late"], empty["late_rows_known"]) == (0, True)


def test_a_replayed_run_stays_known(tmp_path):
    checkpoint, _ = lf.build(tmp_path)
    run = reconcile_run(str(checkpoint), "t1")
    assert run["late_rows_known"] is True and run["late_rows_unknown_reason"] is None
    assert run["rows_late"] == len(lf.LATE_IDS[1]) and run["batches_not_replayed"] == []
    assert judge_run(run)["late_rows_known"] is True and judge_run(run, fail_on_unknown_late=True)["failure"] is None


def test_the_check_warns_about_unknown_late_rows_and_fails_them_on_demand(unknown):
    run = reconcile_run(unknown, "day-1")
    verdict = judge_run(run)
    assert verdict["failure"] is None and verdict["late_rows_known"] is False and verdict["rows_late"] is None
    (warning,) = verdict["warnings"]
    assert warning.startswith("run day-1: late rows unknown: batches 0-2 not replayed: ") and HINT in warning
    strict = judge_run(run, fail_on_unknown_late=True)
    assert strict["warnings"] == [] and strict["fail_on_unknown_late"] is True
    assert strict["failure"].startswith("run day-1: late rows unknown: batches 0-2 not replayed: ")
    assert strict["failure"].endswith("(fail_on_unknown_late=True)")
    # An unknown ledger no longer hides behind the quarantine check's pass: the reason is named either way.
    assert verdict["late_rows_unknown_reason"] == run["late_rows_unknown_reason"]
    # Both failures at once are both named.
    both = judge_run({**run, "rows_quarantined": 15, "quarantined_by_reason": {"bad": 15}}, 0.5, True)
    assert "set aside 15 of its 16 input rows" in both["failure"] and "late rows unknown" in both["failure"]


def test_the_lateness_report_says_unknown_and_why_there_is_no_advice(unknown):
    from watermark_ops.core.lateness import lateness_report

    document = json.loads(json.dumps(lateness_report(unknown).to_dict()))
    (run,) = document["runs"]
    assert run["rows_late"] is None and run["drop_rate"] is None and run["late_rows_known"] is False
    assert run["late_rows_unknown_reason"].startswith("batches 0-2 not replayed: ")
    assert document["late_rows_unknown_reason"] == run["late_rows_unknown_reason"]
    (problem,) = document["problems"]
    assert WHY in problem and "recorded after each run" not in problem and "pre_watermark" in problem



def test_the_checkpoint_page_says_unknown_and_why(unknown):
    import re

    from watermark_ops.render import html as render_html
    from watermark_ops.core.overview import checkpoint_detail
    from watermark_ops.core.thresholds import Thresholds

    detail = checkpoint_detail(unknown, Thresholds())
    (run,) = json.loads(json.dumps(detail))["runs"]
    assert run["rows_late"] is None and run["drop_rate"] is None and run["late_rows_known"] is False
    assert WHY in run["late_rows_unknown_reason"] and "pre_watermark" in run["late_rows_unknown_reason"]
    page = render_html.checkpoint_page(detail, base="/watermark-ops", json_url="/json")
    table = re.search(r'<table id="runs">.*?</table>', page, re.S).group(0)
    assert re.findall(r'<td class="num ledger">([^<]*)</td>', table) == ["unknown"]
    assert "Late rows unknown (never 0) for run <code>day-1</code>" in page and WHY in page
