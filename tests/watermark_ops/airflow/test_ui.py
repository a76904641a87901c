"""The watermark pages through Airflow's own api-server app (``create_app``: the real plugin
manager mounts the plugin, the real SimpleAuthManager issues and checks the JWT), with FastAPI's
TestClient: refused paths, unauthenticated requests, an unreadable checkpoint, a regression in
red, 10,000 batches drawn as the newest 500."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.watermark_ops.airflow import ui_fixtures as uf
from watermark_ops.airflow.ui import STATIC_DIR

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def ui(spark, tmp_path_factory):
    return uf.build(spark, tmp_path_factory.mktemp("ui"))


@pytest.fixture(scope="module")
def client(ui, airflow_db, tmp_path_factory):
    """A TestClient on the real api-server app, and the ``Authorization`` header of admin's JWT."""
    with uf.admin_client(ui.env(), tmp_path_factory.mktemp("auth")) as test_client:
        yield test_client


def _anonymous(client):
    from fastapi.testclient import TestClient

    return TestClient(client.app, base_url="http://127.0.0.1")


# --------------------------------------------------------------------------------------------
# The plugin is registered


def test_the_ui_lists_the_plugin_views(client):
    plugins = client.get("/api/v2/plugins").json()["plugins"]
    ours = next(p for p in plugins if p["name"] == "watermark_ops")
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == ["/watermark-ops"]
    assert ours["external_views"] == []  # no page in an iframe: the React views are the UI's own
    manifest = json.loads((Path(STATIC_DIR) / "watermark-views.json").read_text())
    apps = {a["destination"]: a for a in ours["react_apps"]}
    assert list(apps) == ["nav", "dag", "dag_run", "dashboard"]
    for destination, app in apps.items():
        assert app["name"] == manifest["views"][destination]
        assert app["bundle_url"] == f"/watermark-ops/static/watermark-views.umd.js?v={manifest['sha256'][:12]}"
    assert apps["nav"]["category"] == "browse" and apps["nav"]["url_route"] == "watermarks"
    # the bundle is served without a session (no data in it), and is the one the manifest hashes
    anonymous = _anonymous(client)
    bundle = anonymous.get(apps["nav"]["bundle_url"])
    assert bundle.status_code == 200 and hashlib.sha256(bundle.content).hexdigest() == manifest["sha256"]


def test_each_view_can_be_turned_off(tmp_path, caplog):
    from watermark_ops.airflow.plugin import react_apps

    assert [a["destination"] for a in react_apps("nav, dashboard")] == ["nav", "dashboard"]
    assert react_apps("") == []
    with caplog.at_level("WARNING"):
        assert [a["destination"] for a in react_apps("nav,graph")] == ["nav"]
    assert "'graph' is no view" in caplog.text
    with caplog.at_level("WARNING"):
        assert react_apps("nav", static_dir=str(tmp_path)) == []  # a checkout before `make ui`
    assert "make ui" in caplog.text and "watermark-views.json" in caplog.text


def test_the_overview_counts_states_and_filters_by_one(client):
    from watermark_ops.core.overview import state_key

    whole = client.get("/watermark-ops/api/checkpoints").json()
    counted: dict[str, int] = {}
    for row in whole["checkpoints"]:
        counted[state_key(row)] = counted.get(state_key(row), 0) + 1
    assert whole["states"] == counted and sum(counted.values()) == whole["total"]
    assert [row["state_key"] for row in whole["checkpoints"]] == [state_key(row) for row in whole["checkpoints"]]
    assert {"error", "not_run", "idle"} <= set(counted)
    for state, n in counted.items():
        only = client.get("/watermark-ops/api/checkpoints", params={"state": state}).json()
        assert [state_key(r) for r in only["checkpoints"]] == [state] * n
        assert only["states"] == counted  # the counts are the whole's, before the filter
    for row in whole["checkpoints"]:
        assert row["address"] == (row["url"].removeprefix("/watermark-ops/checkpoints/") if row["url"] else None)


