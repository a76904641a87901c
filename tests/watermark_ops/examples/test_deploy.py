"""End to end on a real deployment: PostgreSQL, Airflow's scheduler and triggerer, a Spark standalone cluster.

``deploy.up()`` starts everything on 127.0.0.1 (the same code as ``make up``); ``flights_pipeline``
is unpaused through the REST API with a catch-up of three daily intervals
(``WATERMARK_OPS_PIPELINE_END``), and the **scheduler** runs it (no ``dags test``): three
consecutive DAG runs, each restarting the same query from its checkpoint, in the deployment's
launch: a thin client of the Spark Connect server ``make up`` starts on the cluster (default), or
with ``WATERMARK_OPS_DEPLOY_TEST_LAUNCH=submit`` a spark-submit to the standalone master per run. In the third run, while its data batch is in flight, one Spark worker is killed
with SIGKILL: Spark reschedules its tasks on the other worker and the run still succeeds. Then:
every run succeeded (REST API), each audit passed, the windows equal the pandas replay of the same
days (what the ``local[2]`` runs write, checked in ``tests/spark_jobs``), every cancelled and
diverted flight is quarantined once, the master ran the runs (three applications under submit; the
one Connect server application, still running, under connect), and the completeness asset got its events. A deferrable ``WatermarkReachedSensor`` (DAG ``watermark_wait``), triggered after the
first run for an instant only the third run closes, waits in the real triggerer and succeeds after
the third run. docs/ui.md's curl sequence (token from ``/auth/token`` with the password read from
the deployment's passwords file, then the JSON endpoints) runs as written against the same
deployment. ``deploy.down()`` stops every process it started, by PID.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.spark_jobs.flight_expectations import assert_quarantine_equals, assert_sink_equals, expected_windows

DAG = "flights_pipeline"
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def deployment():
    from watermark_ops.examples import deploy

    home = Path(tempfile.mkdtemp(prefix="wmo-deploy-"))
    home.chmod(0o755)  # PostgreSQL runs as its own user and must reach its data folder
    launch = os.environ.get("WATERMARK_OPS_DEPLOY_TEST_LAUNCH", "connect")
    saved = {k: os.environ.get(k) for k in ("WATERMARK_OPS_HOME", "WATERMARK_OPS_PIPELINE_END",
                                            "WATERMARK_OPS_SPARK_LAUNCH")}
    os.environ.update(WATERMARK_OPS_HOME=str(home), WATERMARK_OPS_PIPELINE_END="2013-01-03",
                      WATERMARK_OPS_SPARK_LAUNCH=launch)
    try:
        started = time.monotonic()
        urls = deploy.up()
        print(f"\ndeployment up in {time.monotonic() - started:.0f} s")
        yield deploy, urls, home, launch
    finally:
        stopped = deploy.down()
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        assert deploy.running() == {}, stopped


class Api:
    """The Airflow REST API (``/api/v2``) with a JWT from ``/auth/token`` (SimpleAuthManager's admin)."""

    def __init__(self, base: str):
        self.base = base
        self.token = self._call("POST", "/auth/token", {"username": "admin", "password": "admin"},
                                auth=False)["access_token"]

    def _call(self, method: str, path: str, body: dict | None = None, auth: bool = True):
        request = urllib.request.Request(self.base + path, method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        if auth:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"null")

    def get(self, path: str):
        return self._call("GET", path)

    def patch(self, path: str, body: dict):
        return self._call("PATCH", path, body)

    def post(self, path: str, body: dict):
        return self._call("POST", path, body)


def test_unauthenticated_requests_are_refused(deployment):
    _, urls, _, _ = deployment
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urls["airflow"] + f"/api/v2/dags/{DAG}", timeout=30)
    assert refused.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as refused:  # the plugin's pages too
        urllib.request.urlopen(urls["airflow"] + "/watermark-ops/api/checkpoints", timeout=30)
    assert refused.value.code == 401


