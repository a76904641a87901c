"""The terminal face on object storage: ``watermark-ops audit|status|late|lateness s3://...``.

A real Spark-written checkpoint (``restart_history``), its progress log and its landed files are
copied into a bucket of the session's S3 server (``object_storage_fixtures``); the real command
runs as its own process with the standard AWS environment (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ...), and in process with ``--storage-options`` and ``--conn-id`` (an
Airflow ``aws`` connection). Each answer is the one the command gives for the local copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops import object_storage_fixtures as osf
from watermark_ops.terminal import cli
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.times import iso_utc
from watermark_ops.examples.s3server import ACCESS_KEY, REGION, SECRET_KEY

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"


@pytest.fixture(scope="module")
def history(spark):
    return cf.restart_history(spark)


@pytest.fixture(scope="module")
def bucket(history, s3_server):
    """``(checkpoint url, landing url, bucket)`` with the checkpoint, its progress log and landed files."""
    fs = s3_server.filesystem()
    name = osf.new_bucket(fs)
    url, landing = f"s3://{name}/jobs/flight_windows", f"s3://{name}/landing"
    osf.upload(fs, osf.s3_files(history.checkpoint, url, history.dirs.landing, landing))
    return url, landing, name


def command(s3_server, *argv) -> subprocess.CompletedProcess:
    """``python -m watermark_ops ARGV`` as its own process, reaching the server through the AWS environment only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=s3_server.endpoint_url, AWS_ACCESS_KEY_ID=ACCESS_KEY,
               AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_DEFAULT_REGION=REGION,
               PYTHONPATH=os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "watermark_ops", *map(str, argv)], env=env, capture_output=True,
                          text=True, timeout=180)


def local(capsys, *argv) -> tuple[int, str]:
    code = cli.main([str(a) for a in argv])
    return code, capsys.readouterr().out


def _as_local(text: str, url: str, path: Path) -> dict:
    return json.loads(text.replace(url, str(path)))


def test_audit_and_status_of_a_checkpoint_on_s3_with_the_aws_environment(history, bucket, s3_server, capsys):
    url, _, _ = bucket
    audited = command(s3_server, "audit", url, "--json")
    assert audited.returncode == 0, audited.stderr
    code, out = local(capsys, "audit", history.checkpoint, "--json")
    remote, expected = _as_local(audited.stdout, url, history.checkpoint), json.loads(out)
    for document in (remote, expected):
        document.pop("audited_at_ms")
    assert remote == expected and remote["status"] == "ok" and len(remote["batches"]) == 7

    at = iso_utc(read_checkpoint(str(history.checkpoint)).batches[-1].timestamp_ms + 60_000)
    status = command(s3_server, "status", url, "--json", "--at", at)
    assert status.returncode == 0, status.stderr
    code, out = local(capsys, "status", history.checkpoint, "--json", "--at", at)
    assert code == 0 and _as_local(status.stdout, url, history.checkpoint) == json.loads(out)
    table = command(s3_server, "status", url, "--at", at)  # the terminal table names the URL
    assert table.returncode == 0 and url in table.stdout


def test_late_and_lateness_of_a_checkpoint_on_s3_with_the_aws_environment(history, bucket, s3_server, capsys):
    url, landing, name = bucket
    late = command(s3_server, "late", url, "--json", "--sink", f"s3://{name}/late")
    assert late.returncode == 0, late.stderr
    code, out = local(capsys, "late", history.checkpoint, "--json")
    remote, expected = json.loads(late.stdout), json.loads(out)
    assert code == 0 and remote["totals"] == expected["totals"] and remote["complete"]
    assert len(remote["late_rows"]) == len(expected["late_rows"])
    written = remote["sink_files"]
    assert written and all(f.startswith(f"s3://{name}/late/batch=") for f in written)
    assert s3_server.filesystem().ls(f"s3://{name}/late")  # the late rows are on S3

    lateness = command(s3_server, "lateness", url, "--json", "--landing", landing)
    assert lateness.returncode == 0, lateness.stderr
    code, out = local(capsys, "lateness", history.checkpoint, "--json", "--landing", history.dirs.landing)
    remote, expected = json.loads(lateness.stdout), json.loads(out)
    assert code == 0 and remote["runs"] == expected["runs"] and remote["runs"]
    assert [{k: v for k, v in i.items() if k not in ("landing", "read_from")} for i in remote["inputs"]] == \
        [{k: v for k, v in i.items() if k not in ("landing", "read_from")} for i in expected["inputs"]]


def test_storage_options_and_an_airflow_connection(history, bucket, s3_server, aws_conn_id, capsys, monkeypatch):
    url, _, _ = bucket
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    options = json.dumps({"endpoint_url": s3_server.endpoint_url, "key": ACCESS_KEY, "secret": SECRET_KEY,
                          "client_kwargs": {"region_name": REGION}})
    code, out = local(capsys, "audit", url, "--json", "--storage-options", options)
    assert code == 0 and json.loads(out)["head_batch_id"] == 6
    code, out = local(capsys, "status", url, "--json", "--conn-id", aws_conn_id,
                      "--storage-options", '{"max_pool_connections": 16}')
    assert code == 0 and json.loads(out)["head_batch_id"] == 6

    assert cli.main(["audit", url, "--storage-options", "[1]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err
    assert cli.main(["audit", url, "--storage-options", "{endpoint"]) == 2
    assert "--storage-options is not JSON" in capsys.readouterr().err
    assert cli.main(["status", url, "--conn-id", "no_such_connection"]) == 2
    assert "--conn-id no_such_connection" in capsys.readouterr().err


def test_a_missing_checkpoint_and_an_unreadable_object_on_s3_exit_2_naming_them(history, bucket, s3_server):
    url, _, name = bucket
    missing = command(s3_server, "status", f"s3://{name}/nothing-here")
    assert missing.returncode == 2 and f"s3://{name}/nothing-here" in missing.stdout + missing.stderr
    broken_url = f"s3://{name}/broken"
    fs = s3_server.filesystem()
    osf.upload(fs, osf.s3_files(history.checkpoint, broken_url))
    fs.pipe_file(f"{broken_url}/offsets/3", b"v1\n{\"batchWatermarkMs\":")  # cut short: stays so
    audited = command(s3_server, "audit", broken_url, "--json")
    finding, = [f for f in json.loads(audited.stdout)["findings"] if f["rule"] == "unreadable"]
    assert audited.returncode == 2 and finding["file"] == f"{broken_url}/offsets/3"
    assert "the same in 3 reads" in finding["message"]
