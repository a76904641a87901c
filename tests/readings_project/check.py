"""Run with the team's environment's Python after the DAG runs: print, as JSON, what the DAG runs left
(the XComs and states of the run pattern's tasks) and what the UI shows through Airflow's real
api-server app: the facts of ``tests/user_project/check.py`` (its functions), plus the task states.

    python check.py DAG_ID CHECKPOINT
"""

from __future__ import annotations

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


if __name__ == "__main__":
    dag_id, location = sys.argv[1], sys.argv[2]
    print(json.dumps({"xcom": SHARED["xcoms"](dag_id), "states": states(dag_id), "ui": SHARED["ui"](location)},
                     default=str))
