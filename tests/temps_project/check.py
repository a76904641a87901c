"""Run with the team's environment's Python after the DAG runs: print, as JSON, what the runs left:
the XComs and task states of the run pattern, the asset events of the corrections, the CLI's
``corrections``, ``status`` and ``lateness`` JSON, the monitor's evaluation and the UI's overview row.

    python check.py DAG_ID CHECKPOINT
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

SHARED = runpy.run_path(str(Path(__file__).resolve().parents[1] / "readings_project" / "check.py"))


def asset_events() -> list[dict]:
    """``[{"asset": uri, "extra": {...}}]`` of every asset event in the metadata DB, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(AssetEvent, AssetModel).join(AssetModel, AssetEvent.asset_id == AssetModel.id).order_by(
            AssetEvent.id).all()
        return [{"asset": asset.uri, "extra": event.extra} for event, asset in rows]


def cli_json(*argv: str) -> dict:
    from watermark_ops.terminal import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main([*argv, "--json"])
    return json.loads(out.getvalue())


def monitor(checkpoint: str) -> dict:
    """The monitor's evaluation of the checkpoint (what raises its alarms)."""
    from watermark_ops.airflow.monitor import evaluate_entry

    result = evaluate_entry({"checkpoint": checkpoint, "missing_ok": False})
    return {"alarm": result["alarm"], "counted": result["counted"], "restart_alarms": result["restart_alarms"]}


if __name__ == "__main__":
    dag_id, location = sys.argv[1], sys.argv[2]
    print(json.dumps({"xcom": SHARED["SHARED"]["xcoms"](dag_id), "states": SHARED["states"](dag_id),
                      "events": asset_events(), "corrections": cli_json("corrections", location),
                      "status": cli_json("status", location), "lateness": cli_json("lateness", location),
                      "monitor": monitor(location), "ui": SHARED["SHARED"]["ui"](location)}, default=str))
