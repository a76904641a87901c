"""Follow a checkpoint's newest batches from poke to poke at a constant cost: no listing.

A sensor or a monitor pokes a checkpoint every few minutes for as long as the query lives.
:func:`watermark_ops.core.checkpoint.read_checkpoint` with ``newest=N`` bounds the files read, but
it still lists ``offsets/`` (and the checkpoint folder), and a listing grows with the history: on
object storage ``offsets/`` of a 10,000-batch checkpoint is 10 LIST pages of 1,000 keys. Spark
names log files by batch id (``HDFSMetadataLog``: ``offsets/<N>``, ``commits/<N>``) and writes
them in order, so from a remembered head the next files are known by name.

:func:`follow` remembers the window of the newest batches in a :class:`Tail` (JSON-able:
``to_dict`` / ``from_dict``, for an asset store, an XCom or a file) and, at the next poke:

1. reads ``metadata`` (the query id), the remembered head's ``offsets/<head>`` (still there and
   unchanged), its ``commits/<head>`` when it was in flight, the lowest remembered
   ``offsets/<id>`` (not purged), and the candidates ``offsets/<head+1>`` and
   ``commits/<head+1>``: one concurrent read of at most six small objects;
2. while the newest candidate exists, fetches the next ones by name (1, 2, 4, ... batches per
   read) until one is missing;
3. lists, exactly as ``read_checkpoint(location, newest=N)`` does, when there is no memory or it
   no longer matches: another location or window, a query id changed in ``metadata`` (a reset),
   the remembered head's offsets file gone or changed (a rewind), the lowest one gone (Spark's
   purge, ``minBatchesToRetain``), a problem outside the batch files, or more new batches than
   the window holds.

With nothing new, a poke is one read of at most six objects and no LIST, whatever the history.
The :attr:`Tail.checkpoint` is what ``read_checkpoint(location, newest=N)`` returns at that moment
(same batches, problems, ``unread_batches`` and ``lowest_offsets_batch_id``), under Spark's
invariants: offsets ids contiguous above the remembered head (no gap), old files removed only
from the bottom (the purge). A file changed or removed in the middle of the history is the
audit's business (it reads everything); the tail does not see it.

Pure core: imports neither Airflow nor Spark. Times are epoch ms UTC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from watermark_ops.core.checkpoint import (
    Batch,
    Checkpoint,
    _read,
    _resolve,
    read_log_files,
)
from watermark_ops.core.log_formats import CommitEntry, OffsetsEntry, ReadProblem

__all__ = ["TAIL_FORMAT", "Tail", "follow"]

#: The version of :meth:`Tail.to_dict`'s shape (``from_dict`` refuses others).
TAIL_FORMAT = 1
#: The most new batches fetched by name in one read while following (then doubled up to this).
_MAX_STEP = 16


@dataclass(frozen=True)
class Tail:
    """The newest batches of a checkpoint as last followed (:func:`follow`).

    :ivar location: the checkpoint as shown (a local path, or a URL such as ``s3://b/cp``).
    :ivar query_id: ``metadata``'s query id, None when missing or unreadable.
    :ivar newest: the window: how many of the newest offsets batch ids are held.
    :ivar checkpoint: what ``read_checkpoint(location, newest=newest)`` returns now.
    :ivar requests: what the last :func:`follow` did: ``{"list": listing calls, "get": objects
        read, "head": 0}`` (a listing call may be several LIST pages on object storage);
        ``listed`` (bool) says whether it had to list.
    """

    location: str
    query_id: str | None
    newest: int
    checkpoint: Checkpoint
    requests: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"format": 1, "location", "query_id", "newest", "checkpoint": {...}}``
        (the batches' parsed offsets and commits, each distinct ``conf`` once: a few KB per 10
        batches). ``requests`` is not kept."""
        ck = self.checkpoint
        confs: list[dict[str, str]] = []

        def conf_index(conf: dict[str, str]) -> int:
            for i, known in enumerate(confs):
                if known == conf:
                    return i
            confs.append(conf)
            return len(confs) - 1

        def offsets(e: OffsetsEntry) -> dict[str, Any]:
            metadata = dict(e.metadata)
            raw_conf = metadata.pop("conf", _MISSING)
            out = {"v": e.version, "w": e.watermark_ms, "t": e.timestamp_ms, "c": conf_index(e.conf),
                   "s": list(e.sources), "i": list(e.source_ids), "m": metadata}
            if raw_conf is not _MISSING:
                out["mc"] = conf_index(raw_conf) if isinstance(raw_conf, dict) else None
                if not isinstance(raw_conf, dict):
                    out["mr"] = raw_conf
            if e.file != _default_file(ck.location, "offsets", e.batch_id):
                out["f"] = e.file
            return out

        def commit(e: CommitEntry) -> dict[str, Any]:
            out = {"v": e.version, "n": e.next_watermark_ms, "m": e.metadata}
            if e.file != _default_file(ck.location, "commits", e.batch_id):
                out["f"] = e.file
            return out

        batches = []
        for b in ck.batches:
            item: dict[str, Any] = {"id": b.batch_id}
            if b.offsets_file is not None:
                item["of"] = None if b.offsets_file == _default_file(ck.location, "offsets", b.batch_id) else b.offsets_file
            if b.commit_file is not None:
                item["cf"] = None if b.commit_file == _default_file(ck.location, "commits", b.batch_id) else b.commit_file
            if b.offsets is not None:
                item["o"] = offsets(b.offsets)
            if b.commit is not None:
                item["c"] = commit(b.commit)
            batches.append(item)
        return {
            "format": TAIL_FORMAT, "location": self.location, "query_id": self.query_id, "newest": self.newest,
            "checkpoint": {
                "location": ck.location, "query_id": ck.query_id, "has_commit_log": ck.has_commit_log,
                "metadata_file": ck.metadata_file, "newest": ck.newest, "unread_batches": ck.unread_batches,
                "lowest_offsets_batch_id": ck.lowest_offsets_batch_id, "confs": confs, "batches": batches,
                "problems": [p.to_dict() for p in ck.problems],
            },
        }

    @classmethod
    def from_dict(cls, value: Any) -> Tail:
        """The :class:`Tail` :meth:`to_dict` wrote.

        :raises ValueError: for anything else (naming what is wrong): a memory of another shape
            is not guessed at; :func:`follow` without a memory lists instead.
        """
        try:
            if not isinstance(value, dict) or value.get("format") != TAIL_FORMAT:
                raise ValueError(f"expected a tail of format {TAIL_FORMAT}, got "
                                 f"{value.get('format') if isinstance(value, dict) else type(value).__name__!r}")
            ck = value["checkpoint"]
            location = ck["location"]
            confs = ck["confs"]
            batches = []
            for item in ck["batches"]:
                batch_id = int(item["id"])
                offsets = commit = None
                if "o" in item:
                    o = item["o"]
                    metadata = dict(o["m"])
                    if "mc" in o:
                        metadata["conf"] = confs[o["mc"]] if o["mc"] is not None else o.get("mr")
                    offsets = OffsetsEntry(batch_id=batch_id, file=o.get("f") or _default_file(location, "offsets", batch_id),
                                           version=o["v"], watermark_ms=o["w"], timestamp_ms=o["t"],
                                           conf=confs[o["c"]], sources=tuple(o["s"]), source_ids=tuple(o["i"]),
                                           metadata=metadata)
                if "c" in item:
                    c = item["c"]
                    commit = CommitEntry(batch_id=batch_id, file=c.get("f") or _default_file(location, "commits", batch_id),
                                         version=c["v"], next_watermark_ms=c["n"], metadata=c["m"])
                batches.append(Batch(
                    batch_id=batch_id, offsets=offsets, commit=commit,
                    offsets_file=(item["of"] or _default_file(location, "offsets", batch_id)) if "of" in item else None,
                    commit_file=(item["cf"] or _default_file(location, "commits", batch_id)) if "cf" in item else None))
            checkpoint = Checkpoint(
                location=location, query_id=ck["query_id"], batches=tuple(batches),
                problems=tuple(ReadProblem(p["kind"], p["file"], p["message"], p.get("batch_id"))
                               for p in ck["problems"]),
                has_commit_log=bool(ck["has_commit_log"]), metadata_file=ck["metadata_file"], newest=ck["newest"],
                unread_batches=int(ck["unread_batches"]), lowest_offsets_batch_id=ck["lowest_offsets_batch_id"])
            return cls(location=value["location"], query_id=value["query_id"], newest=int(value["newest"]),
                       checkpoint=checkpoint)
        except ValueError:
            raise
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(f"not a tail written by Tail.to_dict: {exc!r}") from None


_MISSING = object()


def _default_file(location: str, log: str, batch_id: int) -> str:
    return f"{location}/{log}/{batch_id}"


def follow(location: Any, previous: Tail | None = None, *, newest: int, filesystem: Any = None,
           storage_options: dict[str, Any] | None = None) -> Tail:
    """The newest ``newest`` batches of the checkpoint now, from the ``previous`` tail (see the
    module docstring for what is read).

    :param location: the checkpoint folder (as for :func:`~watermark_ops.core.checkpoint.read_checkpoint`).
    :param previous: the tail the last follow returned (or :meth:`Tail.from_dict` of it), None.
    :param newest: the window (at least 1), e.g. :func:`watermark_ops.core.stall.recent_batches`.
    :param filesystem: / storage_options: as for :func:`~watermark_ops.core.checkpoint.read_checkpoint`.
    :return: a :class:`Tail`; its ``checkpoint`` carries every problem (never raised for content).
    :raises ValueError: ``newest`` below 1.
    """
    if isinstance(newest, bool) or not isinstance(newest, int) or newest < 1:
        raise ValueError(f"newest must be a positive number of batches, got {newest!r}")
    storage, root = _resolve(location, filesystem, storage_options)
    shown = storage.display(root)
    checkpoint = None
    if _usable(previous, shown, newest):
        checkpoint = _follow(storage, root, previous.checkpoint, newest)
    listed = checkpoint is None
    if listed:
        checkpoint = _read(storage, root, newest)
    requests = {"list": storage.requests["list"], "get": storage.requests["get"], "head": 0, "listed": listed}
    return Tail(location=shown, query_id=checkpoint.query_id, newest=newest, checkpoint=checkpoint, requests=requests)


def _usable(previous: Tail | None, shown: str, newest: int) -> bool:
    if previous is None or previous.location != shown or previous.newest != newest:
        return False
    ck = previous.checkpoint
    if ck.head_batch_id is None or ck.metadata_file is None or ck.newest != newest:
        return False
    head = ck.batch(ck.head_batch_id)
    if head.offsets is None:
        return False
    # A problem outside the batch files (a folder that could not be listed, a missing checkpoint)
    # is only re-checked by a listing.
    files = {ck.metadata_file} | {b.offsets_file for b in ck.batches} | {b.commit_file for b in ck.batches}
    return all(p.file in files for p in ck.problems)


def _follow(storage: Any, root: str, previous: Checkpoint, newest: int) -> Checkpoint | None:
    """The followed checkpoint, or None when the memory no longer matches (then list)."""
    head = previous.head_batch_id
    head_batch = previous.batch(head)
    lowest = previous.lowest_offsets_batch_id
    offsets = {head: f"{root}/offsets/{head}", head + 1: f"{root}/offsets/{head + 1}"}
    if lowest is not None and lowest != head:
        offsets[lowest] = f"{root}/offsets/{lowest}"
    commits = {head + 1: f"{root}/commits/{head + 1}"}
    # Read again: the in-flight head's commit, and every file of the window that had a problem
    # (a half-written or unreadable file may read well now, as a fresh bounded read would).
    reread = {("commits", head)} if not head_batch.committed else set()
    reread |= {(_log_of(p), p.batch_id) for p in previous.problems
               if p.batch_id is not None and _log_of(p) in ("offsets", "commits")
               and (_log_of(p), p.batch_id) != ("offsets", head)}
    for log, i in reread:
        (offsets if log == "offsets" else commits)[i] = f"{root}/{log}/{i}"
    metadata_path = f"{root}/metadata"
    files = read_log_files(storage, offsets, commits, metadata_path, probed=commits.values(),
                           probed_offsets=offsets.values())
    if files.query_id is None or files.query_id != previous.query_id:
        return None  # reset (or metadata unreadable: the listing reports it)
    if files.offsets.get(head) != head_batch.offsets or (lowest is not None and lowest not in files.offsets_files):
        return None  # rewound, purged, or the head's offsets changed
    if not previous.has_commit_log and files.commit_files:
        return None  # a commit log appeared: list to see it whole
    if any(log == "offsets" and i not in files.offsets_files for log, i in reread):
        return None  # an offsets file of the window is gone: the window is not what it was
    found_offsets = {i: p for i, p in files.offsets_files.items() if i > head}
    new_offsets = {i: files.offsets.get(i) for i in found_offsets}
    new_commits = {i: files.commits.get(i) for i in files.commit_files if i > head}
    new_commit_files = {i: p for i, p in files.commit_files.items() if i > head}
    new_problems = [p for p in files.problems if p.batch_id is not None and p.batch_id > head]
    reread_problems = [p for p in files.problems if (_log_of(p), p.batch_id) in reread]
    meta_problems = [p for p in files.problems if p.batch_id is None]
    # Next batches by name while the newest candidate exists.
    step, next_id = 1, head + 2
    while (next_id - 1) in found_offsets:
        if next_id - 1 - head > newest:
            return None  # more new batches than the window: a listing is cheaper
        step = min(step * 2, _MAX_STEP)
        ids = range(next_id, next_id + step)
        more = read_log_files(storage, {i: f"{root}/offsets/{i}" for i in ids},
                              {i: f"{root}/commits/{i}" for i in ids} if previous.has_commit_log else {}, None,
                              probed=[f"{root}/commits/{i}" for i in ids],
                              probed_offsets=[f"{root}/offsets/{i}" for i in ids])
        contiguous = []
        for i in ids:
            if i not in more.offsets_files:
                break
            contiguous.append(i)
        for i in contiguous:
            found_offsets[i] = more.offsets_files[i]
            new_offsets[i] = more.offsets.get(i)
            if i in more.commit_files:
                new_commit_files[i] = more.commit_files[i]
                new_commits[i] = more.commits.get(i)
        new_problems.extend(p for p in more.problems if p.batch_id in contiguous)
        if len(contiguous) < step:
            break
        next_id += step
    # A commit probed past the newest offsets (head + 1 + ...) without its offsets is not seen by
    # a bounded read either: drop it.
    new_commit_files = {i: p for i, p in new_commit_files.items() if i in found_offsets}
    new_commits = {i: c for i, c in new_commits.items() if i in found_offsets}
    display = storage.display
    batches = {b.batch_id: b for b in previous.batches}
    for log, i in reread:
        batch = batches.get(i)
        if batch is None:
            continue
        if log == "offsets":
            batches[i] = Batch(batch_id=i, offsets=files.offsets.get(i), commit=batch.commit,
                               offsets_file=batch.offsets_file, commit_file=batch.commit_file)
        else:
            found = i in files.commit_files
            batches[i] = Batch(batch_id=i, offsets=batch.offsets, commit=files.commits.get(i) if found else None,
                               offsets_file=batch.offsets_file,
                               commit_file=display(files.commit_files[i]) if found else None)
    for i, path in found_offsets.items():
        batches[i] = Batch(batch_id=i, offsets=new_offsets.get(i), commit=new_commits.get(i),
                           offsets_file=display(path),
                           commit_file=display(new_commit_files[i]) if i in new_commit_files else None)
    # A batch known only by a commit that is gone now (a probed in-flight commit) is not held.
    batches = {i: b for i, b in batches.items() if b.offsets_file is not None or b.commit_file is not None}
    window = sorted(i for i, b in batches.items() if b.offsets_file is not None)
    dropped = max(0, len(window) - newest)
    keep_from = window[-newest] if len(window) >= newest else (window[0] if window else head)
    kept = tuple(batches[i] for i in sorted(batches) if i >= keep_from)
    kept_ids = {b.batch_id for b in kept}
    # Problems in read_checkpoint's order: metadata's, the offsets files', the commit files'.
    old = [p for p in previous.problems if p.batch_id is not None and p.batch_id in kept_ids
           and (_log_of(p), p.batch_id) not in reread]
    fresh = [p for p in reread_problems + new_problems if p.batch_id in kept_ids]
    problems = (meta_problems + sorted([p for p in old + fresh if _log_of(p) == "offsets"], key=lambda p: p.batch_id)
                + sorted([p for p in old + fresh if _log_of(p) == "commits"], key=lambda p: p.batch_id))
    return Checkpoint(location=previous.location, query_id=files.query_id, batches=kept, problems=tuple(problems),
                      has_commit_log=previous.has_commit_log, metadata_file=previous.metadata_file, newest=newest,
                      unread_batches=previous.unread_batches + dropped,
                      lowest_offsets_batch_id=previous.lowest_offsets_batch_id)


def _log_of(problem: ReadProblem) -> str:
    """``offsets`` or ``commits``: the log the problem's file belongs to."""
    parent = problem.file.rstrip("/").rsplit("/", 2)
    return parent[-2] if len(parent) >= 2 else ""
