"""The checkpoint registry in the test session's metadata DB: read it, empty it, break it; a DAG whose
audit task registers the checkpoint given as ``params.checkpoint``."""

from __future__ import annotations

import json

import pendulum

START = pendulum.datetime(2024, 1, 1, tz="UTC")


def registry_rows() -> dict[str, tuple[object, object]]:
    """{key: (value, updated_at)} of the registry asset's state store, read from the DB."""
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY

    with create_session() as session:
        rows = (session.query(AssetStateStoreModel).join(AssetModel, AssetModel.id == AssetStateStoreModel.asset_id)
                .filter(AssetModel.name == CHECKPOINT_REGISTRY.name).all())
        return {r.key: (json.loads(r.value), r.updated_at) for r in rows}


def clear_registry() -> None:
    """Forget every registered checkpoint (other tests of the session register theirs)."""
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY

    with create_session() as session:
        ids = [a.id for a in session.query(AssetModel).filter(AssetModel.name == CHECKPOINT_REGISTRY.name)]
        session.query(AssetStateStoreModel).filter(AssetStateStoreModel.asset_id.in_(ids)).delete(
            synchronize_session=False)


def set_registry_value(key: str, value) -> None:
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY

    with create_session() as session:
        asset_id = session.query(AssetModel.id).filter(AssetModel.name == CHECKPOINT_REGISTRY.name).scalar()
        row = session.get(AssetStateStoreModel, (asset_id, key))
        row.value = json.dumps(value)


def audit_dag(dag_id: str = "wo_registry_audit"):
    from airflow.sdk import DAG

    from watermark_ops.airflow.operators import WatermarkAuditOperator

    with DAG(dag_id, schedule=None, start_date=START, params={"checkpoint": ""}) as dag:
        WatermarkAuditOperator(task_id="audit_checkpoint", checkpoint="{{ params.checkpoint }}")
    return dag
