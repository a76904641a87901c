"""Run with the team's environment's Python after the DAG runs: print, as JSON, what the runs left:
the XComs and task states of the run pattern, the asset events of the corrections, and the CLI's
``corrections --json``.

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


def corrections_json(checkpoint: str) -> dict:
    from watermark_ops.terminal import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["corrections", checkpoint, "--json"])
    return json.loads(out.getvalue())


if __name__ == "__main__":
    dag_id, location = sys.argv[1], sys.argv[2]
    print(json.dumps({"xcom": SHARED["SHARED"]["xcoms"](dag_id), "states": SHARED["states"](dag_id),
                      "events": asset_events(), "corrections": corrections_json(location)}, default=str))
