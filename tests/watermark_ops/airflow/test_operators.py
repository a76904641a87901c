"""WatermarkAuditOperator run by real Airflow (``dag.test()``, Task SDK, SQLite DB, asset state store).

The test DAGs live in a DAG file written by this module into its own folder, registered as a second
local DAG bundle: ``dag.test()`` runs only DAGs that a bundle serialized.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf

DAG_FILE = textwrap.dedent('''
    from datetime import timedelta

    import pendulum
    from airflow.sdk import DAG, Asset

    from watermark_ops.airflow.operators import WatermarkAuditOperator

    START = pendulum.datetime(2024, 1, 1, tz="UTC")
    PARAMS = {"checkpoint": ""}

    with DAG("wo_test_audit_strict", schedule=None, start_date=START, params=PARAMS):
        WatermarkAuditOperator(task_id="audit", checkpoint="{{ params.checkpoint }}",
                               retries=2, retry_delay=timedelta(seconds=1))

    with DAG("wo_test_audit_soft", schedule=None, start_date=START, params=PARAMS):
        WatermarkAuditOperator(task_id="audit", checkpoint="{{ params.checkpoint }}", soft=True,
                               memory_asset=Asset(name="wo_test_soft_memory"), retries=2)

    with DAG("wo_test_audit_full", schedule=None, start_date=START, params=PARAMS):
        WatermarkAuditOperator(task_id="audit", checkpoint="{{ params.checkpoint }}", full=True)

    with DAG("wo_test_audit_accept", schedule=None, start_date=START, params={"checkpoint": "", "accept_reset": ""}):
        WatermarkAuditOperator(task_id="audit", checkpoint="{{ params.checkpoint }}",
                               accept_reset="{{ params.accept_reset }}", memory_asset=Asset(name="wo_test_accept_memory"))
''')


@pytest.fixture(scope="module")
def test_dags(airflow_db, tmp_path_factory):
    """The test DAGs, in a second DAG bundle next to the project's dags folder."""
    from airflow.dag_processing.dagbag import DagBag

    folder = tmp_path_factory.mktemp("operator_test_dags")
    (folder / "audit_test_dags.py").write_text(DAG_FILE)
    bundles = [
        {"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle", "kwargs": {}},
        {"name": "watermark-ops-operator-tests", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
         "kwargs": {"path": str(folder), "refresh_interval": 0}},
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps(bundles))
        bag = DagBag(dag_folder=str(folder))
        assert bag.import_errors == {}
        yield {dag_id: bag.get_dag(dag_id) for dag_id in bag.dag_ids}


def outcome(dag_run):
    """(task state, try number, XCom return_value) of the run's one task."""
    from airflow.models import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id).one()
        xcom = session.query(XComModel).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id,
                                                  key="return_value").one_or_none()
        value = None if xcom is None else xcom.value
        return ti.state, ti.try_number, value if not isinstance(value, str) else json.loads(value)


def stored(asset_name: str, key: str):
    """The asset state store value of ``key`` on the asset named ``asset_name``, read from the DB."""
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (session.query(AssetStateStoreModel).join(AssetModel, AssetModel.id == AssetStateStoreModel.asset_id)
               .filter(AssetModel.name == asset_name, AssetStateStoreModel.key == key).one_or_none())
        return None if row is None else json.loads(row.value)


def test_audit_remembers_in_the_asset_state_store_and_a_rewind_fails_without_retries(spark, test_dags, tmp_path):
    from watermark_ops.airflow.operators import AUDIT_MEMORY_ASSET

    history = cf.restart_history(spark)
    checkpoint = cf.copy_checkpoint(history.checkpoint, tmp_path / "cp")
    dag = test_dags["wo_test_audit_strict"]

    state, tries, report = outcome(dag.test(run_conf={"checkpoint": str(checkpoint)}))
    assert (state, tries) == ("success", 1)
    assert report["status"] == "ok" and report["head_batch_id"] == 6 and report["findings"] == []
    assert report["watermark_ms"] == history.runs[-1]["batches"][-1]["watermark_ms"]
    memory = stored(AUDIT_MEMORY_ASSET.name, f"watermark_audit:{checkpoint}")
    assert memory["query_id"] == history.runs[0]["query_id"]
    assert (memory["head_batch_id"], memory["watermark_ms"]) == (6, report["watermark_ms"])

    for batch_id in (5, 6):  # the newest files deleted: only the memory in Airflow can tell
        (checkpoint / "offsets" / str(batch_id)).unlink()
        (checkpoint / "commits" / str(batch_id)).unlink()
    state, tries, report = outcome(dag.test(run_conf={"checkpoint": str(checkpoint)}))
    assert (state, tries) == ("failed", 1)  # AirflowFailException: no retry although retries=2
    assert report["status"] == "violation"
    assert [(f["rule"], f["batch_id"]) for f in report["findings"]] == [("rewound", 4)]
    assert report["remembered"]["head_batch_id"] == 6
    assert stored(AUDIT_MEMORY_ASSET.name, f"watermark_audit:{checkpoint}")["head_batch_id"] == 4


