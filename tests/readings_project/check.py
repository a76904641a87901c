"""Run with the team's environment's Python after the DAG runs: print, as JSON, what the DAG runs left
(the XComs and states of the run pattern's tasks), what the UI shows through Airflow's real
api-server app (the facts of ``tests/user_project/check.py``, its functions), and what every face
prints for the checkpoint: the CLI's tables and JSON, the UI's overview and page (HTML and JSON),
the monitor's alarm and the webhook notification's payload.

    python check.py DAG_ID CHECKPOINT LANDING
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

SHARED = runpy.run_path(str(Path(__file__).resolve().parents[1] / "user_project" / "check.py"))


def states(dag_id: str) -> dict:
    """``{run_id: {task_id: state}}`` read from the metadata DB."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    out: dict = {}
    with create_session() as session:
        for ti in session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id):
            out.setdefault(ti.run_id, {})[ti.task_id] = str(ti.state)
    return out


def cli_texts(checkpoint: str, landing: str) -> dict:
    """``{command: stdout and stderr}`` of the installed CLI's commands on the checkpoint."""
    from watermark_ops.terminal import cli

    def run(*argv: str) -> str:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main(list(argv))
            except SystemExit:  # --help
                pass
        return out.getvalue() + err.getvalue()

    texts = {}
    for command in ("audit", "status", "late", "lateness", "state", "preflight"):
        texts[command] = run(command, checkpoint)
        texts[f"{command} --json"] = run(command, checkpoint, "--json")
        texts[f"{command} --help"] = run(command, "--help")
    texts["lateness --landing"] = run("lateness", checkpoint, "--landing", landing)
    return texts


def ui_texts(checkpoint: str) -> dict:
    """The overview and the checkpoint's page as the real app serves them: ``{"overview", "overview
    json", "page", "page json"}`` (text)."""
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import create_app

    with TestClient(create_app("core"), base_url="http://127.0.0.1") as client:
        token = client.post("/auth/token", json={"username": "admin", "password": "admin"}).json()["access_token"]
        client.headers["Authorization"] = f"Bearer {token}"
        texts = {"overview": client.get("/watermark-ops/").text,
                 "overview json": client.get("/watermark-ops/api/checkpoints").text}
        rows = json.loads(texts["overview json"]).get("checkpoints", [])
        row = next((r for r in rows if (r.get("location") or "").rstrip("/") == checkpoint.rstrip("/")), {})
        if row.get("url"):
            path = row["url"].split("/watermark-ops", 1)[1]
            texts["page"] = client.get("/watermark-ops" + path).text
            texts["page json"] = client.get("/watermark-ops" + path.replace("/checkpoints/", "/api/checkpoints/", 1)).text
        return texts


def alarm_texts(checkpoint: str) -> dict:
    """The monitor's alarm for the checkpoint (as registered: its name from the registry) and the
    webhook payloads a notifier builds from it and from a fresh evaluation."""
    from watermark_ops.airflow.monitor import evaluate_entry
    from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier
    from watermark_ops.airflow.registry import known_checkpoints, server_registry

    known = next(k for k in known_checkpoints(server_registry()[0], [])
                 if k["checkpoint"].rstrip("/") == checkpoint.rstrip("/"))
    result = evaluate_entry({"checkpoint": checkpoint, "missing_ok": False, "name": known["name"]})

    class Alarm(Exception):
        payload = result["payload"]

    return {"alarm": json.dumps(result["payload"]),
            "notification": json.dumps(WatermarkWebhookNotifier().build_alert({"exception": Alarm()})),
            "notification (fresh)": json.dumps(WatermarkWebhookNotifier(checkpoint=checkpoint).build_alert({}))}


if __name__ == "__main__":
    dag_id, location, landing = sys.argv[1], sys.argv[2], sys.argv[3]
    faces = {**{f"cli {k}": v for k, v in cli_texts(location, landing).items()},
             **{f"ui {k}": v for k, v in ui_texts(location).items()}, **alarm_texts(location)}
    print(json.dumps({"xcom": SHARED["xcoms"](dag_id), "states": states(dag_id), "ui": SHARED["ui"](location),
                      "faces": faces}, default=str))
