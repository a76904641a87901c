"""The React views in a real browser: the real ``airflow api-server`` (this session's SQLite metadata
DB, multi-team SimpleAuthManager), the plugin's bundle loaded by Airflow's own UI (``react_apps``),
Debian's headless Chromium driven by Playwright.

Every view in light and in dark mode (the UI's own colour mode, from the browser's preference), a
hover on a batch, the zoom to a run with the back button, a DAG's tab per team, a DAG run's tab, the
dashboard's counts against the overview, a deployment theme (``AIRFLOW__API__THEME``), and no console
error anywhere. Screenshots go to ``test-artifacts/ui/`` (``$WATERMARK_OPS_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.watermark_ops.airflow.views_fixtures import views_deployment  # noqa: F401 - the module's fixture

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("WATERMARK_OPS_TEST_ARTIFACTS") or REPO / "test-artifacts") / "ui"
MODES = ("light", "dark")
CONSOLE_ERRORS: list[str] = []
#: The page a user of another team opens on purpose: the 403s of its requests (Airflow's own and the
#: view's) are what that test checks, so the browser's "Failed to load resource ... 403" lines there
#: are expected; any other console error anywhere fails test_no_console_errors.
FORBIDDEN_PAGE = "/dags/beta_orders_audit/plugin/watermarks-dag"


@pytest.fixture(scope="module")
def server(views_deployment, tmp_path_factory):  # noqa: F811
    """The base URL of a running api-server; stopped by its PID after the module."""
    from watermark_ops.examples.browser import api_server

    with api_server(views_deployment.env, tmp_path_factory.mktemp("api") / "api-server.log") as base:
        yield base


@pytest.fixture(scope="module")
def browser():
    from watermark_ops.examples.browser import chromium

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium() as launched:
        yield launched


def _page(browser, base: str, user: str = "admin", mode: str = "light"):
    """A signed-in page of a new context in ``mode``; its console errors and page errors are collected."""
    from watermark_ops.examples.browser import login

    context = browser.new_context(viewport={"width": 1400, "height": 1000}, color_scheme=mode)
    page = context.new_page()
    page.on("console", lambda m: m.type == "error" and CONSOLE_ERRORS.append(f"{user}/{mode} {page.url}: {m.text}"))
    page.on("pageerror", lambda e: CONSOLE_ERRORS.append(f"{user}/{mode} {page.url}: {e}"))
    login(page, base, user, user)
    return page


@pytest.fixture(scope="module")
def pages(browser, server):
    """Admin's page in each colour mode."""
    made = {mode: _page(browser, server, mode=mode) for mode in MODES}
    yield made
    for page in made.values():
        page.context.close()


def _shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _token_color(page, token: str) -> str:
    """The computed colour of a Chakra token CSS variable in this page (a probe element)."""
    return page.evaluate("""(token) => {
        const probe = document.createElement('span');
        probe.style.color = `var(--chakra-colors-${token})`;
        document.body.appendChild(probe);
        const color = getComputedStyle(probe).color;
        probe.remove();
        return color;
    }""", token)


def _follows_the_ui(page, selector: str, mode: str) -> None:
    """The UI is in ``mode`` and the view's text has the theme's ``fg`` colour and the UI's font."""
    assert page.evaluate("document.documentElement.classList.contains('dark')") is (mode == "dark")
    text = page.locator(selector).first
    assert text.evaluate("e => getComputedStyle(e).color") == _token_color(page, "fg")
    assert text.evaluate("e => getComputedStyle(e).fontFamily") == page.evaluate(
        "getComputedStyle(document.body).fontFamily")


def _open_checkpoint(page, base: str, deployment, ready: str = "watermark-chart") -> str:
    """Open alpha's checkpoint view by its address (a deep link) and wait for ``ready``; its address."""
    address = deployment.address(deployment.alpha.checkpoint)
    page.goto(f"{base}/plugin/watermarks?checkpoint={quote(address, safe='')}")
    page.get_by_test_id(ready).wait_for()
    return address


def _json(page, path: str) -> dict:
    reply = page.request.get(path)
    assert reply.ok, reply.text()
    return reply.json()


def test_the_bundle_needs_no_session_and_the_json_does(server):
    with urllib.request.urlopen(f"{server}/watermark-ops/static/watermark-views.umd.js", timeout=10) as reply:
        assert reply.status == 200 and b"AirflowPlugin" in reply.read()
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{server}/watermark-ops/api/checkpoints", timeout=10)
    assert refused.value.code == 401


@pytest.mark.parametrize("mode", MODES)
def test_the_overview_from_browse_problems_first(pages, server, views_deployment, mode):  # noqa: F811
    page = pages[mode]
    page.goto(f"{server}/")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Watermarks").click()
    page.wait_for_url(f"{server}/plugin/watermarks")
    table = page.get_by_test_id("overview-table")
    table.wait_for()
    rows = table.locator("tbody tr")
    assert rows.count() == 3
    assert rows.first.get_attribute("data-checkpoint") == views_deployment.address(views_deployment.regressed)
    assert "watermark regressed" in rows.first.inner_text()
    assert page.locator("iframe").count() == 0  # the view is the UI's own, not a page in a frame
    _follows_the_ui(page, "[data-testid=overview-table] tbody td", mode)
    _shot(page, f"overview-{mode}")


