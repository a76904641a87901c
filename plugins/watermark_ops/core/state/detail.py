"""The state part of a checkpoint's page: the state store beside the watermark, and the restart
preflight's verdict.

:func:`state_detail` reads the checkpoint's state once (:func:`~watermark_ops.core.state.reader.state_of`
on the checkpoint and progress records the page already read: one listing per partition and store
folder, the files of the chain a restart loads within :data:`DETAIL_MAX_REPLAY_BYTES`) and judges
it: the state summary with its findings (:meth:`~watermark_ops.core.state.summary.StateSummary.document`),
each operator's rows over the batch ids the watermark chart shows (the same x axis), the restart
preflight (:func:`~watermark_ops.core.state.preflight.preflight`: go, warn or no-go, each finding
with its file and recipe; no requested conf, no Spark version: what the files alone say) and, when
the driver wrote one, the diagnosis of the last refused restart (``<checkpoint>.diagnosis.json``).

Pure core: imports neither Airflow nor Spark; never raises for a checkpoint that cannot be read.
"""

from __future__ import annotations

from typing import Any, Iterable

from watermark_ops.core.thresholds import DEFAULT_STATE_THRESHOLDS, StateThresholds

__all__ = ["DETAIL_MAX_REPLAY_BYTES", "state_detail"]

#: The most bytes of state files a page reads (the chain's files, checked whole for the preflight
#: and counted for an operator the progress log gives no rows for).
DETAIL_MAX_REPLAY_BYTES = 64 * 1024 * 1024


def state_detail(location: Any, checkpoint: Any, records: Iterable[dict[str, Any]] = (), *,
                 batch_ids: tuple[int, int] | None = None, thresholds: StateThresholds = DEFAULT_STATE_THRESHOLDS,
                 filesystem: Any = None, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The page's state part (module docstring).

    :param checkpoint: the whole offset and commit logs as the page read them.
    :param records: the job's progress records (this query's).
    :param batch_ids: ``(first, last)`` batch ids the watermark chart shows: each operator's
        ``series`` covers them only; None: every batch read.
    :return: ``{"state_store": StateSummary.document() + per operator "series": {"batch_ids": [...],
        "rows": [...], "removed": [...]} | None, "preflight": PreflightReport.to_dict() | None,
        "diagnosis": Diagnosis.to_dict() | None, "problems": [str]}``.
    """
    from watermark_ops.core.state.metadata import state_metadata_on
    from watermark_ops.core.state.preflight import preflight
    from watermark_ops.core.state.reader import state_of
    from watermark_ops.core.state.summary import summary_of
    from watermark_ops.core.storage import _resolve

    out: dict[str, Any] = {"state_store": None, "preflight": None, "diagnosis": None, "problems": []}
    records = list(records)
    try:
        storage, root = _resolve(location, filesystem, storage_options)
        state = state_of(storage, root, checkpoint, state_metadata_on(storage, root), records,
                         max_replay_bytes=DETAIL_MAX_REPLAY_BYTES, list_files=True, count_files=True)
    except Exception as exc:  # noqa: BLE001 - the page still shows the watermark
        out["problems"].append(f"the state of {location} cannot be read: {exc!r}")
        return out
    head = checkpoint.head_batch_id
    summary = summary_of(state, "full", head, head is not None and checkpoint.in_flight_batch_id is None)
    document = summary.document(thresholds)
    for op, shown in zip(state.operators, document["operators"]):
        batches = [b for b in op.batches
                   if batch_ids is None or batch_ids[0] <= b.batch_id <= batch_ids[1]]
        shown["series"] = {"batch_ids": [b.batch_id for b in batches], "rows": [b.rows for b in batches],
                           "removed": [b.removed for b in batches]}
        shown["missing_files"] = list(op.missing_files)
    out["state_store"] = document
    if checkpoint.batches or checkpoint.problems:
        out["preflight"] = preflight(checkpoint, state, {}, None, records).to_dict()
    out["diagnosis"] = _diagnosis(location, filesystem, storage_options, out["problems"])
    return out


def _diagnosis(location: Any, filesystem: Any, storage_options: dict[str, Any] | None,
               problems: list[str]) -> dict[str, Any] | None:
    """The last refused restart's diagnosis beside the checkpoint, as a dict with its ``line``; None."""
    try:
        from watermark_ops.core.state.diagnosis import read_diagnosis
    except ImportError:  # a package without the driver's diagnosis
        return None
    try:
        found = read_diagnosis(location, filesystem=filesystem, storage_options=storage_options)
    except Exception as exc:  # noqa: BLE001 - named, the page renders
        problems.append(f"the restart diagnosis of {location} cannot be read: {exc!r}")
        return None
    return None if found is None else found.to_dict()
