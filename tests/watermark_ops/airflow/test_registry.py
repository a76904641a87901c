"""Zero-configuration discovery through Airflow's asset state store, with real Airflow (``dag.test()``,
Task SDK, SQLite DB): an audit task registers its checkpoint; the UI overview (the real api-server
app, the plugin loaded from its entry point) and the monitor's ``checkpoints`` task list it with no
configuration file; registration is idempotent and never fails the task."""

from __future__ import annotations

import json

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops import stall_fixtures as sf
from tests.watermark_ops.airflow.registry_fixtures import START, audit_dag, clear_registry, registry_rows, set_registry_value

pytestmark = pytest.mark.timeout(600)

@pytest.fixture
def no_config(monkeypatch):
    for name in ("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", "AIRFLOW__WATERMARK_OPS__CHECKPOINTS",
                 "AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def client(airflow_db, tmp_path_factory):
    """A TestClient on the real api-server app (the plugin from the installed entry point), logged in."""
    from fastapi.testclient import TestClient

    passwords = tmp_path_factory.mktemp("auth") / "passwords.json"
    passwords.write_text(json.dumps({"admin": "admin"}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "admin:admin")
        patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
        from airflow.api_fastapi.app import create_app

        with TestClient(create_app("core"), base_url="http://127.0.0.1") as test_client:
            reply = test_client.post("/auth/token", json={"username": "admin", "password": "admin"})
            assert reply.status_code in (200, 201), reply.text
            test_client.headers["Authorization"] = f"Bearer {reply.json()['access_token']}"
            yield test_client


def test_an_audit_registers_its_checkpoint_for_the_pages_and_the_monitor(spark, airflow_db, client, no_config,
                                                                          tmp_path):
    from watermark_ops.airflow.registry import INDEX_KEY, record_key

    clear_registry()
    history = cf.restart_history(spark)
    checkpoint = str(cf.copy_checkpoint(history.checkpoint, tmp_path / "orders"))
    run = sf.run_dag(audit_dag(), run_conf={"checkpoint": checkpoint})
    assert sf.task_states(run) == {("audit_checkpoint", -1): "success"}

    rows = registry_rows()
    assert rows[INDEX_KEY][0] == [record_key(checkpoint)]
    record = rows[record_key(checkpoint)][0]
    assert record["checkpoint"] == checkpoint
    assert [(t["dag_id"], t["task_id"], t["operator"]) for t in record["tasks"]] == [
        ("wo_registry_audit", "audit_checkpoint", "WatermarkAuditOperator")]
    assert record["tasks"][0]["asset"]["name"] == "watermark_ops_audit_memory"

    # The pages: listed with its DAG, readable at its own folder only (no checkpoint root configured).
    document = client.get("/watermark-ops/api/checkpoints").json()
    assert document["roots"] == {}
    row = next(r for r in document["checkpoints"] if r["location"] == checkpoint)
    assert row["dag_ids"] == ["wo_registry_audit"] and row["error"] is None
    assert row["audit_status"] == "ok" and row["head_batch_id"] == 6
    root = row["url"].split("/")[3]
    assert row["url"] == f"/watermark-ops/checkpoints/{root}/orders" and root.startswith("registered-")
    # Named by its DAG and query (no run pattern group here: the folder), not by the hashed root.
    assert row["name"] == "wo_registry_audit / orders"
    page = client.get(f"/watermark-ops/api/checkpoints/{root}/orders").json()
    assert page["audit"]["status"] == "ok" and page["name"] == "wo_registry_audit / orders"
    html = client.get("/watermark-ops/").text
    assert "wo_registry_audit / orders" in html and "registered-" not in html.replace(row["url"], "")
    assert "no checkpoint root is configured" in html and "Checkpoint roots: ." not in html
    (tmp_path / "sibling").mkdir()
    assert client.get(f"/watermark-ops/api/checkpoints/{root}/sibling").status_code == 404
    assert client.get(f"/watermark-ops/api/checkpoints/{root}/orders/offsets").status_code == 404
    for link in ("/watermark-ops/dags/wo_registry_audit", "/watermark-ops/dags/wo_registry_audit?task_id=audit_checkpoint"):
        reply = client.get(link, follow_redirects=False)
        assert reply.status_code == 307 and reply.headers["location"] == row["url"]

    # The monitor: its watch task lists it (default thresholds, skip while missing).
    from airflow.dag_processing.dagbag import DagBag

    from tests.dags.test_watermark_monitor import DAG_FILE

    monitor = DagBag(dag_folder=str(DAG_FILE)).dags["watermark_monitor"]
    with sf.AlertServer() as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK", server.connection("/watermarks"))
        monitor_run = monitor.test()
    summary = sf.xcoms(monitor_run)[("watch", -1, "summary")]
    # Registered with no thresholds: the defaults, whose max_lag of 6 hours a replay of 2013 exceeds.
    assert (summary["checkpoints"], summary["counts"], summary["alarms"]) == (1, {"lagging": 1}, [checkpoint])
    # The alarm and its notification name the checkpoint by its DAG and query.
    (alert,) = [r["body"] for r in server.requests]
    assert alert["name"] == "wo_registry_audit / orders" and alert["checkpoint"] == checkpoint
    assert alert["message"].startswith("wo_registry_audit / orders: ")
    # The monitor only reads the registry (it is no job of the checkpoint's).
    assert {t["dag_id"] for t in registry_rows()[record_key(checkpoint)][0]["tasks"]} == {"wo_registry_audit"}


def test_registration_is_idempotent_and_never_fails_the_task(spark, airflow_db, no_config, tmp_path):
    from watermark_ops.airflow.registry import INDEX_KEY, record_key

    clear_registry()
    checkpoint = str(tmp_path / "cp")
    cf.handmade_checkpoint(checkpoint, [(0, 5000), (5000, 9000)])
    dag = audit_dag("wo_registry_twice")
    sf.run_dag(dag, run_conf={"checkpoint": checkpoint})
    first = registry_rows()
    sf.run_dag(dag, run_conf={"checkpoint": checkpoint})
    assert registry_rows() == first  # nothing rewritten: same values, same updated_at

    set_registry_value(record_key(checkpoint), ["not", "a", "record"])  # a broken registry value
    run = sf.run_dag(dag, run_conf={"checkpoint": checkpoint})
    assert sf.task_states(run) == {("audit_checkpoint", -1): "success"}  # the audit still ran
    assert sf.xcoms(run)[("audit_checkpoint", -1, "return_value")]["status"] == "ok"
    assert registry_rows()[record_key(checkpoint)][0] == ["not", "a", "record"]  # left for a person to see
    assert registry_rows()[INDEX_KEY][0] == [record_key(checkpoint)]


def test_known_checkpoints_merge_the_configuration_over_the_registry():
    from watermark_ops.airflow.config import parse_entries
    from watermark_ops.airflow.registry import known_checkpoints, read_registry

    registered = [
        {"checkpoint": "/data/a", "tasks": [
            {"dag_id": "pipe", "task_id": "healthy", "operator": "WatermarkStallSensor",
             "thresholds": {"max_lag": 60.0, "stall_batches": 5}, "landings": ["/land/a"], "late_sink": "/late/a",
             "asset": {"name": "a_days", "uri": "a_days"}},
            {"dag_id": "watermark_monitor", "task_id": "watch", "operator": "WatermarkStallSensor",
             "thresholds": {"max_lag": 999.0}, "landings": [], "late_sink": None, "asset": None}]},
        {"checkpoint": "/data/b/", "tasks": [{"dag_id": "other", "task_id": "audit", "operator": "WatermarkAuditOperator"}]},
    ]
    configured = parse_entries(json.dumps({"defaults": {"max_idle": "PT2H"}, "checkpoints": [
        {"checkpoint": "/data/b", "name": "b", "max_lag": None, "missing_ok": False, "note": "n"},
        {"checkpoint": "/data/c", "dag_ids": ["c_dag"]}]}), "cfg")
    known = {k["checkpoint"]: k for k in known_checkpoints(registered, configured, exclude_threshold_dags=["watermark_monitor"])}
    assert list(known) == ["/data/b", "/data/c", "/data/a"]  # configured first, then the registered rest
    a, b, c = known["/data/a"], known["/data/b"], known["/data/c"]
    assert a["thresholds"] == {"max_lag": 60.0, "stall_batches": 5} and a["missing_ok"] is True
    assert a["dag_ids"] == ["pipe", "watermark_monitor"] and a["landings"] == ["/land/a"] and a["late_sink"] == "/late/a"
    assert a["assets"] == [{"name": "a_days", "uri": "a_days"}] and a["registered"] and not a["configured"]
    assert b["name"] == "b" and b["missing_ok"] is False and b["dag_ids"] == ["other"] and b["registered"]
    assert b["thresholds"] == {"max_idle": "PT2H", "max_lag": None}
    assert c["dag_ids"] == ["c_dag"] and not c["registered"] and c["thresholds"] == {"max_idle": "PT2H"}

    store = {"index": ["checkpoint:/x", "checkpoint:/y", "checkpoint:/gone"], "checkpoint:/x": {"checkpoint": "/x", "tasks": []},
             "checkpoint:/y": {"tasks": 3}}
    records, problems = read_registry(store.get)
    assert records == [{"checkpoint": "/x", "tasks": []}]
    assert len(problems) == 1 and "checkpoint:/y" in problems[0]


@pytest.mark.parametrize("text, match", [
    ('[{"checkpoint": "/a", "job": "x"}]', r"checkpoints\[0\]: unknown keys \['job'\]"),
    ('[{"max_lag": "PT1H"}]', r"checkpoints\[0\]: 'checkpoint' \(a location\) is required"),
    ('[{"checkpoint": "/a", "max_lag": "six hours"}]', r"checkpoints\[0\] \(/a\): max_lag"),
    ('{"defaults": {"stall_batch": 3}}', r"defaults: unknown keys"),
    ('[{"checkpoint": "$WO_SURELY_UNSET_VAR/cp"}]', r"checkpoints\[0\]: '\$WO_SURELY_UNSET_VAR/cp': environment variable \$WO_SURELY_UNSET_VAR is not set"),
    ("not json", r"cannot read the monitor config"),
])
def test_bad_entries_name_the_option_and_the_entry(text, match):
    from watermark_ops.airflow.config import parse_entries

    with pytest.raises(ValueError, match=rf"^opt: {match}"):
        parse_entries(text, "opt")


def test_a_task_of_ones_own_registers_landings_and_the_late_sink(airflow_db, no_config, tmp_path):
    """What a DAG's own task (e.g. a run pattern) does: the registry as inlet, one call."""
    from airflow.sdk import DAG, Asset, get_current_context, task

    from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY, known_checkpoints, register_checkpoint, server_registry

    clear_registry()
    checkpoint, landing, late = (str(tmp_path / name) for name in ("cp", "landing", "late"))
    days = Asset(name="wo_registry_days")

    with DAG("wo_registry_own_task", schedule=None, start_date=START) as dag:
        @task(inlets=[CHECKPOINT_REGISTRY], outlets=[days])
        def run_job():
            return register_checkpoint(get_current_context(), checkpoint, landings=[landing], late_sink=late, asset=days)

        run_job()

    run = sf.run_dag(dag)
    assert sf.xcoms(run)[("run_job", -1, "return_value")] is True
    records, problems = server_registry()
    assert problems == []
    (known,) = known_checkpoints(records, [])
    assert (known["checkpoint"], known["dag_ids"], known["landings"], known["late_sink"]) == (
        checkpoint, ["wo_registry_own_task"], [landing], late)
    assert known["assets"] == [{"name": "wo_registry_days", "uri": "wo_registry_days"}]
    assert known["tasks"] == [{"dag_id": "wo_registry_own_task", "task_id": "run_job", "operator": "_PythonDecoratedOperator"}]


def test_the_newest_runs_late_rows_survive_a_later_registration(airflow_db, no_config, tmp_path):
    """The run pattern's ledger task keeps the run's late rows on the record; a task of the same run
    registering after it (the audit, in whichever order the tasks ran) keeps them."""
    from airflow.sdk import DAG, get_current_context, task

    from watermark_ops.airflow.registry import (CHECKPOINT_REGISTRY, known_checkpoints, record_late_rows,
                                                register_checkpoint, server_registry)

    clear_registry()
    checkpoint = str(tmp_path / "cp")
    run = {"run_tag": "manual__1", "late_rows_known": True, "rows_late": 7, "rows_late_recovered": 5,
           "rows_late_dropped": 2}

    with DAG("wo_registry_late_rows", schedule=None, start_date=START) as dag:
        @task(inlets=[CHECKPOINT_REGISTRY])
        def ledger():
            context = get_current_context()
            register_checkpoint(context, checkpoint)
            return record_late_rows(context, checkpoint, run)

        @task(inlets=[CHECKPOINT_REGISTRY])
        def audit():
            return register_checkpoint(get_current_context(), checkpoint, landings=[str(tmp_path / "landing")])

        ledger() >> audit()

    states = sf.run_dag(dag)
    assert sf.xcoms(states)[("ledger", -1, "return_value")] is True
    (known,) = known_checkpoints(server_registry()[0], [])
    assert known["late"] == {"run_tag": "manual__1", "known": True, "rows_late": 7, "rows_late_recovered": 5,
                             "rows_uncorrected": 2}
    assert [t["task_id"] for t in known["tasks"]] == ["audit", "ledger"]
