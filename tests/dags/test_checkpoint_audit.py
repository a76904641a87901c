"""The on-call checkpoint_audit DAG: parses cheaply, has the Params form, logs the terminal's table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "checkpoint_audit.py"


@pytest.fixture(scope="module")
def dag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.get_dag("checkpoint_audit")


def test_manual_dag_with_a_checkpoint_form(dag):
    from watermark_ops.examples.flights.settings import job_locations

    assert type(dag.timetable).__name__ == "NullTimetable"  # schedule=None: triggered by hand only
    param = dag.params.get_param("checkpoint")
    assert param.value == job_locations("flight_windows")["checkpoint"]
    assert param.schema["type"] == "string" and param.schema["title"] == "Checkpoint location"
    (task,) = dag.tasks
    assert task.task_type == "WatermarkAuditOperator" and task.checkpoint == "{{ params.checkpoint }}"


def test_dag_file_does_not_import_pyspark():
    code = (f"import runpy, sys; runpy.run_path({str(DAG_FILE)!r}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_triggered_run_logs_the_same_table_as_the_terminal(spark, dag, tmp_path, capfd):
    from airflow.models import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from watermark_ops.core.audit import run_audit
    from watermark_ops.render import audit_report_text

    checkpoint = cf.copy_checkpoint(cf.restart_history(spark).checkpoint, tmp_path / "cp")
    capfd.readouterr()
    dag_run = dag.test(run_conf={"checkpoint": str(checkpoint)})
    logged = capfd.readouterr()
    log = logged.out + logged.err

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id="checkpoint_audit", run_id=dag_run.run_id).one()
        xcom = session.query(XComModel).filter_by(dag_id="checkpoint_audit", run_id=dag_run.run_id,
                                                  key="return_value").one()
        assert ti.state == "success"
        report = xcom.value if not isinstance(xcom.value, str) else json.loads(xcom.value)
    assert report["status"] == "ok" and report["location"] == str(checkpoint)
    # The table the terminal prints for the same checkpoint (same rows, same findings) is in the log.
    terminal = audit_report_text(run_audit(str(checkpoint)))
    lines = terminal.splitlines()
    tables = [line for line in lines if line.startswith(("┃", "│"))]
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))  # the batches' table ends here
    batches = [line for line in lines[:end] if line.startswith(("┃", "│"))]
    assert len(batches) == 1 + 7
    assert len(tables) == len(batches) + 2  # then the state store's: its header and its one operator
    for line in tables:
        assert line in log


def test_on_call_accepts_a_deliberate_reset_through_the_form(dag, tmp_path):
    """A checkpoint deleted and started again (new query id) fails the audit until on-call gives a reason."""
    import shutil

    from airflow.models import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    def audit(conf: dict) -> tuple[str, dict]:
        dag_run = dag.test(run_conf=conf)
        with create_session() as session:
            ti = session.query(TaskInstance).filter_by(dag_id="checkpoint_audit", run_id=dag_run.run_id).one()
            xcom = session.query(XComModel).filter_by(dag_id="checkpoint_audit", run_id=dag_run.run_id,
                                                      key="return_value").one()
            report = xcom.value if not isinstance(xcom.value, str) else json.loads(xcom.value)
            return ti.state, report

    root = tmp_path / "deleted-on-purpose"
    ids = [f"7d1b2a3c-0000-4000-8000-00000000000{n}" for n in "abc"]
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000)], query_id=ids[0])
    assert audit({"checkpoint": str(root), "accept_reset": ""})[0] == "success"
    shutil.rmtree(root)  # Spark's advice after a state schema change: delete the checkpoint, start again
    cf.handmade_checkpoint(str(root), [(0, 3000)], query_id=ids[1])
    # On-call gives the reason in the form of the first audit after the reset: accepted, on record.
    state, report = audit({"checkpoint": str(root), "accept_reset": "OPS-7: deleted after a state schema change"})
    assert state == "success" and report["status"] == "ok"
    (accepted,) = [f for f in report["findings"] if f["rule"] == "reset_accepted"]
    assert "OPS-7" in accepted["message"] and ids[0] in accepted["message"] and accepted["severity"] == "info"
    # Another reset nobody accepted fails the audit, naming the acceptance that does not cover it.
    shutil.rmtree(root)
    cf.handmade_checkpoint(str(root), [(0, 1000)], query_id=ids[2])
    state, report = audit({"checkpoint": str(root), "accept_reset": ""})
    assert state == "failed" and [f["rule"] for f in report["findings"]] == ["checkpoint_reset"]
    assert ids[1] in report["findings"][0]["message"]