def test_the_chart_points_carry_input_and_late_rows(client):
    detail = client.get("/watermark-ops/api/checkpoints/test/real").json()
    records = [json.loads(line) for line in Path(detail["progress_log"]).read_text().splitlines() if line.strip()]
    by_batch = {r["batch_id"]: r["input_rows"] for r in records if r.get("executed", True)}
    points = detail["chart"]["points"]
    assert [p["input_rows"] for p in points] == [by_batch.get(p["batch_id"]) for p in points]
    # no late-row sink and no replay records: unknown (None), never 0, but for a batch that read no row
    assert [p["rows_late"] for p in points] == [0 if by_batch.get(p["batch_id"]) == 0 else None for p in points]


# --------------------------------------------------------------------------------------------
# Authentication


@pytest.mark.parametrize("path", ["/watermark-ops/", "/watermark-ops/api/checkpoints",
                                  "/watermark-ops/checkpoints/test/real", "/watermark-ops/api/checkpoints/test/real",
                                  "/watermark-ops/dags/flights_pipeline"])
def test_every_route_needs_an_authenticated_user(client, path):
    anonymous = _anonymous(client)
    assert anonymous.get(path).status_code == 401
    assert anonymous.get(path, headers={"Authorization": "Bearer not-a-jwt"}).status_code == 403
    assert client.get(path, follow_redirects=False).status_code in (200, 307)


def test_the_ui_cookie_is_enough(client):
    token = client.headers["Authorization"].removeprefix("Bearer ")
    anonymous = _anonymous(client)
    anonymous.cookies.set("_token", token)
    assert anonymous.get("/watermark-ops/").status_code == 200


# --------------------------------------------------------------------------------------------
# Path safety: refused before anything is read


@pytest.mark.parametrize("raw_path, status", [
    ("/watermark-ops/api/checkpoints/test/%2e%2e/outside/secret", 400),
    ("/watermark-ops/api/checkpoints/test/real/%2E%2E/%2e%2e/outside/secret", 400),
    ("/watermark-ops/api/checkpoints/test/..%2foutside%2fsecret", 400),
    ("/watermark-ops/api/checkpoints/test/s3:%2f%2fbucket%2fcheckpoint", 400),
    ("/watermark-ops/api/checkpoints/test/file:%2f%2f%2fetc", 400),
    ("/watermark-ops/api/checkpoints/test/%2fetc%2fpasswd", 400),
    ("/watermark-ops/api/checkpoints/test/real%5c..%5c..", 400),
    ("/watermark-ops/api/checkpoints/test/escape", 404),  # a symlink out of the root
    ("/watermark-ops/api/checkpoints/nope/real", 404),  # no such root
    ("/watermark-ops/api/checkpoints/test/does-not-exist", 404),
    ("/watermark-ops/checkpoints/test/%2e%2e/outside/secret", 400),
    ("/watermark-ops/checkpoints/test/escape", 404),
])
def test_paths_that_escape_the_roots_are_refused(client, ui, raw_path, status, monkeypatch):
    import watermark_ops.core.snapshot as snapshot  # where the pages read a checkpoint (one read, then judged)

    read = []
    monkeypatch.setattr(snapshot, "read_checkpoint", lambda *a, **k: read.append(a) or pytest.fail("read"))
    reply = client.get(raw_path)
    assert reply.status_code == status, reply.text
    assert read == []
    assert str(ui.outside) not in reply.text


def test_the_overview_does_not_read_a_checkpoint_outside_the_roots(client, ui):
    rows = {row["location"]: row for row in client.get("/watermark-ops/api/checkpoints").json()["checkpoints"]}
    outside = rows[str(ui.outside / "secret")]
    assert outside["error"] == "not under a configured checkpoint root: not read"
    assert outside["query_id"] is None and outside["url"] is None


# --------------------------------------------------------------------------------------------
# The overview


