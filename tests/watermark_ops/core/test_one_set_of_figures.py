"""One set of figures (issue 36 item 4): what the run pattern's ``collect_progress`` pushes is made
from one read of the late-row ledger, so each batch's rows set aside sum to the run's, and the
lateness report nested in the same XCom gives the run the top level's late rows and drop rate;
``lateness --json`` names what it read, never the checkpoint as a landing folder. On
``ledger_fixtures``: three batches of one run, the job's own reasons counted by the ledger (no
quarantine query of the package)."""

from __future__ import annotations

import json

from tests.watermark_ops import ledger_fixtures as lf
from watermark_ops.terminal import cli
from watermark_ops.core.ledger import reconcile_run
from watermark_ops.core.run_figures import collect_run


def _one_run(tmp_path, tag="day-1"):
    """``lf.build``'s checkpoint, its three batches one run ``tag`` with Spark's input rows recorded."""
    checkpoint, landing = lf.build(tmp_path)
    log = tmp_path / "ck.progress.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for record, rows in zip(records, (2, 11, 3)):
        record.update(run_id="r", run_tag=tag, input_rows=rows, timestamp_ms=1_795_449_686_774 + record["batch_id"])
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(checkpoint), str(landing)


def test_each_batch_s_rows_set_aside_sum_to_the_run_s_from_the_ledger(tmp_path):
    checkpoint, landing = _one_run(tmp_path)
    report = collect_run(checkpoint, "day-1", landings=[landing])
    run = reconcile_run(checkpoint, "day-1")
    assert report["quarantine_source"] == run["quarantine_source"] == "ledger"
    assert report["quarantined_rows"] == run["rows_quarantined"] == sum(lf.QUARANTINED_1.values())
    assert [b["quarantined_rows"] for b in report["batches"]] == [0, sum(lf.QUARANTINED_1.values()), 0]
    assert sum(b["quarantined_rows"] for b in report["quarantine_batches"]) == report["quarantined_rows"]


def test_a_quarantine_query_s_rows_are_not_put_on_the_main_query_s_batches(tmp_path):
    checkpoint, landing = _one_run(tmp_path)
    counts = {"rows": 3, "bad_event_time": 3}
    (tmp_path / "ck_quarantine.progress.jsonl").write_text("".join(json.dumps(
        {"batch_id": k, "run_tag": "day-1", "input_rows": 3, "observed_metrics": {"quarantine": counts}}) + "\n"
        for k in (7, 8)))
    report = collect_run(checkpoint, "day-1", landings=[landing], lateness=False)
    assert report["quarantine_source"] == "quarantine_query" and report["quarantined_rows"] == 6
    assert [b["quarantined_rows"] for b in report["batches"]] == [None, None, None]  # not counted by these batches
    assert report["quarantine_batches"] == [{"batch_id": 7, "quarantined_rows": 3}, {"batch_id": 8, "quarantined_rows": 3}]


def test_the_nested_lateness_run_equals_the_top_level(tmp_path):
    checkpoint, landing = _one_run(tmp_path)
    report = json.loads(json.dumps(collect_run(checkpoint, "day-1", landings=[landing])))
    (nested,) = report["lateness"]["runs"]
    assert report["rows_late"] == sum(len(ids) for ids in lf.LATE_IDS.values())
    assert (nested["rows_late"], nested["drop_rate"]) == (report["rows_late"], report["drop_rate"])
    assert nested["input_rows"] == report["input_rows"] == 16 and nested["late_rows_known"] is True


def test_the_lateness_json_names_what_it_read_not_the_checkpoint_as_a_landing(tmp_path, capsys):
    checkpoint, _ = lf.build_unknown(tmp_path)
    (tmp_path / "ck.replay.jsonl").write_text("".join(json.dumps(
        {"query_id": "5d9a862d-0000-4000-8000-000000000001", "batch_id": k, "replayed_by": "spark",
         "files": [f"file://{tmp_path}/landing/f_{k}.csv"], "rows_read": 1, "late_rows": [],
         "event_times_ms": [lf.T0 + k * lf.HOUR]}) + "\n" for k in range(3)))
    assert cli.main(["lateness", str(checkpoint), "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)["inputs"]
    assert item["source"] == "spark_replay" and item["landing"] is None
    assert item["read_from"] == f"{checkpoint}.replay.jsonl"
