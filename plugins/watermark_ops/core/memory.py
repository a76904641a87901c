"""The audit's memory across restarts: the head a checkpoint had at the previous audit.

Spark purges offsets and commits below the newest ``spark.sql.streaming.minBatchesToRetain``
(default 100) batches, so once the old files are gone, what an earlier audit saw is the only
evidence left that the watermark never went back. After each audit the head is remembered:

* ``query_id``: the checkpoint's query id (``metadata``); a new id means the checkpoint was
  replaced (``checkpoint_reset``);
* ``head_batch_id``: the latest batch id in the offset log; a lower one later means log files
  were deleted or an old copy restored (``rewound``);
* ``watermark_ms``: the watermark the next batch starts from (epoch ms UTC); a later batch below
  it means the watermark went back (``watermark_regressed``).
* ``accepted_reset`` (only when recorded): a deliberate checkpoint reset someone accepted
  (:func:`accept_reset`; :class:`ResetAcceptance`: who, when, why, the old and the new query id).
  The next audit that sees exactly that change of query id reports it as ``reset_accepted``
  (info) instead of ``checkpoint_reset`` (error); a change to any other query id is still an
  error. The record is kept while the checkpoint keeps the accepted query id.

Deliberately replacing a checkpoint is an ordinary repair (Spark's advice for an incompatible
query change or a corrupt state store is often to delete the checkpoint and start again): accept
it with ``watermark-ops accept-reset CHECKPOINT --why TEXT --state FILE`` or the audit operator's
``accept_reset``, instead of editing the memory by hand.

The head is one part of what is remembered of a checkpoint: its remembered view
(:mod:`watermark_ops.core.view`: the newest batches, the audited boundary and findings, the
progress-log position, what the state metadata said) is the other, so the next audit reads only
the new batches. Both are kept behind one interface (:class:`AuditMemory`: ``load`` / ``save`` of
the head, ``load_view_entry`` / ``save_view_entry`` of the view), in three back-ends:

* :class:`StateFileMemory`: a JSON state file through fsspec (the terminal: ``--state FILE``);
  one file can remember many checkpoints, keyed by location::

      {"version": 1,
       "checkpoints": {"/abs/path/to/checkpoint": {"query_id": "...", "head_batch_id": 41,
                        "watermark_ms": 1357047180000, "audited_at_ms": 1795265536436,
                        "accepted_reset": {...},    # only after an accept-reset
                        "view": {...}}}}            # View.to_dict(), since the remembered view

  A file of earlier versions (the head alone) is read as it is: the next audit reads everything
  once and adds the view.
* ``AssetStateStoreMemory`` (:mod:`watermark_ops.airflow.memory`, the Airflow face): Airflow 3.3's
  asset state store (AIP-103). The head under ``watermark_audit:<location>`` (the audit's memory
  asset), the view under ``watermark_view:<location>`` (the checkpoint registry, which every
  watermark-ops task has as an inlet: the sensors, the monitor and the audit share it).
* :class:`watermark_ops.core.view.InProcessViews`: a dict in the process (the UI's overview).

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Iterator, Protocol

import msgspec
from msgspec.structs import replace

from watermark_ops.core.jsontext import loads
from watermark_ops.core.times import iso_utc, now_ms

__all__ = [
    "AuditMemory",
    "MemoryFormatError",
    "RememberedHead",
    "ResetAcceptance",
    "ResetAcceptanceError",
    "StateFileMemory",
    "accept_reset",
    "memory_key",
]

STATE_FILE_VERSION = 1
#: The fields of a remembered head in a state file's entry (:meth:`RememberedHead.to_dict`).
_HEAD_KEYS = {"query_id", "head_batch_id", "watermark_ms", "audited_at_ms"}


class MemoryFormatError(ValueError):
    """A remembered head (state file or store value) that is not what this module writes; names its source."""


class ResetAcceptanceError(ValueError):
    """An acceptance of a checkpoint reset that cannot be recorded: nothing remembered, no new query
    id, the query id unchanged, or no reason given. The message says which."""


class ResetAcceptance(msgspec.Struct, frozen=True):
    """Someone's acceptance of a deliberate checkpoint reset: the query id ``from_query_id`` (what the
    memory remembers) replaced by ``to_query_id`` (the checkpoint's new ``metadata`` id,
    ``StreamMetadata.scala``).

    :ivar from_query_id: the remembered (old) query id; None if the old checkpoint had none.
    :ivar to_query_id: the new query id the acceptance is for; no other id is accepted.
    :ivar by: who accepted (a name, or the Airflow task that recorded it).
    :ivar why: the reason, e.g. a ticket: ``"OPS-123: checkpoint deleted after a state schema change"``.
    :ivar at_ms: when it was recorded (epoch ms UTC).
    """

    from_query_id: str | None
    to_query_id: str
    by: str
    why: str
    at_ms: int

    def to_dict(self) -> dict[str, Any]:
        """``{"from_query_id", "to_query_id", "by", "why", "at_ms", "at"}`` (``at``: ISO-8601 UTC)."""
        return {"from_query_id": self.from_query_id, "to_query_id": self.to_query_id, "by": self.by,
                "why": self.why, "at_ms": self.at_ms, "at": iso_utc(self.at_ms)}

    @classmethod
    def from_dict(cls, value: Any, source: str) -> ResetAcceptance:
        """Parse :meth:`to_dict`'s shape (``at`` is informative and ignored).

        :raises MemoryFormatError: naming ``source`` and the field that is wrong.
        """
        if not isinstance(value, dict):
            raise MemoryFormatError(f"{source}: accepted_reset must be an object with from_query_id, to_query_id, "
                                    f"by, why, at_ms, got {value!r}")
        for key in ("to_query_id", "by", "why"):
            if not isinstance(value.get(key), str):
                raise MemoryFormatError(f"{source}: accepted_reset.{key} must be a string, got {value.get(key)!r}")
        if value.get("from_query_id") is not None and not isinstance(value["from_query_id"], str):
            raise MemoryFormatError(f"{source}: accepted_reset.from_query_id must be a string or null, "
                                    f"got {value['from_query_id']!r}")
        if isinstance(value.get("at_ms"), bool) or not isinstance(value.get("at_ms"), int):
            raise MemoryFormatError(f"{source}: accepted_reset.at_ms must be an integer, got {value.get('at_ms')!r}")
        return cls(value.get("from_query_id"), value["to_query_id"], value["by"], value["why"], value["at_ms"])

    def covers(self, remembered_query_id: str | None, query_id: str | None) -> bool:
        """True when this acceptance is for exactly the change ``remembered_query_id`` -> ``query_id``."""
        return query_id is not None and self.to_query_id == query_id and self.from_query_id == remembered_query_id

    def describe(self) -> str:
        """``accepted by <by> at <ISO-8601 UTC>: <why>``, for findings and logs."""
        return f"accepted by {self.by} at {iso_utc(self.at_ms)}: {self.why}"


class RememberedHead(msgspec.Struct, frozen=True):
    """What an audit remembers about a checkpoint.

    :ivar query_id: the query id, None when the checkpoint had no readable ``metadata``.
    :ivar head_batch_id: the latest batch id in the offset log.
    :ivar watermark_ms: the watermark the next batch starts from (epoch ms UTC).
    :ivar audited_at_ms: when the audit ran (epoch ms UTC).
    :ivar accepted_reset: an accepted checkpoint reset (:func:`accept_reset`), None if none.
    """

    query_id: str | None
    head_batch_id: int
    watermark_ms: int
    audited_at_ms: int
    accepted_reset: ResetAcceptance | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"query_id", "head_batch_id", "watermark_ms", "audited_at_ms"}``, JSON-ready, plus
        ``"accepted_reset"`` (:meth:`ResetAcceptance.to_dict`) when one is recorded."""
        document = {"query_id": self.query_id, "head_batch_id": self.head_batch_id,
                    "watermark_ms": self.watermark_ms, "audited_at_ms": self.audited_at_ms}
        if self.accepted_reset is not None:
            document["accepted_reset"] = self.accepted_reset.to_dict()
        return document

    def keeping_acceptance(self, previous: RememberedHead | None) -> RememberedHead:
        """This head, carrying ``previous``'s accepted reset while the query id is the accepted one
        (so the memory keeps who accepted the reset the current query started from)."""
        acceptance = previous.accepted_reset if previous is not None else None
        if self.accepted_reset is None and acceptance is not None and acceptance.to_query_id == self.query_id:
            return replace(self, accepted_reset=acceptance)
        return self

    @classmethod
    def from_dict(cls, value: Any, source: str) -> RememberedHead:
        """Parse :meth:`to_dict`'s shape.

        :param source: where the value came from, for the error message.
        :raises MemoryFormatError: naming ``source`` and the field that is wrong.
        """
        if not isinstance(value, dict):
            raise MemoryFormatError(f"{source}: expected an object with query_id, head_batch_id, watermark_ms, "
                                    f"got {value!r}")
        for key in ("head_batch_id", "watermark_ms", "audited_at_ms"):
            if isinstance(value.get(key), bool) or not isinstance(value.get(key), int):
                raise MemoryFormatError(f"{source}: {key} must be an integer, got {value.get(key)!r}")
        if value.get("query_id") is not None and not isinstance(value["query_id"], str):
            raise MemoryFormatError(f"{source}: query_id must be a string or null, got {value['query_id']!r}")
        acceptance = value.get("accepted_reset")
        return cls(value.get("query_id"), value["head_batch_id"], value["watermark_ms"], value["audited_at_ms"],
                   None if acceptance is None else ResetAcceptance.from_dict(acceptance, source))


