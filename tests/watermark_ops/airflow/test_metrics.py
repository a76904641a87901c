"""The metrics, received for real: a UDP socket on 127.0.0.1 stands in for StatsD, a DAG runs with
``dag.test()`` in a child process whose Airflow ``[metrics]`` settings point at it (Airflow reads
them once per process), and every metric of ``docs/metrics.md``'s table arrives with the value,
the tags and the kind the checkpoint's own figures (the CLI's ``status`` / ``late`` / ``state
--json``) say. With metrics off, the same kind of run sends nothing.

The DAG: the run pattern on a late-row checkpoint with an allowed lateness (the launch marked done:
the checkpoint is what a run left), a stall sensor on it, an audit of a real stateful checkpoint
written by Spark, and a run pattern whose restart the preflight refuses.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pendulum
import pytest

from tests.watermark_ops import ledger_fixtures as lf
from tests.watermark_ops.checkpoint_fixtures import handmade_checkpoint
from tests.watermark_ops.state_store_fixtures import copy_checkpoint
from watermark_ops.airflow.metrics import METRICS, STALL_STATE_VALUES

REPO = Path(__file__).resolve().parents[3]
DAY = pendulum.datetime(2013, 1, 2, tz="UTC")
RUN_ID = f"manual__{DAY.isoformat()}"
DAG_ID = "wo_metrics"
PREFIX = "airflow."

RUNNER = textwrap.dedent('''
    import json, sys
    import pendulum
    from airflow.sdk import DAG

    from tests.watermark_ops import stall_fixtures as sf
    from watermark_ops.airflow.operators import WatermarkAuditOperator
    from watermark_ops.airflow.run import watermarked_run
    from watermark_ops.airflow.sensors import WatermarkStallSensor

    paths = json.loads(sys.argv[1])
    day = pendulum.parse(paths["day"])
    with DAG(paths["dag_id"], schedule=None, start_date=pendulum.datetime(2013, 1, 1, tz="UTC")) as dag:
        WatermarkAuditOperator(task_id="audit_state", checkpoint=paths["state"], memory_asset=None)
        if paths["full"]:
            watermarked_run("flights", application=paths["never"], checkpoint=paths["late"], attach=True,
                            landings=[paths["landing"]], allowed_lateness="6 hours")
            WatermarkStallSensor(task_id="stall", checkpoint=paths["late"], timeout=0)  # the CLI's thresholds
            watermarked_run("refused", application=paths["never"], checkpoint=paths["refused"], attach=True)
    run = sf.run_dag(dag, logical_date=day, run_after=day,
                     mark_success_pattern=r"^flights\\.(preflight|spark_submit)$")
    print(json.dumps({t: s for (t, _), s in sf.task_states(run).items()}))
''')


def _datagrams(sock: socket.socket) -> list[str]:
    """Every datagram the socket holds now (the child has exited: all it sent is in the buffer)."""
    sock.setblocking(False)
    lines = []
    while True:
        try:
            data = sock.recv(65535)
        except BlockingIOError:
            return lines
        lines += [line for line in data.decode().split("\n") if line]


def _parse(line: str) -> dict:
    """``airflow.watermark_ops.lag_s,checkpoint=ck,dag_id=d,basis=data_interval:3600.0|g`` → parts."""
    head, rest = line.rsplit(":", 1)
    value, kind = rest.split("|")[:2]
    name, *tags = head.split(",")
    return {"name": name, "value": float(value), "kind": {"g": "gauge", "c": "counter"}.get(kind, kind),
            "tags": dict(t.split("=", 1) for t in tags)}


def _run(tmp_path: Path, port: int, metrics_on: bool, full: bool, paths: dict) -> dict:
    runner = tmp_path / f"runner_{int(metrics_on)}.py"
    runner.write_text(RUNNER)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO / "spark_jobs"), str(REPO)]),
           "AIRFLOW__METRICS__STATSD_ON": str(metrics_on), "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
           "AIRFLOW__METRICS__STATSD_PORT": str(port), "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
           "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True", "AIRFLOW__METRICS__OTEL_ON": "False",
           "AIRFLOW__METRICS__STATSD_DATADOG_ENABLED": "False"}
    child = subprocess.Popen([sys.executable, str(runner), json.dumps({**paths, "full": full})], cwd=str(REPO),
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = child.communicate(timeout=900)
    finally:
        if child.poll() is None:
            os.kill(child.pid, 9)  # only the child this test started, by its PID
            child.wait()
    assert child.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _cli(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "watermark_ops", *args], capture_output=True, text=True,
                         cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO / "plugins")})
    return json.loads(out.stdout)


@pytest.fixture
def checkpoints(tmp_path, state_checkpoints):
    """A late-row checkpoint whose three batches are this DAG run's (stamped with its data interval),
    with a correction recovering one of its late rows; a copy of the real stateful checkpoint; a
    checkpoint whose restart the preflight refuses (no metadata)."""
    ck, landing = lf.build(tmp_path / "late")
    log = tmp_path / "late" / "ck.progress.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    watermarks = [0, lf.WATERMARK_1, lf.WATERMARK_2]
    for r in records:
        r["run_tag"] = RUN_ID
        r["watermark_ms"] = watermarks[r["batch_id"]]  # as the recorder writes it (the batch's offsets watermark)
        r["data_interval"] = {"start_ms": lf.T0, "end_ms": lf.T0 + 24 * lf.HOUR}
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    # late rows 10 and 13 (window [14:00, 15:00)) recovered by a correction of this run; 4 dropped for good
    start = lf.WATERMARK_1 - lf.HOUR
    correction = {"window_start_ms": start, "window_end_ms": start + lf.HOUR, "keys": {}, "emitted": None,
                  "corrected": {"n": 1}, "late_rows": 1, "run": RUN_ID, "batch_id": 1, "write": 1}
    (tmp_path / "late" / "ck.corrections.jsonl").write_text(json.dumps(correction) + "\n")
    refused = str(tmp_path / "refused_ck")
    handmade_checkpoint(refused, [(0, 10), (10, 20)], query_id=None)  # metadata missing: no_go
    return {"late": str(ck), "landing": str(landing), "refused": refused, "never": str(tmp_path / "never.py"),
            "state": copy_checkpoint(state_checkpoints["dedupe_ids"], tmp_path / "state_ck"),
            "day": DAY.isoformat(), "dag_id": DAG_ID}


def _docs_table() -> dict[str, dict]:
    """docs/metrics.md's table: {name: {"kind", "tags"}}."""
    rows = {}
    for line in (REPO / "docs" / "metrics.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`watermark_ops."):
            rows[cells[0].strip("`")] = {"kind": cells[1], "tags": set(re.findall(r"`(\w+)`", cells[3]))}
    return rows