@pytest.mark.parametrize("mode", MODES)
def test_a_checkpoint_view_and_the_back_button(pages, server, views_deployment, mode):  # noqa: F811
    page = pages[mode]
    d = views_deployment
    page.goto(f"{server}/plugin/watermarks")
    page.get_by_role("button", name="alpha orders").click()
    address = d.address(d.alpha.checkpoint)
    page.wait_for_url(f"**/plugin/watermarks?checkpoint={quote(address, safe='')}")
    view = page.get_by_test_id("checkpoint-view")
    view.wait_for()
    data = _json(page, f"{server}/watermark-ops/api/checkpoints/{address}")
    assert page.get_by_test_id("checkpoint-name").inner_text() == "alpha orders"
    assert f"{data['row']['watermark'][:10]} {data['row']['watermark'][11:19]} UTC" in view.inner_text()
    assert not re.search(r"\b1\d{12}\b", view.inner_text())  # no raw epoch milliseconds unless asked
    assert page.locator(".recharts-reference-line").count() == 3  # three runs, each start marked
    runs = page.get_by_test_id("runs-table").locator("tbody tr")
    assert [r.get_attribute("data-run-tag") for r in runs.all()] == d.alpha_runs
    assert page.get_by_test_id("state-table").locator("tbody tr").count() == len(data["state_store"]["operators"])
    _follows_the_ui(page, "[data-testid=runs-table] tbody td", mode)
    _shot(page, f"checkpoint-{mode}")
    page.go_back()
    page.wait_for_url(f"{server}/plugin/watermarks")
    page.get_by_test_id("overview-table").wait_for()


def test_hovering_a_batch_shows_its_values(pages, server, views_deployment):  # noqa: F811
    page = pages["light"]
    d = views_deployment
    address = _open_checkpoint(page, server, d)
    points = {p["batch_id"]: p for p in _json(page, f"{server}/watermark-ops/api/checkpoints/{address}")["chart"]["points"]}
    records = {r["batch_id"]: r for r in d.progress if r.get("executed", True)}
    batch_id = max(b for b in points if points[b]["watermark_ms"] and records.get(b, {}).get("input_rows"))
    page.locator(f"circle.watermark-dot[data-batch-id='{batch_id}']").hover()
    tip = page.get_by_test_id("batch-tooltip")
    tip.wait_for()
    assert tip.get_attribute("data-batch-id") == str(batch_id)
    values = {label: tip.locator(f"[data-field='{label}']").inner_text()
              for label in ("Watermark", "Batch time", "Input rows", "Late rows")}
    late_file = d.late_sink / f"batch={batch_id}.jsonl"
    late = len([line for line in late_file.read_text().splitlines() if line.strip()]) if late_file.exists() else None
    assert values["Input rows"] == f"{records[batch_id]['input_rows']:,}"
    assert values["Late rows"] == (f"{late:,}" if late is not None else "unknown")
    assert points[batch_id]["rows_late"] == late
    import pendulum

    assert values["Watermark"] == pendulum.from_timestamp(points[batch_id]["watermark_ms"] / 1000).format(
        "YYYY-MM-DD HH:mm:ss") + " UTC"
    _shot(page, "hover")


def test_zooming_to_a_run_is_in_the_url(pages, server, views_deployment):  # noqa: F811
    page = pages["light"]
    d = views_deployment
    address = _open_checkpoint(page, server, d, ready="run-picker")
    all_dots = page.locator("circle.watermark-dot").count()
    page.get_by_test_id("run-picker").select_option("2")
    page.wait_for_url("**run=2**")
    second = next(r for r in _json(page, f"{server}/watermark-ops/api/checkpoints/{address}")["runs"]
                  if r["run_tag"] == d.alpha_runs[1])
    dots = page.locator("circle.watermark-dot")
    from playwright.sync_api import expect

    expect(dots).to_have_count(len(second["batch_ids"]))  # the chart redrawn for the run (waits for it)
    assert sorted(int(x) for x in dots.evaluate_all("ds => ds.map(d => d.dataset.batchId)")) == second["batch_ids"]
    assert dots.count() < all_dots
    deep_link = page.url
    page.go_back()
    page.wait_for_function("() => !location.search.includes('run=')")
    page.goto(deep_link)  # the zoomed view again, from its address alone
    page.get_by_test_id("watermark-chart").wait_for()
    assert page.get_by_test_id("run-picker").input_value() == "2"


