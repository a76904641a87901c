"""The UI's JSON routes on fuzzed checkpoints: never a 500, and what cannot be shown is a named error.

The same mutations as the core's fuzz (``tests/watermark_ops/core/test_fuzz.py``: offset and commit
logs, ``metadata``, ``sources/``, the landed files and the progress log) applied to a copy of the
real restart history under the UI's checkpoint root (``ui_fixtures``' layout and environment: the
root option and a monitor config naming the checkpoint and its landing folder), then
``GET /watermark-ops/api/checkpoints`` and ``/api/checkpoints/test/<path>`` through Airflow's own
api-server app with an authenticated user. Allowed: 200 with the checkpoint's data, whose
problems name their files, or with an ``error`` naming the checkpoint; an error must not be a
Python exception the page caught from the core (``TypeError``, ``KeyError``, ...): the core
returns problems for bad files, it does not raise. The pages only read: nothing changes.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.watermark_ops.airflow import ui_fixtures as uf
from tests.watermark_ops.core.test_fuzz import MUTATION, _copy, _hashes, _mutate

pytestmark = pytest.mark.timeout(600)

EXAMPLES = 100
#: What a caught storage failure may be (the page's "cannot be read: <repr>"); anything else is a crash.
STORAGE_ERRORS = re.compile(r"^cannot be read: (FileNotFoundError|NotADirectoryError|IsADirectoryError|"
                            r"PermissionError|OSError)\(")


@pytest.fixture(scope="module")
def fuzz_root(spark, tmp_path_factory):
    """``(pristine copy of the real checkpoint with progress log and landing, UiCheckpoints)``."""
    from tests.watermark_ops import checkpoint_fixtures as cf

    history = cf.restart_history(spark)
    pristine = tmp_path_factory.mktemp("ui-fuzz-pristine")
    shutil.copytree(history.checkpoint, pristine / "cp", symlinks=True)
    shutil.copy(str(history.checkpoint) + ".progress.jsonl", pristine / "cp.progress.jsonl")
    shutil.copytree(history.dirs.landing, pristine / "landing")
    (pristine / "origin").write_text(str(history.dirs.landing))
    folder = tmp_path_factory.mktemp("ui-fuzz")
    (folder / "root").mkdir()
    (folder / "outside").mkdir()
    return pristine, uf.UiCheckpoints(folder / "root", folder / "outside", folder / "watermark_monitor.json")


@pytest.fixture(scope="module")
def client(fuzz_root, airflow_db, tmp_path_factory):
    """A TestClient on the real api-server app with admin's JWT (as ``test_ui.py``)."""
    from fastapi.testclient import TestClient

    _, ui = fuzz_root
    ui.config.write_text(json.dumps({"checkpoints": []}))
    with uf.admin_client(ui.env(), tmp_path_factory.mktemp("auth")) as test_client:
        yield test_client


def test_the_unmutated_copy_is_shown_with_its_batches(fuzz_root, client):
    pristine, ui = fuzz_root
    work = Path(tempfile.mkdtemp(prefix="ex-", dir=ui.root))
    _copy(pristine, work)
    ui.config.write_text(json.dumps({"checkpoints": [
        {"checkpoint": str(work / "cp"), "landings": [str(work / "landing")]}]}))
    data = client.get(f"/watermark-ops/api/checkpoints/test/{work.name}/cp").json()
    assert data["row"]["head_batch_id"] is not None and data["audit"]["status"] == "ok" and data["chart"]["points"]
    assert data["advice"] and data["runs"]


def _no_crash(error: str | None, where: str) -> None:
    assert error is None or not error.startswith("cannot be read: ") or STORAGE_ERRORS.match(error), (where, error)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutations=st.lists(MUTATION, min_size=1, max_size=3))
def test_the_json_routes_never_answer_500_on_mutated_checkpoints(fuzz_root, client, mutations):
    pristine, ui = fuzz_root
    work = Path(tempfile.mkdtemp(prefix="ex-", dir=ui.root))
    try:
        _copy(pristine, work)
        for kind, pick, value in mutations:
            _mutate(work / "cp", kind, pick, value)
        ui.config.write_text(json.dumps({"checkpoints": [
            {"checkpoint": str(work / "cp"), "landings": [str(work / "landing")]}]}))
        before = {**_hashes(work / "cp"), **_hashes(work / "landing")}
        overview = client.get("/watermark-ops/api/checkpoints")
        assert overview.status_code == 200, (mutations, overview.text[:500])
        rows = overview.json()["checkpoints"]
        (row,) = [r for r in rows if r["location"] == str(work / "cp")]
        for other in rows:  # the deployment's own jobs (not run here) and the config's entry
            _no_crash(other.get("error"), f"overview row {other['name']} for {mutations}")
        address = f"test/{work.name}/cp"
        detail = client.get(f"/watermark-ops/api/checkpoints/{address}")
        assert detail.status_code == 200, (mutations, detail.text[:500])
        data = detail.json()
        if "error" in data:
            assert data["location"] == address
            _no_crash(data["error"], f"checkpoint page for {mutations}")
        else:
            assert data["location"] == str(work / "cp") and data["row"]["location"] == str(work / "cp")
            for finding in data["audit"]["findings"]:
                assert finding["file"] is None or finding["file"].startswith(str(work)), finding  # names its file
        page = client.get(f"/watermark-ops/checkpoints/{address}")
        assert page.status_code == 200, (mutations, page.text[:500])
        assert {**_hashes(work / "cp"), **_hashes(work / "landing")} == before  # the pages only read
    finally:
        shutil.rmtree(work, ignore_errors=True)