def test_overview_rows_problems_first(client, ui):
    document = client.get("/watermark-ops/api/checkpoints").json()
    rows = document["checkpoints"]
    by_name = {row["location"]: row for row in rows}
    real, regressed = by_name[str(ui.root / "real")], by_name[str(ui.root / "regressed")]
    broken, big = by_name[str(ui.root / "broken")], by_name[str(ui.root / "big")]
    not_yet = by_name[str(ui.root / "not-yet")]
    assert real["audit_status"] == "ok" and real["error"] is None and real["state"] in ("advancing", "idle")
    assert real["query_id"] and real["head_batch_id"] >= 5 and real["watermark"].startswith("2013-01-01T")
    assert real["url"] == "/watermark-ops/checkpoints/test/real"
    assert regressed["audit_status"] == "violation" and "watermark_regressed" in regressed["rules"]
    assert regressed["in_flight_batch"] == 4
    assert broken["error"] and "offsets/1" in broken["error"]
    assert big["head_batch_id"] == 9_999 and big["findings"] == 0
    assert not_yet["error"].startswith("not run yet")
    ranks = [row["rank"] for row in rows]
    assert ranks == sorted(ranks)
    assert rows.index(regressed) < rows.index(real) and rows.index(broken) < rows.index(real)
    assert rows.index(not_yet) == len(rows) - 1 or rows[-1]["rank"] == not_yet["rank"]


def test_overview_rows_carry_the_severity_the_header_counts(client, ui):
    """Each row says whether it is a problem or a warning, the classification the header's counts
    use: the React view colours a warning (a state finding such as state_never_compacted) as a
    warning, not as a problem."""
    document = client.get("/watermark-ops/api/checkpoints").json()
    rows = document["checkpoints"]
    severities = [row["severity"] for row in rows]
    assert severities.count("problem") == document["problems"] >= 2
    assert severities.count("warning") == document["warnings"]
    by_name = {row["location"]: row for row in rows}
    assert by_name[str(ui.root / "regressed")]["severity"] == "problem"
    assert by_name[str(ui.root / "broken")]["severity"] == "problem"
    for row in rows:
        assert row["severity"] == ("problem" if row["rank"] <= 1 else "warning" if row["rank"] == 2 else None), row
    # A healthy row with a state warning (what a restart of a never-compacted store replays) is a warning.
    from watermark_ops.core.overview import page_of, severity

    healthy = {**by_name[str(ui.root / "big")], "state_store": None}
    assert healthy["rank"] == 3 and severity(healthy) is None
    warned = {**healthy, "state_store": {"codes": ["state_never_compacted"]}, "rank": 2}
    shown, paging = page_of([warned, healthy])
    assert [row["severity"] for row in shown] == ["warning", None]
    assert paging["warnings"] == 1 and paging["problems"] == 0


def test_overview_page_shows_states_and_errors_on_their_rows(client, ui):
    reply = client.get("/watermark-ops/")
    assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/html")
    page = reply.text
    row = re.search(r'<tr class="bad" data-checkpoint="[^"]*regressed">.*?</tr>', page, re.S).group(0)
    assert "violation" in row and "watermark_regressed" in row
    broken = re.search(r'<tr class="bad" data-checkpoint="[^"]*broken">.*?</tr>', page, re.S).group(0)
    assert 'class="err"' in broken and "offsets/1" in broken
    assert 'href="/watermark-ops/checkpoints/test/real"' in page
    assert "https://" not in page and "<script" not in page  # offline: nothing fetched, no script


def test_a_broken_monitor_config_is_a_row_not_a_500(client, ui, monkeypatch, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(bad))
    reply = client.get("/watermark-ops/")
    assert reply.status_code == 200
    assert "cannot read the monitor config" in reply.text and str(bad) in reply.text


# --------------------------------------------------------------------------------------------
# A checkpoint's page


