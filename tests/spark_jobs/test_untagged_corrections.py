"""Launches by hand (no ``--run-tag``) keep every one of their corrections.

The flat temperatures job of ``test_twin`` (6-hour windows, a 1-hour watermark, the south city's
readings 10 hours late) is launched three times by hand with ``--allowed-lateness "6 hours"``; the
second and third launches drop late rows into different windows. Each launch is its own run: its
corrections carry the declared query's ``runId`` of that start (in the corrections log and as the
``run_key`` folder beside the sink), so the third launch does not replace the second's.

Then a rerun with nothing landed (``--run-tag rerun``: the query starts and runs no batch) has 0 late
rows, known, on every face: the ``late_ledger`` XCom (``reconcile_run``), ``lateness --json``,
``late --json`` and the page's JSON (``checkpoint_detail``, read with the late-row sink the XCom wrote).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.spark_jobs.test_twin import ALLOWED, DAYS, JOB, land
from watermark_ops.core.ledger import late_ledger, read_replay_log


def _launch_by_hand(tmp: Path, *declarations: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "watermark_ops.spark.launch", "--checkpoint", str(tmp / "ck" / "windows"),
               "--master", "local[2]", "--window", "6 hours", "--allowed-lateness", ALLOWED, *declarations, "--", str(JOB),
               str(tmp / "landing"), str(tmp / "out"), str(tmp / "ck")]
    return subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Three launches by hand, a day landed before each; then a tagged rerun with nothing new landed."""
    tmp = tmp_path_factory.mktemp("untagged")
    for day in DAYS:
        land(day, tmp / "landing")
        done = _launch_by_hand(tmp)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    done = _launch_by_hand(tmp, "--run-tag", "rerun")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return tmp


def test_three_launches_without_a_run_tag_keep_all_their_corrections(launched):
    from watermark_ops.core.ledger.corrections import read_corrections, standing

    tmp_path = launched
    checkpoint = str(tmp_path / "ck" / "windows")
    progress = [json.loads(line) for line in Path(checkpoint + ".progress.jsonl").read_text().splitlines()]
    run_ids = list(dict.fromkeys(r["run_id"] for r in progress if r["run_tag"] is None))
    assert len(run_ids) == 3
    # the late rows of the second and third launches fall in different windows
    replays, _ = read_replay_log(checkpoint)
    query_run = {r["batch_id"]: r["run_id"] for r in progress}
    touched: dict[str, set] = {}
    for row in late_ledger(checkpoint).late_rows:
        touched.setdefault(query_run[row.batch_id], set()).add((row.window_start_ms, row.event["city"]))
    assert sorted(touched) == sorted(run_ids[1:]) and not touched[run_ids[1]] & touched[run_ids[2]]
    corrections, problems = read_corrections(checkpoint)
    assert problems == []
    by_run: dict[str, set] = {}
    for c in corrections:
        by_run.setdefault(c["run"], set()).add((c["window_start_ms"], c["keys"]["city"]))
    assert by_run == touched  # every launch's corrections kept, each under its own runId
    assert {(c["window_start_ms"], c["keys"]["city"]) for c in standing(corrections)} == set().union(*touched.values())
    # the table beside the sink: one folder per launch, named by its runId
    folders = sorted(p.name for p in (tmp_path / "out_corrections").iterdir() if p.name.startswith("run_key="))
    assert folders == sorted(f"run_key={run}" for run in touched)
    table = pd.read_parquet(tmp_path / "out_corrections")
    assert len(table) == len(corrections) and set(table["run"]) == set(touched)


def test_a_rerun_without_batches_has_0_late_rows_known_on_every_face(launched, capsys):
    from watermark_ops.core.ledger import reconcile_run
    from watermark_ops.core.overview import checkpoint_detail
    from watermark_ops.core.thresholds import Thresholds
    from watermark_ops.terminal import cli

    checkpoint = str(launched / "ck" / "windows")
    progress = [json.loads(line) for line in Path(checkpoint + ".progress.jsonl").read_text().splitlines()]
    assert not [r for r in progress if r["run_tag"] == "rerun" and r.get("executed")]  # the rerun ran no batch
    sink = str(launched / "out_late")
    assert reconcile_run(checkpoint, None, sink=sink)["rows_late"] > 0  # the late-row sink of the launches
    xcom = reconcile_run(checkpoint, "rerun", sink=sink)  # the late_ledger task's XCom for the rerun
    assert xcom["rows_late"] == 0 and xcom["batch_ids"] == [] and xcom["complete"] is True
    assert cli.main(["lateness", checkpoint, "--json"]) == 0
    (lateness,) = [r for r in json.loads(capsys.readouterr().out)["runs"] if r["run_tag"] == "rerun"]
    assert (lateness["rows_late"], lateness["late_rows_known"]) == (0, True)
    for late_sink in (sink, None):  # the page's JSON, with the ledger's sink and from the replay records
        detail = checkpoint_detail(checkpoint, Thresholds(), late_sink=late_sink)
        (page,) = [r for r in detail["runs"] if r["run_tag"] == "rerun"]
        assert (page["rows_late"], page["late_rows_known"], page["late_rows_unknown_reason"]) == (0, True, None)
    cli.main(["late", checkpoint, "--json"])
    document = json.loads(capsys.readouterr().out)
    assert document["late_rows_known"] is True