class AuditMemory(Protocol):
    """Where what is remembered of a checkpoint is kept: the one store interface of every face.

    Two parts per checkpoint (keyed by :func:`memory_key`): the head the last audit saw
    (``load`` / ``save``, a :class:`RememberedHead`) and the rest of its remembered view
    (``load_view_entry`` / ``save_view_entry``: the JSON of
    :meth:`watermark_ops.core.view.View.to_dict`, or a view kept as is in the process), read and
    written through :func:`watermark_ops.core.view.load_view` / :func:`~watermark_ops.core.view.save_view`.
    Back-ends: :class:`StateFileMemory` (a JSON file, the terminal),
    :class:`watermark_ops.airflow.memory.AssetStateStoreMemory` (Airflow's asset state store),
    :class:`watermark_ops.core.view.InProcessViews` (the process, the UI).
    """

    def load(self, location: str) -> RememberedHead | None:
        """The head remembered for the checkpoint at ``location``, None if none."""

    def save(self, location: str, head: RememberedHead) -> None:
        """Remember ``head`` for the checkpoint at ``location``."""

    def load_view_entry(self, location: str) -> Any:
        """The stored view of the checkpoint at ``location`` (a JSON object, or a view), None if none."""

    def save_view_entry(self, location: str, view: Any) -> None:
        """Keep ``view`` (a :class:`watermark_ops.core.view.View`) for the checkpoint at ``location``."""


