"""Allowed lateness and corrections, pure: the corrections log built by hand (each run's newest
write, the standing correction of each window and keys), the recoverable boundary, the files of a
window, which late rows the corrections recovered, the run's balance with them, and the asset
event's extra. No Spark: the log is what the launcher appends, written line by line here."""

from __future__ import annotations

import json

import pytest

from tests.watermark_ops import ledger_fixtures as lf
from watermark_ops.core.ledger import reconcile_run
from watermark_ops.core.ledger.corrections import (
    allowed_lateness_ms,
    corrections_log_path,
    files_for_windows,
    read_corrections,
    recoverable,
    split_late,
    standing,
)
from watermark_ops.core.ledger.recovered import corrections_event, recovery, split_recovered

HOUR = lf.HOUR
W1 = lf.WATERMARK_1


def correction(start, keys, run, batch_id, write, late_rows=1, corrected=None, emitted=None):
    return {"window_start_ms": start, "window_end_ms": start + HOUR, "keys": keys, "emitted": emitted,
            "corrected": corrected or {"mean": 2.0}, "late_rows": late_rows, "run": run, "batch_id": batch_id,
            "write": write}


def write_log(checkpoint, records, extra_lines=()):
    lines = [json.dumps(r) for r in records] + list(extra_lines)
    with open(corrections_log_path(str(checkpoint)), "w") as handle:
        handle.write("".join(line + "\n" for line in lines))


def test_read_corrections_keeps_each_run_s_newest_write_in_the_order_made(tmp_path):
    checkpoint = tmp_path / "ck"
    assert read_corrections(str(checkpoint)) == ([], [])  # no log: nothing, no problem
    records = [correction(0, {"k": "a"}, "r1", 1, write=10), correction(HOUR, {"k": "a"}, "r1", 1, write=10),
               correction(0, {"k": "b"}, "r2", 3, write=20),
               correction(2 * HOUR, {"k": "a"}, "r1", 1, write=30)]  # r1 run again: its new write replaces both
    write_log(checkpoint, records, ["{not json", json.dumps({"window_start_ms": "x"})])
    kept, problems = read_corrections(str(checkpoint))
    assert [(c["run"], c["window_start_ms"], c["write"]) for c in kept] == [("r2", 0, 20), ("r1", 2 * HOUR, 30)]
    assert len(problems) == 2 and problems[0].startswith(f"{checkpoint}.corrections.jsonl:5: expected one JSON")
    assert "ck.corrections.jsonl:6: expected a correction" in problems[1]


def test_standing_is_the_newest_correction_of_each_window_and_keys():
    first = correction(HOUR, {"k": "a"}, "r1", 1, 1, corrected={"mean": 1.5})
    other_keys = correction(HOUR, {"k": "b"}, "r1", 1, 1)
    later = correction(HOUR, {"k": "a"}, "r2", 4, 2, corrected={"mean": 1.75})
    earlier_window = correction(0, {"k": "a"}, "r2", 4, 2)
    assert standing([first, other_keys, later, earlier_window]) == [earlier_window, later, other_keys]


def test_a_row_late_by_exactly_the_allowed_lateness_is_not_recoverable():
    allowed = allowed_lateness_ms("6 hours")
    assert allowed == 6 * HOUR and allowed_lateness_ms(None) is None and allowed_lateness_ms(" ") is None
    with pytest.raises(ValueError, match="expected an interval"):
        allowed_lateness_ms("six hours")
    rows = [{"late_by_ms": allowed - 1, "window_end_ms": HOUR}, {"late_by_ms": allowed, "window_end_ms": HOUR},
            {"late_by_ms": 0, "window_end_ms": None}]  # no window: nothing to correct
    kept, dropped = split_late(rows, allowed)
    assert kept == rows[:1] and dropped == rows[1:]
    assert not recoverable(0, HOUR, None)  # no allowed lateness: every late row is a final drop


def test_files_for_windows_gives_every_file_of_a_batch_with_a_row_in_a_window():
    replays = {2: {"files": ["c", "d"], "event_times_ms": [5 * HOUR]},
               0: {"files": ["a"], "event_times_ms": [HOUR - 1]},
               1: {"files": ["b", "a"], "event_times_ms": [HOUR, 3 * HOUR]}}
    assert files_for_windows(replays, [(0, HOUR)]) == ["a"]  # the window's end is not in it
    assert files_for_windows(replays, [(HOUR, 2 * HOUR), (5 * HOUR, 6 * HOUR)]) == ["b", "a", "c", "d"]
    assert files_for_windows(replays, [(10 * HOUR, 11 * HOUR)]) == []


