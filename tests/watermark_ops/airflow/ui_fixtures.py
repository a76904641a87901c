"""Checkpoints for the UI tests, under one checkpoint root, and the monitor config that lists them.

* ``real``: the restart history written by the real main job (five runs, real flights), with its
  progress log and landing folder (for the advice);
* ``regressed``: hand-made, batch 3's watermark below batch 2's (Spark never writes this: a
  replaced or hand-edited checkpoint does);
* ``big``: hand-made, 10,000 batches;
* ``broken``: the head's offsets file is binary garbage (its watermark cannot be read);
* ``escape``: a symlink from inside the root to a checkpoint outside it;
* the config also names a checkpoint outside every root and a job that has not run yet.
"""

from __future__ import annotations

import contextlib

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.watermark_ops import checkpoint_fixtures as cf

HOUR_MS = 3_600_000
BASE_MS = 1_357_000_000_000  # 2013-01-01T00:26:40Z


@dataclass
class UiCheckpoints:
    """The root folder, the outside folder, and the monitor config file."""

    root: Path
    outside: Path
    config: Path

    def env(self) -> dict[str, str]:
        """The environment the plugin reads: its root and the monitor config."""
        from watermark_ops.examples.flights.settings import runtime_home

        roots = {"test": str(self.root), "runtime": str(runtime_home() / "checkpoints")}
        return {"AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS": json.dumps(roots),
                "AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG": str(self.config)}


def build(spark, folder: Path, big_batches: int = 10_000) -> UiCheckpoints:
    """Write every checkpoint under ``folder`` (the real one copied from the shared restart history)."""
    root, outside = folder / "root", folder / "outside"
    root.mkdir(parents=True)
    outside.mkdir()
    history = cf.restart_history(spark)
    shutil.copytree(history.checkpoint, root / "real")
    shutil.copy2(Path(str(history.checkpoint) + ".progress.jsonl"), root / "real.progress.jsonl")
    landing = folder / "landing"
    shutil.copytree(history.dirs.landing, landing)
    chain = [(0, BASE_MS), (BASE_MS, BASE_MS + HOUR_MS), (BASE_MS + HOUR_MS, BASE_MS + 2 * HOUR_MS),
             (BASE_MS, BASE_MS + HOUR_MS), (BASE_MS + HOUR_MS, None)]
    cf.handmade_checkpoint(str(root / "regressed"), chain)
    cf.handmade_checkpoint(str(root / "big"), [(BASE_MS + i * 60_000, BASE_MS + (i + 1) * 60_000)
                                               for i in range(big_batches)])
    cf.handmade_checkpoint(str(root / "broken"), [(0, BASE_MS), (BASE_MS, BASE_MS)])
    (root / "broken" / "offsets" / "1").write_bytes(b"\x00\xff\xfe garbage")
    cf.handmade_checkpoint(str(outside / "secret"), [(0, BASE_MS)])
    os.symlink(outside / "secret", root / "escape")
    config = folder / "watermark_monitor.json"
    config.write_text(json.dumps({
        "defaults": {"max_lag": None, "max_idle": None, "max_skew": None},
        "checkpoints": [
            {"checkpoint": str(root / "real"), "landings": [str(landing)]},
            {"checkpoint": str(root / "regressed")},
            {"checkpoint": str(root / "big")},
            {"checkpoint": str(root / "broken")},
            {"checkpoint": str(outside / "secret")},
            {"checkpoint": str(root / "not-yet"), "missing_ok": True},
        ],
    }))
    return UiCheckpoints(root, outside, config)


@contextlib.contextmanager
def admin_client(env: dict[str, str], folder: Path):
    """A TestClient on Airflow's real api-server app (the plugin mounted by the real plugin manager)
    with ``env`` set, and the ``Authorization`` header of admin's JWT from the real SimpleAuthManager."""
    import pytest
    from fastapi.testclient import TestClient

    passwords = folder / "passwords.json"
    passwords.write_text(json.dumps({"admin": "admin"}))
    patch = pytest.MonkeyPatch()
    for name, value in {**env, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords)}.items():
        patch.setenv(name, value)
    from airflow.api_fastapi.app import create_app

    try:
        with TestClient(create_app("core"), base_url="http://127.0.0.1") as test_client:
            reply = test_client.post("/auth/token", json={"username": "admin", "password": "admin"})
            assert reply.status_code in (200, 201), reply.text
            test_client.headers["Authorization"] = f"Bearer {reply.json()['access_token']}"
            yield test_client
    finally:
        patch.undo()
