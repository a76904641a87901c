"""``make screenshot``: the watermark pages of the ``make run`` checkpoint, photographed in the Airflow UI.

Starts ``airflow api-server`` on 127.0.0.1 over the demo's Airflow home (its SQLite metadata DB,
this repo's dags/ and plugins/), signs in through the login form in Debian's headless Chromium,
and saves, under ``docs/`` (or the folder given):

* ``watermarks-overview.png``: Browse → Watermarks, the overview inside the Airflow UI;
* ``checkpoint-page.png``: the page of ``flight_windows``'s checkpoint (the chart of its runs).

Run ``make run`` first: without the checkpoint the command says so and exits 2. The server is
stopped by its PID when the pictures are taken.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from watermark_ops.examples.browser import api_server, auth_environment, chromium, login
from watermark_ops.examples.flights.demo import airflow_environment
from watermark_ops.examples.flights.settings import REPO_ROOT, job_locations, runtime_home


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
    with api_server(env, home / "airflow" / "api-server.log") as base, chromium() as browser:
        page = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        login(page, base)
        page.goto(f"{base}/plugin/watermarks")
        page.frame_locator("iframe").locator("#overview").wait_for()
        page.screenshot(path=str(out / "watermarks-overview.png"))
        page.set_viewport_size({"width": 1200, "height": 900})
        page.goto(f"{base}/watermark-ops/checkpoints/runtime/flight_windows")
        page.locator("#chart").wait_for()
        page.screenshot(path=str(out / "checkpoint-page.png"), full_page=True)
    print(f"wrote {out / 'watermarks-overview.png'} and {out / 'checkpoint-page.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
