"""A team's plain job, attached without a changed line, from the wheel in a fresh environment.

The project under ``tests/readings_project/`` differs from the example on every axis the example
hides (its README): a plain script that imports nothing of watermark-ops, run by the package's
launcher; a CSV landing, several files per trigger; a field named ``event_time`` in epoch
milliseconds parsed by the job's own code; a number that arrives as the text ``HIGH`` and is set aside
by the job's own ``try_cast`` and reason. Two daily runs through ``airflow dags test`` must give the
late rows an independent pandas replay of the landed files computes, row for row (its watermark
computed from the rows too), the windows it computes, a balance, and the lateness advice on the
job's own field, on the UI page too; every face's output for the checkpoint (the CLI's tables and
JSON, the UI's pages and JSON, the XComs, the monitor's alarm and the webhook payload) holds none of
the example's words, and the task logs carry the job's lines, not py4j's; a third day, whose upstream
switched the event time to text, fails its check naming the reason and an example record.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.example_words import example_words_in
from tests.packaging_fixtures import run_logged, user_environment

pytestmark = pytest.mark.timeout(1200)

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "tests" / "readings_project"
DAG_ID = "readings_hourly"
#: Logical dates: each run lands what arrived the day before it.
DAYS = ("2013-01-02", "2013-01-03")
BAD_DAY = "2013-01-04"
HOUR_MS = 3_600_000
DELAY_MS = 2 * HOUR_MS  # the job's withWatermark("reading_time", "2 hours")


@pytest.fixture(scope="module")
def project(tmp_path_factory, wheel):
    """The two good runs and the bad one, then the facts the runs left (check.py in the team's env)."""
    root = tmp_path_factory.mktemp("readings")
    made = user_environment(root, wheel, PROJECT / "dags", {"READINGS_HOME": str(root / "home")})
    airflow = str(made["venv"] / "bin" / "airflow")
    for day in DAYS:
        run_logged([airflow, "dags", "test", DAG_ID, day], made["env"], root, made["log"], timeout=900)
    bad = run_logged([airflow, "dags", "test", DAG_ID, BAD_DAY, "-c", json.dumps({"event_time_as": "text"})],
                     made["env"], root, made["log"], timeout=900, check=False)
    checkpoint = str(root / "home" / "checkpoints" / DAG_ID)
    facts = json.loads(run_logged([str(made["python"]), str(PROJECT / "check.py"), DAG_ID, checkpoint,
                                   str(root / "home" / "landing")], made["env"], root, made["log"]
                                  ).stdout.strip().splitlines()[-1])
    return {**made, "home": root / "home", "checkpoint": checkpoint, "facts": facts, "bad": bad}


def _runs(facts: dict) -> list[tuple[str, dict, dict]]:
    """``[(run_id, {task: xcom}, {task: state})]`` in run order, task ids without the group prefix."""
    def short(mapping: dict) -> dict:
        return {task.rsplit(".", 1)[-1]: value for task, value in mapping.items()}

    return [(run_id, short(facts["xcom"].get(run_id, {})), short(facts["states"][run_id]))
            for run_id in sorted(facts["states"])]


def _pandas_replay(landing: Path) -> list[dict]:
    """Per landed day, in run order: the rows as the job parses them, and which are late.

    Independent of Spark and of the package: the landed CSVs read with pandas, the job's parsing
    redone (epoch-ms ``event_time``; ``gust`` a number or empty), the watermark for a run's rows the
    newest good event time of the runs before it minus the delay threshold (one data batch per run
    and the trailing no-data batch: Spark >= 3.4 filters with the previous batch's watermark), and a
    row late when its 1-hour window ends at or before it.
    """
    runs, newest = [], None
    for day in DAYS:
        frames = []
        for path in sorted(landing.glob(f"readings_{pd.Timestamp(day) - pd.Timedelta(days=1):%Y-%m-%d}_*.csv")):
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
            frame["file"], frame["line"] = path.name, range(2, len(frame) + 2)  # line 1 is the header
            frames.append(frame)
        rows = pd.concat(frames, ignore_index=True)
        rows["ms"] = pd.to_numeric(rows["event_time"], errors="coerce")
        gust = pd.to_numeric(rows["gust"].replace("", None), errors="coerce")
        rows["bad"] = rows["ms"].isna() | ((rows["gust"] != "") & gust.isna())
        rows["gust_mph"], rows["temp"] = gust, pd.to_numeric(rows["temp_f"].replace("", None), errors="coerce")
        watermark = 0 if newest is None else max(0, newest - DELAY_MS)
        good = rows[~rows["bad"]].copy()
        good["window_start"] = good["ms"].astype("int64") // HOUR_MS * HOUR_MS
        good["late"] = good["window_start"] + HOUR_MS <= watermark
        newest = max(newest or 0, int(good["ms"].max()))
        runs.append({"rows": rows, "good": good, "watermark": watermark, "newest": newest})
    return runs


def test_two_daily_runs_of_a_plain_job_match_an_independent_pandas_replay(project):
    runs = _runs(project["facts"])
    assert len(runs) == 3
    replay = _pandas_replay(project["home"] / "landing")
    late_files = {}
    for (run_id, xcom, state), expected in zip(runs[:2], replay):
        assert set(state.values()) == {"success"}, (run_id, state)
        assert xcom["audit_checkpoint"]["status"] == "ok", xcom["audit_checkpoint"]
        ledger = xcom["late_ledger"]
        # Exact: the launcher replayed each batch in Spark through the job's own parse().
        assert ledger["complete"] and ledger["replayed_by"] == ["spark"], ledger
        # The balance: rows in = aggregated + late + set aside, all rows.
        assert ledger["balanced"] and ledger["rows_in"] == len(expected["rows"]), ledger
        assert ledger["rows_quarantined"] == int(expected["rows"]["bad"].sum()) > 0
        assert set(ledger["quarantined_by_reason"]) == {"gust_not_a_number"}  # the job's own reason, counted
        assert ledger["quarantine_source"] == "ledger"
        # The late rows equal pandas', row for row.
        wanted = {(r.file, r.line, r.station, r.event_time) for r in expected["good"][expected["good"]["late"]].itertuples()}
        rows = []
        for path in ledger["sink_files"]:
            rows += [json.loads(line) for line in Path(path).read_text().splitlines()]
        got = {(Path(r["source_file"]).name, r["line"], r["event"]["station"], r["event"]["event_time"]) for r in rows}
        assert got == wanted and ledger["rows_late"] == len(wanted), (sorted(got ^ wanted), ledger)
        assert all(r["watermark_ms"] == expected["watermark"] for r in rows)
        late_files[run_id] = ledger["late_by_partition"]
        # The figures are rows: drop rate from the ledger, Spark's late partial aggregates apart.
        progress = xcom["collect_progress"]
        assert progress["drop_rate"] == pytest.approx(len(wanted) / len(expected["rows"]))
        assert progress["late_partial_aggregates_spark"] == ledger["late_partial_aggregates_spark"]
        # The lateness advice, on the job's own event-time field, from the rows the replay made.
        (advice,) = progress["lateness"]["inputs"]
        assert advice["event_time_field"] == "event_time" and advice["events"] > 0 and advice["advice"], advice
        assert xcom["check_run"]["rows_in"] == ledger["rows_in"]
    # The second day's late rows are the south readings that arrived 8 hours late, behind the watermark.
    assert list(late_files.values())[0] == {} and set(list(late_files.values())[1]) == {"south"}, late_files

    # The windows the job wrote (its own Parquet sink) equal pandas' windows closed by the last watermark.
    good = pd.concat([run["good"][~run["good"]["late"]] for run in replay])
    closed = good[good["window_start"] + HOUR_MS <= max(0, replay[-1]["newest"] - DELAY_MS)]
    expected = closed.groupby(["station", "window_start"]).agg(
        readings=("ms", "size"), mean_temp_f=("temp", "mean"), max_gust_mph=("gust_mph", "max")).reset_index()
    written = pd.read_parquet(project["home"] / "output")
    written["window_start"] = ((pd.to_datetime(written["hour_start"], utc=True) - pd.Timestamp(0, tz="UTC"))
                               // pd.Timedelta(milliseconds=1))
    merged = expected.merge(written, on=["station", "window_start"], how="outer", suffixes=("", "_spark"),
                            indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"]
    assert (merged["readings"] == merged["readings_spark"]).all()
    assert ((merged["mean_temp_f"] - merged["mean_temp_f_spark"]).abs() < 1e-9).all()
    assert ((merged["max_gust_mph"].fillna(-1) - merged["max_gust_mph_spark"].fillna(-1)).abs() < 1e-9).all()


def test_a_run_that_sets_aside_nearly_all_rows_fails_its_check_naming_the_reason_and_an_example(project):
    run_id, xcom, state = _runs(project["facts"])[2]
    assert state["check_run"] == "failed" and state["late_ledger"] == "success", state
    ledger = xcom["late_ledger"]
    assert ledger["rows_quarantined"] == ledger["rows_in"] > 0 and ledger["rows_aggregated"] == 0
    output = project["bad"].stdout + project["bad"].stderr
    example = next(line for line in output.splitlines() if "top reason bad_event_time" in line)
    assert f"set aside {ledger['rows_in']} of its {ledger['rows_in']} input rows" in example
    assert re.search(r"e\.g\. file:///\S+/readings_2013-01-03_(north|east|south)\.csv line \d+: \{", example), example
    assert '"event_time": "2013-01-0' in example  # the landed text the job could not parse


def test_every_face_shows_the_job_s_own_words_and_none_of_the_example_s(project):
    facts = project["facts"]
    faces = {f"xcom {run_id} {task}": json.dumps(value) for run_id, tasks in facts["xcom"].items()
             for task, value in tasks.items()}
    faces.update(facts["faces"])
    assert {"cli late", "cli lateness --json", "ui page", "ui page json", "ui overview", "notification"} <= set(faces)
    leaks = {face: example_words_in(text) for face, text in faces.items() if example_words_in(text)}
    assert leaks == {}
    # The UI page's advice is on the job's own field, from the rows its own parsing made.
    page = json.loads(faces["ui page json"])
    (advice,) = page["advice"]
    assert advice["event_time_field"] == "event_time" and advice["source"] == "spark_replay" and advice["advice"]
    assert '<code class="event-time-field">event_time</code>' in faces["ui page"]
    # Named by its DAG and query, everywhere it is shown.
    name = "readings_hourly / readings_hourly"
    assert page["name"] == name and facts["ui"]["row"]["name"] == name and name in faces["ui overview"]
    assert json.loads(faces["notification"])["name"] == name
    # Rows, not Spark's partial aggregates: the page's drop rate is the ledger's rows over the input rows.
    late = [run for run in page["runs"] if run["rows_late"]]
    assert late and all(run["drop_rate"] == run["rows_late"] / run["input_rows"] for run in late)
    assert "late per station" in faces["cli late"] and "gust_not_a_number" in faces["cli late"]
    # The task logs carry the job's lines, not py4j's INFO chatter.
    log = Path(project["log"]).read_text()
    assert not [line for line in log.splitlines() if "py4j" in line and "INFO" in line][:3]
