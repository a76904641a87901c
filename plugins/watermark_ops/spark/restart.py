"""In the driver, where the new query exists: check a restart before it starts, and say in one
line why a refused one was refused.

* :func:`check_start` (called by the launcher's wrapped ``start()`` and by ``run_queries`` before
  each query starts): the query's analyzed plan (:func:`query_shape`, classic and Spark Connect)
  against what its checkpoint holds (:func:`watermark_ops.core.state.held.read_held_shape`), by
  :func:`watermark_ops.core.state.restart.compare_start`. A refused change writes the diagnosis
  beside the checkpoint and raises :class:`RestartRefused`: nothing is started. Accepted changes
  are logged as warnings.
* :func:`diagnose_failure`: when Spark itself refuses a restart (its error class deep in a wrapped
  ``StreamingQueryException``), map the error to a :class:`~watermark_ops.core.state.diagnosis.Diagnosis`
  (:func:`watermark_ops.core.state.diagnosis.diagnose_spark_error`, with the preflight's reading
  of the files to name the file Spark did not) and write it beside the checkpoint.
* :func:`write_diagnosis` / :func:`clear_diagnosis`: ``<checkpoint>.diagnosis.json`` (through
  fsspec, as the progress log); a run that finishes clears its checkpoint's.

The drivers log :attr:`Diagnosis.line` as their last ERROR line and exit with
:data:`watermark_ops.spark.exits.EXIT_RESTART_REFUSED`.

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Iterable

from watermark_ops.core.state.diagnosis import Diagnosis, diagnose_spark_error, diagnosis_from_check, diagnosis_path
from watermark_ops.core.state.plan import QueryShape, parse_analyzed_plan
from watermark_ops.core.state.restart import StartCheck, compare_start, parse_accepted

log = logging.getLogger("watermark_ops.spark")

__all__ = ["RestartRefused", "analyzed_plan_text", "check_start", "clear_diagnosis", "diagnose_failure",
           "query_shape", "write_diagnosis"]

#: Markers of the errors :func:`diagnose_spark_error` maps: without one, no file is read.
_MARKERS = ("STATE_STORE_", "STREAMING_STATEFUL_OPERATOR", "sources in the checkpoint offsets",
            "STREAMING_CHECKPOINT_MISSING_METADATA_FILE", "doesn't exist", "not found in offset log",
            "CANNOT_LOAD_STATE_STORE", "INVALID_LOG_VERSION")


class RestartRefused(Exception):
    """A restart refused, by the start check (nothing started) or by Spark; ``diagnosis`` says why."""

    def __init__(self, diagnosis: Diagnosis):
        super().__init__(diagnosis.line)
        self.diagnosis = diagnosis


def analyzed_plan_text(frame: Any) -> str:
    """The analyzed logical plan of a streaming DataFrame as Spark prints it: classic
    ``queryExecution().analyzed()``; Spark Connect ``_explain_string(mode="extended")`` (the
    server's analyzer, the same text)."""
    if hasattr(frame, "_jdf"):
        return str(frame._jdf.queryExecution().analyzed().toString())
    return str(frame._explain_string(mode="extended"))


def query_shape(frame: Any) -> QueryShape:
    """The :class:`QueryShape` of a query about to start; a relative local file-source path is made
    absolute (the driver's folder, as Spark resolves it)."""
    from urllib.parse import urlsplit

    shape = parse_analyzed_plan(analyzed_plan_text(frame))
    sources = []
    for source in shape.sources:
        path = source.get("path")
        if source.get("kind") == "file" and path and urlsplit(path).scheme in ("", "file") and "://" not in path:
            source = {**source, "path": os.path.abspath(path)}
        sources.append(source)
    return QueryShape(tuple(sources), shape.operators, shape.operators_known, shape.watermarks,
                      shape.window_durations_ms, windows=shape.windows, window_columns=shape.window_columns)


def _now_ms() -> int:
    return int(time.time() * 1000)


def check_start(frame: Any, checkpoint: str, accept: Iterable[str] | str | None = (), *,
                query_name: str | None = None, run_tag: str | None = None) -> StartCheck:
    """Compare the query of ``frame`` with what ``checkpoint`` holds (module docstring).

    :return: the :class:`StartCheck` (its ``starting`` shape is what the recorder records as
        ``started_with``); a check that could not run (a file it could not read, an unexpected plan)
        is logged and lets the query start (Spark still checks what it checks).
    :raises RestartRefused: for a change the run does not accept; the diagnosis is written first.
    """
    from watermark_ops.core.state.held import read_held_shape

    accepted = parse_accepted(accept)
    try:
        starting = query_shape(frame)
    except Exception as exc:  # noqa: BLE001 - the check must not stop a query it cannot read
        log.warning("query %s: the start check could not read the query's plan (%s): not checked", query_name, exc)
        return StartCheck(str(checkpoint), "unchecked")
    try:
        held = read_held_shape(checkpoint)
        check = compare_start(held, starting, accepted)
    except Exception as exc:  # noqa: BLE001
        log.warning("query %s: the start check could not read %s (%s): not checked", query_name, checkpoint, exc)
        return StartCheck(str(checkpoint), "unchecked", (), starting)
    for change in check.accepted:
        log.warning("query %s: accepted change of %s (%s): %s", query_name, checkpoint, change.code, change.message)
    diagnosis = diagnosis_from_check(check, query_name=query_name, run_tag=run_tag, timestamp_ms=_now_ms())
    if diagnosis is not None:
        write_diagnosis(diagnosis, str(checkpoint))
        raise RestartRefused(diagnosis)
    return check


def diagnose_failure(exc: BaseException, checkpoint: str | None, *, query_name: str | None = None,
                     run_tag: str | None = None) -> Diagnosis | None:
    """The diagnosis of a query that failed because Spark refused its restart, written beside
    ``checkpoint``; None for any other failure (nothing is read or written then)."""
    text = str(exc)
    if checkpoint is None or not any(marker in text for marker in _MARKERS):
        return None
    from watermark_ops.core.checkpoint import read_checkpoint
    from watermark_ops.core.state.held import read_held_shape
    from watermark_ops.core.state.preflight import preflight
    from watermark_ops.core.state.reader import read_state

    report = held = None
    try:
        read = read_checkpoint(checkpoint)
        report = preflight(read, read_state(checkpoint, checkpoint=read, progress_records=()))
        held = read_held_shape(checkpoint, progress_records=[])
    except Exception as error:  # noqa: BLE001 - the diagnosis then names fewer files
        log.warning("could not read %s to name the file behind the failure: %s", checkpoint, error)
    diagnosis = diagnose_spark_error(text, str(checkpoint), report=report, held=held, query_name=query_name,
                                     run_tag=run_tag, timestamp_ms=_now_ms())
    if diagnosis is not None:
        write_diagnosis(diagnosis, str(checkpoint))
    return diagnosis


def write_diagnosis(diagnosis: Diagnosis, checkpoint: str) -> None:
    """Write ``diagnosis`` to ``<checkpoint>.diagnosis.json`` (fsspec; a failure to write is logged)."""
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(diagnosis_path(checkpoint))
        parent = fs._parent(path)
        if parent:
            fs.makedirs(parent, exist_ok=True)
        with fs.open(path, "w") as handle:
            handle.write(json.dumps(diagnosis.to_dict(), indent=1, sort_keys=True, default=str) + "\n")
    except Exception as exc:  # noqa: BLE001 - the log line still says it
        log.warning("could not write the diagnosis beside %s: %s", checkpoint, exc)


def clear_diagnosis(checkpoint: str | None) -> None:
    """Remove ``<checkpoint>.diagnosis.json`` after a run of the checkpoint finished (none: nothing)."""
    if not checkpoint:
        return
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(diagnosis_path(checkpoint))
        if fs.exists(path):
            fs.rm(path)
    except Exception as exc:  # noqa: BLE001 - a stale diagnosis is reported by its run tag and time
        log.warning("could not remove the old diagnosis beside %s: %s", checkpoint, exc)
