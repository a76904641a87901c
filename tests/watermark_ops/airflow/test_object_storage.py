"""The Airflow faces on checkpoints in object storage: a real S3 API, an Airflow connection, real Spark.

Real parts only: moto's standalone S3 server (session fixture ``s3_server``), an Airflow ``aws``
connection to it (``aws_conn_id``; the faces take ``conn_id`` and read through
:func:`watermark_ops.airflow.storage.checkpoint_filesystem`), checkpoints written by real Spark
(``stall_fixtures``) and copied to the server (Spark here has no S3 connector), ``dag.test()`` with
the real Task SDK on the session's SQLite DB, the trigger's ``run()`` driven as the triggerer drives
it, and Airflow's own api-server app for the pages. Request counts come from
:class:`watermark_ops.examples.s3server.DelayProxy` in front of the server (no delay here: counts
only; timings are in ``benchmarks/poke_benchmark.py``).

* the audit operator, the partitions operator and the stall sensor (poke, reschedule) read
  ``s3://`` through ``conn_id``, and
  the registry records the connection for the monitor and the pages;
* a poke from the remembered tail (kept in the asset state store between processes) makes no LIST;
* a deferrable sensor notices a batch written to the server after its first poke, through the
  trigger Airflow rebuilds from ``serialize()`` (``dag.test()`` runs it in line; a second test drives
  ``run()`` itself and counts the trigger's requests per poll);
* UI roots that are object-store prefixes: pages render, and nothing outside the prefix is read.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import urllib.parse
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pendulum
import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops import stall_fixtures as sf

pytestmark = pytest.mark.timeout(400)

BUCKET = "wm-airflow-faces"
OTHER_BUCKET = "wm-airflow-other"
PREFIX = f"s3://{BUCKET}/cp"
START = pendulum.datetime(2026, 1, 1, tz="UTC")
TRIGGER = "watermark_ops.airflow.triggers.WatermarkTrigger"


def _dag(dag_id: str):
    from airflow.sdk import DAG

    return DAG(dag_id, schedule=None, start_date=START, catchup=False)


def _connection(name: str, endpoint_url: str) -> str:
    """Set ``AIRFLOW_CONN_<NAME>`` to an ``aws`` connection reaching ``endpoint_url``; returns the id."""
    from watermark_ops.examples.s3server import aws_connection

    os.environ[f"AIRFLOW_CONN_{name.upper()}"] = aws_connection(endpoint_url)
    return name


@dataclass
class Growing:
    """A real checkpoint on the server without its newest batch, and that batch to upload later.

    :ivar url: the checkpoint's location on the server.
    :ivar batch_id: the held-back batch (``offsets/N`` and ``commits/N``).
    :ivar target_ms: the watermark batch ``N`` ran with: reached once it is committed, not before.
    """

    url: str
    batch_id: int
    target_ms: int
    files: dict[str, bytes]
    fs: object

    def write_next_batch(self) -> None:
        """Upload ``offsets/N`` then ``commits/N``, in Spark's order."""
        for name in sorted(self.files, key=lambda n: not n.startswith("offsets")):
            self.fs.pipe({f"{self.url}/{name}": self.files[name]})


@dataclass
class Lake:
    """The server's checkpoints: a healthy one (with its progress log) and a stalled one."""

    fs: object
    local: dict[str, str]
    healthy: str
    stalled: str
    folder: Path

    def growing(self, name: str) -> Growing:
        """A fresh partial copy of the healthy checkpoint and its progress log under ``<PREFIX>/<name>``
        (see :class:`Growing`)."""
        from watermark_ops.core.progress import progress_log_path
        from watermark_ops.examples.s3server import upload_tree

        values = sf.log_values(self.local["healthy"])
        batch_id = max(values)
        assert values[batch_id]["watermark_ms"] > values[batch_id - 1]["watermark_ms"]  # it moves the watermark
        copy = self.folder / name
        shutil.copytree(self.local["healthy"], copy)
        held = {}
        for log in ("offsets", "commits"):
            held[f"{log}/{batch_id}"] = (copy / log / str(batch_id)).read_bytes()
            for path in (copy / log / str(batch_id), copy / log / f".{batch_id}.crc"):
                path.unlink(missing_ok=True)
        url = f"{PREFIX}/{name}"
        upload_tree(self.fs, copy, url)
        log = Path(progress_log_path(self.local["healthy"]))
        self.fs.pipe({progress_log_path(url): log.read_bytes()})  # the job's progress log, beside it
        return Growing(url, batch_id, values[batch_id]["watermark_ms"], held, self.fs)


