"""A deployment for the React views' browser tests: two teams' DAGs, their checkpoints and DAG runs.

* ``alpha``: the real main job run three times on real flights, each run tagged (``run_tag``) with the
  id of the DAG run of ``alpha_orders_audit`` that audits it (``dag.test()`` makes those runs and
  registers the checkpoint under the DAG); its late-row ledger written by the real ledger
  (``late_ledger`` + ``write_late_rows``, what the DAG's ledger task does) to ``<output>_late``.
* ``beta``: a copy of the shared real restart history, claimed by ``beta_orders_audit`` (config).
* ``regressed``: hand-made, batch 3's watermark below batch 2's, claimed by no DAG (admins only).

Teams and users as in Airflow's multi-team mode: alice (viewer, alpha), bob (user, beta), admin.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops.airflow import ui_fixtures as uf
from tests.watermark_ops.airflow.registry_fixtures import clear_registry
from tests.watermark_ops.airflow.team_fixtures import sync_teams, team_bundles

USERS = {"admin": "admin", "alice": "viewer:alpha", "bob": "user:beta"}


@dataclass
class Deployment:
    """What the browser tests need: the api-server's environment and the facts to check against."""

    env: dict[str, str]
    root: Path
    alpha: cf.JobDirs
    alpha_runs: list[str]
    beta: Path
    regressed: Path
    late_sink: Path
    progress: list[dict] = field(default_factory=list)

    def address(self, location: Path) -> str:
        """The checkpoint's address under the ``views`` root (``views/<relative path>``)."""
        return "views/" + str(location.relative_to(self.root))


def build(spark, folder: Path) -> Deployment:
    """Write the checkpoints, the teams' DAG bundles, the monitor config; sync the DAGs to the DB and
    make alpha's three DAG runs (``dag.test()``). The environment is set in this process for the
    duration of the module (a ``MonkeyPatch`` the caller undoes) and returned for the api-server."""
    import pendulum

    from watermark_ops.core.ledger import late_ledger, write_late_rows

    root = folder / "root"
    alpha = cf.JobDirs(root / "alpha")
    dates = [pendulum.datetime(2013, 1, 1 + i, tz="UTC") for i in range(3)]
    run_ids = [f"manual__{d.isoformat()}" for d in dates]  # what dag.test(run_after=d) names its run
    for index, run_id in enumerate(run_ids):
        cf.land_hour(alpha, index)
        cf.run_job(spark, alpha, run_tag=run_id)
    late_sink = Path(str(alpha.output) + "_late")
    write_late_rows(late_ledger(str(alpha.checkpoint)), str(late_sink))
    beta = cf.copy_checkpoint(cf.restart_history(spark).checkpoint, root / "beta" / "orders")
    regressed = root / "ops" / "regressed"
    regressed.parent.mkdir(parents=True)
    cf.handmade_checkpoint(str(regressed), [(0, uf.BASE_MS), (uf.BASE_MS, uf.BASE_MS + uf.HOUR_MS),
                                            (uf.BASE_MS + uf.HOUR_MS, uf.BASE_MS + 2 * uf.HOUR_MS),
                                            (uf.BASE_MS, uf.BASE_MS + uf.HOUR_MS), (uf.BASE_MS + uf.HOUR_MS, None)])
    config = folder / "watermark_monitor.json"
    config.write_text(json.dumps({
        "defaults": {"max_lag": None, "max_idle": None, "max_skew": None},
        "checkpoints": [
            {"checkpoint": str(alpha.checkpoint), "name": "alpha orders", "dag_ids": ["alpha_orders_audit"],
             "late_sink": str(late_sink), "landings": [str(alpha.landing)]},
            {"checkpoint": str(beta), "name": "beta orders", "dag_ids": ["beta_orders_audit"]},
            {"checkpoint": str(regressed), "name": "regressed"},
        ]}))
    bundles = team_bundles(folder, {"alpha": alpha.checkpoint, "beta": beta}, year=2013)
    passwords = folder / "passwords.json"
    passwords.write_text(json.dumps({user: user for user in USERS}))
    from watermark_ops.examples.browser import auth_environment

    env = {**auth_environment(folder / "auth"),
           "AIRFLOW__CORE__MULTI_TEAM": "True",
           "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in USERS.items()),
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
           "AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS": json.dumps({"views": str(root)}),
           "AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG": str(config),
           "AIRFLOW__API__EXPOSE_CONFIG": "False", "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING"}
    progress = [json.loads(line) for line in Path(str(alpha.checkpoint) + ".progress.jsonl").read_text().splitlines()
                if line.strip()]
    return Deployment(env, root, alpha, run_ids, beta, regressed, late_sink, progress)


def sync_and_run(deployment: Deployment) -> None:
    """What ``airflow teams create`` and the DAG processor do (teams, bundles, DAGs into the DB),
    then alpha's three DAG runs through ``dag.test()`` (each audits the checkpoint and registers it)."""
    import pendulum

    dags = sync_teams()
    clear_registry()
    for index, run_id in enumerate(deployment.alpha_runs):
        run = dags["alpha_orders_audit"].test(run_after=pendulum.datetime(2013, 1, 1 + index, tz="UTC"))
        assert str(run.state) == "success" and run.run_id == run_id, (run.state, run.run_id, run_id)


@pytest.fixture(scope="module")
def views_deployment(spark, airflow_db, tmp_path_factory):
    """The deployment, its environment set in this process for the module."""
    folder = tmp_path_factory.mktemp("views")
    deployment = build(spark, folder)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in deployment.env.items():
            patch.setenv(name, value)
        patch.delenv("AIRFLOW__WATERMARK_OPS__CHECKPOINTS", raising=False)
        sync_and_run(deployment)
        deployment.env = {**os.environ}
        yield deployment
