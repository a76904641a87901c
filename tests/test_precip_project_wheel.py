"""A team's sliding-window job (``tests/precip_project/``: 7-day windows sliding by 1 day per weather
over Parquet files, Seattle's real weather of January 2013), attached with no window declared, from
the wheel, through its DAG: three weekly runs on spark-submit and on Spark Connect.

A day of 10 mm of rain or more arrives 5 days late, so the second run's batch drops the rainy 8 and
9 January from only some of their 7 windows (3 and 2: the windows that ended at or before the
watermark of 11 January) and keeps them in the others. The team's own pandas replay
(``replay.py``) reproduces from the landed files and the checkpoint's logs every window Spark wrote
and names every (row, window) drop:

* ``test_the_replay_matches_the_sink_*``: the replay equals the sink, window for window, with the
  batch that wrote it (this holds whatever the package does);
* ``test_the_package_agrees_with_the_replay``: the package's late rows, its per-run figures and its
  corrections (30 days allowed) are the replay's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import project_replays as shared

pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "tests" / "precip_project"
DAG_ID = "weekly_precip"
DATES = ("2013-01-13", "2013-01-20", "2013-01-27")  # each runs the week that ends on it
CONFS = {"2013-01-27": {"no_gauge": ["2013-01-23"]}}  # a gauge's "no reading" sentinel in the third week


def _project(root: Path, wheel: Path, launch: str) -> dict:
    made = shared.three_runs(root, wheel, PROJECT, DAG_ID, "PRECIP", launch, DATES, CONFS, connect=launch == "connect")
    checkpoint = made["home"] / "checkpoints" / "windows"
    code, replayed, said = shared.replay(made, PROJECT / "replay.py", made["home"] / "landing", checkpoint,
                                         made["home"] / "output")
    return {**made, "checkpoint": checkpoint, "replay_code": code, "replay": replayed, "replay_said": said,
            "facts": shared.facts(made, DAG_ID, checkpoint)}


@pytest.fixture(scope="module")
def submitted(tmp_path_factory, wheel):
    return _project(tmp_path_factory.mktemp("precip-submit"), wheel, "submit")


@pytest.fixture(scope="module")
def connected(tmp_path_factory, wheel, connect_server):
    return _project(tmp_path_factory.mktemp("precip-connect"), wheel, "connect")


def _replay_matches(project: dict) -> None:
    assert (project["home"] / "output" / "_spark_metadata").is_dir(), [d.stdout[-2000:] for d in project["done"]]
    assert project["replay_code"] == 0, project["replay_said"]
    replayed = project["replay"]
    # the data's late days: 8 and 9 January 2013, dropped from 3 and 2 of their windows, kept in the others
    partly = {(r["date"], len(r["windows_dropped"])) for r in replayed["rows_late_partly"]}
    assert partly == {("2013-01-08", 3), ("2013-01-09", 2)}, replayed["late_rows"]
    assert len(replayed["window_drops"]) == 5 and len(replayed["corrections"]) == 3
    assert replayed["rows_bad"] == 1 and replayed["windows_written"] > 0


def test_the_replay_matches_the_sink_under_spark_submit(submitted):
    _replay_matches(submitted)


def test_the_replay_matches_the_sink_on_spark_connect(connected):
    _replay_matches(connected)


def _agrees(project: dict) -> None:
    """The package's faces against the replay (what the package is being built to give)."""
    facts, replayed = project["facts"], project["replay"]
    done = project["done"]
    assert [d.returncode for d in done] == [0, 0, 0], done[-1].stdout[-3000:] + done[-1].stderr[-3000:]
    # late: each late row with the windows it was dropped from (a late row: dropped from at least one)
    assert "error" not in facts["late"], facts["late"]
    late = {shared.row_key(r): shared.windows_of(r) for r in facts["late"]["late_rows"]}
    assert late == {shared.row_key(r): shared.windows_of(r) for r in replayed["late_rows"]}
    # per run: the late ledger's and lateness's figures
    runs = shared.runs(facts)
    assert len(runs) == 3
    by_run = shared.late_by_run(runs, replayed["late_rows"], project["home"] / "landing")
    lateness = {r.get("run_tag"): r for r in facts["lateness"].get("runs", [])}
    for run_id, xcom, state in runs:
        assert {t: s for t, s in state.items() if t != "announce_corrections"} == dict.fromkeys(
            [t for t in state if t != "announce_corrections"], "success"), (run_id, state)
        ledger, mine = xcom["late_ledger"], by_run[run_id]
        figures = {"rows_late": len(mine), "window_drops": sum(len(r["windows_dropped"]) for r in mine),
                   "rows_late_partly": sum(1 for r in mine if r["windows_kept"]), "rows_late_recovered": len(mine),
                   "rows_late_dropped": 0}
        assert {k: ledger.get(k) for k in figures} == figures, (run_id, ledger)
        assert bool(ledger["corrections"]) == bool(mine), (run_id, ledger)
        assert {k: lateness[ledger["run_tag"]].get(k) for k in figures} == figures, lateness.get(ledger["run_tag"])
    # corrections: every (window, weather) that lost a row, its value over every landed row; nothing retracted
    assert "error" not in facts["corrections"], facts["corrections"]
    got = {(c["window_start_ms"], c["window_end_ms"], c["keys"]["weather"]): c
           for c in facts["corrections"]["corrections"]}
    want = {(c["window_start_ms"], c["window_end_ms"], c["keys"]["weather"]): c for c in replayed["corrections"]}
    assert set(got) == set(want)
    for key, c in got.items():
        assert set(c["keys"]) == {"weather"} and c["retracts"] == [], c
        corrected, truth = c["corrected"], want[key]["corrected"]
        assert (corrected["days"], corrected["precipitation_mm"]) == (truth["days"], truth["precipitation_mm"]), c
        assert abs(corrected["mean_temp_max"] - truth["mean_temp_max"]) <= 1e-9, c
        assert c["emitted"]["days"] == want[key]["emitted"]["days"] < truth["days"], c


def test_the_package_agrees_with_the_replay(submitted, connected):
    """(2) The package's late rows, per-run figures and corrections equal the replay's, on both launches."""
    _agrees(submitted)
    _agrees(connected)