@pytest.fixture(scope="module")
def lake(spark, s3_server, tmp_path_factory) -> Lake:
    """Real Spark-written checkpoints (and the healthy one's progress log) copied to the S3 server,
    plus a checkpoint in another bucket, beside the prefix (``cp2``) and outside it, for the pages."""
    from watermark_ops.core.progress import progress_log_path
    from watermark_ops.examples.s3server import upload_tree

    fs = s3_server.filesystem()
    folder = tmp_path_factory.mktemp("lake")
    local = {"healthy": sf.inputs_take_turns(spark).checkpoints["min"],
             "stalled": sf.one_input_without_data(spark).checkpoints["min"]}
    for name, path in local.items():
        upload_tree(fs, path, f"{PREFIX}/{name}")
        if Path(progress_log_path(path)).exists():
            fs.pipe({progress_log_path(f"{PREFIX}/{name}"): Path(progress_log_path(path)).read_bytes()})
    secret = folder / "secret"
    cf.handmade_checkpoint(str(secret), [(0, 1_357_000_000_000)], query_id="5ec7e7a1-0000-4000-8000-000000000bad")
    upload_tree(fs, secret, f"s3://{OTHER_BUCKET}/cp/secret")
    upload_tree(fs, secret, f"s3://{BUCKET}/cp2/job")  # a sibling prefix that starts with the root's text
    upload_tree(fs, secret, f"s3://{BUCKET}/outside/secret")
    fs.invalidate_cache()
    return Lake(fs, local, f"{PREFIX}/healthy", f"{PREFIX}/stalled", folder)


@pytest.fixture
def counted(s3_server, request):
    """A counting proxy in front of the server and an ``aws`` connection through it (its own id, so
    that the filesystem cached per connection in this process is new)."""
    from watermark_ops.examples.s3server import DelayProxy

    proxy = DelayProxy(s3_server.endpoint_url)
    name = "wm_counted_" + request.node.name.split("[")[0][-40:].lower()
    conn_id = _connection(name, proxy.endpoint_url)
    yield proxy, conn_id
    os.environ.pop(f"AIRFLOW_CONN_{name.upper()}", None)
    proxy.close()


# --------------------------------------------------------------------------------------------
# The operator and the sensors read s3:// through a connection