def accept_reset(memory: AuditMemory, location: str, query_id: str | None, *, why: str, by: str,
                 at_ms: int | None = None) -> RememberedHead:
    """Record in ``memory`` that the checkpoint at ``location`` was reset on purpose: its remembered
    query id replaced by ``query_id``. The remembered head is kept as it is (the old query's last
    batch and watermark, for the record), with a :class:`ResetAcceptance` added; the next audit
    that sees exactly this change reports ``reset_accepted`` (info), not ``checkpoint_reset``.

    :param memory: a :class:`StateFileMemory` or ``AssetStateStoreMemory``.
    :param location: the checkpoint (the memory's key).
    :param query_id: the checkpoint's new query id (its ``metadata``, ``StreamMetadata.scala``):
        the only id the acceptance is for.
    :param why: the reason, not empty (a ticket, what was deleted and why).
    :param by: who accepts, not empty.
    :param at_ms: when (epoch ms UTC), default now.
    :return: the head now remembered.
    :raises ResetAcceptanceError: nothing remembered for ``location`` (no reset to accept: the next
        audit starts the memory), no ``query_id`` (no ``metadata`` yet: start the query first),
        ``query_id`` equal to the remembered one (no reset), or an empty ``why``/``by``.
    :raises MemoryFormatError: the memory holds something malformed (nothing is written).
    """
    if not (why or "").strip():
        raise ResetAcceptanceError(f"{location}: say why the reset is accepted (a ticket, what was deleted and why)")
    if not (by or "").strip():
        raise ResetAcceptanceError(f"{location}: say who accepts the reset")
    remembered = memory.load(location)
    if remembered is None:
        raise ResetAcceptanceError(f"{location}: no audit is remembered for this checkpoint, so there is no reset "
                                   f"to accept (the next audit starts the memory)")
    if query_id is None:
        raise ResetAcceptanceError(f"{location}: no query id (no readable metadata file): start the new query "
                                   f"first, then accept the reset to the query id it writes")
    if query_id == remembered.query_id:
        raise ResetAcceptanceError(f"{location}: the query id is still {query_id}, the one the audit of "
                                   f"{iso_utc(remembered.audited_at_ms)} remembered: there is no reset to accept")
    acceptance = ResetAcceptance(remembered.query_id, query_id, by.strip(), why.strip(),
                                 now_ms() if at_ms is None else at_ms)
    head = replace(remembered, accepted_reset=acceptance)
    memory.save(location, head)
    return head