@pytest.mark.parametrize("mode", MODES)
def test_a_dag_tab_lists_exactly_that_dags_checkpoints(browser, server, views_deployment, mode):  # noqa: F811
    d = views_deployment
    alice = _page(browser, server, "alice", mode)
    try:
        alice.goto(f"{server}/dags/alpha_orders_audit/plugin/watermarks-dag")
        table = alice.get_by_test_id("overview-table")
        table.wait_for()
        assert [r.get_attribute("data-checkpoint") for r in table.locator("tbody tr").all()] == [
            d.address(d.alpha.checkpoint)]
        _follows_the_ui(alice, "[data-testid=overview-table] tbody td", mode)
        _shot(alice, f"dag-tab-{mode}")
        alice.goto(f"{server}{FORBIDDEN_PAGE}")  # another team's DAG
        alice.get_by_test_id("load-error").wait_for()
        assert alice.get_by_test_id("overview-table").count() == 0
        assert any(_refused_on_purpose(e) for e in CONSOLE_ERRORS)  # the console is listened to
        assert "beta orders" not in alice.inner_text("body")
    finally:
        alice.context.close()
    bob = _page(browser, server, "bob", mode)
    try:
        bob.goto(f"{server}/dags/beta_orders_audit/plugin/watermarks-dag")
        table = bob.get_by_test_id("overview-table")
        table.wait_for()
        assert [r.get_attribute("data-checkpoint") for r in table.locator("tbody tr").all()] == [d.address(d.beta)]
    finally:
        bob.context.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_dag_run_tab_shows_that_runs_batches(pages, server, views_deployment, mode):  # noqa: F811
    page = pages[mode]
    d = views_deployment
    run_id = d.alpha_runs[1]
    page.goto(f"{server}/dags/alpha_orders_audit/runs/{quote(run_id, safe='')}/plugin/watermarks-run")
    section = page.get_by_test_id("run-checkpoint")
    section.wait_for()
    assert section.count() == 1
    mine = sorted(r["batch_id"] for r in d.progress if r.get("run_tag") == run_id and r.get("executed", True))
    shown = [int(r.get_attribute("data-batch-id")) for r in section.get_by_test_id("run-batches").locator("tbody tr").all()]
    assert shown == mine
    assert [r.get_attribute("data-run-tag") for r in section.get_by_test_id("runs-table").locator("tbody tr").all()] == [
        run_id]
    preflight = _json(page, f"{server}/watermark-ops/api/dags/alpha_orders_audit/runs/{quote(run_id, safe='')}")
    verdict = preflight["checkpoints"][0]["preflight"]["verdict"]
    assert verdict in section.get_by_test_id("preflight").inner_text()
    _follows_the_ui(page, "[data-testid=run-batches] tbody td", mode)
    _shot(page, f"dag-run-tab-{mode}")


@pytest.mark.parametrize("mode", MODES)
def test_the_dashboard_counts_equal_the_overviews(pages, server, mode):
    page = pages[mode]
    page.goto(f"{server}/")
    widget = page.get_by_test_id("dashboard-view")
    widget.wait_for()
    widget.get_by_test_id("state-count").first.wait_for()
    shown = {s.get_attribute("data-state"): int(s.locator("[data-count]").inner_text())
             for s in widget.get_by_test_id("state-count").all()}
    overview = _json(page, f"{server}/watermark-ops/api/checkpoints")
    from watermark_ops.core.overview import state_key

    counted: dict[str, int] = {}
    for row in overview["checkpoints"]:
        counted[state_key(row)] = counted.get(state_key(row), 0) + 1
    assert shown == counted == overview["states"]
    assert sum(shown.values()) == overview["total"] == 3
    _shot(page, f"dashboard-{mode}")
    state, n = next(iter(shown.items()))
    widget.locator(f"[data-testid=state-count][data-state='{state}']").click()
    page.wait_for_url(f"**/plugin/watermarks?state={state}")
    page.get_by_test_id("overview-table").wait_for()
    assert page.get_by_test_id("overview-table").locator("tbody tr").count() == n


def test_a_deployment_theme_colours_the_views(browser, views_deployment, tmp_path):  # noqa: F811
    from watermark_ops.examples.browser import api_server

    brand = {str(k): {"value": f"oklch({0.97 - i * 0.07:.3f} 0.2 145)"}
             for i, k in enumerate((50, 100, 200, 300, 400, 500, 600, 700, 800, 900, 950))}
    env = {**views_deployment.env, "AIRFLOW__API__THEME": json.dumps({"tokens": {"colors": {"brand": brand}}})}
    with api_server(env, tmp_path / "api-server.log") as base:
        for mode in MODES:
            page = _page(browser, base, mode=mode)
            try:
                _open_checkpoint(page, base, views_deployment)
                line = page.locator(".recharts-line-curve").last  # the watermark, drawn last
                stroke = line.evaluate("e => getComputedStyle(e).stroke")
                assert stroke == _token_color(page, "brand-solid")
                assert " 145" in stroke  # the deployment's green hue, not a colour of the views' own
                _shot(page, f"theme-{mode}")
            finally:
                page.context.close()


def test_no_console_errors():
    """Runs last in this module: every page above logged no console error and threw nothing (but the
    refused requests of the page another team's user opens on purpose)."""
    assert [e for e in CONSOLE_ERRORS if not _refused_on_purpose(e)] == []


def _refused_on_purpose(error: str) -> bool:
    return error.startswith("alice/") and FORBIDDEN_PAGE in error and "status of 403" in error