def test_an_audit_after_a_run_reads_the_new_batches_only_and_full_reads_everything(test_dags, tmp_path):
    """The remembered view on the registry asset: the second audit reads the run's two new batches
    (four files) and says so; ``full=True`` reads every file again and finds the same."""
    from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY

    root = tmp_path / "cp"
    base = 1_357_000_000_000
    cf.handmade_checkpoint(str(root), [(base + i * 60_000, base + (i + 1) * 60_000) for i in range(3)])
    strict, full = test_dags["wo_test_audit_strict"], test_dags["wo_test_audit_full"]
    state, _, first = outcome(strict.test(run_conf={"checkpoint": str(root)}))
    assert state == "success" and first["reads"]["mode"] == "full"
    assert stored(CHECKPOINT_REGISTRY.name, f"watermark_view:{root}")["checkpoint"]["batches"][-1]["id"] == 2
    for i in (3, 4):  # a run: two more batches
        cf.put(str(root), f"offsets/{i}", cf.offsets_text(base + i * 60_000, 1_700_000_000_000 + i * 60_000))
        cf.put(str(root), f"commits/{i}", cf.commit_text(base + (i + 1) * 60_000))
    state, _, after = outcome(strict.test(run_conf={"checkpoint": str(root)}))
    assert state == "success" and after["reads"]["mode"] == "incremental"
    assert (after["reads"]["new_batches"], after["reads"]["batch_files"]) == (2, 4)
    assert after["added_batches"] == {"first": 3, "last": 4, "count": 2}
    state, _, again = outcome(full.test(run_conf={"checkpoint": str(root)}))
    assert state == "success" and again["reads"]["mode"] == "full" and again["reads"]["batch_files"] == 10
    assert again["findings"] == after["findings"] == [] and again["head_batch_id"] == after["head_batch_id"] == 4


def test_unreadable_checkpoint_fails_with_retries(test_dags, tmp_path):
    dag = test_dags["wo_test_audit_strict"]
    state, tries, report = outcome(dag.test(run_conf={"checkpoint": str(tmp_path / "missing")}))
    assert (state, tries) == ("failed", 3)  # AirflowException: retried (storage may come back), twice
    assert report["status"] == "unreadable" and report["findings"][0]["message"].startswith("[checkpoint_missing]")


def test_soft_mode_only_warns(test_dags, tmp_path, capfd):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000), (2000, 2000)])
    state, tries, report = outcome(test_dags["wo_test_audit_soft"].test(run_conf={"checkpoint": str(root)}))
    assert (state, tries) == ("success", 1)
    assert report["status"] == "violation"
    assert {f["rule"] for f in report["findings"]} == {"watermark_regressed", "commit_offset_mismatch"}
    assert stored("wo_test_soft_memory", f"watermark_audit:{root}")["head_batch_id"] == 2
    logged = capfd.readouterr()
    assert "soft mode, not failing" in logged.out + logged.err


def test_operator_declares_its_memory_asset_as_outlet_and_templates_the_checkpoint():
    from airflow.sdk import Asset

    from watermark_ops.airflow.operators import AUDIT_MEMORY_ASSET, WatermarkAuditOperator

    default = WatermarkAuditOperator(task_id="a", checkpoint="{{ params.checkpoint }}")
    assert default.outlets == [AUDIT_MEMORY_ASSET] and "checkpoint" in default.template_fields
    other = Asset(name="elsewhere")
    custom = WatermarkAuditOperator(task_id="b", checkpoint="/cp", memory_asset=other, outlets=[Asset(name="x")])
    assert custom.outlets == [Asset(name="x"), other]
    assert WatermarkAuditOperator(task_id="c", checkpoint="/cp", memory_asset=None).outlets == []


