"""Read a job's progress log and summarise the micro-batches of one run.

The progress log is written by ``spark_jobs/streaming_driver.py`` (``ProgressRecorder``) beside the
checkpoint, at ``<checkpoint>.progress.jsonl``: one JSON object per micro-batch, reduced from
Spark's ``StreamingQueryProgress`` (``sql/core/.../streaming/progress.scala``). Fields used here:
``query_id``, ``run_id`` (Spark's, new at every restart), ``run_tag`` (the Airflow run id the job
was given), ``batch_id``, ``executed``, ``timestamp_ms`` and ``watermark_ms`` (epoch ms UTC),
``input_rows``, ``state_rows_removed`` (windows emitted in append mode), ``rows_dropped_by_watermark``,
``observed_metrics`` (``Dataset.observe`` metrics, e.g. ``quarantine.rows``).

Pure core: no Airflow, no Spark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from watermark_ops.core.jsontext import loads
from watermark_ops.core.times import iso_utc

__all__ = ["ProgressLog", "progress_log_path", "read_progress_log", "records_of_run", "run_report", "summarize_run"]


def progress_log_path(checkpoint: str) -> str:
    """The progress log kept beside a checkpoint: ``<checkpoint>.progress.jsonl``.

    The jobs write it under the same name (``spark_jobs/streaming_driver.py``; a test keeps the two equal).

    :param checkpoint: checkpoint location (a local path or an fsspec URL).
    :return: the same kind of location, string form.
    """
    return str(checkpoint).rstrip("/") + ".progress.jsonl"


@dataclass
class ProgressLog:
    """The parsed progress log.

    :ivar records: the good lines, as dicts, in file order.
    :ivar problems: one message per line that is not a JSON object with a ``batch_id``, naming the
        file and line number; those lines are kept aside here, not dropped silently.
    """

    location: str
    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_progress_log(location: str) -> ProgressLog:
    """Read ``location`` (local path or fsspec URL); a missing file is an empty log.

    :raises OSError: when the file exists but cannot be read.
    """
    import fsspec

    fs, path = fsspec.core.url_to_fs(str(location))
    log = ProgressLog(location=str(location))
    if not fs.exists(path):
        return log
    text = fs.cat_file(path).decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = loads(line)
        except json.JSONDecodeError as exc:
            log.problems.append(f"{location}:{number}: expected one JSON object per line ({exc.msg})")
            continue
        if not isinstance(record, dict) or not isinstance(record.get("batch_id"), int):
            log.problems.append(f"{location}:{number}: expected a JSON object with an integer batch_id")
            continue
        log.records.append(record)
    return log


def summarize_run(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Summarise the micro-batches of one run (records already selected, e.g. by ``run_tag``).

    Records of triggers that ran no batch (``executed`` false) are left out of ``batches``.

    :return: ``{"batches": [{"batch_id", "watermark_ms", "timestamp_ms", "input_rows",
        "windows_emitted", "rows_dropped_by_watermark"}], "batch_ids": [int],
        "input_rows": int, "windows_emitted": int, "rows_dropped_by_watermark": int,
        "last_watermark_ms": int | None}``. ``last_watermark_ms`` is the watermark the run's last
        batch ran with (epoch ms UTC), None when the run executed no batch.
    """
    batches = [
        {
            "batch_id": r["batch_id"],
            "watermark_ms": r.get("watermark_ms"),
            "timestamp_ms": r.get("timestamp_ms"),
            "input_rows": int(r.get("input_rows") or 0),
            "windows_emitted": int(r.get("state_rows_removed") or 0),
            "rows_dropped_by_watermark": int(r.get("rows_dropped_by_watermark") or 0),
            "quarantined_rows": int(((r.get("observed_metrics") or {}).get("quarantine") or {}).get("rows") or 0),
        }
        for r in sorted(records, key=lambda r: r["batch_id"])
        if r.get("executed", True)
    ]
    watermarks = [b["watermark_ms"] for b in batches if b["watermark_ms"] is not None]
    return {
        "batches": batches,
        "batch_ids": [b["batch_id"] for b in batches],
        "input_rows": sum(b["input_rows"] for b in batches),
        "windows_emitted": sum(b["windows_emitted"] for b in batches),
        "rows_dropped_by_watermark": sum(b["rows_dropped_by_watermark"] for b in batches),
        "quarantined_rows": sum(b["quarantined_rows"] for b in batches),
        "last_watermark_ms": watermarks[-1] if watermarks else None,
    }


def records_of_run(log: ProgressLog, run_tag: str) -> list[dict[str, Any]]:
    """The records stamped with ``run_tag`` (the job's ``--run-tag``, the DAG passes its run id)."""
    return [r for r in log.records if r.get("run_tag") == run_tag]


def run_report(checkpoint: str, run_tag: str, quarantine_checkpoint: str | None = None) -> dict[str, Any]:
    """What one DAG run's restart of a job did, from the progress logs beside its checkpoints.

    :param checkpoint: the main query's checkpoint; its log is ``<checkpoint>.progress.jsonl``.
    :param run_tag: the ``--run-tag`` the job was given (the DAG's run id).
    :param quarantine_checkpoint: the quarantine query's checkpoint (default ``<checkpoint>_quarantine``).
    :return: :func:`summarize_run` of the main query's batches, plus ``quarantined_rows`` (from the
        quarantine query), ``last_watermark`` (ISO-8601 UTC or None) and ``progress_log_problems``
        (lines of either log that could not be read, each naming file and line).
    """
    main = read_progress_log(progress_log_path(checkpoint))
    quarantine = read_progress_log(progress_log_path(quarantine_checkpoint or checkpoint.rstrip("/") + "_quarantine"))
    report = summarize_run(records_of_run(main, run_tag))
    report["quarantined_rows"] = summarize_run(records_of_run(quarantine, run_tag))["quarantined_rows"]
    report["last_watermark"] = iso_utc(report["last_watermark_ms"])
    report["progress_log_problems"] = main.problems + quarantine.problems
    return report