def test_audit_operator_and_stall_sensor_read_through_the_connection(airflow_db, lake, aws_conn_id):
    from airflow.sdk import Asset

    from tests.watermark_ops.airflow.registry_fixtures import registry_rows
    from watermark_ops.airflow.operators import WatermarkAuditOperator
    from watermark_ops.airflow.partitions import WatermarkPartitionsOperator
    from watermark_ops.airflow.registry import record_key
    from watermark_ops.airflow.sensors import WatermarkStallSensor
    from watermark_ops.core.audit import run_audit
    from watermark_ops.core.stall import evaluate
    from watermark_ops.core.thresholds import Thresholds

    emitted = evaluate(lake.local["healthy"], Thresholds(max_lag=None)).emitted_through_ms

    with _dag("wo_s3_audit_and_sensors") as dag:
        WatermarkAuditOperator(task_id="audit", checkpoint=lake.healthy, conn_id=aws_conn_id,
                               memory_asset=Asset(name="wo_s3_audit_memory"))
        WatermarkPartitionsOperator(task_id="hours", checkpoint=lake.healthy, conn_id=aws_conn_id, grain="hour",
                                    asset=Asset(name="wo_s3_hours"), since=emitted - 3 * 3_600_000)
        WatermarkStallSensor(task_id="healthy", checkpoint=lake.healthy, conn_id=aws_conn_id, max_idle="P3650D",
                             poke_interval=1)
        WatermarkStallSensor(task_id="stalled", checkpoint=lake.stalled, conn_id=aws_conn_id, mode="reschedule",
                             poke_interval=1, timeout=2)
    run = sf.run_dag(dag)
    assert sf.task_states(run) == {("audit", -1): "success", ("hours", -1): "success", ("healthy", -1): "success",
                                   ("stalled", -1): "failed"}
    values = sf.xcoms(run)
    hours = values[("hours", -1, "return_value")]
    assert hours["emitted_through_ms"] == emitted and hours["announced"]  # the hours before it, read from S3

    report, local = values[("audit", -1, "return_value")], run_audit(lake.local["healthy"]).to_dict()
    assert report["status"] == "ok" and report["location"] == lake.healthy
    assert [b["batch_id"] for b in report["batches"]] == [b["batch_id"] for b in local["batches"]]
    assert (report["query_id"], report["watermark_ms"]) == (local["query_id"], local["watermark_ms"])

    healthy = values[("healthy", -1, "return_value")]
    assert healthy["outcome"] == "done" and healthy["state"] in ("advancing", "idle")
    stalled = values[("stalled", -1, "return_value")]
    assert stalled["outcome"] == "fail" and stalled["state"] == "stalled"
    assert [b["batch_id"] for b in stalled["flat_data_batches"]] == [0, 1, 2]  # as read locally

    # The registry names the connection: the monitor and the pages read the checkpoint with it.
    record = registry_rows()[record_key(lake.healthy)][0]
    assert {(t["task_id"], t.get("conn_id")) for t in record["tasks"]} == {
        ("audit", aws_conn_id), ("hours", aws_conn_id), ("healthy", aws_conn_id)}


def test_known_checkpoints_carry_the_connection():
    """The monitor and the pages read a checkpoint with its configured connection, else the one its
    tasks registered (with that connection's storage options)."""
    from watermark_ops.airflow.config import parse_entries
    from watermark_ops.airflow.registry import known_checkpoints

    registered = [
        {"checkpoint": "s3://b/cp/a", "tasks": [
            {"dag_id": "d", "task_id": "local_read"},
            {"dag_id": "d", "task_id": "s3_read", "conn_id": "aws_a", "storage_options": {"max_pool_connections": 8}}]},
        {"checkpoint": "s3://b/cp/b", "tasks": [{"dag_id": "d", "task_id": "t", "conn_id": "aws_task"}]},
        {"checkpoint": "/local/c", "tasks": [{"dag_id": "d", "task_id": "t"}]},
    ]
    configured = parse_entries(json.dumps([{"checkpoint": "s3://b/cp/b", "conn_id": "aws_configured"}]), "test")
    known = {k["checkpoint"]: k for k in known_checkpoints(registered, configured)}
    assert (known["s3://b/cp/a"]["conn_id"], known["s3://b/cp/a"]["storage_options"]) == ("aws_a", {"max_pool_connections": 8})
    assert (known["s3://b/cp/b"]["conn_id"], known["s3://b/cp/b"]["storage_options"]) == ("aws_configured", None)
    assert (known["/local/c"]["conn_id"], known["/local/c"]["storage_options"]) == (None, None)


def test_a_poke_from_the_remembered_tail_lists_nothing(airflow_db, lake, counted):
    """The tail a sensor read is kept in the asset state store: the next process (here a new DAG
    and sensor object: a reschedule's next poke, the next run) follows it without a LIST."""
    from tests.watermark_ops.airflow.registry_fixtures import registry_rows
    from watermark_ops.airflow.memory import TailMemory
    from watermark_ops.airflow.sensors import WatermarkStallSensor

    proxy, conn_id = counted

    def poke_once(dag_id: str) -> dict:
        with _dag(dag_id) as dag:
            WatermarkStallSensor(task_id="watch", checkpoint=lake.healthy, conn_id=conn_id, max_idle="P3650D",
                                 mode="reschedule", poke_interval=1)
        proxy.reset()
        run = sf.run_dag(dag)
        assert sf.task_states(run) == {("watch", -1): "success"}
        return dict(proxy.counts)

    poke_once("wo_s3_tail_first")  # lists, unless an earlier test left a tail: either way it saves one
    remembered = registry_rows()[TailMemory.key(lake.healthy)][0]
    assert remembered["location"] == lake.healthy
    second = poke_once("wo_s3_tail_second")
    assert second.get("LIST", 0) == 0 and second.get("GET", 0) >= 1, second