def test_accept_reset_records_the_acceptance_and_the_audit_passes(test_dags, tmp_path):
    import shutil

    root = tmp_path / "cp"
    key = f"watermark_audit:{root}"
    old_id, new_id = "7d1b2a3c-0000-4000-8000-0000000000a1", "7d1b2a3c-0000-4000-8000-0000000000b2"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000)], query_id=old_id)
    dag = test_dags["wo_test_audit_accept"]
    state, _, report = outcome(dag.test(run_conf={"checkpoint": str(root)}))
    assert state == "success" and report["status"] == "ok"

    shutil.rmtree(root)  # deleted on purpose, the query started again: a new query id
    cf.handmade_checkpoint(str(root), [(0, 2000)], query_id=new_id)
    state, _, report = outcome(dag.test(run_conf={"checkpoint": str(root), "accept_reset": "OPS-9: state schema change"}))
    assert state == "success" and report["status"] == "ok"
    assert [(f["rule"], f["severity"]) for f in report["findings"]] == [("reset_accepted", "info")]
    assert "OPS-9: state schema change" in report["findings"][0]["message"]
    acceptance = report["remembered"]["accepted_reset"]
    assert (acceptance["from_query_id"], acceptance["to_query_id"]) == (old_id, new_id)
    assert acceptance["by"].startswith("dag_test via wo_test_audit_accept/manual__") and acceptance["by"].endswith("/audit")
    assert isinstance(acceptance["at_ms"], int) and acceptance["at"].endswith("Z")
    remembered = stored("wo_test_accept_memory", key)
    assert remembered["query_id"] == new_id and remembered["accepted_reset"]["why"] == "OPS-9: state schema change"

    # A later reset without an acceptance for its own query id fails, the earlier acceptance notwithstanding.
    shutil.rmtree(root)
    cf.handmade_checkpoint(str(root), [(0, 1000)], query_id="7d1b2a3c-0000-4000-8000-0000000000c3")
    # (conf given whole: dag.test() in one process keeps the previous run's param values)
    state, tries, report = outcome(dag.test(run_conf={"checkpoint": str(root), "accept_reset": ""}))
    assert (state, tries) == ("failed", 1) and report["status"] == "violation"
    assert [f["rule"] for f in report["findings"]] == ["checkpoint_reset"]
    assert f"was for query id {new_id}, not this one" in report["findings"][0]["message"]


def test_the_demo_s_fresh_start_forgets_the_deleted_checkpoints_memories(test_dags, tmp_path):
    """A deliberate fresh start (make run: checkpoint and outputs deleted) forgets the audit memory and
    the announced days with the operators' own keys, so the new query's first audit starts a new memory."""
    import os
    from pathlib import Path

    import watermark_ops
    from watermark_ops.examples.flights import demo
    from watermark_ops.examples.flights.settings import job_locations

    locations = job_locations("flight_windows", home=tmp_path / "home")
    checkpoint = locations["checkpoint"]
    cf.handmade_checkpoint(checkpoint, [(0, 5000), (5000, 9000)], query_id="7d1b2a3c-0000-4000-8000-0000000000d4")
    dag = test_dags["wo_test_audit_soft"]
    assert outcome(dag.test(run_conf={"checkpoint": checkpoint}))[2]["status"] == "ok"
    assert stored("wo_test_soft_memory", f"watermark_audit:{checkpoint}")["head_batch_id"] == 1

    deleted = demo.fresh_start(locations)
    assert deleted == [checkpoint, checkpoint + "_quarantine"] and not os.path.exists(checkpoint)
    plugins = str(Path(watermark_ops.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": plugins + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code, summary = demo.forget_remembered(deleted, env, tmp_path / "demo.log")
    # the audit's head and the checkpoint's remembered view (on the registry, shared with the sensors)
    assert (code, summary) == (0, "2 remembered entries forgotten for 2 checkpoint(s)")
    assert f"forgot watermark_audit:{checkpoint} (asset wo_test_soft_memory)" in (tmp_path / "demo.log").read_text()
    assert f"forgot watermark_view:{checkpoint} (asset watermark_ops_checkpoints)" in (tmp_path / "demo.log").read_text()
    assert stored("wo_test_soft_memory", f"watermark_audit:{checkpoint}") is None

    # The new query's first audit: no checkpoint_reset, a new memory.
    cf.handmade_checkpoint(checkpoint, [(0, 3000)], query_id="7d1b2a3c-0000-4000-8000-0000000000e5")
    state, _, report = outcome(dag.test(run_conf={"checkpoint": checkpoint}))
    assert state == "success" and report["status"] == "ok" and report["findings"] == [] and report["remembered"] is None


def test_checkpoint_memory_keys_are_the_operators_keys():
    from airflow.sdk import Asset

    from watermark_ops.airflow.memory import AssetStateStoreMemory, TailMemory, checkpoint_memory_keys
    from watermark_ops.airflow.partitions import WatermarkPartitionsOperator

    location = "/data/cp/"
    partitions = [WatermarkPartitionsOperator(task_id=f"p_{grain}", checkpoint=location, asset=Asset(name="days"),
                                              since="2013-01-01T00:00:00Z", grain=grain).memory_key()
                  for grain in ("day", "hour")]
    assert checkpoint_memory_keys(location) == [AssetStateStoreMemory(None).key(location), *partitions,
                                                TailMemory.key(location)]