def memory_key(location: Any) -> str:
    """The key a checkpoint is remembered under: its location, normalised.

    A local path becomes absolute (``./cp`` and ``/home/x/cp`` are one checkpoint); a URL
    (``s3://b/cp``) and any other location keep their text; trailing ``/`` are dropped.
    """
    text = os.fspath(location) if isinstance(location, os.PathLike) else str(location)
    if "://" not in text:
        text = os.path.abspath(text)
    return text.rstrip("/") or "/"


class StateFileMemory:
    """A JSON state file (local path or fsspec URL) remembering one head per checkpoint.

    The file is read once (on the first :meth:`load`) and rewritten whole on each :meth:`save`,
    atomically where the filesystem can rename (a temp file beside it, then a move), so a reader
    never sees half a file. Audits running at once may share one file: on the local filesystem
    :meth:`save` holds an exclusive ``flock`` on ``<file>.lock`` while it re-reads the file, adds
    its entry and replaces the file, so no audit loses another's entry. Object stores have no such
    lock: there the re-read only narrows the window. A missing file is an empty memory; a file that
    is not the shape in the module docstring raises :class:`MemoryFormatError` and is never
    overwritten.

    :param path: the state file location.
    :param storage_options: passed to ``fsspec.core.url_to_fs``.
    """

    def __init__(self, path: Any, storage_options: dict[str, Any] | None = None):
        import fsspec

        self.path = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
        self._fs, self._fs_path = fsspec.core.url_to_fs(self.path, **(storage_options or {}))
        self._entries: dict[str, Any] | None = None

    def _read(self) -> dict[str, Any]:
        if self._entries is not None:
            return self._entries
        try:
            raw = self._fs.cat_file(self._fs_path)
        except FileNotFoundError:
            self._entries = {}
            return self._entries
        try:
            state = loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise MemoryFormatError(f"state file {self.path}: not JSON ({exc}); expected "
                                    f'{{"version": {STATE_FILE_VERSION}, "checkpoints": {{...}}}}') from None
        if not isinstance(state, dict) or not isinstance(state.get("checkpoints"), dict):
            raise MemoryFormatError(f'state file {self.path}: expected {{"version": {STATE_FILE_VERSION}, '
                                    f'"checkpoints": {{...}}}}, got {str(state)[:80]!r}')
        if state.get("version") != STATE_FILE_VERSION:
            raise MemoryFormatError(f"state file {self.path}: version {state.get('version')!r} is not "
                                    f"{STATE_FILE_VERSION}, the only one this version of watermark-ops knows")
        self._entries = state["checkpoints"]
        return self._entries

    def load(self, location: str) -> RememberedHead | None:
        """The head remembered for ``location``, None if none (an entry holding only a view,
        written by ``status --state``, has no head).

        :raises MemoryFormatError: when the state file or this checkpoint's entry is malformed.
        """
        key = memory_key(location)
        value = self._read().get(key)
        if value is None or (isinstance(value, dict) and not _HEAD_KEYS & value.keys()):
            return None
        return RememberedHead.from_dict(value, f"state file {self.path}, entry {key!r}")

    def save(self, location: str, head: RememberedHead) -> None:
        """Remember ``head`` for ``location`` (other checkpoints' entries are kept, and this one's
        view; an accepted reset of this checkpoint is kept while ``head`` has the accepted query id).

        :raises MemoryFormatError: when the existing file is malformed (it is left untouched).
        """
        def change(entry: dict[str, Any] | None, key: str) -> dict[str, Any]:
            nonlocal head
            if entry is not None and _HEAD_KEYS & entry.keys():  # keep an accepted reset while the query id is the accepted one
                head = head.keeping_acceptance(RememberedHead.from_dict(entry, f"state file {self.path}, entry {key!r}"))
            view = entry.get("view") if isinstance(entry, dict) else None
            return {**head.to_dict(), **({"view": view} if view is not None else {})}

        self._update(location, change)

    def load_view_entry(self, location: str) -> Any:
        """The view kept in this checkpoint's entry (``"view"``: :meth:`watermark_ops.core.view.View.to_dict`),
        None if none (a state file of earlier versions keeps only the head: read, and completed
        at the next save)."""
        value = self._read().get(memory_key(location))
        return value.get("view") if isinstance(value, dict) else None

    def save_view_entry(self, location: str, view: Any) -> None:
        """Keep ``view`` in this checkpoint's entry (its head, other checkpoints' entries kept).

        :raises MemoryFormatError: when the existing file is malformed (it is left untouched).
        """
        document = view.to_dict()

        def change(entry: dict[str, Any] | None, key: str) -> dict[str, Any]:
            if entry is not None and not isinstance(entry, dict):
                raise MemoryFormatError(f"state file {self.path}, entry {key!r}: expected an object, got {entry!r}")
            return {**(entry or {}), "view": document}

        self._update(location, change)

    def _update(self, location: str, change: Any) -> None:
        """Re-read the file under the lock, replace this checkpoint's entry by ``change(entry, key)``,
        write the file whole (a temporary file moved over it)."""
        parent = self._fs._parent(self._fs_path)
        if parent:
            self._fs.makedirs(parent, exist_ok=True)
        with self._exclusive():
            self._entries = None  # re-read: another audit may have saved since this one loaded
            entries = dict(self._read())
            key = memory_key(location)
            entries[key] = change(entries.get(key), key)
            payload = json.dumps({"version": STATE_FILE_VERSION, "checkpoints": entries}, indent=2, sort_keys=True)
            name = self._fs_path.rstrip("/").rsplit("/", 1)[-1]
            import uuid

            temp = f"{parent}/.{name}.{uuid.uuid4().hex}.tmp" if parent else f".{name}.{uuid.uuid4().hex}.tmp"
            self._fs.pipe_file(temp, (payload + "\n").encode())
            self._fs.mv(temp, self._fs_path)
            self._entries = entries

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """An exclusive ``flock`` on ``<file>.lock`` on the local filesystem; nothing elsewhere."""
        protocol = self._fs.protocol if isinstance(self._fs.protocol, str) else self._fs.protocol[0]
        if protocol not in ("file", "local"):
            yield
            return
        import fcntl

        with open(self._fs_path + ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