def test_deferrable_sensor_notices_a_batch_written_after_its_first_poke(airflow_db, lake, aws_conn_id):
    """The sensor pokes (not reached), defers; the trigger Airflow rebuilt from its row polls in
    line; then a batch lands on the server: the trigger, reading through the same process-wide
    filesystem as the first poke, must see it (no stale listing)."""
    from watermark_ops.airflow.sensors import WatermarkReachedSensor

    growing = lake.growing("deferrable")
    with _dag("wo_s3_deferrable") as dag:
        WatermarkReachedSensor(task_id="complete", checkpoint=growing.url, target=growing.target_ms,
                               conn_id=aws_conn_id, deferrable=True, poke_interval=0.3, timeout=timedelta(minutes=3))
    deferred = []

    def write_once_deferred():
        deferred.append(sf.wait_for_trigger_row(TRIGGER, growing.url))
        growing.write_next_batch()

    writer = threading.Thread(target=write_once_deferred)
    writer.start()
    try:
        run = sf.run_dag(dag)
    finally:
        writer.join(timeout=300)
    assert deferred == [True]
    assert sf.task_states(run) == {("complete", -1): "success"}
    value = sf.xcoms(run)[("complete", -1, "return_value")]
    assert value["outcome"] == "done" and value["emitted_through_ms"] == growing.target_ms
    assert value["latest_batch"]["batch_id"] == growing.batch_id


def test_trigger_polls_follow_the_tail_and_see_a_new_batch(lake, counted):
    """``run()`` of the trigger rebuilt from ``serialize()`` (what the triggerer runs): poll 1 lists;
    the later polls make no LIST and a constant number of requests; the batch written after poll 1
    is seen."""
    from airflow.sdk.serde import deserialize, serialize

    from watermark_ops.airflow.triggers import WatermarkTrigger

    proxy, conn_id = counted
    growing = lake.growing("trigger")
    built = WatermarkTrigger(checkpoint=growing.url, goal="reached", target_ms=growing.target_ms, conn_id=conn_id,
                             poll_interval=0.1, timeout=timedelta(minutes=2))
    classpath, kwargs = built.serialize()
    assert kwargs["conn_id"] == conn_id
    trigger = WatermarkTrigger(**deserialize(serialize(kwargs)))
    per_poll: list[dict] = []
    original = trigger._check

    def counted_check():
        proxy.reset()
        try:
            return original()
        finally:
            per_poll.append(dict(proxy.counts))

    trigger._check = counted_check

    async def scenario():
        events = asyncio.create_task(_events(trigger))
        while len(per_poll) < 3:  # poll 1 listed; polls 2 and 3 followed the unchanged tail
            await asyncio.sleep(0.02)
        await asyncio.to_thread(growing.write_next_batch)
        return await events

    events = asyncio.run(scenario())
    assert len(events) == 1 and events[0]["status"] == "done", events
    assert events[0]["classification"]["emitted_through_ms"] == growing.target_ms
    assert per_poll[0].get("LIST", 0) >= 1
    assert all(poll.get("LIST", 0) == 0 for poll in per_poll[1:]), per_poll
    assert per_poll[1] == per_poll[2]  # unchanged checkpoint: the same requests each poll


async def _events(trigger) -> list[dict]:
    return [event.payload async for event in trigger.run()]


# --------------------------------------------------------------------------------------------
# UI roots on object storage


