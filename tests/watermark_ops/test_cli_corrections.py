"""``watermark-ops corrections`` (its table and its JSON's exact shape), and the late rows that
``late`` and ``lateness`` split into recovered and dropped for good, on ``ledger_fixtures.build``'s
checkpoint with a corrections log written by hand (what the launcher appends)."""

from __future__ import annotations

import json

import pytest

from tests.watermark_ops import ledger_fixtures as lf
from tests.watermark_ops.core.test_corrections import correction, write_log
from watermark_ops.terminal import cli
from watermark_ops.core.times import iso_utc

HOUR, W1 = lf.HOUR, lf.WATERMARK_1


@pytest.fixture
def corrected(tmp_path, monkeypatch):
    """The checkpoint; run t1's newest write corrects rows 10 and 13's window (EWR) and a window of
    JFK no late row of it is in; an older write of t1 is not shown."""
    monkeypatch.setenv("COLUMNS", "200")
    checkpoint, _ = lf.build(tmp_path)
    write_log(checkpoint, [
        correction(W1 - 3 * HOUR, {"origin": "LGA"}, "t1", 1, write=1),
        correction(W1 - HOUR, {"origin": "EWR"}, "t1", 1, write=2, late_rows=2, emitted={"mean": 12.5},
                   corrected={"mean": 13.25}),
        correction(W1 - 3 * HOUR, {"origin": "JFK"}, "t1", 1, write=2, corrected={"mean": 4.0}),
    ])
    return str(checkpoint)


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_corrections_json_is_the_public_fields_in_the_order_made(capsys, corrected):
    code, out, _ = run(capsys, "corrections", corrected, "--json")
    assert code == 0
    assert json.loads(out) == {"corrections": [
        {"window_start_ms": W1 - HOUR, "window_end_ms": W1, "keys": {"origin": "EWR"}, "emitted": {"mean": 12.5},
         "corrected": {"mean": 13.25}, "late_rows": 2, "run": "t1", "batch_id": 1, "retracts": []},
        {"window_start_ms": W1 - 3 * HOUR, "window_end_ms": W1 - 2 * HOUR, "keys": {"origin": "JFK"}, "emitted": None,
         "corrected": {"mean": 4.0}, "late_rows": 1, "run": "t1", "batch_id": 1, "retracts": []},
    ]}


def test_corrections_table_shows_the_window_in_utc_the_keys_and_emitted_to_corrected(capsys, corrected, tmp_path):
    code, out, _ = run(capsys, "corrections", corrected)
    assert code == 0
    first = next(line for line in out.splitlines() if "origin=EWR" in line)
    assert f"{iso_utc(W1 - HOUR)} → {iso_utc(W1)}" in first and "mean: 12.5 → 13.25" in first and " t1 " in first
    assert "mean: - → 4" in out and "origin=LGA" not in out  # the older write of t1 is not shown
    assert "2 corrections, each run's newest write" in out
    code, out, _ = run(capsys, "corrections", tmp_path / "elsewhere")
    assert code == 0 and "no corrections" in out and json.loads(
        run(capsys, "corrections", tmp_path / "elsewhere", "--json")[1]) == {"corrections": []}


def test_late_and_lateness_split_the_late_rows_into_recovered_and_dropped(capsys, corrected):
    code, out, _ = run(capsys, "late", corrected, "--json")
    split = json.loads(out)["corrections"]
    assert (split["rows_late_recovered"], split["rows_late_dropped"], split["corrections"]) == (2, 4, 2)
    assert split["by_batch"] == {"0": {"recovered": 0, "dropped": 0}, "1": {"recovered": 2, "dropped": 2},
                                 "2": {"recovered": 0, "dropped": 2}}
    _, out, _ = run(capsys, "late", corrected)
    assert "6 late = 2 recovered (2 corrections) + 4 dropped for good" in out
    _, out, _ = run(capsys, "lateness", corrected, "--json")
    runs = {r["run_tag"]: r for r in json.loads(out)["runs"]}
    assert [(runs[t]["rows_late"], runs[t]["rows_late_recovered"], runs[t]["rows_late_dropped"],
             runs[t]["corrections"]) for t in ("t0", "t1", "t2")] == [(0, 0, 0, 0), (4, 2, 2, 2), (2, 0, 2, 0)]
    _, out, _ = run(capsys, "lateness", corrected)
    assert "t1: 4 late = 2 recovered (2 corrections) + 2 dropped for good" in out


def test_the_checkpoint_page_and_its_json_show_the_corrections_and_each_run_s_split(corrected, tmp_path):
    """The UI's data (``checkpoint_detail``, what ``/api/checkpoints/...`` returns) and its page
    (``checkpoint_page``), with the ledger's sink as the run pattern writes it and without one."""
    from watermark_ops.core.ledger import reconcile_run
    from watermark_ops.core.overview import checkpoint_detail
    from watermark_ops.core.thresholds import Thresholds
    from watermark_ops.render.html import checkpoint_page

    sink = tmp_path / "out_late"
    reconcile_run(corrected, "t1", sink=str(sink))
    reconcile_run(corrected, "t2", sink=str(sink))
    for late_sink in (str(sink), None):  # the sink's rows, or the replay's (none here: unknown)
        detail = json.loads(json.dumps(checkpoint_detail(corrected, Thresholds(), late_sink=late_sink)))
        assert [(c["window_start_ms"], c["keys"], c["run"]) for c in detail["corrections"]] == [
            (W1 - HOUR, {"origin": "EWR"}, "t1"), (W1 - 3 * HOUR, {"origin": "JFK"}, "t1")]
        assert "write" not in detail["corrections"][0]
        runs = {r["run_tag"]: r for r in detail["runs"]}
        if late_sink:
            assert [(runs[t]["rows_late"], runs[t]["rows_late_recovered"], runs[t]["rows_late_dropped"])
                    for t in ("t1", "t2")] == [(4, 2, 2), (2, 0, 2)]
        else:
            assert runs["t1"]["rows_late_recovered"] is None and runs["t1"]["corrections"] == 2
    page = checkpoint_page(checkpoint_detail(corrected, Thresholds(), late_sink=str(sink)), base="/wo", json_url="/j")
    table = page[page.index('<table id="corrections">'):]
    assert f"{iso_utc(W1 - HOUR)} → {iso_utc(W1)}" in table and "<code>origin=EWR</code>" in table
    assert "<code>mean</code>: 12.5 → 13.25" in table and "<code>mean</code>: - → 4.0" in table
    assert "2 recovered, 2 dropped" in page
