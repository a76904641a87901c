"""A refused restart, in one readable line: what, which file, what to do.

When a restart is refused — by the driver's start check (:mod:`watermark_ops.core.state.restart`)
or by Spark itself, whose error class sits deep in a wrapped stack trace — the driver writes the
run's diagnosis beside the checkpoint, logs its :attr:`Diagnosis.line` as its last ERROR line and
exits with its own status (``watermark_ops.spark.exits.EXIT_RESTART_REFUSED``); the run pattern's
submit task fails with that line, and the UI reads the same file (:func:`read_diagnosis`).

The file, ``<checkpoint>.diagnosis.json`` (:func:`diagnosis_path`), one JSON object
(:meth:`Diagnosis.to_dict`)::

    {"version": 1, "checkpoint": "...", "code": "window_duration_changed", "refused_by": "watermark-ops",
     "message": "...", "file": ".../state/0/0/4.delta", "recipe": "...", "line": "...",
     "spark_error_class": null, "spark_error": null, "changes": [{...}], "query_name": "...",
     "run_tag": "...", "timestamp_ms": 1795449686774}

``refused_by`` is ``watermark-ops`` (the start check: nothing was started) or ``spark`` (Spark's
error, mapped by :func:`diagnose_spark_error`); ``changes`` lists every change the start check
found (:class:`~watermark_ops.core.state.restart.StartChange`), accepted ones included. The next
run of the checkpoint that finishes removes the file: a diagnosis describes the newest refused run.

Spark's refusals mapped (Spark 4.2; the class or text → ``code``): ``STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE``
→ ``key_schema_changed``; ``STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE`` → ``value_schema_changed``;
``STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA`` → ``operators_changed``; "There are [N]
sources in the checkpoint offsets and now there are [M]" → ``source_count_changed``;
``STREAMING_CHECKPOINT_MISSING_METADATA_FILE`` → ``metadata_missing``; "batch N doesn't exist" /
"Previous batch N not found" → ``offsets_hole``;
``CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS`` / ``...CANNOT_READ_STREAMING_STATE_FILE``
→ ``state_file_missing``; ``CANNOT_LOAD_STATE_STORE.UNCATEGORIZED`` → ``state_file_truncated`` (or
``state_file_unreadable``) when the files show which, else ``state_store_unloadable`` like any
other ``CANNOT_LOAD_STATE_STORE.*``; ``STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED`` →
``state_format_v2_with_hdfs``; ``INVALID_LOG_VERSION`` → ``log_version_unsupported``. The codes
are the preflight's where it has one, so a preflight finding read after the failure names the file
Spark did not (a truncated file's path is not in Spark's message).

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DIAGNOSIS_SUFFIX", "Diagnosis", "diagnose_spark_error", "diagnosis_from_check", "diagnosis_path",
           "read_diagnosis", "refused_restart"]

#: The diagnosis file's name beside the checkpoint.
DIAGNOSIS_SUFFIX = ".diagnosis.json"
_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]{4,}(?:\.[A-Z0-9_]+)?)\]")
_RESTORE = "restore it from a copy of the checkpoint (a backup, the object store's versioning); never edit it by hand"
_NEW = "start a new checkpoint (and a new output, or clear the old one) for the changed query"
_REREAD = "start a new checkpoint and re-read the input (clear or replace the sink's output first)"


def diagnosis_path(checkpoint: str) -> str:
    """``<checkpoint>.diagnosis.json`` (a local path or URL, as the checkpoint's)."""
    return str(checkpoint).rstrip("/") + DIAGNOSIS_SUFFIX


@dataclass(frozen=True)
class Diagnosis:
    """Why a restart was refused (module docstring: the file's shape)."""

    code: str
    refused_by: str
    message: str
    file: str | None
    recipe: str
    checkpoint: str
    spark_error_class: str | None = None
    spark_error: str | None = None
    changes: tuple[dict[str, Any], ...] = ()
    query_name: str | None = None
    run_tag: str | None = None
    timestamp_ms: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def line(self) -> str:
        """What, which file, what to do: one line."""
        who = "Spark" if self.refused_by == "spark" else "watermark-ops"
        where = f" [{self.file}]" if self.file else ""
        return (f"restart of {self.checkpoint} refused by {who} ({self.code}): {self.message}{where}. "
                f"What to do: {self.recipe}")

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object (module docstring)."""
        return {"version": 1, "checkpoint": self.checkpoint, "code": self.code, "refused_by": self.refused_by,
                "message": self.message, "file": self.file, "recipe": self.recipe, "line": self.line,
                "spark_error_class": self.spark_error_class, "spark_error": self.spark_error,
                "changes": [dict(c) for c in self.changes], "query_name": self.query_name, "run_tag": self.run_tag,
                "timestamp_ms": self.timestamp_ms}

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> Diagnosis:
        """The inverse of :meth:`to_dict`. :raises ValueError: for another shape."""
        try:
            return cls(code=str(document["code"]), refused_by=str(document["refused_by"]),
                       message=str(document["message"]), file=document.get("file"), recipe=str(document["recipe"]),
                       checkpoint=str(document["checkpoint"]), spark_error_class=document.get("spark_error_class"),
                       spark_error=document.get("spark_error"),
                       changes=tuple(dict(c) for c in document.get("changes") or ()),
                       query_name=document.get("query_name"), run_tag=document.get("run_tag"),
                       timestamp_ms=document.get("timestamp_ms"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a diagnosis: missing or bad {exc}") from None


def diagnosis_from_check(check: Any, *, query_name: str | None = None, run_tag: str | None = None,
                         timestamp_ms: int | None = None) -> Diagnosis | None:
    """The diagnosis of a refused start check (:class:`~watermark_ops.core.state.restart.StartCheck`),
    None when it refused nothing."""
    refused = check.refused
    if not refused:
        return None
    first = refused[0]
    more = f" (also: {', '.join(c.code for c in refused[1:])})" if len(refused) > 1 else ""
    return Diagnosis(first.code, "watermark-ops", first.message + more, first.file, first.recipe, check.location,
                     changes=tuple(c.to_dict() for c in check.changes), query_name=query_name, run_tag=run_tag,
                     timestamp_ms=timestamp_ms)


def _struct_fields(text: str) -> list[str]:
    """Top-level field names of a Scala ``StructType(StructField(a,...),StructField(b,...))`` text."""
    names, depth, i = [], 0, 0
    body = text[text.find("(") + 1:] if text.startswith("StructType(") else text
    while i < len(body):
        if body.startswith("StructField(", i) and depth == 0:
            end = body.find(",", i)
            names.append(body[i + len("StructField("):end])
            depth += 1
            i += len("StructField(")
            continue
        if body[i] == "(":
            depth += 1
        elif body[i] == ")":
            depth -= 1
            if depth < 0:
                break
        i += 1
    return names


def _finding_file(report: Any, *codes: str) -> str | None:
    for finding in getattr(report, "findings", ()) or ():
        if finding.code in codes and finding.level == "no_go":
            return finding.file
    return None


def _operator_folder(evidence: dict[str, Any], root: str) -> str:
    """``state/<op>`` of the first operator the held shape names (its metadata file's folder), else ``state``."""
    metadata = evidence.get("operators")
    return metadata.rsplit("/_metadata/", 1)[0] if isinstance(metadata, str) and "/_metadata/" in metadata \
        else f"{root}/state"


def diagnose_spark_error(text: str, checkpoint: str, *, report: Any = None, held: Any = None,
                         query_name: str | None = None, run_tag: str | None = None,
                         timestamp_ms: int | None = None) -> Diagnosis | None:
    """Map Spark's error of a refused restart to a :class:`Diagnosis` (module docstring), None for
    an error that is not a refused restart (a failure of the job's own code, a lost executor, ...).

    :param text: the exception's text (``str(StreamingQueryException)``: Spark's message, then the
        query's description).
    :param checkpoint: the failed query's checkpoint location.
    :param report: the preflight report read after the failure
        (:class:`~watermark_ops.core.state.preflight.PreflightReport`): names the file when Spark's
        message does not.
    :param held: what the checkpoint holds (:class:`~watermark_ops.core.state.held.HeldShape`):
        names the state schema, operator metadata or offsets file.
    """
    text = str(text or "")
    message_part = text.split("=== Streaming Query ===", 1)[0].strip()
    classes = [c for c in _CLASS.findall(message_part) if c not in ("STREAM_FAILED",)]
    spark_class = classes[0] if classes else None
    evidence = dict(getattr(getattr(held, "shape", None), "evidence", None) or {})
    root = checkpoint.rstrip("/")
    schema_file = (evidence.get("keys") or {}).get(0) or f"{root}/state/0/0/_metadata/schema"
    found: tuple[str, str, str | None, str] | None = None
    quoted = None  # Spark's own words when its error has no class
    match = re.search(r"Existing (key|value)_schema=(.*?) and new \1_schema=(.*?)\.\s*(?:\n|If you|$)", message_part,
                      re.S)
    if spark_class in ("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"):
        part = "key" if "KEY" in spark_class else "value"
        fields = f" (the state has {_struct_fields(match.group(2))}, this query {_struct_fields(match.group(3))})" \
            if match else ""
        what = "grouping or deduplication keys" if part == "key" else "aggregates (the state's value columns)"
        found = (f"{part}_schema_changed", f"the state's {part} schema does not fit this query{fields}",
                 schema_file, f"restore the {what} the checkpoint was written with; to change them, {_NEW}")
    elif spark_class == "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA":
        detail = re.search(r"Stateful operators in the metadata: (.*?); Stateful operators in current batch: (.*?)\.",
                           message_part, re.S)
        said = f" (the checkpoint: {detail.group(1)}; this query: {detail.group(2)})" if detail else ""
        found = ("operators_changed", f"the query's stateful operators are not the checkpoint's{said}",
                 evidence.get("operators") or f"{root}/state/0/_metadata/metadata",
                 f"keep the stateful operators the checkpoint was written with; to add, remove or replace one, {_NEW}")
    elif (sources := re.search(r"There are \[(\d+)\] sources in the checkpoint offsets and now there are \[(\d+)\]",
                               message_part)):
        quoted = sources.group(0)
        found = ("source_count_changed", f"the checkpoint's query read {sources.group(1)} source(s), this one reads "
                 f"{sources.group(2)}", evidence.get("sources") or f"{root}/offsets",
                 f"read the {sources.group(1)} source(s) the checkpoint was written with; to change them, {_NEW}")
    elif spark_class == "STREAMING_CHECKPOINT_MISSING_METADATA_FILE":
        found = ("metadata_missing", "the checkpoint's metadata file is missing while its logs hold batches",
                 f"{root}/metadata", f"{_RESTORE}. It holds only {{\"id\": \"<query id>\"}}: the id is in the job's "
                 f"progress log (query_id)")
    elif (hole := re.search(r"(?:batch (\d+) doesn't exist|Previous batch (\d+) not found)", message_part)):
        batch, quoted = hole.group(1) or hole.group(2), hole.group(0)
        found = ("offsets_hole", f"offsets/{batch} is missing below the newest batch: the restart needs it",
                 _finding_file(report, "offsets_hole") or f"{root}/offsets/{batch}",
                 f"{_RESTORE}; without a copy the query cannot resume from this checkpoint: {_REREAD}")
    elif spark_class and spark_class.startswith("CANNOT_LOAD_STATE_STORE"):
        path = re.search(r"(?:Error reading delta file|streaming state file of) (\S+?)(?: of | does not exist|$)",
                         message_part)
        if spark_class.endswith(("DELTA_FILE_NOT_EXISTS", "CANNOT_READ_STREAMING_STATE_FILE")):
            found = ("state_file_missing", "a state file the restart loads is missing",
                     path.group(1) if path else _finding_file(report, "state_file_missing"),
                     f"{_RESTORE}; without a copy: {_REREAD}")
        else:
            truncated = _finding_file(report, "state_file_truncated")
            unreadable = _finding_file(report, "state_file_unreadable", "state_file_missing")
            code = "state_file_truncated" if truncated else "state_file_unreadable" if unreadable else \
                "state_store_unloadable"
            what = {"state_file_truncated": "a state file the restart loads is cut short (no lz4 end block)",
                    "state_file_unreadable": "a state file the restart loads cannot be read",
                    "state_store_unloadable": f"Spark could not load the state ({spark_class})"}[code]
            found = (code, what, truncated or unreadable or (path.group(1) if path else f"{root}/state"),
                     f"{_RESTORE}; without a copy: {_REREAD}")
    elif spark_class == "STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED":
        found = ("state_format_v2_with_hdfs", "the run asks for checkpoint format version 2, which the HDFS-backed "
                 "state store (frozen in this checkpoint) does not support",
                 _finding_file(report, "state_format_v2_with_hdfs") or _operator_folder(evidence, root),
                 "leave spark.sql.streaming.stateStore.checkpointFormatVersion at 1 for this checkpoint")
    elif spark_class and spark_class.startswith("INVALID_LOG_VERSION"):
        found = ("log_version_unsupported", "the checkpoint's logs were written by a newer Spark than this one reads",
                 _finding_file(report, "log_version_unsupported") or f"{root}/offsets",
                 "run the Spark release that wrote this checkpoint, or a newer one")
    if found is None:
        return None
    code, message, file, recipe = found
    said = spark_class or f'"{quoted}"'
    return Diagnosis(code, "spark", f"{message} (Spark: {said})", file, recipe,
                     checkpoint, spark_error_class=spark_class, spark_error=message_part[:2000],
                     query_name=query_name, run_tag=run_tag, timestamp_ms=timestamp_ms)


def read_diagnosis(location: Any, *, filesystem: Any = None,
                   storage_options: dict[str, Any] | None = None) -> Diagnosis | None:
    """The diagnosis beside the checkpoint at ``location`` (``<checkpoint>.diagnosis.json``), None
    when there is none (no refused run since the last one that finished).

    :param location: the checkpoint (local path, fsspec URL, ``ObjectStoragePath``).
    :return: the :class:`Diagnosis`; a file that cannot be read or parsed gives a diagnosis of code
        ``diagnosis_unreadable`` naming it (never raises for content).
    """
    from watermark_ops.core.storage import _resolve

    storage, root = _resolve(location, filesystem, storage_options)
    path = diagnosis_path(root)
    raw = storage.read([path], probed=[path])(path)
    shown = storage.display(path)
    if isinstance(raw, FileNotFoundError):
        return None
    try:
        if isinstance(raw, Exception):
            raise ValueError(f"cannot read the file: {raw!r}")
        return Diagnosis.from_dict(json.loads(raw.decode("utf-8")))
    except (ValueError, UnicodeDecodeError, AttributeError) as exc:
        return Diagnosis("diagnosis_unreadable", "watermark-ops", f"the diagnosis file cannot be read ({exc})", shown,
                         "look at the driver's log of the last run", storage.display(root))


def refused_restart(location: Any, *, filesystem: Any = None,
                    storage_options: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The refused restart standing beside a checkpoint, as ``status``, the overview and the monitor
    show it until a run succeeds (the launcher removes the file then): one small read of
    ``<checkpoint>.diagnosis.json`` (:func:`read_diagnosis`).

    :return: ``{"line": the diagnosis line (what, which file, what to do), "code", "refused_by":
        "watermark-ops" | "spark", "file": str | None, "run_tag": str | None, "timestamp_ms": epoch
        ms UTC | None}``, None when no restart stands refused; a location that cannot be reached
        gives None (the checkpoint's own read names that problem).
    """
    try:
        found = read_diagnosis(location, filesystem=filesystem, storage_options=storage_options)
    except (OSError, ValueError):
        return None
    if found is None:
        return None
    return {"line": found.line, "code": found.code, "refused_by": found.refused_by, "file": found.file,
            "run_tag": found.run_tag, "timestamp_ms": found.timestamp_ms}
