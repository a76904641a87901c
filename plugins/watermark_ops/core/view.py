"""The remembered view of a checkpoint: what a later look needs, so it reads only what changed.

One value per checkpoint (keyed by its location; valid for one query id), shared by every face:
the audit (:func:`watermark_ops.core.audit.run_audit`, ``watermark-ops audit --state``, the audit
operator), the sensors, their trigger and the monitor (:func:`watermark_ops.core.stall.evaluate_tail`),
``watermark-ops status --state`` and the UI overview (:mod:`watermark_ops.core.overview_cache`).
:func:`watermark_ops.core.advance.advance` is the one function that moves it on; this module is the
value, its JSON form and where it is kept.

What a :class:`View` holds
--------------------------
* ``window``: the newest ``newest`` batch ids of the offset log as a
  :class:`~watermark_ops.core.checkpoint.Checkpoint` (what ``read_checkpoint(location,
  newest=newest)`` returns: batches, problems, ``unread_batches``, ``lowest_offsets_batch_id``),
  and the size of the head's ``offsets/<head>`` (a rewritten or deleted head is noticed by one
  stat, without reading it);
* ``audit`` (:class:`Audited`, when the whole retained log was read once): the *boundary* (the
  newest batch whose files are final: the committed head, or the batch below an in-flight head),
  that batch's files (the rules compare it with the next batch), the findings about the batches up
  to it (no later file changes them) and every finding of the last look; None for a view that
  started from a bounded read (a sensor's first poke): an audit then reads everything once;
* ``progress`` (:class:`ProgressPosition`): where the job's progress log was read up to, whether
  it exists, and (in the process that read them, never stored) the records of the window's batches;
* ``state``: what the state operators' metadata said (read while the watermark is 0: evidence of a
  watermark, :func:`watermark_ops.core.stall.watermark_evidence`);
* ``state_store``: the state summary (:class:`~watermark_ops.core.state.summary.StateSummary`: the
  stateful operators, their rows per batch, the chain a restart replays) as read at the head of
  the look that last asked for it; read again only when the checkpoint has new batches;
* ``remembered``: the head the last *audit* saw, with an accepted reset
  (:class:`~watermark_ops.core.memory.RememberedHead`): the memory rules compare with it. Only an
  audit (or ``accept-reset``) changes it; every other face carries it through unchanged.

Where it is kept (:func:`load_view` / :func:`save_view`, over any store with
``load(location)`` / ``save(location, head)`` for the audit's head and ``load_view_entry`` /
``save_view_entry`` for the rest): a JSON state file for the terminal
(:class:`watermark_ops.core.memory.StateFileMemory`: the entry of a checkpoint holds the head's
fields and ``"view"``), Airflow's asset state store for every Airflow face
(:class:`watermark_ops.airflow.memory.AssetStateStoreMemory`: ``watermark_audit:<location>`` on the
audit's memory asset, ``watermark_view:<location>`` on the checkpoint registry), a dict in the
process for the UI (:class:`InProcessViews`). The progress records are not stored (a few KB per
batch): a new process reads the end of the log once.

JSON (:meth:`View.to_dict`, format 2)::

    {"format": 2, "location", "query_id", "newest",
     "checkpoint": {... the window, each distinct conf once ...}, "head_size": int | null,
     "audit": {"boundary", "boundary_batch", "final": [Finding], "findings": [Finding],
               "async_tracking": bool, "highest": [ms, "offsets/N"] | null, "conf_seen": [[run, key]]} | null,
     "progress": {"path", "found": bool, "end": bytes read} | null,
     "state": {"metadata": StateMetadata.to_dict() | null, "problems": [str]} | null,
     "state_store": StateSummary.to_dict() | null}

Format 1 (the sensors' tail of earlier versions, :class:`watermark_ops.core.tail.Tail`) is read
as a view without audit, progress or state: migrated on the next save.

Pure core: imports neither Airflow nor Spark. Times are epoch ms UTC.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

import msgspec

from watermark_ops.core.checkpoint import Batch, Checkpoint
from watermark_ops.core.log_formats import CommitEntry, OffsetsEntry, ReadProblem
from watermark_ops.core.memory import RememberedHead, memory_key
from watermark_ops.core.rules import Finding

if TYPE_CHECKING:
    from watermark_ops.core.state.metadata import StateMetadata
    from watermark_ops.core.state.summary import StateSummary

__all__ = ["VIEW_FORMAT", "WINDOW", "Audited", "InProcessViews", "ProgressPosition", "View", "ViewFormatError",
           "load_view", "save_view"]

#: The version of :meth:`View.to_dict`'s shape; 1 is the sensors' tail of earlier versions (read).
VIEW_FORMAT = 2
#: The window every face keeps at least: Spark's own ``spark.sql.streaming.minBatchesToRetain``
#: default (:data:`watermark_ops.core.stall.RECENT_BATCHES`), so a real checkpoint is usually held whole.
WINDOW = 100
_FORMATS = (1, VIEW_FORMAT)


class ViewFormatError(ValueError):
    """A stored view that is not what :meth:`View.to_dict` writes (names what is wrong)."""


class Audited(msgspec.Struct, frozen=True):
    """The audit of a view's checkpoint: everything up to ``boundary`` is final.

    :ivar boundary: the newest batch id whose files are final (None: none yet).
    :ivar boundary_batch: that batch's files (the rules compare it with the next batch).
    :ivar final: the findings (without the memory rules) about batch ids up to ``boundary``.
    :ivar findings: every finding of the last look (``final``, the newer batches', those about the
        whole checkpoint), sorted as :func:`watermark_ops.core.audit.audit_checkpoint` sorts them.
    :ivar async_tracking: a progress record asked for async progress tracking (kept for the rules).
    :ivar highest: the highest watermark of the offset and commit logs up to ``boundary`` and where
        it was first seen (``(ms, "offsets/N")``): the rules name it when the watermark goes back.
    :ivar conf_seen: the ``(run id, conf key)`` pairs a finding already reported up to ``boundary``.
    """

    boundary: int | None
    boundary_batch: Batch | None
    final: tuple[Finding, ...] = ()
    findings: tuple[Finding, ...] = ()
    async_tracking: bool = False
    highest: tuple[int, str] | None = None
    conf_seen: tuple[tuple[Any, str], ...] = ()


@dataclass(frozen=True)
class ProgressPosition:
    """Where the job's progress log (``<checkpoint>.progress.jsonl``) was read up to.

    :ivar path: the log's location.
    :ivar found: the log existed at the last read (a job of another tool writes none).
    :ivar end: bytes read (the log's size then): the next read starts here.
    :ivar records: the records of the window's batches (this process only; None after loading a
        stored view: the next look reads the end of the log again).
    :ivar problems: bad lines and read problems (messages naming the file), newest last.
    :ivar complete: False when the last tail read stopped at its byte bound.
    :ivar marker: the log's ``(size, version tag)`` at the last read (ETag on object storage,
        modification time locally); this process only.
    """

    path: str
    found: bool = False
    end: int = 0
    records: list[dict[str, Any]] | None = field(default=None, compare=False)
    problems: tuple[str, ...] = field(default=(), compare=False)
    complete: bool = field(default=True, compare=False)
    marker: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class View:
    """One checkpoint as remembered after a look (see the module docstring).

    :ivar location: the checkpoint as shown (a local path, or a URL such as ``s3://b/cp``).
    :ivar query_id: ``metadata``'s query id, None when missing or unreadable.
    :ivar newest: the window: how many of the newest offsets batch ids are held.
    :ivar window: what ``read_checkpoint(location, newest=newest)`` returned at the last look.
    :ivar head_size: bytes of ``offsets/<head>`` when it was read (None: unknown).
    :ivar audit: :class:`Audited`, or None (no whole read yet).
    :ivar progress: :class:`ProgressPosition`, None when the progress log is not followed.
    :ivar state: ``(StateMetadata | None, problem messages)`` while the watermark is 0, else None.
    :ivar state_store: the state summary as last read (:mod:`watermark_ops.core.state.summary`), None
        when no look asked for it.
    :ivar remembered: the head the last audit saw (with an accepted reset), None if none.
    :ivar reads: what the last look read: ``{"mode": "full" | "bounded" | "incremental",
        "batch_files": n, "requests": n}`` (``requests``: files read, probed and stat'ed, and folders listed).
    :ivar requests: the same by kind: ``{"list": n, "get": n, "head": n, "listed": bool}``.
    :ivar head_tag: ``offsets/<head>``'s version tag (ETag, modification time) once seen (this process).
    :ivar fresh: the whole checkpoint as read by this look when it read everything (for the audit's table).
    :ivar added: the batches this look read above the previous boundary (for the audit's memory rules).
    """

    location: str
    query_id: str | None
    newest: int
    window: Checkpoint
    head_size: int | None = None
    audit: Audited | None = None
    progress: ProgressPosition | None = None
    state: tuple[StateMetadata | None, tuple[str, ...]] | None = None
    remembered: RememberedHead | None = None
    state_store: StateSummary | None = None
    reads: dict[str, Any] = field(default_factory=dict, compare=False)
    requests: dict[str, Any] = field(default_factory=dict, compare=False)
    head_tag: Any = field(default=None, compare=False)
    fresh: Checkpoint | None = field(default=None, compare=False, repr=False)
    added: tuple[Batch, ...] = field(default=(), compare=False, repr=False)

    @property
    def checkpoint(self) -> Checkpoint:
        """The window (the name the sensors' tail used)."""
        return self.window

    @property
    def head_batch_id(self) -> int | None:
        """The head batch id at the last look."""
        return self.window.head_batch_id

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The audit's findings of the last look (without the memory rules); () without an audit."""
        return self.audit.findings if self.audit is not None else ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, format 2 (see the module docstring). ``remembered`` is kept apart (the
        audit's memory), the progress records and the ``reads`` are not kept."""
        confs: list[dict[str, str]] = []
        out: dict[str, Any] = {"format": VIEW_FORMAT, "location": self.location, "query_id": self.query_id,
                               "newest": self.newest, "checkpoint": _checkpoint_dict(self.window, confs),
                               "head_size": self.head_size, "audit": None, "progress": None, "state": None,
                               "state_store": None if self.state_store is None else self.state_store.to_dict()}
        if self.audit is not None:
            a = self.audit
            out["audit"] = {"boundary": a.boundary,
                            "boundary_batch": None if a.boundary_batch is None
                            else _batch_dict(a.boundary_batch, self.window.location, confs),
                            "final": [f.to_dict() for f in a.final], "findings": [f.to_dict() for f in a.findings],
                            "async_tracking": a.async_tracking,
                            "highest": None if a.highest is None else list(a.highest),
                            "conf_seen": [list(pair) for pair in a.conf_seen]}
        if self.progress is not None:
            out["progress"] = {"path": self.progress.path, "found": self.progress.found, "end": self.progress.end}
        if self.state is not None:
            metadata, problems = self.state
            out["state"] = {"metadata": None if metadata is None else metadata.to_dict(), "problems": list(problems)}
        out["checkpoint"]["confs"] = confs
        return out

    @classmethod
    def from_dict(cls, value: Any) -> View:
        """The :class:`View` :meth:`to_dict` wrote (format 2), or the sensors' tail of earlier
        versions (format 1: a view of the window alone).

        :raises ViewFormatError: for anything else, naming what is wrong (a ``ValueError``).
        """
        if not isinstance(value, dict) or value.get("format") not in _FORMATS:
            found = value.get("format") if isinstance(value, dict) else type(value).__name__
            raise ViewFormatError(f"expected a view of format {VIEW_FORMAT} (or a tail of format 1), got {found!r}")
        try:
            ck = value["checkpoint"]
            confs = ck["confs"]
            window = _checkpoint_of(ck, confs)
            audit = progress = state = None
            if value.get("audit") is not None:
                a = value["audit"]
                boundary_batch = None if a["boundary_batch"] is None else _batch_of(a["boundary_batch"],
                                                                                    window.location, confs)
                audit = Audited(boundary=a["boundary"], boundary_batch=boundary_batch,
                                final=tuple(_finding(f) for f in a["final"]),
                                findings=tuple(_finding(f) for f in a["findings"]),
                                async_tracking=bool(a.get("async_tracking")),
                                highest=None if a.get("highest") is None else (int(a["highest"][0]), str(a["highest"][1])),
                                conf_seen=tuple((pair[0], pair[1]) for pair in a.get("conf_seen") or ()))
            if value.get("progress") is not None:
                p = value["progress"]
                progress = ProgressPosition(path=str(p["path"]), found=bool(p["found"]), end=int(p["end"]))
            if value.get("state") is not None:
                s = value["state"]
                state = (None if s["metadata"] is None else _state_metadata(s["metadata"]), tuple(s["problems"]))
            head_size = value.get("head_size")
            return cls(location=value["location"], query_id=value["query_id"], newest=int(value["newest"]),
                       window=window, head_size=None if head_size is None else int(head_size), audit=audit,
                       progress=progress, state=state, state_store=_state_store(value.get("state_store")))
        except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
            raise ViewFormatError(f"not a view written by View.to_dict: {exc!r}") from None

    def with_remembered(self, head: RememberedHead | None) -> View:
        """This view carrying ``head`` as the last audit's."""
        return replace(self, remembered=head)


# --------------------------------------------------------------------------------------------
# The window


def _log_of(problem: ReadProblem) -> str:
    """``offsets`` or ``commits``: the log the problem's file belongs to."""
    parts = problem.file.rstrip("/").rsplit("/", 2)
    return parts[-2] if len(parts) >= 2 else ""


def _boundary(checkpoint: Checkpoint) -> int | None:
    """The newest batch id whose files are final: the committed head, else the highest id below an
    in-flight head (None when there is none)."""
    head = checkpoint.head_batch_id
    if head is None:
        return None
    if checkpoint.in_flight_batch_id is None:
        return head
    below = [b.batch_id for b in checkpoint.batches if b.batch_id < head]
    return max(below) if below else None


def _window(checkpoint: Checkpoint, batches: Sequence[Batch], newest: int, older: int,
            problems: Sequence[ReadProblem], lowest: int | None) -> Checkpoint:
    """The newest ``newest`` offsets ids of ``batches`` (and the commit-only ids among them), with
    their problems in :func:`read_checkpoint`'s order (metadata's, the offsets', the commits')."""
    ids = [b.batch_id for b in batches if b.offsets_file is not None]
    ids.sort()
    keep_from = ids[-newest] if len(ids) > newest else (ids[0] if ids else None)
    kept = tuple(batches) if keep_from is None else tuple(b for b in batches if b.batch_id >= keep_from)
    dropped = 0 if keep_from is None else bisect.bisect_left(ids, keep_from)  # ids below it
    kept_ids = {b.batch_id for b in kept} if problems else set()
    mine = [p for p in problems if p.batch_id is None or p.batch_id in kept_ids]
    ordered = ([p for p in mine if p.batch_id is None]
               + sorted([p for p in mine if p.batch_id is not None and _log_of(p) == "offsets"], key=lambda p: p.batch_id)
               + sorted([p for p in mine if p.batch_id is not None and _log_of(p) != "offsets"], key=lambda p: p.batch_id))
    return Checkpoint(location=checkpoint.location, query_id=checkpoint.query_id, batches=kept,
                      problems=tuple(ordered), has_commit_log=checkpoint.has_commit_log,
                      metadata_file=checkpoint.metadata_file, newest=newest, unread_batches=older + dropped,
                      lowest_offsets_batch_id=lowest)


# --------------------------------------------------------------------------------------------
# The window's compact JSON: each distinct conf once, file names implied by the location


_MISSING = object()


def _default_file(location: str, log: str, batch_id: int) -> str:
    return f"{location}/{log}/{batch_id}"


def _conf_index(confs: list[dict[str, str]], conf: dict[str, str]) -> int:
    for i, known in enumerate(confs):
        if known is conf or known == conf:
            return i
    confs.append(conf)
    return len(confs) - 1


def _batch_dict(b: Batch, location: str, confs: list[dict[str, str]]) -> dict[str, Any]:
    item: dict[str, Any] = {"id": b.batch_id}
    if b.offsets_file is not None:
        item["of"] = None if b.offsets_file == _default_file(location, "offsets", b.batch_id) else b.offsets_file
    if b.commit_file is not None:
        item["cf"] = None if b.commit_file == _default_file(location, "commits", b.batch_id) else b.commit_file
    if b.offsets is not None:
        e = b.offsets
        metadata = dict(e.metadata)
        raw_conf = metadata.pop("conf", _MISSING)
        o = {"v": e.version, "w": e.watermark_ms, "t": e.timestamp_ms, "c": _conf_index(confs, e.conf),
             "s": list(e.sources), "i": list(e.source_ids), "m": metadata}
        if raw_conf is not _MISSING:
            o["mc"] = _conf_index(confs, raw_conf) if isinstance(raw_conf, dict) else None
            if not isinstance(raw_conf, dict):
                o["mr"] = raw_conf
        if e.file != _default_file(location, "offsets", e.batch_id):
            o["f"] = e.file
        item["o"] = o
    if b.commit is not None:
        c = b.commit
        item["c"] = {"v": c.version, "n": c.next_watermark_ms, "m": c.metadata}
        if c.file != _default_file(location, "commits", c.batch_id):
            item["c"]["f"] = c.file
    return item


def _batch_of(item: dict[str, Any], location: str, confs: list[Any]) -> Batch:
    batch_id = int(item["id"])
    offsets = commit = None
    if "o" in item:
        o = item["o"]
        metadata = dict(o["m"])
        if "mc" in o:
            metadata["conf"] = confs[o["mc"]] if o["mc"] is not None else o.get("mr")
        offsets = OffsetsEntry(batch_id=batch_id, file=o.get("f") or _default_file(location, "offsets", batch_id),
                               version=o["v"], watermark_ms=o["w"], timestamp_ms=o["t"], conf=confs[o["c"]],
                               sources=tuple(o["s"]), source_ids=tuple(o["i"]), metadata=metadata)
    if "c" in item:
        c = item["c"]
        commit = CommitEntry(batch_id=batch_id, file=c.get("f") or _default_file(location, "commits", batch_id),
                             version=c["v"], next_watermark_ms=c["n"], metadata=c["m"])
    return Batch(batch_id=batch_id, offsets=offsets, commit=commit,
                 offsets_file=(item["of"] or _default_file(location, "offsets", batch_id)) if "of" in item else None,
                 commit_file=(item["cf"] or _default_file(location, "commits", batch_id)) if "cf" in item else None)


def _checkpoint_dict(ck: Checkpoint, confs: list[dict[str, str]]) -> dict[str, Any]:
    return {"location": ck.location, "query_id": ck.query_id, "has_commit_log": ck.has_commit_log,
            "metadata_file": ck.metadata_file, "newest": ck.newest, "unread_batches": ck.unread_batches,
            "lowest_offsets_batch_id": ck.lowest_offsets_batch_id,
            "batches": [_batch_dict(b, ck.location, confs) for b in ck.batches],
            "problems": [p.to_dict() for p in ck.problems]}


def _checkpoint_of(ck: dict[str, Any], confs: list[Any]) -> Checkpoint:
    location = ck["location"]
    return Checkpoint(
        location=location, query_id=ck["query_id"],
        batches=tuple(_batch_of(item, location, confs) for item in ck["batches"]),
        problems=tuple(ReadProblem(p["kind"], p["file"], p["message"], p.get("batch_id")) for p in ck["problems"]),
        has_commit_log=bool(ck["has_commit_log"]), metadata_file=ck["metadata_file"], newest=ck["newest"],
        unread_batches=int(ck["unread_batches"]), lowest_offsets_batch_id=ck["lowest_offsets_batch_id"])


def _finding(value: dict[str, Any]) -> Finding:
    return Finding(value["rule"], value["severity"], value["batch_id"], value["file"], value["message"])


def _state_store(value: Any) -> StateSummary | None:
    """The stored state summary; None when absent or unreadable (only a cache: read again)."""
    if value is None:
        return None
    from watermark_ops.core.state.summary import StateSummary

    try:
        return StateSummary.from_dict(value)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError):
        return None


def _state_metadata(value: dict[str, Any]) -> StateMetadata:
    from watermark_ops.core.state.metadata import StateMetadata, StateOperator

    operators = tuple(StateOperator(operator_id=op["operator_id"], name=op["name"], version=op["version"],
                                    metadata_file=op["metadata_file"], stores=tuple(op["stores"]),
                                    watermark_columns=tuple(dict(c) for c in op["watermark_columns"]))
                      for op in value["operators"])
    problems = tuple(ReadProblem(p["kind"], p["file"], p["message"], p.get("batch_id")) for p in value["problems"])
    return StateMetadata(location=value["location"], has_state_folder=bool(value["has_state_folder"]),
                         operators=operators, problems=problems)


# --------------------------------------------------------------------------------------------
# Where views are kept


def load_view(store: Any, location: Any) -> View | None:
    """The view ``store`` remembers for ``location`` (with the last audit's head), or None.

    A stored view that cannot be read is only a cache: it is logged and ignored (the next look
    reads the checkpoint again and replaces it). The head is the audit's memory: a malformed one
    raises.

    :param store: anything with ``load(location) -> RememberedHead | None`` and
        ``load_view_entry(location) -> dict | None`` (:class:`watermark_ops.core.memory.StateFileMemory`,
        :class:`watermark_ops.airflow.memory.AssetStateStoreMemory`, :class:`InProcessViews`).
    :raises watermark_ops.core.memory.MemoryFormatError: the audit's remembered head is malformed.
    """
    head = store.load(str(location))
    entry = store.load_view_entry(str(location))
    view = None
    if entry is not None:
        if isinstance(entry, View):
            view = entry
        else:
            try:
                view = View.from_dict(entry)
            except ViewFormatError as exc:
                import logging

                logging.getLogger(__name__).warning("remembered view of %s ignored (read again): %s", location, exc)
    if view is None:
        if head is None:
            return None
        # Only the audit's head (a state file or store entry of earlier versions): nothing read yet.
        return View(location=memory_key(location), query_id=head.query_id, newest=0,
                    window=Checkpoint(location=str(location), query_id=head.query_id, batches=(), problems=(),
                                      has_commit_log=True),
                    remembered=head)
    return replace(view, remembered=head)


def save_view(store: Any, location: Any, view: View, *, previous: View | None = None) -> bool:
    """Remember ``view`` for ``location``: its view entry, and the audit's head when it changed.

    :param previous: the view loaded before the look: nothing is written when equal (a look at an
        unchanged checkpoint writes nothing).
    :return: True when something was written.
    """
    wrote = False
    if previous is None or replace(previous, remembered=None) != replace(view, remembered=None):
        store.save_view_entry(str(location), view)
        wrote = True
    old = previous.remembered if previous is not None else None
    if view.remembered is not None and view.remembered != old:
        store.save(str(location), view.remembered)
        wrote = True
    return wrote


class InProcessViews:
    """Views kept in this process (the UI's overview, a test): the same two parts as a file or the
    asset state store, keyed by :func:`~watermark_ops.core.memory.memory_key`. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heads: dict[str, RememberedHead] = {}
        self._views: dict[str, View] = {}

    def load(self, location: str) -> RememberedHead | None:
        with self._lock:
            return self._heads.get(memory_key(location))

    def save(self, location: str, head: RememberedHead) -> None:
        with self._lock:
            key = memory_key(location)
            self._heads[key] = head.keeping_acceptance(self._heads.get(key))

    def load_view_entry(self, location: str) -> View | None:
        with self._lock:
            return self._views.get(memory_key(location))

    def save_view_entry(self, location: str, view: View) -> None:
        with self._lock:
            self._views[memory_key(location)] = replace(view, remembered=None)

    def forget(self, keep: Any) -> None:
        """Drop the views of locations not in ``keep`` (checkpoints no longer watched)."""
        wanted = {memory_key(location) for location in keep}
        with self._lock:
            for key in [k for k in self._views if k not in wanted]:
                del self._views[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._views)
