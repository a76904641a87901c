"""watermark_monitor over checkpoints on the S3 API (the session's moto server), each read through
its configured Airflow connection (conn_id): real Spark-written checkpoints copied into a bucket,
one stalled, one with a corrupt head offsets file. The run alarms exactly those two, named by
their s3:// locations; the next cycle reads from the memory the first left (no listing, a few
small objects per checkpoint) and agrees with it, also on another worker (another AIRFLOW_HOME,
the same metadata DB: the views live in the asset state store, not on a worker's disk)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.watermark_ops import object_storage_fixtures as osf
from tests.watermark_ops import stall_fixtures as sf

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]
DAG_FILE = REPO / "dags" / "watermark_monitor.py"


def _bucket(spark, s3_server) -> tuple[list[str], set[str]]:
    """Four checkpoints in a new bucket: two healthy, one stalled, one with its head offsets cut in half."""
    fs = s3_server.filesystem()
    bucket = osf.new_bucket(fs)
    healthy = Path(sf.inputs_take_turns(spark).checkpoints["min"])
    stalled = Path(sf.one_input_without_data(spark).checkpoints["min"])
    sources = {"q_healthy_1": healthy, "q_healthy_2": healthy, "q_stalled": stalled, "q_corrupt": healthy}
    files: dict[str, bytes] = {}
    for name, source in sources.items():
        files.update(osf.s3_files(source, f"s3://{bucket}/{name}"))
    head = osf.offsets_ids(healthy)[-1]
    key = f"s3://{bucket}/q_corrupt/offsets/{head}"
    files[key] = files[key][: len(files[key]) // 2]
    osf.upload(fs, files)
    locations = [f"s3://{bucket}/{name}" for name in sources]
    return locations, {f"s3://{bucket}/q_stalled", f"s3://{bucket}/q_corrupt"}


def test_the_monitor_reads_each_checkpoint_through_its_connection(airflow_db, spark, s3_server, aws_conn_id,
                                                                   monkeypatch, tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    from tests.watermark_ops.airflow.registry_fixtures import clear_registry

    clear_registry()
    locations, bad = _bucket(spark, s3_server)
    config = tmp_path / "monitor.json"
    config.write_text(json.dumps({"defaults": {"max_lag": "PT6H", "max_idle": "P3650D"},
                                  "checkpoints": [{"checkpoint": c, "conn_id": aws_conn_id} for c in locations]}))
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(config))
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)  # only the connection knows the server
    with sf.AlertServer() as server:
        monkeypatch.setenv("AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK", server.connection("/watermarks"))
        run = DagBag(dag_folder=str(DAG_FILE)).dags["watermark_monitor"].test()
        alerts = {a["body"]["checkpoint"]: a["body"] for a in server.requests}
    states = sf.task_states(run)
    assert states[("watch", -1)] == "success" and len(states) == 1 + len(bad)
    assert set(alerts) == bad
    assert alerts[locations[2]]["state"] == "stalled"
    assert alerts[locations[3]]["state"] is None and "offsets/" in alerts[locations[3]]["message"]
    summary = sf.xcoms(run)[("watch", -1, "summary")]
    assert summary["counts"]["stalled"] == 1 and summary["counts"]["unreadable"] == 1
    # A first cycle lists every checkpoint (the unreadable one, which raised, reports no requests).
    assert summary["requests"]["listed"] == len(locations) - 1


def test_a_second_cycle_reads_from_the_memory_and_agrees(spark, s3_server, monkeypatch, tmp_path):
    from watermark_ops.airflow.monitor import evaluate_checkpoints, summarize
    from watermark_ops.core.view import InProcessViews
    from watermark_ops.examples.s3server import aws_connection

    locations, bad = _bucket(spark, s3_server)
    proxy = osf.counting(s3_server)
    try:
        monkeypatch.setenv("AIRFLOW_CONN_WO_MONITOR_PROXY", aws_connection(proxy.endpoint_url))
        entries = [{"checkpoint": c, "missing_ok": False, "max_lag": "PT6H", "max_idle": "P3650D",
                    "conn_id": "wo_monitor_proxy"} for c in locations]
        memory = InProcessViews()  # the store's in-process back-end (Airflow's: the asset state store)
        cycles = []
        for _ in range(2):
            proxy.reset()
            results = evaluate_checkpoints(entries, memory=memory, concurrency=4)
            cycles.append((summarize(results), dict(proxy.counts)))
    finally:
        proxy.close()
    (cold, cold_requests), (warm, warm_requests) = cycles
    healthy = {"advancing", "idle"}  # a real clock: the healthy copies go idle 15 minutes after their build
    for counts in (cold["counts"], warm["counts"]):
        assert (counts["stalled"], counts["unreadable"], sum(n for s, n in counts.items() if s in healthy)) == (1, 1, 2)
    assert [a["location"] for a in cold["alarms"]] == [a["location"] for a in warm["alarms"]] == locations[2:]
    assert cold["remembered"] == 0 and len(memory) == 3  # not the unreadable one
    assert cold_requests["LIST"] >= len(locations)
    # The second cycle moves each readable checkpoint's remembered view on: no listing, a few small
    # objects each (the unreadable one, never remembered, is read in full again).
    assert warm["remembered"] == 3 and warm["requests"]["listed"] == 0 and warm["requests"]["list"] == 0
    assert warm["requests"]["get"] <= 6 * 3 < cold["requests"]["get"]
    assert warm_requests["GET"] < cold_requests["GET"] and warm_requests["LIST"] < cold_requests["LIST"]


def test_a_cycle_on_another_worker_reads_no_more_than_a_warm_cycle(airflow_db, spark, s3_server, monkeypatch,
                                                                   tmp_path):
    """The real DAG, three cycles: cold and warm on a worker, then one on a second worker (its own
    AIRFLOW_HOME, the same metadata DB). The views are in the registry asset's state store, so the
    second worker reads what the warm cycle read: no listing, the same requests, counted by the proxy."""
    from airflow.dag_processing.dagbag import DagBag

    from tests.watermark_ops.airflow.registry_fixtures import clear_registry
    from watermark_ops.examples.s3server import aws_connection

    clear_registry()
    locations, bad = _bucket(spark, s3_server)
    proxy = osf.counting(s3_server)
    cycles = []
    try:
        monkeypatch.setenv("AIRFLOW_CONN_WO_WORKER_PROXY", aws_connection(proxy.endpoint_url))
        config = tmp_path / "monitor.json"
        config.write_text(json.dumps({"defaults": {"max_lag": "PT6H", "max_idle": "P3650D"},
                                      "checkpoints": [{"checkpoint": c, "conn_id": "wo_worker_proxy"}
                                                      for c in locations]}))
        monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(config))
        for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(name, raising=False)
        with sf.AlertServer() as server:
            monkeypatch.setenv("AIRFLOW_CONN_WATERMARK_OPS_WEBHOOK", server.connection("/watermarks"))
            dag = DagBag(dag_folder=str(DAG_FILE)).dags["watermark_monitor"]
            for worker in ("worker-a", "worker-a", "worker-b"):
                monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / worker))
                proxy.reset()
                run = dag.test()
                cycles.append((sf.xcoms(run)[("watch", -1, "summary")], dict(proxy.counts)))
    finally:
        proxy.close()
    (cold, cold_requests), (warm, warm_requests), (other, other_requests) = cycles
    for summary in (cold, warm, other):
        assert [a for a in summary["alarms"]] == sorted(bad, key=locations.index)
    assert cold["remembered"] == 0 and warm["remembered"] == other["remembered"] == len(locations) - 1
    assert other["requests"]["listed"] == 0 and other["requests"]["list"] == 0
    assert sum(other_requests.values()) <= sum(warm_requests.values()) < sum(cold_requests.values())
    assert other_requests.get("LIST", 0) <= warm_requests.get("LIST", 0)
