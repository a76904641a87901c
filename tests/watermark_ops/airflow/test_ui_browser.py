"""End to end in a real browser: the real ``airflow api-server`` (this session's SQLite metadata DB,
the repo's plugins folder, SimpleAuthManager), Debian's headless Chromium driven by Playwright.

Signs in through the login form, opens **Watermarks** from the UI's navigation (the plugin's
external view: the overview in the UI's iframe), then the page of a real checkpoint (five runs of
the main job) and of a checkpoint whose watermark went backwards, and checks what is rendered:
the state names, the watermark, the finding rule names and files, the red of the regression.
Screenshots are saved under ``test-artifacts/ui/`` (``$WATERMARK_OPS_TEST_ARTIFACTS``).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.watermark_ops.airflow import ui_fixtures as uf

pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("WATERMARK_OPS_TEST_ARTIFACTS") or REPO / "test-artifacts") / "ui"


@pytest.fixture(scope="module")
def server(spark, airflow_db, tmp_path_factory):
    """``(base URL, the UI checkpoints)`` of a running api-server; stopped by its PID after the module."""
    from watermark_ops.examples.browser import api_server, auth_environment

    folder = tmp_path_factory.mktemp("ui-browser")
    ui = uf.build(spark, folder / "checkpoints", big_batches=600)
    env = {**os.environ, **auth_environment(folder / "auth"), **ui.env(),
           "AIRFLOW__API__EXPOSE_CONFIG": "False", "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING"}
    with api_server(env, folder / "api-server.log") as base:
        yield base, ui


@pytest.fixture(scope="module")
def page(server):
    from watermark_ops.examples.browser import chromium, login

    base, _ = server
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        login(page, base)
        yield page
        context.close()


def _shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_the_routes_refuse_a_request_without_a_session(server):
    base, _ = server
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{base}/watermark-ops/api/checkpoints", timeout=10)
    assert refused.value.code == 401


def test_the_overview_from_the_ui_navigation(page, server):
    base, ui = server
    page.goto(f"{base}/")
    page.get_by_role("button", name="Browse").click()
    page.get_by_role("menuitem", name="Watermarks").click()
    page.wait_for_url(f"{base}/plugin/watermarks")
    frame = page.frame_locator("iframe")
    table = frame.locator("#overview")
    table.wait_for()
    text = table.inner_text()
    for name in ("real", "regressed", "broken", "big", "not-yet", "secret"):
        assert name in text
    assert "violation" in text and "watermark_regressed" in text
    assert "not under a configured checkpoint root" in text and "not run yet" in text
    states = set(frame.locator("#overview .badge").all_inner_texts())
    assert states & {"advancing", "idle"} and "violation" in states
    first = frame.locator("#overview tr[data-checkpoint]").first.get_attribute("data-checkpoint")
    assert first != str(ui.root / "real")  # problems first
    _shot(page, "overview-in-airflow")


def test_a_real_checkpoint_page(page, server, spark):
    from tests.watermark_ops import checkpoint_fixtures as cf

    base, _ = server
    page.goto(f"{base}/watermark-ops/")
    page.get_by_role("link", name="test/real", exact=True).click()
    page.wait_for_url(f"{base}/watermark-ops/checkpoints/test/real")
    data = page.request.get(f"{base}/watermark-ops/api/checkpoints/test/real").json()
    assert page.inner_text("#state") == data["state"] and data["state"] in ("advancing", "idle")
    assert data["status"]["watermark"] in page.inner_text("#watermark")
    assert page.locator("#chart").is_visible()
    history = cf.restart_history(spark)
    assert page.locator("#chart line.restart").count() == len([r for r in history.runs if any(
        b.get("executed", True) for b in r["batches"])])
    assert page.locator("#runs tr").count() == 1 + len(history.runs)
    assert "No findings" in page.inner_text("#findings")
    _shot(page, "checkpoint-real")


def test_a_regression_shows_red_with_its_file(page, server):
    base, ui = server
    page.goto(f"{base}/watermark-ops/checkpoints/test/regressed")
    assert page.inner_text("#audit-status") == "audit: violation"
    row = page.locator("#findings tr", has_text="watermark_regressed")
    assert "regressed/offsets/3" in row.inner_text()
    color = row.locator("td").first.evaluate("td => getComputedStyle(td).backgroundColor")
    assert color == "rgb(255, 245, 245)"  # the red row
    assert page.locator("#chart .regressed").count() == 1
    assert page.locator("#chart .inflight").count() == 2  # batch 4 in flight, in both panels
    _shot(page, "checkpoint-regressed")


def test_the_big_checkpoint_says_what_it_leaves_out(page, server):
    base, _ = server
    page.goto(f"{base}/watermark-ops/checkpoints/test/big")
    assert "Showing the newest 500 of 600 batches (from batch 100)" in page.inner_text("#chart-note")


def test_a_refused_path_in_the_browser(page, server):
    base, ui = server
    reply = page.goto(f"{base}/watermark-ops/checkpoints/test/escape")
    assert reply.status == 404
    assert str(ui.outside) not in page.content()
