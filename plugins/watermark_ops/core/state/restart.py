"""The driver's start check: the query about to start against what its checkpoint holds.

The restart preflight (:mod:`watermark_ops.core.state.preflight`) reads files; the query about to
start is not in them. The driver has it: it captures the analyzed plan
(:func:`watermark_ops.core.state.plan.parse_analyzed_plan`) and :func:`compare_start` compares it
with what the checkpoint holds (:func:`watermark_ops.core.state.held.read_held_shape`). What real
Spark 4.2 restarts did with each change (the tests' state corpus restarts each for real):

refused by Spark, with an error class deep in a wrapped stack trace (the check names it before):

* ``source_count_changed``: another number of sources ("There are [1] sources in the checkpoint
  offsets and now there are [2] sources requested by the query", ``OffsetSeq``/``MicroBatchExecution``);
* ``operators_changed``: a stateful operator removed, added or replaced
  (``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA``);
* ``key_schema_changed``: another number of grouping or deduplication keys
  (``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``; Spark compares the key fields' types, ignoring their
  names: a renamed key of the same type is accepted, so only the count is compared here). A
  changed value schema (``STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE``: another aggregate) is not
  predicted: Spark's refusal is diagnosed instead (:mod:`watermark_ops.core.state.diagnosis`);

accepted silently by Spark, with wrong or surprising results (refused here unless accepted):

* ``window_duration_changed``: the state keeps the old windows beside the new ones; old windows
  are emitted when the watermark passes them, with the counts of the old width;
* ``watermark_delay_changed``: the checkpoint's watermark is kept (it never goes back), and the
  new delay applies from the next batch on: a shorter delay drops rows the old one kept, a longer
  one holds windows back;
* ``source_path_changed``: a file source reading another folder: the checkpoint's source log
  holds absolute file URIs, so every file of the new folder is new to the query and read again
  (whole batches late, or counted twice in the sink).

A run accepts the silent changes it means by naming them (:data:`ACCEPTABLE_CHANGES`:
``window_duration``, ``watermark_delay``, ``source_path``); what Spark refuses cannot be accepted.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from watermark_ops.core.state.plan import QueryShape, source_folder

__all__ = ["ACCEPTABLE_CHANGES", "CHANGE_CODES", "StartChange", "StartCheck", "compare_start", "parse_accepted"]

#: The silent changes a run may accept (the name without ``_changed``).
ACCEPTABLE_CHANGES = ("window_duration", "watermark_delay", "source_path")
#: Every change code → whether Spark itself refuses the restart.
CHANGE_CODES = {"source_count_changed": True, "operators_changed": True, "key_schema_changed": True,
                "window_duration_changed": False, "watermark_delay_changed": False, "source_path_changed": False}
_NEW_CHECKPOINT = "start a new checkpoint (and a new output, or clear the old one) for the changed query"


@dataclass(frozen=True)
class StartChange:
    """One difference between the query about to start and its checkpoint.

    :ivar code: a key of :data:`CHANGE_CODES`.
    :ivar message: what changed, with both values.
    :ivar file: the file that holds the checkpoint's value (state schema, source log, progress log, ...).
    :ivar recipe: what to do.
    :ivar refused_by_spark: Spark refuses this restart itself (the check only says it first).
    :ivar accepted: the run accepts it (only silent changes can be).
    """

    code: str
    message: str
    file: str | None
    recipe: str
    refused_by_spark: bool
    accepted: bool = False

    @property
    def refuses(self) -> bool:
        """True when the start must be refused."""
        return not self.accepted

    def to_dict(self) -> dict[str, Any]:
        """Every attribute."""
        return {"code": self.code, "message": self.message, "file": self.file, "recipe": self.recipe,
                "refused_by_spark": self.refused_by_spark, "accepted": self.accepted}


@dataclass(frozen=True)
class StartCheck:
    """The check's answer: ``changes`` (refused and accepted), ``held_from`` (``progress_log`` |
    ``files`` | ``new`` when the checkpoint holds no batch yet), the checkpoint location."""

    location: str
    held_from: str
    changes: tuple[StartChange, ...] = ()
    starting: QueryShape | None = None

    @property
    def refused(self) -> list[StartChange]:
        """The changes that refuse the start."""
        return [c for c in self.changes if c.refuses]

    @property
    def accepted(self) -> list[StartChange]:
        """The silent changes the run accepted."""
        return [c for c in self.changes if c.accepted]

    def line(self) -> str | None:
        """One readable line for the first refused change (what, which file, what to do), None when none."""
        refused = self.refused
        if not refused:
            return None
        first = refused[0]
        more = f" (also: {', '.join(c.code for c in refused[1:])})" if len(refused) > 1 else ""
        return (f"restart of {self.location} refused ({first.code}): {first.message}{more} [{first.file}]. "
                f"What to do: {first.recipe}")

    def to_dict(self) -> dict[str, Any]:
        """``{"location", "held_from", "refused": bool, "changes": [...], "line"}``."""
        return {"location": self.location, "held_from": self.held_from, "refused": bool(self.refused),
                "changes": [c.to_dict() for c in self.changes], "line": self.line()}


def parse_accepted(accepted: Iterable[str] | str | None) -> tuple[str, ...]:
    """``"window_duration,source_path"`` or a list → the names; also takes ``*_changed`` codes.

    :raises ValueError: for a name that is not a silent change (:data:`ACCEPTABLE_CHANGES`),
        saying that Spark refuses the others whatever the run says.
    """
    if accepted is None:
        return ()
    items = accepted.replace(";", ",").split(",") if isinstance(accepted, str) else list(accepted)
    names = []
    for item in items:
        name = str(item).strip().removesuffix("_changed")
        if not name or name in ("None", "null", "[]"):
            continue
        if name not in ACCEPTABLE_CHANGES:
            refused = f"{name}_changed" in CHANGE_CODES
            raise ValueError(f"cannot accept {item!r}: " + (
                "Spark itself refuses that restart, whatever the run accepts; start a new checkpoint" if refused
                else f"the changes a run can accept are {', '.join(ACCEPTABLE_CHANGES)}"))
        names.append(name)
    return tuple(dict.fromkeys(names))


def _ms_text(ms: int) -> str:
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000)):
        if ms % size == 0 and ms >= size:
            n = ms // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{ms} ms"


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def compare_start(held: Any, starting: QueryShape, accept: Iterable[str] = ()) -> StartCheck:
    """Compare the query about to start with what its checkpoint holds (module docstring).

    :param held: a :class:`~watermark_ops.core.state.held.HeldShape`, or None for a checkpoint
        that holds no batch yet (then nothing is compared).
    :param starting: the new query's shape (its analyzed plan's).
    :param accept: the silent changes the run accepts (:func:`parse_accepted` names).
    :return: a :class:`StartCheck`; each aspect the checkpoint cannot tell is not compared.
    """
    if held is None:
        return StartCheck("", "new", (), starting)
    accepted = set(parse_accepted(list(accept)))
    was, evidence = held.shape, held.shape.evidence
    recorded = held.held_from == "progress_log"
    log_file = evidence.get("file") if recorded else None
    changes: list[StartChange] = []

    def add(code: str, message: str, file: str | None, recipe: str) -> None:
        silent = not CHANGE_CODES[code]
        changes.append(StartChange(code, message, log_file or file, recipe, not silent,
                                   silent and code.removesuffix("_changed") in accepted))

    # Sources: their number, then the folders of file sources.
    if was.sources and len(was.sources) != len(starting.sources):
        add("source_count_changed",
            f"the checkpoint's query read {len(was.sources)} source(s), this one reads {len(starting.sources)} "
            f"({', '.join(s['description'] for s in starting.sources)}); Spark refuses it (\"There are "
            f"[{len(was.sources)}] sources in the checkpoint offsets and now there are [{len(starting.sources)}]\")",
            evidence.get("sources"),
            f"read the {len(was.sources)} source(s) the checkpoint was written with; to add or remove a source, "
            f"{_NEW_CHECKPOINT}")
    elif was.sources:
        new_folders = [source_folder(s["path"]) for s in starting.sources if s.get("kind") == "file" and s.get("path")]
        for index, source in enumerate(was.sources):
            if source.get("kind") != "file" or not source.get("path") or not new_folders:
                continue
            entries = (evidence.get("entries") or {}).get(index) or (evidence.get("entries") or {}).get(str(index))
            old = source_folder(source["path"])
            matched = (any(all(_under(e, f) for e in entries) for f in new_folders) if entries and not recorded
                       else old in new_folders)
            if not matched:
                add("source_path_changed",
                    f"source {index} read {old}, this query reads {', '.join(new_folders)}: the checkpoint's source "
                    f"log names files by absolute path, so every file there is new to the query and is read again "
                    f"(Spark accepts it silently; whole batches late, or counted twice in the sink)",
                    (evidence.get("source_paths") or {}).get(index),
                    f"read {old} again; if the files really moved, accept the change (accept_changes="
                    f"['source_path']) knowing every file in the new folder is read again, or {_NEW_CHECKPOINT}")
    # Stateful operators, then their keys.
    names_was = sorted(o["name"] for o in was.operators)
    names_now = sorted(o["name"] for o in starting.operators)
    # A checkpoint without state (or whose operators cannot all be named) is not compared: Spark decides.
    comparable = was.operators_known and starting.operators_known and bool(was.operators)
    if comparable and names_was != names_now:
        add("operators_changed",
            f"the checkpoint holds state of {names_was or 'no stateful operator'}, this query has "
            f"{names_now or 'no stateful operator'}; Spark refuses it "
            f"(STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA)",
            evidence.get("operators"),
            f"keep the stateful operators the checkpoint was written with; to add, remove or replace one, "
            f"{_NEW_CHECKPOINT}")
    elif comparable:
        for index, (old, new) in enumerate(zip(was.operators, starting.operators)):
            if old["name"] != new["name"] or old.get("keys") is None or new.get("keys") is None:
                continue
            if len(old["keys"]) != len(new["keys"]):
                add("key_schema_changed",
                    f"{old['name']} keeps state by {len(old['keys'])} key(s) ({', '.join(old['keys'])}), this "
                    f"query by {len(new['keys'])} ({', '.join(new['keys'])}); Spark refuses it "
                    f"(STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE)",
                    (evidence.get("keys") or {}).get(index),
                    f"group (or deduplicate) by the keys the checkpoint was written with; to change them, "
                    f"{_NEW_CHECKPOINT}")
    # The watermark's delay and the windows' duration: accepted silently by Spark.
    gone = sorted(was.delays_ms - starting.delays_ms)
    if gone and starting.delays_ms:
        add("watermark_delay_changed",
            f"the checkpoint's query had a watermark delay of {', '.join(_ms_text(d) for d in gone)}, this one "
            f"{', '.join(_ms_text(d) for d in sorted(starting.delays_ms))}: Spark keeps the checkpoint's watermark "
            f"and applies the new delay from the next batch (a shorter delay drops rows the old one kept, a longer "
            f"one holds windows back); it says nothing",
            evidence.get("watermarks"),
            f"set the delay back to {_ms_text(gone[0])}; if the new delay is meant, accept the change "
            f"(accept_changes=['watermark_delay'])")
    old_windows = set(was.window_durations_ms) - set(starting.window_durations_ms)
    if old_windows and starting.window_durations_ms:
        old_text = ", ".join(_ms_text(d) for d in sorted(old_windows))
        add("window_duration_changed",
            f"the checkpoint's state holds windows of {old_text}, this query makes windows of "
            f"{', '.join(_ms_text(d) for d in starting.window_durations_ms)}: Spark keeps both in state and emits "
            f"the old ones with their old width beside the new ones; it says nothing",
            evidence.get("windows"),
            f"keep the window at {old_text}; to change it, {_NEW_CHECKPOINT} (or accept the mix: "
            f"accept_changes=['window_duration'])")
    return StartCheck(held.location, held.held_from, tuple(changes), starting)
