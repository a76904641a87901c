"""A team's session-window job (``tests/spells_project/``: consecutive days of one weather as one
spell, ``session_window(date, "1 day")``, over JSON lines, Seattle's real weather of November and
December 2012), attached with no window declared, from the wheel, through its DAG: three weekly
runs on spark-submit and on Spark Connect.

A day of 10 mm of rain or more arrives 4 days late. The rain of 21 November 2012 lands in the second
run, after the first run wrote the rain spells on either side of it ([18, 21) and [22, 23)): Spark
drops it (its one-row session ended at the watermark) and never joins them; with 30 days allowed,
the correction is the one spell [18, 25) that retracts the three Spark wrote. The spell of 28
November to 4 December is written in two touching parts (its 30 November arrives late but on time
for its one-row session, after [28, 30) was written): a second correction, with no late row. The third run lands a
day in the station's old date format, which the job's ``unreadable_days`` query keeps (no reason
column). The job appends one line per run to ``output_runs.txt`` after its queries end.

* ``test_the_replay_matches_the_sink_*``: the team's pandas replay equals the sink, spell for spell,
  with the batch that wrote it (this holds whatever the package does);
* ``test_the_package_agrees_with_the_replay``: the package's late rows, per-run figures, retracting
  corrections, quarantine by query name and the epilogue once per run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import project_replays as shared

pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "tests" / "spells_project"
DAG_ID = "weather_spells"
DATES = ("2012-11-25", "2012-12-02", "2012-12-09")  # each runs the week that ends on it
CONFS = {"2012-12-09": {"old_format": ["2012-12-05"]}}
DAY_MS = 86_400_000


def _project(root: Path, wheel: Path, launch: str) -> dict:
    made = shared.three_runs(root, wheel, PROJECT, DAG_ID, "SPELLS", launch, DATES, CONFS, connect=launch == "connect")
    checkpoint = made["home"] / "checkpoints" / "spells"
    code, replayed, said = shared.replay(made, PROJECT / "replay.py", made["home"] / "landing", checkpoint,
                                         made["home"] / "output")
    return {**made, "checkpoint": checkpoint, "replay_code": code, "replay": replayed, "replay_said": said,
            "facts": shared.facts(made, DAG_ID, checkpoint)}


@pytest.fixture(scope="module")
def submitted(tmp_path_factory, wheel):
    return _project(tmp_path_factory.mktemp("spells-submit"), wheel, "submit")


@pytest.fixture(scope="module")
def connected(tmp_path_factory, wheel, connect_server):
    return _project(tmp_path_factory.mktemp("spells-connect"), wheel, "connect")


def _ms(day: str) -> int:
    from datetime import datetime, timezone

    return int(datetime.fromisoformat(day).replace(tzinfo=timezone.utc).timestamp() * 1000)


def _replay_matches(project: dict) -> None:
    assert (project["home"] / "output" / "_spark_metadata").is_dir(), [d.stdout[-2000:] for d in project["done"]]
    assert project["replay_code"] == 0, project["replay_said"]
    replayed = project["replay"]
    assert [(r["date"], r["weather"]) for r in replayed["late_rows"]] == [("2012-11-21", "rain")]
    # the late day joins two rain spells the first run wrote: a correction retracting what Spark wrote
    joined, split = replayed["corrections"]
    assert (joined["window_start_ms"], joined["window_end_ms"]) == (_ms("2012-11-18"), _ms("2012-11-25"))
    assert [(r["window_start_ms"], r["window_end_ms"], r["batch"]) for r in joined["retracts"]] == [
        (_ms("2012-11-18"), _ms("2012-11-21"), 1), (_ms("2012-11-22"), _ms("2012-11-23"), 1),
        (_ms("2012-11-23"), _ms("2012-11-25"), 3)]
    assert [r["date"] for r in replayed["merging_late_rows"]] == ["2012-11-21"]
    # and a spell Spark wrote in two touching parts (the late-arriving 30 November was on time for its
    # session, but a written session is final): no late row, yet the spells over every row differ
    assert (split["window_start_ms"], split["window_end_ms"], split["late_rows"]) == (
        _ms("2012-11-28"), _ms("2012-12-05"), [])
    assert [(r["window_start_ms"], r["window_end_ms"]) for r in split["retracts"]] == [
        (_ms("2012-11-28"), _ms("2012-11-30")), (_ms("2012-11-30"), _ms("2012-12-05"))]
    assert replayed["rows_bad"] == 1


def test_the_replay_matches_the_sink_under_spark_submit(submitted):
    _replay_matches(submitted)


def test_the_replay_matches_the_sink_on_spark_connect(connected):
    _replay_matches(connected)


def _sink_sessions(project: dict) -> dict[tuple, dict]:
    import pandas as pd

    sink = pd.read_parquet(project["home"] / "output")
    return {(int(pd.Timestamp(r.window_start).value // 10**6), int(pd.Timestamp(r.window_end).value // 10**6),
             r.weather): {"days": int(r.days), "precipitation_mm": float(r.precipitation_mm)}
            for r in sink.itertuples()}


def _agrees(project: dict) -> None:
    """The package's faces against the replay (what the package is being built to give)."""
    facts, replayed, done = project["facts"], project["replay"], project["done"]
    assert [d.returncode for d in done] == [0, 0, 0], done[-1].stdout[-3000:] + done[-1].stderr[-3000:]
    # the epilogue ran once per run: not in the batch twin, not twice
    assert len((project["home"] / "output_runs.txt").read_text().splitlines()) == 3
    # late: each late row with its one-row session [ts, ts + 1 day) as the window it was dropped from
    assert "error" not in facts["late"], facts["late"]
    late = {shared.row_key(r): shared.windows_of(r) for r in facts["late"]["late_rows"]}
    assert late == {shared.row_key(r): shared.windows_of(r) for r in replayed["late_rows"]}
    assert all(e - s == DAY_MS for windows in late.values() for s, e in windows)
    runs = shared.runs(facts)
    assert len(runs) == 3
    by_run = shared.late_by_run(runs, replayed["late_rows"], project["home"] / "landing")
    lateness = {r.get("run_tag"): r for r in facts["lateness"].get("runs", [])}
    for i, (run_id, xcom, state) in enumerate(runs):
        assert {t: s for t, s in state.items() if t != "announce_corrections"} == dict.fromkeys(
            [t for t in state if t != "announce_corrections"], "success"), (run_id, state)
        ledger, mine = xcom["late_ledger"], by_run[run_id]
        figures = {"rows_late": len(mine), "window_drops": len(mine), "rows_late_partly": 0,
                   "rows_late_recovered": len(mine), "rows_late_dropped": 0}
        assert {k: ledger.get(k) for k in figures} == figures, (run_id, ledger)
        # a run with a late row corrects its spell; the third run also mends the spell Spark wrote in two parts
        assert (ledger["corrections"] or 0) >= (1 if mine else 0), (run_id, ledger)
        assert {k: lateness[ledger["run_tag"]].get(k) for k in figures} == figures, lateness.get(ledger["run_tag"])
        # the quarantine query without a reason column: its rows set aside under its query name, with a record
        if i == 2:
            assert ledger["quarantined_by_reason"] == {"unreadable_days": 1}, ledger
            assert "12/05/2012" in json.dumps(ledger), ledger
        else:
            assert not ledger.get("quarantined_by_reason"), ledger
    # the corrections table beside the sink: the job's own split window columns as timestamps, the
    # grouping key only, and each retraction before its replacement
    import pandas as pd

    table = pd.read_parquet(project["home"] / "output_corrections")
    assert str(table["window_start"].dtype).startswith("datetime64") and str(table["window_end"].dtype).startswith(
        "datetime64"), table.dtypes
    assert "weather" in table.columns and not any(c.startswith("session") for c in table.columns), table.columns
    assert set(table["correction"]) == {"retraction", "replacement"}, table
    # corrections: applied in order to the sink (remove what each retracts, add the corrected spell),
    # the sink becomes the spells over every landed row
    assert "error" not in facts["corrections"], facts["corrections"]
    sessions = _sink_sessions(project)
    for c in facts["corrections"]["corrections"]:
        assert set(c["keys"]) == {"weather"}, c
        weather = c["keys"]["weather"]
        for r in c["retracts"]:
            assert sessions.pop((r["window_start_ms"], r["window_end_ms"], weather)) == {
                k: r["values"][k] for k in ("days", "precipitation_mm")}, (c, r)
        sessions[(c["window_start_ms"], c["window_end_ms"], weather)] = {
            k: c["corrected"][k] for k in ("days", "precipitation_mm")}
    truth = {(s["window_start_ms"], s["window_end_ms"], s["keys"]["weather"]): s["values"]
             for s in replayed["sessions_over_every_row"]}
    assert sessions == truth
    want = {(c["window_start_ms"], c["keys"]["weather"]): {(r["window_start_ms"], r["window_end_ms"])
                                                           for r in c["retracts"]} for c in replayed["corrections"]}
    assert {(c["window_start_ms"], c["keys"]["weather"]): {(r["window_start_ms"], r["window_end_ms"])
                                                           for r in c["retracts"]}
            for c in facts["corrections"]["corrections"]} == want


def test_the_package_agrees_with_the_replay(submitted, connected):
    """(2) The package's late rows, per-run figures, corrections, quarantine and epilogue agree with
    the replay, on both launches."""
    _agrees(submitted)
    _agrees(connected)
