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
(``watermark_partitions:<grain>:<location>``), and the sensors' remembered tail
(``watermark_tail:<location>``, :class:`TailMemory`: the newest batches the last poke read, so the
next poke fetches only newer files by name instead of listing the logs). When a checkpoint is deleted on purpose together
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

__all__ = ["AUDIT_KEY_PREFIX", "AssetStateStoreMemory", "MAX_KEY_LENGTH", "TAIL_KEY_PREFIX", "TailMemory",
           "checkpoint_memory_keys", "forget_checkpoints", "partitions_key_prefix", "state_store_key"]

#: The prefix of the audit memory's key (``watermark_audit:<location>``).
AUDIT_KEY_PREFIX = "watermark_audit:"

#: The prefix of the sensors' remembered tail (``watermark_tail:<location>``, :class:`TailMemory`).
TAIL_KEY_PREFIX = "watermark_tail:"

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
    memory's, the announced partitions' for each grain (``day``, ``hour``), then the sensors'
    remembered tail."""
    return [state_store_key(AUDIT_KEY_PREFIX, location),
            *(state_store_key(partitions_key_prefix(grain), location) for grain in GRAINS),
            state_store_key(TAIL_KEY_PREFIX, location)]


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



def _without_requests(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != "requests"}


class TailMemory:
    """The sensors' remembered tail of a checkpoint (:class:`watermark_ops.core.tail.Tail`), kept in
    an asset state store under ``watermark_tail:<location>`` between pokes of different processes
    (``mode="reschedule"``: every poke is a new task run; a new DAG run of the same sensor; the
    monitor's sensors): with it a poke on an unchanged checkpoint lists nothing and makes the same
    few requests whatever the history (:func:`watermark_ops.core.checks.check_tail`).

    The tail is only a cache of what the checkpoint holds: a tail that no longer matches (a reset,
    a purge, another window) is detected by ``follow`` and read again by listing; a malformed value
    is ignored (logged), never an error. Any task may share it: it describes the files, not a task.
    Its size is that of ``Tail.to_dict()`` (a few KB for 100 batches).

    :param store: an asset state store accessor (``context["asset_state_store"][asset]``: ``get(key,
        default=None)`` / ``set(key, value)`` of JSON values).
    """

    def __init__(self, store: Any) -> None:
        self.store = store
        self._saved: dict[str, dict[str, Any]] = {}

    @staticmethod
    def key(location: str) -> str:
        """``watermark_tail:<normalised location>`` (its SHA-256 past 512 characters)."""
        return state_store_key(TAIL_KEY_PREFIX, location)

    def load(self, location: str) -> Any:
        """The remembered ``Tail`` of ``location``, or None (nothing remembered, or a value that is
        not a tail: logged as a warning and ignored; the next poke lists)."""
        import logging

        from watermark_ops.core.tail import Tail

        value = self.store.get(self.key(location), default=None)
        if not isinstance(value, dict):
            return None
        try:
            tail = Tail.from_dict(value)
        except Exception as exc:  # a cache: a bad value costs one listing, never the poke
            logging.getLogger(__name__).warning("remembered tail %s ignored: %r", self.key(location), exc)
            return None
        self._saved[location] = _without_requests(value)
        return tail

    def save(self, location: str, tail: Any) -> bool:
        """Remember ``tail`` for ``location``: one ``set``, skipped when it equals what this memory
        loaded or saved last (a poke on an unchanged checkpoint writes nothing).

        :return: True when written.
        """
        value = tail.to_dict()
        if self._saved.get(location) == _without_requests(value):
            return False
        self.store.set(self.key(location), value)
        self._saved[location] = _without_requests(value)
        return True


if __name__ == "__main__":
    sys.exit(main())
