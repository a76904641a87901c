"""The flights example's day partitions: what each closed New York day holds, and its daily report.

``flights_pipeline`` announces every New York calendar day the watermark closed as one partitioned
asset event (:data:`DAY_ASSET_NAME`, key ``YYYY-MM-DD``; see
:class:`watermark_ops.airflow.partitions.WatermarkPartitionsOperator`), with :func:`day_facts` in the
event's extra; ``flights_daily_report`` runs once per such day and writes :func:`daily_report`.

The day is the New York calendar day because the pipeline's data intervals are New York days
(``CronDataIntervalTimetable("0 0 * * *", "America/New_York")``); the hourly windows are UTC hours,
and a New York day is a whole number of them (24, or 23 on 2013-03-10 and 25 on 2013-11-03).

Sources, both written by the pipeline:

* the windows' Parquet sink (``job_locations("flight_windows")["output"]``), read through Spark's
  own file-sink log ``_spark_metadata`` (``FileStreamSinkLog``: ``v1`` then one JSON
  ``SinkFileStatus`` per line, ``action`` ``add`` or ``delete``; every 10th batch a ``N.compact``
  file holding all earlier entries), so files of a batch that never committed are not read;
* the late-row ledger's sink ``<output>_late/batch=<N>.jsonl`` (``late_ledger`` task;
  :func:`watermark_ops.core.ledger.write_late_rows`), one JSON object per late row with its
  ``event_time_ms``.

Pandas and pyarrow are imported inside the functions (DAG files import this module at parse time).
Instants are epoch ms UTC.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from watermark_ops.core.partitions import DEFAULT_TIMEZONE, Partition, partition_of
from watermark_ops.core.times import iso_utc

__all__ = ["DAY_ASSET_NAME", "day_asset_uri", "day_facts", "daily_report", "late_rows_in", "report_path",
           "sink_windows"]

#: The partitioned asset of closed New York days (one name per URI in a metadata DB).
DAY_ASSET_NAME = "flight_windows_days"


def day_asset_uri(output: str) -> str:
    """The day asset's URI: the windows' sink, one partition per day (``file://<output>?partition=day``)."""
    return "file://" + str(output).rstrip("/") + "?partition=day"


def _sink_files(output: str) -> list[str]:
    """The Parquet files Spark's file sink committed (``_spark_metadata``,
    :func:`watermark_ops.core.sink_log.read_sink_log`), as local paths.

    An empty list when the sink has no ``_spark_metadata`` yet (nothing committed).

    :raises ValueError: for a log file that cannot be read or is not ``v1`` + JSON lines (naming it).
    """
    from watermark_ops.core.sink_log import read_sink_log
    from watermark_ops.core.storage import open_storage, uri_location

    storage, folder = open_storage(output)
    listed = read_sink_log(storage, folder)
    if any(p.kind == "missing" for p in listed.problems):
        return []
    if listed.problems:
        raise ValueError("; ".join(f"{p.file}: {p.message}" for p in listed.problems))
    return [uri_location(path) for path in listed.files]


def sink_windows(output: str, start_ms: int, end_ms: int):
    """The windows in the sink whose start lies in ``[start_ms, end_ms)``.

    :return: a pandas DataFrame ``[origin, window_start_ms, departures, mean_dep_delay, max_dep_delay]``
        (empty with those columns when none).
    """
    import pandas as pd
    import pyarrow.parquet as pq

    columns = ["origin", "window_start", "departures", "mean_dep_delay", "max_dep_delay"]
    frames = [pq.read_table(path, columns=columns).to_pandas() for path in _sink_files(output)]
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    frame["window_start_ms"] = (pd.to_datetime(frame["window_start"], utc=True).astype("int64") // 10**6
                                if len(frame) else pd.Series(dtype="int64"))
    frame = frame[(frame.window_start_ms >= start_ms) & (frame.window_start_ms < end_ms)]
    return frame[["origin", "window_start_ms", "departures", "mean_dep_delay", "max_dep_delay"]].reset_index(drop=True)


def late_rows_in(late_sink: str, start_ms: int, end_ms: int) -> int:
    """Late rows (the ledger's ``batch=<N>.jsonl`` files) whose event time lies in ``[start_ms, end_ms)``.

    A missing sink folder counts 0. The count grows while rows of a closed day keep arriving late.
    """
    folder = Path(late_sink)
    if not folder.is_dir():
        return 0
    count = 0
    for file in sorted(folder.glob("batch=*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.strip() and start_ms <= json.loads(line)["event_time_ms"] < end_ms:
                count += 1
    return count


def day_facts(output: str):
    """``partition_facts`` for the pipeline's day partitions: ``callable(Partition) -> {"windows",
    "departures", "late_rows"}`` (windows in the sink for the day, their departures, late rows of the
    day recorded by the ledger so far)."""

    def facts(partition: Partition) -> dict[str, Any]:
        windows = sink_windows(output, partition.start_ms, partition.end_ms)
        return {"windows": int(len(windows)), "departures": int(windows.departures.sum()) if len(windows) else 0,
                "late_rows": late_rows_in(output.rstrip("/") + "_late", partition.start_ms, partition.end_ms)}

    return facts


def report_path(reports_dir: str | os.PathLike, day: str) -> Path:
    """``<reports_dir>/<day>.json``."""
    return Path(reports_dir) / f"{day}.json"


def daily_report(day: str, output: str, emitted_through_ms: int | None, reports_dir: str | os.PathLike,
                 tz: str = DEFAULT_TIMEZONE) -> dict[str, Any]:
    """Build and write the report of one closed day: departures, mean departure delay per airport,
    late-row share.

    :param day: the partition key, ``YYYY-MM-DD`` (a calendar day in ``tz``).
    :param output: the windows' Parquet sink; the late rows are read from ``<output>_late``.
    :param emitted_through_ms: the checkpoint's emitted-through watermark (epoch ms UTC): the day
        must be final, ``emitted_through_ms >= day end``.
    :return: and written to ``<reports_dir>/<day>.json`` (atomically): ``{"day", "timezone",
        "start_ms", "end_ms", "start", "end", "windows", "departures", "late_rows", "late_share"
        (late / (departures + late), None with neither), "airports": {origin: {"departures",
        "mean_dep_delay" (minutes, departure-weighted over the day's windows)}}, "emitted_through_ms"}``.
    :raises ValueError: a key that is not a date, or a day not final yet (never report a partial day).
    """
    try:
        first = date.fromisoformat(day)
    except ValueError as exc:
        raise ValueError(f"partition key {day!r} is not a day (YYYY-MM-DD)") from exc
    start = datetime(first.year, first.month, first.day, tzinfo=ZoneInfo(tz)).astimezone(timezone.utc)
    partition = partition_of(int(start.timestamp() * 1000), "day", tz)
    if emitted_through_ms is None or emitted_through_ms < partition.end_ms:
        raise ValueError(f"day {day} ({tz}) is not final: its windows end at {iso_utc(partition.end_ms)}, the sink "
                         f"is complete through {iso_utc(emitted_through_ms) or 'nothing'}")
    windows = sink_windows(output, partition.start_ms, partition.end_ms)
    late = late_rows_in(output.rstrip("/") + "_late", partition.start_ms, partition.end_ms)
    departures = int(windows.departures.sum()) if len(windows) else 0
    airports = {}
    for origin, group in windows.groupby("origin"):
        n = int(group.departures.sum())
        airports[str(origin)] = {"departures": n,
                                 "mean_dep_delay": float((group.mean_dep_delay * group.departures).sum() / n)}
    report = {
        "day": day, "timezone": tz, **{k: v for k, v in partition.to_dict().items() if k != "key"},
        "windows": int(len(windows)), "departures": departures, "late_rows": late,
        "late_share": late / (departures + late) if departures + late else None,
        "airports": dict(sorted(airports.items())), "emitted_through_ms": emitted_through_ms,
    }
    target = report_path(reports_dir, day)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    temp.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temp, target)
    return report