def test_checkpoint_page_of_a_real_checkpoint(client, ui, spark):
    from tests.watermark_ops import checkpoint_fixtures as cf

    history = cf.restart_history(spark)
    data = client.get("/watermark-ops/api/checkpoints/test/real").json()
    assert data["audit"]["status"] == "ok" and data["state"] in ("advancing", "idle")
    chart = data["chart"]
    assert chart["total"] == chart["shown"] == len(chart["points"]) == data["status"]["head_batch_id"] + 1
    executed = [[b["batch_id"] for b in run["batches"] if b.get("executed", True)] for run in history.runs]
    assert [r["batch_id"] for r in chart["restarts"]] == [ids[0] for ids in executed if ids]  # one per run
    assert [run["batch_ids"] for run in data["runs"]] == executed
    assert sum(run["late_partial_aggregates_spark"] for run in data["runs"]) == sum(
        b.get("rows_dropped_by_watermark") or 0 for run in history.runs for b in run["batches"])
    assert data["advice"] and data["advice"][0]["events"] > 50 and data["advice"][0]["advice"]
    assert data["advice"][0]["event_time_field"] == "dep_time"  # the job's late rule names its own field
    page = client.get("/watermark-ops/checkpoints/test/real").text
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="chart"' in page
    assert page.count('class="restart"') == len(chart["restarts"])
    assert data["status"]["watermark"] in page
    assert "No findings" in page
    skew = data["classification"]["partition_skew"]  # the job records each batch's newest event time per origin
    assert skew["column"] == "origin" and {p["partition"] for p in skew["partitions"]} == {"EWR", "JFK", "LGA"}
    table = re.search(r'<table id="skew">.*?</table>', page, re.S).group(0)
    assert all(airport in table for airport in ("EWR", "JFK", "LGA")) and "(leader)" in table


def test_a_regression_is_red_with_its_file(client, ui):
    data = client.get("/watermark-ops/api/checkpoints/test/regressed").json()
    finding = next(f for f in data["audit"]["findings"] if f["rule"] == "watermark_regressed")
    assert finding["severity"] == "error" and finding["batch_id"] == 3
    assert finding["file"].endswith("regressed/offsets/3")
    assert [p["batch_id"] for p in data["chart"]["points"] if p["regressed"]] == [3]
    assert [p["batch_id"] for p in data["chart"]["points"] if not p["committed"]] == [4]
    page = client.get("/watermark-ops/checkpoints/test/regressed").text
    row = re.search(r'<tr class="bad">.*?watermark_regressed.*?</tr>', page, re.S).group(0)
    assert "regressed/offsets/3" in row
    assert 'class="regressed"' in page and "batch 3 regressed" in page
    assert 'class="inflight"' in page and "batch 4 in flight" in page
    assert 'id="audit-status">audit: violation' in page


def test_an_unreadable_checkpoint_shows_its_error_on_the_page(client):
    reply = client.get("/watermark-ops/checkpoints/test/broken")
    assert reply.status_code == 200
    assert "offsets/1" in reply.text and 'id="problems"' in reply.text
    data = client.get("/watermark-ops/api/checkpoints/test/broken").json()
    assert any(f["rule"] == "unreadable" and f["file"].endswith("broken/offsets/1") for f in data["audit"]["findings"])


def test_ten_thousand_batches_draw_the_newest_500_and_say_so(client):
    data = client.get("/watermark-ops/api/checkpoints/test/big").json()
    chart = data["chart"]
    assert chart["total"] == 10_000 and chart["shown"] == 500 == len(chart["points"])
    assert chart["first_shown_batch_id"] == 9_500 and chart["points"][-1]["batch_id"] == 9_999
    reply = client.get("/watermark-ops/checkpoints/test/big")
    assert "Showing the newest 500 of 10000 batches (from batch 9500)" in reply.text
    # The page's budget is its size: the chart draws 500 batches, not 10,000.
    assert len(reply.content) < 250_000, len(reply.content)
    assert reply.text.count("<circle") <= 2


