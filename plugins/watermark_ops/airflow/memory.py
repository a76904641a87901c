"""What watermark-ops remembers of a checkpoint, in Airflow's asset state store (Airflow 3.3, AIP-103).

:class:`AssetStateStoreMemory` is the Airflow back-end of the one store interface
(:class:`watermark_ops.core.memory.AuditMemory`): the audit's remembered head under
``watermark_audit:<location>`` on the audit's memory asset (every audit task and DAG auditing the
same checkpoint shares it, and it survives Spark's purging of old log files), and the checkpoint's
remembered view (:mod:`watermark_ops.core.view`: the newest batches, the audited boundary and
findings, the progress-log position, the state metadata) under ``watermark_view:<location>`` on
the checkpoint registry (:data:`watermark_ops.airflow.registry.CHECKPOINT_REGISTRY`), which every
watermark-ops task has as an inlet: the audit operator, the sensors (every ``mode``, the next DAG
run) and the monitor's ``watch`` task on any worker read and move on the same view, so each reads
only what changed since any of them last looked. The terminal keeps the same two parts in a state
file (:class:`watermark_ops.core.memory.StateFileMemory`).

Entries of earlier versions are read, never ignored: a head without a view (the audit reads
everything once and adds the view), and the sensors' tail ``watermark_tail:<location>`` (read as a
view of the newest batches, then deleted once the view is saved under its new key).

What watermark-ops keeps in the asset state store per checkpoint (:func:`checkpoint_memory_keys`):
the audit's remembered head, the announced partitions of
:class:`watermark_ops.airflow.partitions.WatermarkPartitionsOperator`
(``watermark_partitions:<grain>:<location>``) and the remembered view. When a checkpoint is
deleted on purpose together with everything it produced (a fresh start, as ``make run`` does),
:func:`forget_checkpoints` deletes those entries from the metadata DB, so the next audit starts a
new memory instead of reporting ``checkpoint_reset``::

    python -m watermark_ops.airflow.memory forget CHECKPOINT [CHECKPOINT ...]

(it needs the metadata DB, like ``airflow db`` commands: run it where those run, not in a task).
To keep the history and only accept a replaced checkpoint, use ``accept_reset`` instead
(:func:`watermark_ops.core.memory.accept_reset`).
"""

from __future__ import annotations

import hashlib
import sys
import threading
from typing import Any, Iterable

from watermark_ops.core.memory import RememberedHead, memory_key
from watermark_ops.core.partitions import GRAINS

__all__ = ["AUDIT_KEY_PREFIX", "BUNDLE_KEY_PREFIX", "AssetStateStoreMemory", "MAX_KEY_LENGTH", "TAIL_KEY_PREFIX",
           "TailMemory", "VIEW_KEY_PREFIX", "ViewBundle", "checkpoint_memory_keys", "forget_checkpoints", "partitions_key_prefix",
           "state_store_key"]

#: The prefix of the audit memory's key (``watermark_audit:<location>``).
AUDIT_KEY_PREFIX = "watermark_audit:"

#: The prefix of a checkpoint's remembered view (``watermark_view:<location>``, on the registry asset).
VIEW_KEY_PREFIX = "watermark_view:"

#: The prefix of the sensors' tail of earlier versions (``watermark_tail:<location>``): read and migrated.
TAIL_KEY_PREFIX = "watermark_tail:"

#: The prefix of the keys bundling the views of every checkpoint the monitor watches
#: (``watermark_views:<i>/<n>``, :class:`ViewBundle`).
BUNDLE_KEY_PREFIX = "watermark_views:"
#: The most views one bundle key holds (their JSON compressed: a few KB each).
BUNDLE_VIEWS = 200

#: Airflow's ``asset_state_store.key`` column is ``String(512)``.
MAX_KEY_LENGTH = 512

