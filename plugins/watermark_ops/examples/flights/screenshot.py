"""``make screenshot``: the watermark views of the ``make run`` checkpoint, photographed in the Airflow UI.

Starts ``airflow api-server`` on 127.0.0.1 over the demo's Airflow home (its SQLite metadata DB,
this repo's dags/ and plugins/), signs in through the login form in Debian's headless Chromium,
and saves, under ``docs/`` (or the folder given), each in the UI's light and dark mode
(``<name>-light.png``, ``<name>-dark.png``):

* ``views-overview``: Browse → Watermarks, the overview;
* ``views-checkpoint``: the checkpoint of ``flight_windows`` (the chart of its runs, one batch hovered);
* ``views-dag``: the **Watermark** tab of the DAG that runs it;
* ``views-dag-run``: the **Watermark run** tab of that DAG's newest run;
* ``views-dashboard``: the home page with the **Watermark states** widget.

Run ``make run`` first: without the checkpoint the command says so and exits 2. The server is
stopped by its PID when the pictures are taken.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from urllib.parse import quote

from watermark_ops.examples.browser import api_server, auth_environment, chromium, login
from watermark_ops.examples.flights.demo import airflow_environment
from watermark_ops.examples.flights.settings import REPO_ROOT, job_locations, runtime_home

ADDRESS = "runtime/flight_windows"
DAG_ID = "flights_pipeline"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(REPO_ROOT / "docs"), help="folder of the PNG files (default docs/)")
    args = parser.parse_args(argv)
    checkpoint = Path(job_locations("flight_windows")["checkpoint"])
    if not (checkpoint / "offsets").is_dir():
        print(f"no checkpoint at {checkpoint}: run `make run` first", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    home = runtime_home()
    env = {**airflow_environment(), **auth_environment(home / "airflow" / "ui-auth")}
    written = []
    with api_server(env, home / "airflow" / "api-server.log") as base, chromium() as browser:
        for mode in ("light", "dark"):
            page = browser.new_context(viewport={"width": 1400, "height": 900}, color_scheme=mode).new_page()
            login(page, base)
            runs = page.request.get(f"{base}/api/v2/dags/{DAG_ID}/dagRuns?order_by=-run_after&limit=1").json()
            run_id = runs["dag_runs"][0]["dag_run_id"] if runs.get("dag_runs") else None

            def shot(name: str, url: str, ready: str, hover: str | None = None) -> None:
                page.goto(url)
                page.get_by_test_id(ready).first.wait_for()
                if hover:  # the batch before the newest: the newest is often a no-data batch
                    dots = page.locator(hover)
                    dots.nth(max(0, dots.count() - 2)).hover()
                    page.get_by_test_id("batch-tooltip").wait_for()
                path = out / f"{name}-{mode}.png"
                page.screenshot(path=str(path))
                written.append(path.name)

            shot("views-overview", f"{base}/plugin/watermarks", "overview-table")
            shot("views-checkpoint", f"{base}/plugin/watermarks?checkpoint={quote(ADDRESS, safe='')}",
                 "watermark-chart", hover="circle.watermark-dot")
            shot("views-dag", f"{base}/dags/{DAG_ID}/plugin/watermarks-dag", "overview-table")
            if run_id:
                shot("views-dag-run", f"{base}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/plugin/watermarks-run",
                     "run-checkpoint")
            shot("views-dashboard", f"{base}/", "state-count")
            page.context.close()
    print(f"wrote {', '.join(written)} under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