def test_a_dag_link_leads_to_its_checkpoint_or_the_overview(client, ui, monkeypatch):
    from watermark_ops.examples.flights.settings import job_locations

    config = json.loads(ui.config.read_text())
    config["checkpoints"].append({"checkpoint": job_locations("flight_windows")["checkpoint"],
                                  "dag_ids": ["flights_pipeline"]})
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(ui.config.with_name("with_job.json")))
    ui.config.with_name("with_job.json").write_text(json.dumps(config))
    reply = client.get("/watermark-ops/dags/flights_pipeline?task_id=flight_windows", follow_redirects=False)
    assert reply.status_code == 307 and reply.headers["location"] == "/watermark-ops/checkpoints/runtime/flight_windows"
    reply = client.get("/watermark-ops/dags/some_other_dag", follow_redirects=False)
    assert reply.status_code == 307 and reply.headers["location"] == "/watermark-ops/"


def test_the_pages_write_nothing(client, ui):
    def listing():
        return sorted((str(p.relative_to(ui.root)), p.stat().st_mtime_ns) for p in ui.root.rglob("*")
                      if not p.is_symlink())

    before = listing()
    for path in ("/watermark-ops/", "/watermark-ops/checkpoints/test/real", "/watermark-ops/checkpoints/test/regressed"):
        assert client.get(path).status_code == 200
    assert listing() == before


def test_the_chart_limit_is_a_query_parameter(client):
    chart = client.get("/watermark-ops/api/checkpoints/test/big?limit=20").json()["chart"]
    assert chart["shown"] == 20 and chart["first_shown_batch_id"] == 9_980
    assert client.get("/watermark-ops/api/checkpoints/test/big?limit=0").json()["chart"]["shown"] == 10_000
    assert client.get("/watermark-ops/api/checkpoints/test/big?limit=many").status_code == 422