def test_object_store_roots_confine_by_segments():
    from watermark_ops.core.roots import CheckpointRoots, PathRefused

    roots = CheckpointRoots.of({"lake": {"url": "s3://b/cp/", "conn_id": "c"}, "near": "s3://b/cp2", "local": "/srv"})
    assert roots.roots["lake"] == "s3://b/cp" and roots.access["lake"]["conn_id"] == "c" and "near" not in roots.access
    assert roots.address("s3://b/cp/job") == ("lake", "job")
    assert roots.address("s3://b/cp2/job") == ("near", "job")  # never lake's "2/job"
    for outside in ("s3://b/cp", "s3://other/cp/job", "s3://b/cp/../cp2/job", "s3://b/cp//job", "/srv-other/x"):
        assert roots.address(outside) is None, outside
    for relative in ("..", "job/../..", "%2e%2e/x", "s3://other/cp", "/abs", "a\\b"):
        with pytest.raises(PathRefused) as refused:
            roots.locate("lake", relative)
        assert refused.value.status == 400, relative
    assert CheckpointRoots.of({"x": {"url": "s3://b"}}).roots == {"x": "s3://b"}  # a whole bucket
    for bad in ("s3://", "s3://b/../c", "s3://b/c?x=1", {"conn_id": "c"}, {"url": "s3://b", "x": 1},
                {"url": "s3://b", "conn_id": 7}):
        with pytest.raises(ValueError):
            CheckpointRoots.of({"x": bad})


@pytest.fixture(scope="module")
def s3_pages(lake, airflow_db, s3_server, tmp_path_factory):
    """Airflow's api-server app with ``checkpoint_roots`` = ``{"lake": {"url": PREFIX, "conn_id"}}``,
    the connection through a proxy recording every request's path; the monitor config names the
    healthy checkpoint and three outside the prefix."""
    from tests.watermark_ops.airflow import ui_fixtures as uf
    from watermark_ops.examples.s3server import DelayProxy

    proxy = DelayProxy(s3_server.endpoint_url)
    paths: list[str] = []
    proxy.fail = lambda method, path: paths.append(urllib.parse.unquote(path)) or None
    conn_id = _connection("wm_pages_lake", proxy.endpoint_url)
    folder = tmp_path_factory.mktemp("s3_pages")
    config = folder / "monitor.json"
    config.write_text(json.dumps({"defaults": {"max_idle": None, "max_lag": None, "max_skew": None}, "checkpoints": [
        {"checkpoint": lake.healthy}, {"checkpoint": f"s3://{OTHER_BUCKET}/cp/secret"},
        {"checkpoint": f"s3://{BUCKET}/cp2/job"}, {"checkpoint": f"s3://{BUCKET}/outside/secret"}]}))
    env = {"AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS": json.dumps({"lake": {"url": PREFIX, "conn_id": conn_id}}),
           "AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG": str(config)}
    with uf.admin_client(env, folder) as client:
        yield client, paths
    proxy.close()


def _outside_prefix(paths: list[str]) -> list[str]:
    """Requests that name a key (or a listing prefix) not below ``<bucket>/cp/``."""
    out = []
    for path in paths:
        bare, _, query = path.partition("?")
        listed = urllib.parse.parse_qs(query).get("prefix", [None])[0]
        key = f"/{BUCKET}/{listed}" if listed is not None else bare
        if not key.startswith(f"/{BUCKET}/cp/"):
            out.append(path)
    return out


def test_pages_of_an_object_store_root_render(s3_pages, lake):
    from watermark_ops.core.checkpoint import read_checkpoint

    client, paths = s3_pages
    paths.clear()
    local = read_checkpoint(lake.local["healthy"])
    data = client.get("/watermark-ops/api/checkpoints/lake/healthy").json()
    assert data["location"] == lake.healthy and "error" not in data, data
    assert data["row"]["query_id"] == local.query_id and data["row"]["head_batch_id"] == local.batches[-1].batch_id
    assert data["chart"]["total"] == len(local.batches)
    page = client.get("/watermark-ops/checkpoints/lake/healthy")
    assert page.status_code == 200 and local.query_id in page.text
    assert paths and _outside_prefix(paths) == []

    rows = {row["location"]: row for row in client.get("/watermark-ops/api/checkpoints").json()["checkpoints"]}
    assert rows[lake.healthy]["url"] == "/watermark-ops/checkpoints/lake/healthy" and rows[lake.healthy]["error"] is None
    for outside in (f"s3://{OTHER_BUCKET}/cp/secret", f"s3://{BUCKET}/cp2/job", f"s3://{BUCKET}/outside/secret"):
        assert rows[outside]["error"] == "not under a configured checkpoint root: not read"
        assert rows[outside]["url"] is None and rows[outside]["query_id"] is None
    assert _outside_prefix(paths) == []