#: One call to the asset state store at a time in this process: a task's calls go through its
#: one channel to the supervisor anyway, and ``dag.test()``'s in-process supervisor is not
#: thread-safe (the monitor evaluates checkpoints in threads).
_STORE_LOCK = threading.Lock()


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
    memory's, the announced partitions' for each grain (``day``, ``hour``), then the remembered view."""
    return [state_store_key(AUDIT_KEY_PREFIX, location),
            *(state_store_key(partitions_key_prefix(grain), location) for grain in GRAINS),
            state_store_key(VIEW_KEY_PREFIX, location)]


def forget_checkpoints(locations: Iterable[str]) -> list[dict[str, str]]:
    """Delete what watermark-ops remembers of these checkpoints (:func:`checkpoint_memory_keys`) from
    the asset state store in Airflow's metadata DB, on whichever asset holds it (table
    ``asset_state_store``, ``airflow/models/asset_state_store.py``). For a deliberate fresh start:
    the checkpoints and their outputs deleted too.

    Needs the metadata DB (``AIRFLOW_HOME`` / ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``), as the
    ``airflow db`` commands do: a task cannot, it has no DB access in Airflow 3.

    :return: ``[{"asset": asset name, "key": key}]``, what was deleted (empty when nothing was
        remembered, e.g. before the first run); a view taken out of the monitor's bundle is named
        ``watermark_views:<i>/<n> <location>``.
    """
    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    locations = list(locations)
    keys = sorted({key for location in locations
                   for key in (*checkpoint_memory_keys(location), state_store_key(TAIL_KEY_PREFIX, location))})
    with create_session() as session:
        rows = (session.query(AssetStateStoreModel, AssetModel.name)
                .join(AssetModel, AssetModel.id == AssetStateStoreModel.asset_id)
                .filter(AssetStateStoreModel.key.in_(keys)).all())
        forgotten = [{"asset": name, "key": row.key} for row, name in rows]
        for row, _ in rows:
            session.delete(row)
        bundles = (session.query(AssetStateStoreModel, AssetModel.name)
                   .join(AssetModel, AssetModel.id == AssetStateStoreModel.asset_id)
                   .filter(AssetStateStoreModel.key.startswith(BUNDLE_KEY_PREFIX)).all())
        for row, name in bundles:  # the monitor's bundles: take these checkpoints' views out
            forgotten += [{"asset": name, "key": f"{row.key} {location}"}
                          for location in _forget_in_bundle(row, {memory_key(loc) for loc in locations})]
    return forgotten


def _forget_in_bundle(row: Any, keys: set[str]) -> list[str]:
    """Take the views of ``keys`` out of a bundle row of the asset state store (deleted when empty);
    returns the locations taken out. A row that is not a bundle is left alone."""
    import base64
    import json
    import zlib

    try:
        value = json.loads(row.value)
        views = json.loads(zlib.decompress(base64.b64decode(value["views"])))
    except Exception:  # noqa: BLE001 - not a bundle this version wrote: left for a person to see
        return []
    gone = sorted(k for k in views if k in keys)
    if gone:
        views = {k: v for k, v in views.items() if k not in keys}
        value.update(views=base64.b64encode(zlib.compress(json.dumps(views, separators=(",", ":")).encode(), 6)).decode(),
                     count=len(views))
        row.value = json.dumps(value)
    return gone


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
    """What is remembered of checkpoints, kept in Airflow's asset state store (Airflow 3.3, AIP-103):
    the audit's head (``load`` / ``save``) and the remembered view (``load_view_entry`` /
    ``save_view_entry``; :func:`watermark_ops.core.view.load_view` / :func:`~watermark_ops.core.view.save_view`).

    :param store: the accessor of the asset keeping the audit's heads, ``context["asset_state_store"][asset]``
        (an ``airflow.sdk.execution_time.context.AssetStateStoreAccessor``): anything with
        ``get(key, default=None)`` and ``set(key, value)`` taking JSON values. The task must have
        the asset as an inlet or outlet, and the asset must be known to Airflow (its DAG parsed).
        None: no head (a sensor, the monitor: they only read and move on views).
    :param key_prefix: prefix of the per-checkpoint key of the head.
    :param views: the accessor keeping the views (the registry asset,
        :data:`watermark_ops.airflow.registry.CHECKPOINT_REGISTRY`); default ``store``.
    """

    MAX_KEY_LENGTH = MAX_KEY_LENGTH

    def __init__(self, store: Any, key_prefix: str = AUDIT_KEY_PREFIX, views: Any = None):
        self.store = store
        self.key_prefix = key_prefix
        self.views = views if views is not None else store
        self._legacy: set[str] = set()

    def key(self, location: str) -> str:
        """``<prefix><normalised location>``; a location too long for a key is replaced by its SHA-256."""
        return state_store_key(self.key_prefix, location)

    @staticmethod
    def view_key(location: str) -> str:
        """``watermark_view:<normalised location>`` (its SHA-256 past 512 characters)."""
        return state_store_key(VIEW_KEY_PREFIX, location)

    def load(self, location: str) -> RememberedHead | None:
        """The head remembered for ``location``, None if none (or no head store).

        :raises MemoryFormatError: when the stored value is not a remembered head.
        """
        if self.store is None:
            return None
        key = self.key(location)
        with _STORE_LOCK:
            value = self.store.get(key, default=None)
        return None if value is None else RememberedHead.from_dict(value, f"asset state store key {key!r}")

    def save(self, location: str, head: RememberedHead) -> None:
        """Remember ``head`` for ``location`` (one ``set`` of a JSON object); an accepted reset
        already stored is kept while ``head`` has the accepted query id.

        :raises MemoryFormatError: when the stored value is not a remembered head.
        :raises ValueError: there is no head store.
        """
        if self.store is None:
            raise ValueError("this memory keeps no audit heads (no store given)")
        value = head.keeping_acceptance(self.load(location)).to_dict()
        with _STORE_LOCK:
            self.store.set(self.key(location), value)

    def load_view_entry(self, location: str) -> Any:
        """The view stored for ``location`` (``View.to_dict()``), else the sensors' tail of an
        earlier version (``watermark_tail:``, read as a view; deleted at the next save), else None."""
        if self.views is None:
            return None
        with _STORE_LOCK:
            value = self.views.get(self.view_key(location), default=None)
            if value is None:
                value = self.views.get(state_store_key(TAIL_KEY_PREFIX, location), default=None)
                if value is not None:
                    self._legacy.add(location)
        return value

    def save_view_entry(self, location: str, view: Any) -> None:
        """Keep ``view`` for ``location`` (one ``set``); a tail of an earlier version is then deleted."""
        value = view.to_dict()
        with _STORE_LOCK:
            self.views.set(self.view_key(location), value)
            if location in self._legacy:
                self._legacy.discard(location)
                try:
                    self.views.delete(state_store_key(TAIL_KEY_PREFIX, location))
                except Exception:  # noqa: BLE001 - an accessor without delete: the old key stays, unread
                    pass


class ViewBundle(AssetStateStoreMemory):
    """The remembered views of many checkpoints at once, for the face that looks at all of them in
    one task (the monitor's ``watch``): a few keys of the registry asset's state store,
    ``watermark_views:<i>/<n>`` (at most :data:`BUNDLE_VIEWS` views each, by a hash of the
    location; the views' JSON compressed), read once before the cycle (:meth:`read`: one ``get``
    per key) and written once after it (:meth:`flush`: one ``set`` per key whose views changed),
    instead of a ``get`` and a ``set`` per checkpoint, each a call to the Execution API (about 13 ms
    each in ``dag.test()``: seconds per cycle at a few hundred checkpoints). Any worker's cycle
    reads the same bundles. The same interface as :class:`AssetStateStoreMemory` (no heads: the
    monitor audits nothing); thread-safe.

    :param views: the registry asset's accessor.
    :param locations: the checkpoints of the cycle (the bundle's size and what it keeps).
    """

    def __init__(self, views: Any, locations: Iterable[str]) -> None:
        super().__init__(None, views=views)
        self.locations = sorted({memory_key(location) for location in locations})
        self.shards = max(1, -(-len(self.locations) // BUNDLE_VIEWS))
        self._bundle: dict[int, dict[str, Any]] = {}
        self._dirty: set[int] = set()
        self._lock = threading.Lock()

    def _shard(self, key: str) -> int:
        return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % self.shards

    def bundle_key(self, shard: int) -> str:
        """``watermark_views:<shard>/<shards>``."""
        return f"{BUNDLE_KEY_PREFIX}{shard}/{self.shards}"

    def read(self) -> int:
        """Read every bundle key of this many checkpoints (one ``get`` each); a value that is not
        a bundle is logged and taken as empty (its checkpoints are read again). Returns the views held."""
        import base64
        import json
        import logging
        import zlib

        held = 0
        for shard in range(self.shards):
            with _STORE_LOCK:
                value = self.views.get(self.bundle_key(shard), default=None)
            views: dict[str, Any] = {}
            if value is not None:
                try:
                    if not isinstance(value, dict) or value.get("format") != 1:
                        raise ValueError(f"expected a bundle of format 1, got {str(value)[:60]!r}")
                    views = json.loads(zlib.decompress(base64.b64decode(value["views"])))
                    if not isinstance(views, dict):
                        raise ValueError("the views are not an object")
                except Exception as exc:  # noqa: BLE001 - a cache: its checkpoints are read again
                    logging.getLogger(__name__).warning("bundle %s ignored (read again): %r", self.bundle_key(shard), exc)
                    views = {}
            self._bundle[shard] = views
            held += len(views)
        return held

    def load_view_entry(self, location: str) -> Any:
        """The view the bundle holds for ``location``, None if none."""
        key = memory_key(location)
        with self._lock:
            return self._bundle.get(self._shard(key), {}).get(key)

    def save_view_entry(self, location: str, view: Any) -> None:
        """Keep ``view`` in the bundle (written by :meth:`flush`)."""
        key = memory_key(location)
        shard = self._shard(key)
        value = view.to_dict()
        with self._lock:
            self._bundle.setdefault(shard, {})[key] = value
            self._dirty.add(shard)

    def flush(self) -> int:
        """Write every bundle key whose views changed (the views of checkpoints no longer watched
        dropped); returns how many were written."""
        import base64
        import json
        import zlib

        keep = set(self.locations)
        with self._lock:
            dirty = sorted(self._dirty)
            self._dirty.clear()
            payloads = {shard: {k: v for k, v in self._bundle.get(shard, {}).items() if k in keep} for shard in dirty}
        for shard, views in payloads.items():
            packed = base64.b64encode(zlib.compress(json.dumps(views, separators=(",", ":")).encode(), 6)).decode()
            with _STORE_LOCK:
                self.views.set(self.bundle_key(shard), {"format": 1, "views": packed, "count": len(views)})
        return len(payloads)


class TailMemory(AssetStateStoreMemory):
    """The sensors' remembered tail of earlier versions, now the remembered view on the registry
    asset (the name kept for code that uses it): :class:`AssetStateStoreMemory` without heads.

    :param store: the registry asset's accessor (``context["asset_state_store"][CHECKPOINT_REGISTRY]``).
    """

    def __init__(self, store: Any) -> None:
        super().__init__(None, views=store)

    @staticmethod
    def key(location: str) -> str:  # type: ignore[override]
        """``watermark_view:<normalised location>``: where the view is kept."""
        return state_store_key(VIEW_KEY_PREFIX, location)


if __name__ == "__main__":
    sys.exit(main())
