"""A third team's flat job, attached with 0 changed lines, from the wheel, through its DAG: late rows
recovered as corrections, on spark-submit and on Spark Connect.

The project under ``tests/temps_project/`` (its job is ``tests/spark_jobs/test_twin.py``'s: a flat
script parsing inline, two queries, 6-hour windows per city with count, mean, min and max) declares
``allowed_lateness="6 hours"`` on ``watermarked_run(attach=True, ...)`` and nothing about its parsing.
Three daily runs of ``airflow dags test`` in a fresh environment with the wheel must give:

* the late rows an independent pandas replay of the landed files computes, row for row (city, landed
  event time, file and line);
* for every window a recoverable late row touched, a standing correction equal to a pandas aggregate
  over every landed row of that window (counts exact, means within 1e-9), and no other window;
* an asset event per correcting run naming exactly its corrected windows;
* no duplicate correction when a run is run again;

and a day of garbage event times fails ``check_run`` naming the job's own reason and a record (file, line).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.packaging_fixtures import run_logged, user_environment
from tests.spark_jobs.test_twin import DAYS, HOUR_MS, WINDOW_MS, pandas_late, pandas_windows

pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "tests" / "temps_project"
DAG_ID = "city_temps"


def _landed(landing: Path, day: str) -> pd.DataFrame:
    """The rows the run of logical date ``day`` landed (the day before it), with their file and line."""
    frames = []
    for path in sorted(landing.glob(f"temps_{pd.Timestamp(day) - pd.Timedelta(days=1):%Y-%m-%d}_*.json")):
        frame = pd.read_json(path, lines=True, dtype=str)
        frame["file"], frame["line"] = path.name, range(1, len(frame) + 1)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _facts(made: dict, checkpoint: str) -> dict:
    done = run_logged([str(made["python"]), str(PROJECT / "check.py"), DAG_ID, checkpoint], made["env"], made["root"],
                      made["log"])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _project(root: Path, wheel: Path, launch: str, extra_env: dict[str, str], garbage: bool) -> dict:
    made = user_environment(root, wheel, PROJECT / "dags", {"TEMPS_HOME": str(root / "home"), "TEMPS_LAUNCH": launch,
                                                           **extra_env}, packages=("vega_datasets",))
    airflow = str(made["venv"] / "bin" / "airflow")
    for day in DAYS:
        run_logged([airflow, "dags", "test", DAG_ID, day], made["env"], root, made["log"], timeout=900)
    checkpoint = str(root / "home" / "checkpoints" / "windows")
    before = _facts(made, checkpoint)
    run_logged([airflow, "dags", "test", DAG_ID, DAYS[-1]], made["env"], root, made["log"], timeout=900)  # again
    bad = None
    if garbage:
        bad = run_logged([airflow, "dags", "test", DAG_ID, "2010-01-05", "-c", json.dumps({"garbage": True})],
                         made["env"], root, made["log"], timeout=900, check=False)
    return {**made, "home": root / "home", "checkpoint": checkpoint, "before": before,
            "facts": _facts(made, checkpoint), "bad": bad}


@pytest.fixture(scope="module")
def submitted(tmp_path_factory, wheel):
    return _project(tmp_path_factory.mktemp("temps-submit"), wheel, "submit", {}, garbage=True)


@pytest.fixture(scope="module")
def connected(tmp_path_factory, wheel, connect_server):
    import os

    conn = {"AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": os.environ["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"]}
    return _project(tmp_path_factory.mktemp("temps-connect"), wheel, "connect", conn, garbage=False)


def _runs(facts: dict) -> list[tuple[str, dict, dict]]:
    def short(mapping: dict) -> dict:
        return {task.rsplit(".", 1)[-1]: value for task, value in mapping.items()}

    return [(run_id, short(facts["xcom"].get(run_id, {})), short(facts["states"][run_id]))
            for run_id in sorted(facts["states"])]


def _check(project: dict) -> None:
    facts, landing = project["before"], project["home"] / "landing"
    runs = _runs(facts)[:3]
    landed = [_landed(landing, day) for day in DAYS]
    expected = pandas_late([frame[["city", "event_time", "temp"]] for frame in landed])
    assert not expected[0] and all(expected[1:])
    for (run_id, xcom, state), rows, late in zip(runs, landed, expected):
        # every task succeeds; the corrections' announcement runs only when the run corrected something
        assert {t: s for t, s in state.items() if t != "announce_corrections"} == dict.fromkeys(
            [t for t in state if t != "announce_corrections"], "success"), (run_id, state)
        assert state["announce_corrections"] == ("success" if late else "skipped"), (run_id, state)
        ledger = xcom["late_ledger"]
        assert ledger["complete"] and ledger["balanced"] and ledger["rows_in"] == len(rows), ledger
        got = []
        for path in ledger["sink_files"]:
            got += [json.loads(line) for line in Path(path).read_text().splitlines()]
        # row for row: the city and landed event time pandas found late, at the file and line that landed it
        lines = {(r.city, r.event_time): (r.file, r.line) for r in rows.itertuples()}
        assert {(r["event"]["city"], r["event"]["landed_time"]) for r in got} == late
        assert all((Path(r["source_file"]).name, r["line"]) == lines[(r["event"]["city"], r["event"]["landed_time"])]
                   for r in got)
        # every late row here is within the allowed lateness: recovered, none dropped for good
        assert ledger["rows_late"] == ledger["rows_late_recovered"] == len(late), ledger
        assert ledger["rows_late_dropped"] == 0 and ledger["corrections"] == (1 if late else 0), ledger
    # corrections: the newest per window and city equals pandas over every landed row of it; no other window
    truth = pandas_windows([frame[["city", "event_time", "temp"]] for frame in landed])
    corrections = facts["corrections"]["corrections"]
    standing = {(c["window_start_ms"], c["keys"]["city"]): c for c in corrections}
    late_windows = {(pd.Timestamp(t).value // 10**6 // WINDOW_MS * WINDOW_MS, city)
                    for run in expected for city, t in run}
    assert set(standing) == late_windows
    for (start, city), c in standing.items():
        count, mean, low, high = truth.loc[(start, city)]
        assert c["corrected"]["readings"] == count and abs(c["corrected"]["mean_temp_f"] - mean) <= 1e-9
        assert (c["corrected"]["min_temp_f"], c["corrected"]["max_temp_f"]) == (low, high)
        assert c["window_end_ms"] - start == WINDOW_MS and c["emitted"]["readings"] < count
    # one asset event per correcting run, naming exactly its windows
    named = [{(w["window_start_ms"], w["keys"]["city"]) for w in e["extra"]["corrected_windows"]}
             for e in facts["events"] if "corrected_windows" in (e["extra"] or {})]
    assert named == [{(c["window_start_ms"], c["keys"]["city"]) for c in corrections if c["run"] == run}
                     for run in dict.fromkeys(c["run"] for c in corrections)]
    # the run run again: no correction added
    again = project["facts"]["corrections"]["corrections"]
    assert sorted(json.dumps(c, sort_keys=True) for c in again) == sorted(json.dumps(c, sort_keys=True)
                                                                            for c in corrections)


def test_three_daily_runs_under_spark_submit_recover_their_late_rows_as_corrections(submitted):
    _check(submitted)


def test_a_backfill_of_2010_is_on_time_for_its_interval_on_every_face(submitted):
    """The runs replay 2010 through the run pattern: lag is judged against each run's data
    interval, not the wall clock, so status, the monitor and the overview raise no lag alarm."""
    facts = submitted["before"]
    classification = facts["status"]["classification"]
    assert classification["lag_basis"] == "data_interval" and facts["status"]["state"] != "lagging", classification
    assert classification["alarm"] is False and facts["monitor"]["alarm"] is False, facts["monitor"]
    row = facts["ui"]["row"]
    assert row is not None and row.get("lag_basis") == "data_interval" and row.get("state") != "lagging", row
    # every late row of the newest run is held by a correction: nothing uncorrected, no problem
    assert row["late_rows_uncorrected"] == 0 and row["late_run"] == _runs(facts)[-1][0], row


def test_the_figures_agree_across_the_faces(submitted):
    """Per run: the per-batch figures sum to the run's, the nested lateness figures equal the top
    level, the ledger's and collect_progress's late and set-aside rows are the same, and the
    lateness report names the checkpoint it read. The last run sets every row aside with the job's
    own reason (its own rejects sink): the same count on every face."""
    facts = submitted["facts"]
    for run_id, xcom, _ in _runs(facts):
        ledger, progress = xcom.get("late_ledger"), xcom.get("collect_progress")
        if not ledger or not progress:
            continue
        assert progress["rows_late"] == ledger["rows_late"] and progress["drop_rate"] == ledger["drop_rate"]
        by_batch = [b.get("quarantined_rows") for b in progress["batches"] if b.get("quarantined_rows") is not None]
        assert sum(by_batch) == ledger["rows_quarantined"], (progress["batches"], ledger)
        nested = [r for r in progress["lateness"]["runs"] if r.get("run_tag") == ledger["run_tag"]]
        assert nested and nested[0]["rows_late"] == ledger["rows_late"], (nested, ledger)
    garbage = _runs(facts)[-1][1]["late_ledger"]
    assert garbage["quarantined_by_reason"] == {"unreadable_time": garbage["rows_in"]} and garbage["rows_in"] > 0
    assert facts["lateness"].get("checkpoint", "").rstrip("/") == submitted["checkpoint"].rstrip("/")


def test_the_same_on_spark_connect(connected):
    _check(connected)


def test_garbage_event_times_fail_the_check_naming_the_job_s_reason_and_a_record(submitted):
    output = submitted["bad"].stdout + submitted["bad"].stderr
    assert submitted["bad"].returncode != 0
    line = next(line for line in output.splitlines() if "top reason unreadable_time" in line)
    assert re.search(r"e\.g\. file:///\S+/temps_2010-01-04_(seattle|sf)\.json line \d+: \{", line), line
    assert '"landed_time": "at 2010-01-0' in line
