"""The audit's memory in Airflow's asset state store (Airflow 3.3, AIP-103).

The same two methods as every :class:`watermark_ops.core.memory.AuditMemory` (``load(location)``,
``save(location, head)``), kept on an asset: one key per checkpoint, ``watermark_audit:<location>``,
so every audit task and DAG that audits the same checkpoint shares one remembered head, and it
survives Spark's purging of old log files. :class:`watermark_ops.airflow.operators.WatermarkAuditOperator`
uses it; the terminal keeps the same heads in a state file
(:class:`watermark_ops.core.memory.StateFileMemory`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from watermark_ops.core.memory import RememberedHead, memory_key

__all__ = ["AssetStateStoreMemory", "MAX_KEY_LENGTH", "state_store_key"]

#: Airflow's ``asset_state_store.key`` column is ``String(512)``.
MAX_KEY_LENGTH = 512


def state_store_key(prefix: str, location: str) -> str:
    """``<prefix><normalised location>`` (:func:`watermark_ops.core.memory.memory_key`); a location
    too long for the 512-character key column is replaced by its SHA-256 (``<prefix>sha256:<hex>``)."""
    key = prefix + memory_key(location)
    if len(key) > MAX_KEY_LENGTH:
        key = prefix + "sha256:" + hashlib.sha256(memory_key(location).encode()).hexdigest()
    return key


class AssetStateStoreMemory:
    """Remembered heads kept in Airflow's asset state store (Airflow 3.3, AIP-103).

    :param store: the accessor of one asset, ``context["asset_state_store"][asset]`` (an
        ``airflow.sdk.execution_time.context.AssetStateStoreAccessor``): anything with
        ``get(key, default=None)`` and ``set(key, value)`` taking JSON values. The task must have
        the asset as an inlet or outlet, and the asset must be known to Airflow (its DAG parsed).
    :param key_prefix: prefix of the per-checkpoint key.
    """

    MAX_KEY_LENGTH = MAX_KEY_LENGTH

    def __init__(self, store: Any, key_prefix: str = "watermark_audit:"):
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
        """Remember ``head`` for ``location`` (one ``set`` of a JSON object)."""
        self.store.set(self.key(location), head.to_dict())