def test_bad_checkpoint_roots_are_named_on_the_page(client, monkeypatch):
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS", "[not an object")
    reply = client.get("/watermark-ops/")
    assert reply.status_code == 200 and "checkpoint_roots" in reply.text
    assert client.get("/watermark-ops/checkpoints/test/real").status_code == 200  # an error page, not a 500


# --------------------------------------------------------------------------------------------
# Late rows per run: Spark's late-group count beside the late-row ledger's rows


def _ledger_cells(page: str) -> list[str]:
    table = re.search(r'<table id="runs">.*?</table>', page, re.S).group(0)
    return re.findall(r'<td class="num ledger">([^<]*)</td>', table)


def test_late_rows_per_run_show_the_ledger_beside_spark(client, ui, spark, request, tmp_path):
    """The ledger sink written by ``reconcile_run`` on the shared real checkpoint; the known
    checkpoint's ``late_sink`` names it (set here on its entry of the ``[watermark_ops]`` monitor config)."""
    from tests.watermark_ops import checkpoint_fixtures as cf
    from watermark_ops.core.ledger import reconcile_run

    history = cf.restart_history(spark)
    real, sink = ui.root / "real", tmp_path / "output_late"
    # Without a sink: every run's ledger cell is "unknown" (never 0), and the page says why; run 4
    # landed nothing and wrote no batch: 0 late rows, known, as on every face (XCom, lateness, late)
    page = client.get("/watermark-ops/checkpoints/test/real").text
    runs = client.get("/watermark-ops/api/checkpoints/test/real").json()["runs"]
    assert _ledger_cells(page) == ["unknown"] * 3 + ["0", "unknown"] and len(runs) == 5
    assert runs[3]["late_rows_known"] is True and runs[3]["rows_late"] == 0
    others = runs[:3] + runs[4:]
    assert all(run["late_rows_known"] is False and run["late_rows_unknown_reason"] for run in others)
    assert all(run["rows_late"] is None and run["drop_rate"] is None for run in others)  # no rows, no rate
    assert "no late-row sink is known for this checkpoint" in page

    # The flights_pipeline's late_ledger task does this after each run (all runs here: no run tag).
    result = reconcile_run(str(real), None, quarantine_checkpoint=str(history.checkpoint) + "_quarantine",
                           sink=str(sink))
    assert result["complete"] and result["sink_files"]
    config = json.loads(ui.config.read_text())
    for entry in config["checkpoints"]:
        if entry.get("checkpoint") == str(real):
            entry["late_sink"] = str(sink)
    original_text = ui.config.read_text()
    ui.config.write_text(json.dumps(config))
    request.addfinalizer(lambda: ui.config.write_text(original_text))
    data = client.get("/watermark-ops/api/checkpoints/test/real").json()
    assert data["late_sink"] == str(sink)
    files = {int(p.name.removeprefix("batch=").removesuffix(".jsonl")): len(p.read_text().splitlines())
             for p in sink.glob("batch=*.jsonl")}
    assert sum(files.values()) == result["rows_late"]
    expected = [sum(files[b] for b in run["batch_ids"] if b in files) if any(b in files for b in run["batch_ids"])
                else 0 if not run["batch_ids"] else None for run in data["runs"]]
    assert [run["rows_late"] for run in data["runs"]] == expected
    assert [run["drop_rate"] for run in data["runs"]] == [n / run["input_rows"] if n is not None and run["input_rows"]
                                                          else None for n, run in zip(expected, data["runs"])]
    assert expected[3] == 0 and all(n is not None for n in expected)  # run 4: no new data, no batch: 0
    spark_counts = [run["late_partial_aggregates_spark"] for run in data["runs"]]
    assert spark_counts == [sum(b.get("rows_dropped_by_watermark") or 0 for b in run["batches"] if b.get("executed", True))
                            for run in history.runs]
    page = client.get("/watermark-ops/checkpoints/test/real").text
    assert _ledger_cells(page) == [str(n) if n is not None else "unknown" for n in expected]
    assert f"from the late-row ledger's sink <code>{sink}</code>" in page
    print("ledger rows per run", expected, "spark late groups per run", spark_counts)


def test_the_ledger_is_read_for_the_runs_shown_only(ui, spark, tmp_path):
    from tests.watermark_ops import checkpoint_fixtures as cf
    from watermark_ops.core.ledger import reconcile_run
    from watermark_ops.core.overview import checkpoint_detail
    from watermark_ops.core.thresholds import Thresholds

    history = cf.restart_history(spark)
    sink = tmp_path / "late"
    reconcile_run(str(ui.root / "real"), None, quarantine_checkpoint=str(history.checkpoint) + "_quarantine",
                  sink=str(sink))
    newest = checkpoint_detail(str(ui.root / "real"), Thresholds(), late_sink=str(sink), runs_limit=1)["runs"]
    whole = checkpoint_detail(str(ui.root / "real"), Thresholds(), late_sink=str(sink))["runs"]
    assert [r["rows_late"] for r in newest] == [None] * 3 + [0, whole[-1]["rows_late"]]  # run 4 wrote no batch
    assert whole[-1]["rows_late"] is not None
    # A missing sink is named, never a failure.
    detail = checkpoint_detail(str(ui.root / "real"), Thresholds(), late_sink=str(tmp_path / "nowhere"))
    assert [r["rows_late"] for r in detail["runs"]] == [None] * 3 + [0, None]
    assert any("no batch=<N>.jsonl" in p and "nowhere" in p for p in detail["problems"])


def test_the_views_sources_name_no_colour_or_font_of_their_own():
    """The React views take every colour and font from the UI's theme (Chakra tokens, its CSS
    variables): no literal colour or font family in ui/src (the browser test checks the result)."""
    sources = Path(__file__).resolve().parents[3] / "ui" / "src"
    found = [(path.name, match.group(0)) for path in sorted(sources.rglob("*.ts*"))
             for match in re.finditer(r"#[0-9a-fA-F]{3,8}\b|\b(?:rgba?|hsla?|oklch)\(|font-?family", path.read_text(),
                                      re.I)]
    assert found == []
    assert "var(--chakra-colors-" in (sources / "Chart.tsx").read_text()
