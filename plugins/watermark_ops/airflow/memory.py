"""The audit's memory in Airflow's asset state store (Airflow 3.3, AIP-103).

The same two methods as every :class:`watermark_ops.core.memory.AuditMemory` (``load(location)``,
``save(location, head)``), kept on an asset: one key per checkpoint, ``watermark_audit:<location>``,
so every audit task and DAG that audits the same checkpoint shares one remembered head, and it
survives Spark's purging of old log files. :class:`watermark_ops.airflow.operators.WatermarkAuditOperator`
uses it; the terminal keeps the same heads in a state file
(:class:`watermark_ops.core.memory.StateFileMemory`).

What watermark-ops keeps in the asset state store per checkpoint (:func:`checkpoint_memory_keys`):
the audit's remembered head (``watermark_audit:<location>``) and the announced partitions of
:class:`watermark_ops.airflow.partitions.WatermarkPartitionsOperator`
(``watermark_partitions:<grain>:<location>``). When a checkpoint is deleted on purpose together
with everything it produced (a fresh start, as ``make run`` does), :func:`forget_checkpoints`
deletes those entries from the metadata DB, so the next audit starts a new memory instead of
reporting ``checkpoint_reset``::

    python -m watermark_ops.airflow.memory forget CHECKPOINT [CHECKPOINT ...]

(it needs the metadata DB, like ``airflow db`` commands: run it where those run, not in a task).
To keep the history and only accept a replaced checkpoint, use ``accept_reset`` instead
(:func:`watermark_ops.core.memory.accept_reset`).
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any, Iterable

from watermark_ops.core.memory import RememberedHead, memory_key
from watermark_ops.core.partitions import GRAINS

__all__ = ["AUDIT_KEY_PREFIX", "AssetStateStoreMemory", "MAX_KEY_LENGTH", "checkpoint_memory_keys",
           "forget_checkpoints", "partitions_key_prefix", "state_store_key"]

#: The prefix of the audit memory's key (``watermark_audit:<location>``).
AUDIT_KEY_PREFIX = "watermark_audit:"

#: Airflow's ``asset_state_store.key`` column is ``String(512)``.
MAX_KEY_LENGTH = 512


def state_store_key(prefix: str, location: str) -> str:
    """``<prefix><normalised location>`` (:func:`watermark_ops.core.memory.memory_key`); a location
    too long for the 512-character key column is replaced by its SHA-256 (``<prefix>sha256:<hex>``)."""
    key = prefix + memory_key(location)
    if len(key) > MAX_KEY_LENGTH:
        key = prefix + "sha256:" + hashlib.sha256(memory_key(location).encode()).hexdigest()
    return key


def partitions_key_prefix(grain: str) -> str:
    """``watermark_partitions:<grain>:``, the prefix of the announced partitions' key."""
    return f"watermark_partitions:{grain}:"


def checkpoint_memory_keys(location: str) -> list[str]:
    """Every asset-state-store key watermark-ops keeps for the checkpoint at ``location``: the audit
    memory's, then the announced partitions' for each grain (``day``, ``hour``)."""
    return [state_store_key(AUDIT_KEY_PREFIX, location),
            *(state_store_key(partitions_key_prefix(grain), location) for grain in GRAINS)]


def forget_checkpoints(locations: Iterable[str]) -> list[dict[str, str]]:
    """Delete what watermark-ops remembers of these checkpoints (:func:`checkpoint_memory_keys`) from
    the asset state store in Airflow's metadata DB, on whichever asset holds it (table
    ``asset_state_store``, ``airflow/models/asset_state_store.py``). For a deliberate fresh start:
    the checkpoints and their outputs deleted too.

    Needs the metadata DB (``AIRFLOW_HOME`` / ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``), as the
    ``airflow db`` commands do: a task cannot, it has no DB access in Airflow 3.

    :return: ``[{"asset": asset name, "key": key}]``, what was deleted (empty when nothing was
        remembered, e.g. before the first run).
    """
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    keys = sorted({key for location in locations for key in checkpoint_memory_keys(location)})
    with create_session() as session:
        rows = (session.query(AssetStateStoreModel, AssetModel.name)
                .join(AssetModel, AssetModel.id == AssetStateStoreModel.asset_id)
                .filter(AssetStateStoreModel.key.in_(keys)).all())
        forgotten = [{"asset": name, "key": row.key} for row, name in rows]
        for row, _ in rows:
            session.delete(row)
    return forgotten


def main(argv: list[str] | None = None) -> int:
    """``python -m watermark_ops.airflow.memory forget CHECKPOINT ...``: :func:`forget_checkpoints`,
    one line per deleted entry; exit 0."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m watermark_ops.airflow.memory",
                                     description="forget what watermark-ops remembers of deleted checkpoints")
    commands = parser.add_subparsers(dest="command", required=True)
    forget = commands.add_parser("forget", help="delete the audit memory and announced partitions of checkpoints")
    forget.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT")
    args = parser.parse_args(argv)
    forgotten = forget_checkpoints(args.checkpoints)
    for entry in forgotten:
        print(f"forgot {entry['key']} (asset {entry['asset']})")
    print(f"{len(forgotten)} remembered entries forgotten for {len(args.checkpoints)} checkpoint(s)")
    return 0


class AssetStateStoreMemory:
    """Remembered heads kept in Airflow's asset state store (Airflow 3.3, AIP-103).

    :param store: the accessor of one asset, ``context["asset_state_store"][asset]`` (an
        ``airflow.sdk.execution_time.context.AssetStateStoreAccessor``): anything with
        ``get(key, default=None)`` and ``set(key, value)`` taking JSON values. The task must have
        the asset as an inlet or outlet, and the asset must be known to Airflow (its DAG parsed).
    :param key_prefix: prefix of the per-checkpoint key.
    """

    MAX_KEY_LENGTH = MAX_KEY_LENGTH

    def __init__(self, store: Any, key_prefix: str = AUDIT_KEY_PREFIX):
        self.store = store
        self.key_prefix = key_prefix

    def key(self, location: str) -> str:
        """``<prefix><normalised location>``; a location too long for a key is replaced by its SHA-256."""
        return state_store_key(self.key_prefix, location)

    def load(self, location: str) -> RememberedHead | None:
        """The head remembered for ``location``, None if none.

        :raises MemoryFormatError: when the stored value is not a remembered head.
        """
        key = self.key(location)
        value = self.store.get(key, default=None)
        return None if value is None else RememberedHead.from_dict(value, f"asset state store key {key!r}")

    def save(self, location: str, head: RememberedHead) -> None:
        """Remember ``head`` for ``location`` (one ``set`` of a JSON object); an accepted reset
        already stored is kept while ``head`` has the accepted query id.

        :raises MemoryFormatError: when the stored value is not a remembered head.
        """
        self.store.set(self.key(location), head.keeping_acceptance(self.load(location)).to_dict())


if __name__ == "__main__":
    sys.exit(main())
