"""The progress-log reader: good lines kept, bad lines named and kept aside, runs summarised."""

from __future__ import annotations

import json

from watermark_ops.core.progress import progress_log_path, read_progress_log, records_of_run, summarize_run


def _line(batch_id, tag, **fields):
    return json.dumps({"batch_id": batch_id, "run_tag": tag, **fields})


def test_bad_lines_are_named_and_the_rest_is_read(tmp_path):
    log = tmp_path / "cp.progress.jsonl"
    log.write_text("\n".join([
        _line(0, "a", input_rows=5, watermark_ms=0, state_rows_removed=1),
        "{cut",
        "[" * 100_000 + "]" * 100_000,  # deep nesting: not a RecursionError
        json.dumps({"no_batch_id": 1}),
        "",
        _line(1, "a", input_rows=0, watermark_ms=7000, executed=False),
        _line(2, "b", input_rows=3, watermark_ms=9000, rows_dropped_by_watermark=2,
              observed_metrics={"quarantine": {"rows": 1}}),
    ]) + "\n")
    read = read_progress_log(str(log))
    assert [r["batch_id"] for r in read.records] == [0, 1, 2]
    assert [p.split(": ", 1)[0] for p in read.problems] == [f"{log}:2", f"{log}:3", f"{log}:4"]
    assert "nested too deeply" in read.problems[1] and "integer batch_id" in read.problems[2]
    assert read_progress_log(str(tmp_path / "missing.jsonl")).records == []

    run_a = summarize_run(records_of_run(read, "a"))
    assert run_a["batch_ids"] == [0] and run_a["windows_emitted"] == 1  # batch 1 ran no batch
    run_b = summarize_run(records_of_run(read, "b"))
    assert (run_b["last_watermark_ms"], run_b["late_partial_aggregates_spark"], run_b["quarantined_rows"]) == (9000, 2, 1)


def test_the_log_lives_beside_the_checkpoint():
    assert progress_log_path("/data/cp/") == "/data/cp.progress.jsonl"
    assert progress_log_path("s3://bucket/cp") == "s3://bucket/cp.progress.jsonl"


def test_quarantined_rows_are_reported_per_reason(tmp_path):
    """run_report sums the quarantine query's observed metrics per reason, for this run only."""
    from watermark_ops.core.progress import run_report

    counts = {"rows": 6, "malformed_record": 2, "null_event_time": 4, "future_event_time": 0}
    (tmp_path / "ck.progress.jsonl").write_text("\n".join([
        _line(0, "a", input_rows=9, watermark_ms=5000),
        _line(1, "a", input_rows=0, watermark_ms=5000),
    ]) + "\n")
    (tmp_path / "ck_quarantine.progress.jsonl").write_text("\n".join([
        _line(0, "earlier", input_rows=4, observed_metrics={"quarantine": {**counts, "rows": 9, "malformed_record": 9}}),
        _line(1, "a", input_rows=9, observed_metrics={"quarantine": counts}),
        _line(2, "a", input_rows=1, observed_metrics={"quarantine": {**counts, "rows": 1, "malformed_record": 1,
                                                                      "null_event_time": 0}}),
        _line(3, "a", input_rows=0, executed=False, observed_metrics={"quarantine": counts}),
        _line(4, "a", input_rows=0, observed_metrics={}),  # a no-data batch observes nothing
    ]) + "\n")
    report = run_report(str(tmp_path / "ck"), "a")
    assert report["quarantined_by_reason"] == {"malformed_record": 3, "null_event_time": 4, "future_event_time": 0}
    assert report["quarantined_rows"] == 7 == sum(report["quarantined_by_reason"].values())
    assert summarize_run([])["quarantined_by_reason"] == {}
    assert summarize_run(iter(records_of_run(read_progress_log(str(tmp_path / "ck_quarantine.progress.jsonl")), "a"))
                         )["quarantined_by_reason"]["malformed_record"] == 3  # any iterable, read once


def test_a_local_log_read_in_pieces_gives_what_a_whole_read_gives(tmp_path, monkeypatch):
    """The audit's read of a local log (a few fields, in pieces of one reused buffer) against the
    same log read whole through fsspec: the same records, problems (line numbers from the start),
    end and size, whatever the piece size; a line longer than a piece, a bad line and a last
    line without its newline included."""
    from watermark_ops.core import progress

    fields = ("query_id", "run_id", "requested_conf")
    lines = [json.dumps({"batch_id": i, "query_id": "q", "run_id": f"r{i // 3}", "requested_conf": {"k": str(i)},
                         "ignored": "x" * (i * 37 % 300)}) for i in range(40)]
    logs = {
        "records only": "\n".join(lines) + "\n",
        "a long line": "\n".join(lines[:5] + [json.dumps({"batch_id": 99, "pad": "y" * 5000})] + lines[5:]) + "\n",
        "a bad line": "\n".join(lines[:20] + ["{cut", "", "\r"] + lines[20:]) + "\n",
        "a last line being written": "\n".join(lines) + "\n" + lines[0][:25],
        "a last record without its newline": "\n".join(lines),
        "empty": "",
    }
    whole_reads = []
    real_whole = progress._Reader.whole
    monkeypatch.setattr(progress._Reader, "whole", lambda self: whole_reads.append(self.path) or real_whole(self))
    for piece in (64, 1000, progress.PIECE_BYTES):
        monkeypatch.setattr(progress, "PIECE_BYTES", piece)
        for name, text in logs.items():
            log = tmp_path / f"{name}.jsonl"
            log.write_text(text)
            whole_reads.clear()
            local = read_progress_log(str(log), fields=fields)
            # in pieces only, unless a line is not a record or the last one has no newline (then read whole)
            assert (whole_reads == []) == (name in ("records only", "a long line", "empty")), (piece, name)
            whole = read_progress_log(f"file://{log}", fields=fields)
            assert [r["batch_id"] for r in local.records] == [r["batch_id"] for r in whole.records], (piece, name)
            assert local.records == whole.records and (local.end_offset, local.marker) == (whole.end_offset, whole.marker)
            assert [p.removeprefix(local.location) for p in local.problems] == \
                   [p.removeprefix(whole.location) for p in whole.problems]  # ":<line>: <what>"
    assert len(read_progress_log(str(tmp_path / "a bad line.jsonl"), fields=fields).problems) == 1