def test_the_docs_table_is_the_metric_table():
    table = _docs_table()
    assert table == {m.name: {"kind": m.kind, "tags": {"checkpoint", "dag_id", *m.tags}} for m in METRICS}


def test_every_metric_in_the_docs_arrives_with_the_checkpoints_figures_and_none_when_off(
        airflow_db, checkpoints, tmp_path):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    try:
        states = _run(tmp_path, port, True, True, checkpoints)
        received = [_parse(line) for line in _datagrams(sock)]
        ours = [r for r in received if r["name"].startswith(PREFIX + "watermark_ops.")]
        assert states["refused.preflight"] == "failed" and states["flights.late_ledger"] == "success", states

        # every metric of the docs' table arrived, with its kind and tags
        table = _docs_table()
        names = {r["name"][len(PREFIX):] for r in ours}
        assert names == set(table), (sorted(names), sorted(table))
        for r in ours:
            spec = table[r["name"][len(PREFIX):]]
            assert r["kind"] == spec["kind"] and set(r["tags"]) == spec["tags"], r
            assert r["tags"]["dag_id"] == DAG_ID

        def values(name, **tags):
            return [r["value"] for r in ours if r["name"] == PREFIX + name
                    and all(r["tags"].get(k) == v for k, v in tags.items())]

        # the late checkpoint's figures, as the CLI gives them
        status = _cli("status", "--json", checkpoints["late"])
        late_document = _cli("late", "--json", checkpoints["late"])
        late, split = late_document["totals"], late_document["corrections"]
        c = status["classification"]
        assert c["lag_basis"] == "data_interval"
        assert values("watermark_ops.watermark_epoch_s", checkpoint="ck") == [status["watermark_ms"] / 1000] * 2
        assert values("watermark_ops.lag_s", checkpoint="ck", basis="data_interval") == [c["lag_ms"] / 1000]
        assert values("watermark_ops.stall_state", checkpoint="ck", state=c["state"]) == \
            [STALL_STATE_VALUES[c["state"]]]
        assert (late["rows_late"], split["rows_late_recovered"], split["rows_late_dropped"]) == (6, 2, 4)
        assert values("watermark_ops.late_rows", checkpoint="ck") == [late["rows_late"]]
        assert values("watermark_ops.late_rows_recovered", checkpoint="ck") == [split["rows_late_recovered"]]
        assert values("watermark_ops.late_rows_dropped", checkpoint="ck") == [split["rows_late_dropped"]]
        assert values("watermark_ops.corrections", checkpoint="ck") == [split["corrections"]] == [1]
        audit = _cli("audit", "--json", checkpoints["late"])
        for severity in ("error", "warning", "info"):
            assert values("watermark_ops.audit_findings", checkpoint="ck", severity=severity) == \
                [sum(1 for f in audit["findings"] if f["severity"] == severity)]
        # the stateful checkpoint: rows per operator, as `watermark-ops state --json` counts them
        state = _cli("state", "--json", checkpoints["state"])
        operators = {f"{op['operator_id']}_{op['name']}": op["rows"][-1] for op in state["operators"]}  # per batch
        assert operators and all(n for n in operators.values())
        got = {r["tags"]["operator"]: r["value"] for r in ours
               if r["name"] == PREFIX + "watermark_ops.state_rows" and r["tags"]["checkpoint"] == "state_ck"}
        assert got == operators
        assert values("watermark_ops.restarts_refused", checkpoint="refused_ck", by="preflight") == [1]

        # metrics off: the same settings with statsd_on False send nothing at all
        _datagrams(sock)
        off = _run(tmp_path, port, False, False, {**checkpoints, "dag_id": DAG_ID + "_off"})
        assert off["audit_state"] == "success"
        assert _datagrams(sock) == []
    finally:
        sock.close()
