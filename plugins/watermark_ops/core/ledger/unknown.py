"""When the late rows cannot be known, and the ledger's problems said once per kind, not once per batch.

A batch the ledger could not replay (no Spark replay record for a job whose parsing is its own, a
format the Python replay cannot read exactly, a missing file) has no late-row count: 0 would be a
lie. Every face then says *unknown* (None in JSON and XCom, ``late_rows_known`` false and the
reason) and never adds the replayed batches' rows up as if they were the run's. The reason is
built here, once, for every face (:attr:`~watermark_ops.core.ledger.model.LateLedger.late_rows_unknown_reason`).

A problem that repeats per batch (the same kind and message, one landed file per batch) is one
group with its batch range, ``batches 0-53: ...`` (:func:`group_problems`), so 54 batches of a job
that declared no pre-watermark function make one line, not 54.

Pure core: plain data in, plain data out.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from watermark_ops.core.log_formats import ReadProblem

__all__ = ["UNKNOWN", "batches_text", "group_problems", "id_ranges", "problem_lines", "unknown_reason"]

#: The word every text face shows for late rows (and figures made from them) that cannot be known.
UNKNOWN = "unknown"
#: The distinct problem groups a reason names before it says how many more there are.
REASON_GROUPS = 3


def id_ranges(ids: Iterable[int]) -> str:
    """Batch ids as ranges, sorted and without repeats: ``0-3, 7``."""
    parts: list[list[int]] = []
    for i in sorted(set(ids)):
        if parts and i == parts[-1][1] + 1:
            parts[-1][1] = i
        else:
            parts.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def batches_text(ids: Sequence[int]) -> str:
    """``"batch 3"`` or ``"batches 0-53"``: ids (sorted, at least one) as the text names them."""
    return f"batch {ids[0]}" if len(ids) == 1 else f"batches {id_ranges(ids)}"


def group_problems(problems: Iterable[ReadProblem]) -> list[dict[str, Any]]:
    """The problems grouped by kind and message (a leading ``"batch N: "`` that repeats the
    problem's batch id left out of the message), in the order each first appears.

    :return: ``[{"kind", "message", "batch_ids": [int], "batches": "0-53" | None, "files": [str]
        (distinct, first seen first), "text"}]``. ``text`` is one line: ``"batches 0-53: kind:
        message (54 files, first <file>)"`` for a problem repeated per batch, ``"batch 3: kind:
        <file>: message"`` for one batch, ``"kind: <file>: message"`` without a batch.
    """
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for problem in problems:
        message = problem.message  # "batch N: ..." says what batch_id says: the same problem in every batch
        if problem.batch_id is not None and message.startswith(f"batch {problem.batch_id}: "):
            message = message[len(f"batch {problem.batch_id}: "):]
        group = groups.setdefault((problem.kind, message),
                                  {"kind": problem.kind, "message": message, "batch_ids": [], "files": []})
        if problem.batch_id is not None and problem.batch_id not in group["batch_ids"]:
            group["batch_ids"].append(problem.batch_id)
        if problem.file not in group["files"]:
            group["files"].append(problem.file)
    result = []
    for group in groups.values():
        ids, files = sorted(group["batch_ids"]), group["files"]
        where = files[0] if len(files) == 1 else f"{len(files)} files, first {files[0]}"
        if not ids:
            text = f"{group['kind']}: {where}: {group['message']}"
        elif len(files) == 1:
            text = f"{batches_text(ids)}: {group['kind']}: {where}: {group['message']}"
        else:
            text = f"{batches_text(ids)}: {group['kind']}: {group['message']} ({where})"
        result.append({**group, "batch_ids": ids, "batches": id_ranges(ids) if ids else None, "text": text})
    return result


def problem_lines(problems: Iterable[ReadProblem]) -> list[str]:
    """One line per problem group (:func:`group_problems`), a repeated problem once with its batch range."""
    return [group["text"] for group in group_problems(problems)]


def unknown_reason(unreplayed: Sequence[int], problems: Sequence[ReadProblem],
                   not_replayable: Sequence[dict[str, Any]], found: bool) -> str | None:
    """Why the late rows of a ledger's batches cannot be known, None when they can.

    :param unreplayed: the batch ids that were not replayed.
    :param problems: the ledger's problems (those of the unreplayed batches say why).
    :param not_replayable: sources that are not file sources (``LateLedger.not_replayable``).
    :param found: False when there is no checkpoint at the location.
    :return: e.g. ``"batches 3-5 not replayed: cannot be exact in Python: the job parses its csv
        input with its own code and declares no pre-watermark function ...; declare ..."``.
    """
    if not found:
        where = next((p.file for p in problems if p.kind in ("checkpoint_missing", "not_a_checkpoint")), "the location")
        return f"no checkpoint at {where}: no batch to replay"
    parts = []
    if unreplayed:
        wanted = set(unreplayed)
        groups = group_problems(p for p in problems if p.batch_id in wanted)
        why = "; ".join(g["message"] for g in groups[:REASON_GROUPS])
        if len(groups) > REASON_GROUPS:
            why += f"; and {len(groups) - REASON_GROUPS} more problems"
        parts.append(f"{batches_text(sorted(wanted))} not replayed: {why or 'see the problems'}")
    for source in not_replayable:
        ids = sorted(source.get("batch_ids") or [])
        parts.append(f"source {source.get('source')} ({source.get('description') or 'no description'}) is not a "
                     f"file source: its rows cannot be read back from the checkpoint "
                     f"({batches_text(ids) if ids else 'no batch'})")
    return "; ".join(parts) or None