@pytest.mark.parametrize("raw_path, status", [
    ("lake/%2e%2e/outside/secret", 400),
    ("lake/%2E%2E%2Foutside%2Fsecret", 400),
    ("lake/%252e%252e/outside/secret", 400),  # encoded twice: still refused
    ("lake/healthy/..%2f..%2fcp2%2fjob", 400),  # the sibling prefix cp2
    ("lake/..%2f..%2f" + OTHER_BUCKET + "%2fcp%2fsecret", 400),  # another bucket
    ("lake/s3:%2f%2f" + OTHER_BUCKET + "%2fcp%2fsecret", 400),
    ("lake/%2f" + BUCKET + "%2foutside%2fsecret", 400),
    ("lake/secret", 404),  # no object below cp/secret/ (the secret lies outside the prefix)
    ("lake/2/job", 404),  # cp/2/job is not cp2/job
    ("nope/healthy", 404),
])
def test_object_store_paths_outside_the_prefix_are_refused(s3_pages, raw_path, status):
    client, paths = s3_pages
    paths.clear()
    for route in ("/watermark-ops/api/checkpoints/", "/watermark-ops/checkpoints/"):
        reply = client.get(route + raw_path)
        assert reply.status_code == status, (route, reply.text)
        assert "5ec7e7a1" not in reply.text  # the outside checkpoints' query id never shows
    assert _outside_prefix(paths) == [], paths


def test_a_registered_object_store_checkpoint_gets_its_own_page(s3_pages, lake, aws_conn_id):
    """No root holds it: a task that read it through ``conn_id`` registered it, so the pages read
    exactly that prefix with that connection, and nothing beside it."""
    from airflow.sdk import Asset

    from watermark_ops.airflow.operators import WatermarkAuditOperator
    from watermark_ops.airflow.plugin import PageRoots
    from watermark_ops.examples.s3server import upload_tree

    client, _ = s3_pages
    location = f"s3://{OTHER_BUCKET}/registered/job"
    local = lake.folder / "registered"
    cf.handmade_checkpoint(str(local), [(0, 1_357_000_000_000), (1_357_000_000_000, 1_357_000_060_000)],
                           query_id="4e915e2e-0000-4000-8000-000000000001")
    upload_tree(lake.fs, local, location)
    with _dag("wo_s3_registered_elsewhere") as dag:
        WatermarkAuditOperator(task_id="audit", checkpoint=location, conn_id=aws_conn_id,
                               memory_asset=Asset(name="wo_s3_registered_memory"))
    assert sf.task_states(sf.run_dag(dag)) == {("audit", -1): "success"}

    name = PageRoots.name_for(location)
    rows = {row["location"]: row for row in client.get("/watermark-ops/api/checkpoints").json()["checkpoints"]}
    assert rows[location]["url"] == f"/watermark-ops/checkpoints/{name}/job" and rows[location]["error"] is None
    assert rows[location]["query_id"] == "4e915e2e-0000-4000-8000-000000000001"
    data = client.get(f"/watermark-ops/api/checkpoints/{name}/job").json()
    assert data["location"] == location and data["row"]["head_batch_id"] == 1
    for path, status in ((f"{name}/other", 404), (f"{name}/job%2f..%2f..%2fcp%2fsecret", 404),
                         (f"{name}/..%2f..%2fcp%2fsecret", 404)):  # only its one address: as for local
        reply = client.get(f"/watermark-ops/api/checkpoints/{path}")
        assert reply.status_code == status and "5ec7e7a1" not in reply.text, (path, reply.text)