def test_the_scheduler_runs_three_days_on_the_cluster_and_survives_a_killed_worker(deployment, spark):
    deploy, urls, home, launch = deployment
    print(f"launch: {launch}")
    from watermark_ops.examples.flights.settings import job_locations

    locations = job_locations("flight_windows", home)
    api = Api(urls["airflow"])
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # the DAG processor parses the file first
        try:
            api.get(f"/api/v2/dags/{DAG}")
            break
        except urllib.error.HTTPError:
            time.sleep(2)
    assert api.patch("/api/v2/dags/watermark_wait", {"is_paused": False})["is_paused"] is False
    assert api.patch(f"/api/v2/dags/{DAG}", {"is_paused": False})["is_paused"] is False

    killed, waiting = None, None
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        runs = api.get(f"/api/v2/dags/{DAG}/dagRuns?order_by=logical_date")["dag_runs"]
        if waiting is None and runs and runs[0]["state"] == "success":
            # The windows through 2013-01-03 05:00 UTC are final only after the third run: the
            # deferrable sensor waits for them in the real triggerer.
            waiting = api.post("/api/v2/dags/watermark_wait/dagRuns", {
                "logical_date": None,
                "conf": {"checkpoint": locations["checkpoint"], "target": "2013-01-03T05:00:00Z"}})["dag_run_id"]
        if killed is None and len(runs) == 3 and runs[-1]["state"] == "running":
            killed = _kill_a_worker_mid_batch(deploy, locations["checkpoint"], first_new_batch=4)
        if len(runs) == 3 and all(r["state"] in ("success", "failed") for r in runs):
            break
        assert not any(r["state"] == "failed" for r in runs), runs
        time.sleep(0.5 if killed is None and len(runs) == 3 else 3)
    runs = api.get(f"/api/v2/dags/{DAG}/dagRuns?order_by=logical_date")["dag_runs"]
    assert [r["state"] for r in runs] == ["success"] * 3, runs
    assert [r["logical_date"][:10] for r in runs] == ["2013-01-01", "2013-01-02", "2013-01-03"]
    assert killed, "the third run ended before a worker could be killed mid-batch"
    for run in runs:
        start, end = (time.mktime(time.strptime(run[k][:19], "%Y-%m-%dT%H:%M:%S")) for k in ("start_date", "end_date"))
        print(f"scheduled run {run['logical_date'][:10]}: {end - start:.0f} s")
    for run in runs:
        audit = api.get(f"/api/v2/dags/{DAG}/dagRuns/{run['dag_run_id']}/taskInstances/audit_checkpoint"
                        "/xcomEntries/return_value?deserialize=true")
        value = json.loads(audit["value"]) if isinstance(audit["value"], str) else audit["value"]
        assert value["status"] == "ok", value

    # The deferred sensor: resolved by the triggerer once the third run's batches committed, not before.
    deadline = time.monotonic() + 120
    while api.get(f"/api/v2/dags/watermark_wait/dagRuns/{waiting}")["state"] not in ("success", "failed"):
        assert time.monotonic() < deadline, "the triggerer did not resolve the deferred sensor"
        time.sleep(2)
    assert api.get(f"/api/v2/dags/watermark_wait/dagRuns/{waiting}")["state"] == "success"
    sensor = api.get(f"/api/v2/dags/watermark_wait/dagRuns/{waiting}/taskInstances/wait_for_watermark")
    third = api.get(f"/api/v2/dags/{DAG}/dagRuns/{runs[2]['dag_run_id']}/taskInstances/flight_windows")
    assert sensor["try_number"] == 1 and sensor["start_date"] < third["start_date"] < sensor["end_date"], (sensor, third)
    apps = [a["name"] for a in deploy.master_state()["completedapps"]]
    if launch == "submit":  # three spark-submits to the standalone master, one application each
        assert apps.count("flight_windows") == 3, apps
    else:  # no application per run: each run was a client of the one Connect server on the cluster
        assert "flight_windows" not in apps, apps
        assert [a["name"] for a in deploy.master_state()["activeapps"]] == ["watermark-ops-connect"]
        for run in runs:
            entry = api.get(f"/api/v2/dags/{DAG}/dagRuns/{run['dag_run_id']}/taskInstances/flight_windows"
                            "/xcomEntries/return_value?deserialize=true")
            value = json.loads(entry["value"]) if isinstance(entry["value"], str) else entry["value"]
            assert value["url"] == urls["connect"] + "/" and value["returncode"] == 0, value
    # The windows and the quarantine: what the pandas replay of the three days predicts.
    landed = [{"path": str(p)} for p in sorted(Path(locations["landing"]).glob("flights_*.jsonl"))]
    assert len(landed) == 3
    emitted, _, _, _ = expected_windows(landed)
    assert_sink_equals(spark.read.parquet(locations["output"]).toPandas(), emitted)
    assert_quarantine_equals(spark.read.parquet(locations["output"] + "_quarantine").toPandas(), landed)
    # Completeness: one asset event per run, and one partitioned event per New York day made final
    # (the third run's watermark closes 2013-01-02; 2013-01-03 closes with the next run).
    events = api.get("/api/v2/assets/events?source_dag_id=" + DAG)["asset_events"]
    assert len([e for e in events if e["name"] == "flight_windows_complete"]) == 3, events
    days = [e for e in events if e["name"] == "flight_windows_days"]
    assert sorted(e.get("partition_key") or "" for e in days) == ["2013-01-01", "2013-01-02"], days
    # The watermark page of the deployment's api-server (the plugin) shows the checkpoint and its three runs.
    page = api.get("/watermark-ops/api/checkpoints/runtime/flight_windows")
    head = {k: v for k, v in page.items() if k not in ("chart", "runs", "batches")}
    assert page["audit"]["status"] == "ok" and page["state"] in ("advancing", "idle"), head
    assert {run["run_tag"] for run in page["runs"]} == {run["dag_run_id"] for run in runs}
    assert len(page["chart"]["restarts"]) == len(page["runs"]) >= 3
    rows = {row["name"]: row for row in api.get("/watermark-ops/api/checkpoints")["checkpoints"]}
    assert rows["flight_windows"]["audit_status"] == "ok" and rows["flight_windows"]["error"] is None
    # The React views of the deployment's UI: each registered, its bundle served, and each DAG run's
    # tab has that run's batches.
    ours = next(p for p in api.get("/api/v2/plugins")["plugins"] if p["name"] == "watermark_ops")
    assert [a["destination"] for a in ours["react_apps"]] == ["nav", "dag", "dag_run", "dashboard"]
    with urllib.request.urlopen(urls["airflow"] + ours["react_apps"][0]["bundle_url"], timeout=30) as bundle:
        assert bundle.status == 200 and b"AirflowPlugin" in bundle.read()
    for run in runs:
        tab = api.get(f"/watermark-ops/api/dags/{DAG}/runs/{urllib.parse.quote(run['dag_run_id'], safe='')}")
        mine = [c for c in tab["checkpoints"] if c["name"] == "flight_windows"][0]
        assert [r["run_tag"] for r in mine["runs"]] == [run["dag_run_id"]] and mine["points"], mine
    print(f"killed {killed} while batch 4 was in flight; the run succeeded on the other worker")
    logs = [*Path(deploy.folder(), "airflow", "logs").rglob("*.log"), Path(deploy.folder(), "logs", "spark-connect.log")]
    lost = [line.split('"event":"')[-1][:160] for path in logs if path.exists()
            for line in open(path, errors="replace") if "Lost task" in line or "Lost executor" in line]
    assert any("Lost executor" in line for line in lost), "the driver never noticed the killed worker"
    print("the driver saw:", *lost, sep="\n  ")


