"""Run with the user's environment's Python after the DAG runs: print, as JSON, what the DAG runs left
(the XComs of the run pattern's tasks) and what the UI shows through Airflow's real api-server app.

    python check.py DAG_ID CHECKPOINT
"""

from __future__ import annotations

import json
import sys


def xcoms(dag_id: str) -> dict:
    """``{run_id: {task_id: return_value}}`` read from the metadata DB."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    out: dict = {}
    with create_session() as session:
        for row in session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.key == "return_value"):
            value = row.value
            while isinstance(value, str):
                try:
                    value = json.loads(value)
                except ValueError:
                    break
            out.setdefault(row.run_id, {})[row.task_id] = value
    return out


def ui(checkpoint: str) -> dict:
    """The overview row of ``checkpoint`` and its page's JSON, through the real app and auth manager."""
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import create_app

    with TestClient(create_app("core"), base_url="http://127.0.0.1") as client:
        token = client.post("/auth/token", json={"username": "admin", "password": "admin"}).json()["access_token"]
        client.headers["Authorization"] = f"Bearer {token}"
        listed = client.get("/api/v2/plugins").json()["plugins"]
        plugins = [p["name"] for p in listed]
        # The React views, from the installed wheel alone: their react_apps and the bundle they load.
        react_apps = [a for p in listed if p["name"] == "watermark_ops" for a in p.get("react_apps", [])]
        bundles = {a["bundle_url"]: client.get(a["bundle_url"]) for a in react_apps}
        bundle = [{"url": url, "status": r.status_code, "bytes": len(r.content),
                   "plugin": b"AirflowPlugin" in r.content} for url, r in bundles.items()]
        overview = client.get("/watermark-ops/api/checkpoints")
        is_json = overview.headers.get("content-type", "").startswith("application/json")
        rows = overview.json().get("checkpoints", []) if overview.status_code == 200 and is_json else []
        row = next((r for r in rows if (r.get("location") or "").rstrip("/") == checkpoint.rstrip("/")), None)
        page = html = None
        if row and row.get("url"):
            path = row["url"].split("/watermark-ops", 1)[1]
            page_reply = client.get("/watermark-ops" + path.replace("/checkpoints/", "/api/checkpoints/", 1))
            page = page_reply.json() if page_reply.status_code == 200 else {"status": page_reply.status_code}
            html = client.get("/watermark-ops" + path).status_code
        return {"plugins": plugins, "react_apps": [a["destination"] for a in react_apps], "bundles": bundle,
                "overview_status": overview.status_code, "overview_json": is_json,
                "rows": len(rows), "row": row,
                "page": page, "page_html_status": html}


if __name__ == "__main__":
    dag_id, location = sys.argv[1], sys.argv[2]
    print(json.dumps({"xcom": xcoms(dag_id), "ui": ui(location)}, default=str))
