"""Two teams' DAG bundles, as Airflow's multi-team mode has them: one folder per team with one audit
DAG, the bundle tied to its team in ``[dag_processor] dag_bundle_config_list``, and what ``airflow
teams create`` and the DAG processor do (the teams, the bundles and their DAGs in the metadata DB)."""

from __future__ import annotations

import textwrap
from pathlib import Path

DAG_FILE = '''
import pendulum
from airflow.sdk import DAG

from watermark_ops.airflow.operators import WatermarkAuditOperator

with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime({year}, 1, 1, tz="UTC")):
    WatermarkAuditOperator(task_id="audit_orders", checkpoint={checkpoint!r})
'''
LOCAL_BUNDLE = "airflow.dag_processing.bundles.local.LocalDagBundle"


def team_bundles(folder: Path, checkpoints: dict[str, Path], year: int = 2024) -> list[dict]:
    """Write ``<team>-dags/<team>_orders.py`` (DAG ``<team>_orders_audit`` auditing the team's
    checkpoint) per team; return the ``dag_bundle_config_list`` (the plain DAGs folder first)."""
    bundles = [{"name": "dags-folder", "classpath": LOCAL_BUNDLE, "kwargs": {}}]
    for team, checkpoint in checkpoints.items():
        dags = folder / f"{team}-dags"
        dags.mkdir()
        (dags / f"{team}_orders.py").write_text(textwrap.dedent(DAG_FILE.format(
            dag_id=f"{team}_orders_audit", checkpoint=str(checkpoint), year=year)))
        bundles.append({"name": f"{team}-dags", "classpath": LOCAL_BUNDLE, "kwargs": {"path": str(dags)},
                        "team_name": team})
    return bundles


def sync_teams(teams: tuple[str, ...] = ("alpha", "beta")) -> dict:
    """Create the teams, sync the bundles of the environment's ``dag_bundle_config_list`` and parse
    each team's DAGs into the DB; return ``{dag_id: DAG}``."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db
    from airflow.models.team import Team
    from airflow.utils.session import create_session

    with create_session() as session:
        for team in teams:
            if Team.get_name_if_exists(team, session=session) is None:
                session.add(Team(name=team))
    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    dags = {}
    for team in teams:
        bundle = manager.get_bundle(f"{team}-dags")
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        assert not bag.import_errors, bag.import_errors
        sync_bag_to_db(bag, bundle.name, None)
        dags.update(bag.dags)
    return dags