def _ui_doc_block() -> str:
    """docs/ui.md's shell block that calls the JSON endpoints (the one that asks /auth/token)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", (REPO / "docs" / "ui.md").read_text(), re.S | re.M)
    found = [b for b in blocks if "/auth/token" in b]
    assert len(found) == 1, blocks
    return found[0]


def test_the_ui_docs_curl_sequence_works_as_written(deployment):
    """docs/ui.md's token and JSON calls, run as written by bash from the repository's root against
    this deployment (the same as ``make up``): the password read from the deployment's passwords
    file, a token from /auth/token, the overview and its first checkpoint's page as JSON."""
    _, urls, _, _ = deployment
    block = _ui_doc_block()
    assert "http://127.0.0.1:28080" in block and urls["airflow"] == "http://127.0.0.1:28080"
    done = subprocess.run(["bash", "-e", "-u", "-o", "pipefail", "-c", block], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (done.stdout, done.stderr)
    printed = [json.loads(part) for part in re.findall(r"^\{.*?^\}", done.stdout, re.S | re.M)]
    # What the doc printed is what an authenticated client of the same api-server reads.
    overview = Api(urls["airflow"]).get("/watermark-ops/api/checkpoints?page_size=1000")
    assert overview["total"] >= 1
    assert printed[0] == {"total": overview["total"], "problems": overview["problems"],
                          "warnings": overview["warnings"], "first": overview["checkpoints"][0]["name"]}
    run = [row for row in overview["checkpoints"] if row["state_key"] != "not_run"]
    if run:  # after the scheduler's runs (this module's order): the first run checkpoint's page
        assert len(printed) == 2 and printed[1]["location"].endswith("/" + run[0]["address"].split("/", 1)[1])
    else:  # a fresh deployment: every checkpoint is "not run yet", and the block says so
        assert len(printed) == 1 and "no checkpoint has run yet" in done.stdout, done.stdout
    # The block fails loudly with a wrong password: the token request answers 401 and curl -f stops it.
    wrong = block.replace('"$(jq -r .admin "$PASSWORDS")"', '"not-the-password"')
    assert wrong != block
    refused = subprocess.run(["bash", "-e", "-u", "-o", "pipefail", "-c", wrong], cwd=REPO, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode != 0 and "error: 401" in refused.stderr, (refused.stdout, refused.stderr)


def _kill_a_worker_mid_batch(deploy, checkpoint: str, first_new_batch: int) -> str | None:
    """SIGKILL the process group (worker + executor) of the Spark worker whose executor is busy
    (≥ 20 % CPU over 0.2 s: the batch's tasks run there) while ``offsets/<first_new_batch>`` exists
    without its commit; None when the batch committed first."""
    import psutil

    offsets, commits = Path(checkpoint, "offsets", str(first_new_batch)), Path(checkpoint, "commits", str(first_new_batch))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not offsets.exists():
        time.sleep(0.01)
    workers = {name: pid for name, pid in deploy.running().items() if name.startswith("spark-worker")}
    def executor_processes(pid: int) -> list:
        found = []
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if "CoarseGrainedExecutorBackend" in " ".join(child.cmdline()):
                    found.append(child)
            except psutil.Error:  # an earlier application's executor, exited (a zombie) or gone
                pass
        return found

    executors = {name: executor_processes(pid) for name, pid in workers.items()}
    for processes in executors.values():
        for process in processes:
            _cpu(process)  # start measuring
    while True:  # planning runs in the driver first: wait until the batch's tasks run on an executor
        time.sleep(0.2)
        if not offsets.exists() or commits.exists() or time.monotonic() > deadline:
            return None
        busy = {name: sum(_cpu(p) for p in processes) for name, processes in executors.items()}
        if max(busy.values()) >= 20:
            break
    name = max(busy, key=busy.get)
    os.killpg(workers[name], signal.SIGKILL)
    return f"{name} (pid {workers[name]}, its executor at {busy[name]:.0f} % CPU; the other {min(busy.values()):.0f} %)"


def _cpu(process) -> float:
    """CPU % of ``process`` since the previous call, 0 once it has exited."""
    import psutil

    try:
        return process.cpu_percent(None)
    except psutil.Error:
        return 0.0
