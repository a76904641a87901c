"""Run with the team's environment's Python after the DAG runs: print, as JSON, what the runs left:
the XComs and task states of the run pattern and the CLI's ``late``, ``lateness`` and
``corrections`` JSON (each ``{"error": ...}`` when the CLI refused).

    python check.py DAG_ID CHECKPOINT
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

TEMPS = runpy.run_path(str(Path(__file__).resolve().parents[1] / "temps_project" / "check.py"))


def cli_json(*argv: str) -> dict:
    from watermark_ops.terminal import cli

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main([*argv, "--json"])
        return json.loads(out.getvalue())
    except (Exception, SystemExit) as error:  # what the CLI said, for the test's message
        return {"error": f"{type(error).__name__}: {error}", "output": (out.getvalue() + err.getvalue())[-2000:]}


if __name__ == "__main__":
    dag_id, location = sys.argv[1], sys.argv[2]
    print(json.dumps({"xcom": TEMPS["SHARED"]["SHARED"]["xcoms"](dag_id), "states": TEMPS["SHARED"]["states"](dag_id),
                      "late": cli_json("late", location), "lateness": cli_json("lateness", location),
                      "corrections": cli_json("corrections", location)}, default=str))