def test_a_late_row_is_recovered_by_a_standing_correction_of_its_window_keys_and_no_earlier_batch():
    row = {"batch_id": 3, "window_start_ms": HOUR, "window_end_ms": 2 * HOUR, "event": {"k": "a", "v": 1}}
    no_key_column = {**row, "event": {"v": 1}}
    same = correction(HOUR, {"k": "a"}, "r", 3, 1)
    assert split_recovered([row, no_key_column], [same]) == ([row, no_key_column], [])
    assert split_recovered([row], [correction(HOUR, {"k": "b"}, "r", 3, 1)]) == ([], [row])  # other keys
    assert split_recovered([row], [correction(0, {"k": "a"}, "r", 3, 1)]) == ([], [row])  # other window
    # made by an earlier run (before the row was dropped): it cannot hold it
    assert split_recovered([row], [correction(HOUR, {"k": "a"}, "r0", 2, 1)]) == ([], [row])
    assert split_recovered([row], [correction(HOUR, {"k": "a"}, "r9", 7, 2)]) == ([row], [])  # a later run's
    assert recovery([row], []) == {"rows_late_recovered": None, "rows_late_dropped": None, "corrections": None}
    assert recovery(None, [same], "r") == {"rows_late_recovered": None, "rows_late_dropped": None, "corrections": 1}


def test_the_run_s_late_rows_are_recovered_plus_dropped_for_good(tmp_path):
    """``lf.build``: run t1 (batch 1) drops rows 10 and 13 (window [W1-1h, W1), EWR), 11 ([W1-2h,
    W1-1h), JFK) and 17 ([W1-3h, W1-2h), LGA)."""
    checkpoint, _ = lf.build(tmp_path)
    log = tmp_path / "ck.progress.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for record, rows in zip(records, (2, 11, 3)):  # Spark's input rows, as a real run records them
        record["input_rows"] = rows
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    plain = reconcile_run(str(checkpoint), "t1")  # no corrections log: no split, as before
    assert plain["rows_late"] == 4 and plain["rows_late_recovered"] is None and plain["corrections"] is None
    assert plain["balance"] == "11 = 2 aggregated + 4 late + 5 set aside: balanced"
    write_log(checkpoint, [
        correction(W1 - 3 * HOUR, {"origin": "LGA"}, "t1", 1, write=1),   # t1's first write: replaced below
        correction(W1 - 2 * HOUR, {"origin": "JFK"}, "t0", 0, write=1),   # made before row 11 was dropped
        correction(W1 - HOUR, {"origin": "EWR"}, "t1", 1, write=2, late_rows=2),  # holds rows 10 and 13
        correction(W1 - 3 * HOUR, {"origin": "JFK"}, "t1", 1, write=2),  # other keys than row 17's
    ])
    run = json.loads(json.dumps(reconcile_run(str(checkpoint), "t1")))
    assert (run["rows_late"], run["rows_late_recovered"], run["rows_late_dropped"], run["corrections"]) == (4, 2, 2, 2)
    assert run["rows_late_recovered"] + run["rows_late_dropped"] == run["rows_late"] and run["balanced"]
    assert run["balance"] == ("11 = 2 aggregated + 4 late (2 recovered by 2 corrections, 2 dropped for good) "
                              "+ 5 set aside: balanced")
    later = reconcile_run(str(checkpoint), "t2")  # rows 20 and 22: no correction holds them
    assert (later["rows_late"], later["rows_late_recovered"], later["rows_late_dropped"], later["corrections"]) \
        == (2, 0, 2, 0)


def test_the_asset_event_names_the_run_s_corrected_windows_once_each():
    fixes = [correction(HOUR, {"k": "a"}, "r1", 1, 1), correction(HOUR, {"k": "a"}, "r2", 4, 2, late_rows=3),
             correction(0, {"k": "b"}, "r2", 4, 2), correction(HOUR, {"k": "a"}, "r2", 4, 2)]
    extra = corrections_event("s3://lake/ck", "r2", fixes)
    assert extra == {"corrected_windows": [{"window_start_ms": HOUR, "window_end_ms": 2 * HOUR, "keys": {"k": "a"}},
                                           {"window_start_ms": 0, "window_end_ms": HOUR, "keys": {"k": "b"}}],
                     "run": "r2", "checkpoint": "s3://lake/ck", "corrections": 3, "late_rows": 5}
    assert corrections_event("s3://lake/ck", "r3", fixes) is None  # nothing corrected: no event
