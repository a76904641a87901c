"""The launcher's Spark replay records: the late-row ledger of a job whose parsing is its own.

After a run's queries stop, the launcher (``watermark_ops.spark.launch``) replays each of the run's
micro-batches in the same driver: the files the batch read (:class:`~watermark_ops.core.ledger.plan.BatchPlan`)
are read as a Spark batch with the stream's own reader settings, passed through the job's
pre-watermark function, and judged by the late rule with the watermark the checkpoint recorded
(``watermark_ops.spark.replay``). Each batch's result is appended as one JSON line to
``<checkpoint>.replay.jsonl`` (beside the checkpoint and its progress log; a re-run batch is
appended again and the newest line wins)::

    {"query_id": str, "batch_id": int, "run_tag": str | null, "replayed_by": "spark",
     "files": [uri], "rows_read": int,            # rows the batch's files made (Spark's numInputRows)
     "rows_quarantined": {reason: int},          # rows the job sets aside (its reason column; rows its
                                                 #   function filters out count as "filtered_by_job")
     "set_aside_examples": {reason: {"file", "line", "event"}},
     "rows_aggregated": int,                     # rows that entered the watermark and were not late
     "late_rows": [LateRow.to_dict()],
     "late_watermark_ms": int,                   # the watermark late rows were judged by
     "event_times_ms": [int],                    # rows entering the watermark, in arrival order
     "problems": [str]}                          # e.g. the replay read other row counts than Spark

:func:`watermark_ops.core.ledger.late_ledger` reads these records where they exist (CLI, Airflow
ledger task, UI), and :func:`watermark_ops.core.lateness.replayed_lateness` turns the event times into
the lateness advice on the job's own event-time field, whatever the landed format. All instants epoch ms UTC. Pure core.
"""

from __future__ import annotations

from typing import Any, Callable

from watermark_ops.core.ledger.model import BatchLedger, LateRow
from watermark_ops.core.ledger.plan import BatchPlan
from watermark_ops.core.jsontext import loads
from watermark_ops.core.progress import _Reader

__all__ = ["FILTERED_BY_JOB", "batch_from_record", "read_records", "read_replay_log", "replay_log_path",
           "replay_record"]

#: The reason counted for rows the job's pre-watermark function filters out without naming why.
FILTERED_BY_JOB = "filtered_by_job"


def replay_log_path(checkpoint: str) -> str:
    """``<checkpoint>.replay.jsonl``: where the launcher's Spark replay records live."""
    return str(checkpoint).rstrip("/") + ".replay.jsonl"


def replay_record(batch: BatchLedger, query_id: str | None, run_tag: str | None, event_times_ms: list[int],
                  problems: list[str] | None = None) -> dict[str, Any]:
    """One replayed batch as a replay-log line (module docstring)."""
    return {
        "query_id": query_id, "batch_id": batch.batch_id, "run_tag": run_tag, "replayed_by": "spark",
        "files": list(batch.files), "rows_read": batch.rows_read, "rows_quarantined": dict(batch.rows_quarantined),
        "set_aside_examples": dict(batch.set_aside_examples), "rows_aggregated": batch.rows_aggregated,
        "late_rows": [row.to_dict() for row in batch.late_rows], "late_watermark_ms": batch.late_watermark_ms,
        "event_times_ms": list(event_times_ms), "problems": list(problems or []),
    }


def read_replay_log(checkpoint: str, query_id: str | None = None, *, filesystem: Any = None,
                    storage_options: dict[str, Any] | None = None) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """The newest replay record of each batch id of ``query_id`` (all queries when None).

    :return: ``({batch id: record}, problems)``: a line that is not a record of this shape is a
        problem naming the file and line, never used. A missing log is empty.
    :raises OSError: when the log exists but cannot be read.
    """
    location = replay_log_path(checkpoint)
    found, problems = read_records(location, lambda r: isinstance(r.get("batch_id"), int)
                                   and isinstance(r.get("late_rows"), list) and isinstance(r.get("rows_read"), int),
                                   "a replay record with batch_id, rows_read and late_rows",
                                   filesystem=filesystem, storage_options=storage_options)
    records: dict[int, dict[str, Any]] = {}
    for record in found:
        if query_id is None or record.get("query_id") in (None, query_id):
            records[record["batch_id"]] = record
    return records, problems


def read_records(location: str, is_record: Callable[[dict[str, Any]], bool], expected: str, *,
                 filesystem: Any = None, storage_options: dict[str, Any] | None = None,
                 ) -> tuple[list[dict[str, Any]], list[str]]:
    """The JSON objects of a JSON-lines log the launcher keeps beside a checkpoint (its replay log,
    its corrections log), in file order.

    :param is_record: whether a JSON object is a record of the log's shape.
    :param expected: the shape in words, for the problem of a line that is not one.
    :return: ``(records, problems)``: a line that is not JSON, or not a record, is a problem naming
        the file and line, never used. A missing log is empty.
    :raises OSError: when the log exists but cannot be read.
    """
    try:
        data = _Reader(location, filesystem, storage_options).whole()
    except FileNotFoundError:
        return [], []
    records, problems = [], []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = loads(line)
        except ValueError as exc:
            problems.append(f"{location}:{number}: expected one JSON object per line ({exc})")
            continue
        if not (isinstance(record, dict) and is_record(record)):
            problems.append(f"{location}:{number}: expected {expected}")
            continue
        records.append(record)
    return records, problems


def batch_from_record(plan: BatchPlan, record: dict[str, Any]) -> tuple[BatchLedger, str | None]:
    """The :class:`BatchLedger` a replay record holds, judged against the plan read from the checkpoint.

    :return: ``(batch, problem)``: the batch not replayed, with a problem naming why, when the record
        disagrees with the checkpoint (other files than the source log names) or says its replay was
        not exact.
    """
    planned = list(dict.fromkeys(uri for _, uri in plan.files))
    if list(record.get("files") or []) != planned:
        return plan.unreplayed(), (f"batch {plan.batch_id}: the Spark replay read {len(record.get('files') or [])} "
                                   f"files, the checkpoint's source log names {len(planned)}: expected the same files")
    if record.get("problems"):
        return plan.unreplayed(), f"batch {plan.batch_id}: the Spark replay was not exact: {'; '.join(record['problems'])}"
    rows = []
    for item in record.get("late_rows") or []:
        rows.append(LateRow.from_dict(item, plan.batch_id))
    batch = BatchLedger(plan.batch_id, True, plan.watermark_ms, plan.timestamp_ms, tuple(planned), plan.log_offsets,
                        int(record["rows_read"]), {str(k): int(v) for k, v in (record.get("rows_quarantined") or {}).items()},
                        int(record.get("rows_aggregated") or 0), tuple(rows), rule=plan.rule,
                        late_watermark_ms=plan.late_watermark_ms, late_watermark=plan.late_watermark,
                        replayed_by="spark", set_aside_examples=dict(record.get("set_aside_examples") or {}),
                        **plan.spark_rows())
    return batch, None
