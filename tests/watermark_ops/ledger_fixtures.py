"""A minimal checkpoint for the late-row ledger, written file by file as Spark 4.2 writes them.

Three micro-batches of a file source with ``compactInterval`` 2: log offsets 0, 1 (``1.compact``,
holding offsets 0 and 1) and 2, each adding one landed file; batch 0 runs with watermark 0, batch 1
with :data:`WATERMARK_1`, batch 2 with :data:`WATERMARK_2`. The progress log carries the
``window_end`` rule (1-hour windows) of ``flight_windows``, and by default says the session ran
with ``spark.sql.streaming.statefulOperator.allowMultiple=false``: late rows are then filtered
with each batch's own watermark (:data:`LATE_IDS`). With ``allow_multiple=None`` (records that
name neither version nor conf: Spark >= 3.4's default) or ``"true"``, batch N filters with batch
N-1's watermark (:data:`LATE_IDS_PREVIOUS`). Shapes copied from a real
``flight_windows`` checkpoint (``sources/0/0``, ``offsets/N``, ``commits/N``, the progress record).
"""

from __future__ import annotations

import json
from pathlib import Path

from flight_inputs import EVENT_SCHEMA_DDL
from watermark_ops.core.ledger import late_rule

HOUR = 3_600_000
T0 = 1_357_016_400_000  # 2013-01-01T05:00:00Z
WATERMARK_1 = T0 + 10 * HOUR
WATERMARK_2 = T0 + 20 * HOUR
#: ``flight_windows``' rule: 1-hour windows on ``dep_time``, its lines read by the package's classified
#: JSON reader with the flights' schema (``inputs``: what the Python replay needs to be exact).
RULE = late_rule("window_end", "dep_time", "2 hours", window="1 hour", schema=EVENT_SCHEMA_DDL,
                 required_fields={"no_arrival": "arr_time"})


def iso(ms: int) -> str:
    from watermark_ops.core.times import iso_utc

    return iso_utc(ms)


def flight(flight_id: int, dep_ms: int | None, origin: str = "EWR", arrived: bool = True, **extra) -> str:
    event = {"id": flight_id, "origin": origin, "dest": "ORD", "carrier": "UA", "flight": 1, "tailnum": "N1",
             "status": "landed" if arrived else "diverted", "sched_dep_time": iso(T0),
             "dep_time": iso(dep_ms) if dep_ms is not None else None,
             "arr_time": iso(T0 + 30 * HOUR) if arrived else None, "dep_delay": 1.0, "arr_delay": 2.0,
             "stream_time": iso(T0 + 30 * HOUR)}
    event.update(extra)
    return json.dumps(event)


#: Landed lines per file (bytes); batch 1 reads file 1 (watermark WATERMARK_1), batch 2 file 2.
FILES = {
    0: [flight(1, T0 + HOUR), flight(2, T0 + 2 * HOUR, "JFK")],
    1: [
        flight(10, WATERMARK_1 - HOUR),            # window [W-1h, W): ends at the watermark: late, by 0
        flight(11, WATERMARK_1 - HOUR - 1, "JFK"),  # the window before: late by 1 h
        flight(12, WATERMARK_1),                   # window [W, W+1h): on time
        flight(13, WATERMARK_1 - 1),               # window [W-1h, W): late
        flight(14, WATERMARK_1 - 5 * HOUR, arrived=False),  # diverted: quarantined, not late
        flight(15, None, status="cancelled"),      # cancelled: quarantined
        flight(16, T0, dep_time="12345"),          # unparseable event time
        "{not json",                               # malformed
        "",                                        # a blank line: no row
        "[" + flight(17, WATERMARK_1 - 3 * HOUR, "LGA") + "," + flight(18, WATERMARK_1 + HOUR) + "]",  # two rows
        flight(19, T0, dep_delay="NaN"),           # a double that is text: malformed
    ],
    2: [flight(20, WATERMARK_2 - 2 * HOUR, "LGA"), flight(21, WATERMARK_2 + HOUR),
        flight(22, WATERMARK_1 - 2 * HOUR, "JFK")],  # behind both watermarks
}
#: Late rows per batch when each batch filters with its own watermark (allowMultiple false).
LATE_IDS = {1: [10, 11, 13, 17], 2: [20, 22]}
#: ... and with the previous batch's (Spark >= 3.4's default): batch 1 with 0, batch 2 with WATERMARK_1.
LATE_IDS_PREVIOUS = {1: [], 2: [22]}
ALLOW_MULTIPLE = "spark.sql.streaming.statefulOperator.allowMultiple"
QUARANTINED_1 = {"no_arrival": 1, "null_event_time": 1, "unparseable_event_time": 1, "malformed_record": 2}


def build(root: Path, sources: list[str] | None = None, allow_multiple: str | None = "false",
          spark_version: str | None = "4.2.0") -> tuple[Path, Path]:
    """Write the checkpoint ``root/ck``, its progress log and the landing folder ``root/landing``.

    :param sources: the source line of each batch's offsets file (default ``{"logOffset": k}``).
    :param allow_multiple: the recorded ``requested_conf`` value of ``allowMultiple`` (None: not recorded).
    :param spark_version: the recorded ``spark_version`` (None: not recorded).
    :return: ``(checkpoint, landing)``.
    """
    checkpoint, landing = root / "ck", root / "landing"
    for folder in ("offsets", "commits", "sources/0"):
        (checkpoint / folder).mkdir(parents=True, exist_ok=True)
    landing.mkdir(parents=True, exist_ok=True)
    (checkpoint / "metadata").write_text('{"id":"5d9a862d-0000-4000-8000-000000000001"}')
    watermarks = [0, WATERMARK_1, WATERMARK_2]
    entries = []
    records = []
    for k, lines in FILES.items():
        path = landing / f"flights_{k}.jsonl"
        path.write_bytes(("\n".join(lines) + "\n").encode())
        entries.append(json.dumps({"path": "file://" + str(path), "timestamp": T0 + k, "batchId": k}))
        source = sources[k] if sources else json.dumps({"logOffset": k})
        (checkpoint / "offsets" / str(k)).write_text(
            "v1\n" + json.dumps({"batchWatermarkMs": watermarks[k], "batchTimestampMs": 1795449686774 + k,
                                 "conf": {"spark.sql.shuffle.partitions": "2"}}, separators=(",", ":"))
            + "\n" + source)
        (checkpoint / "commits" / str(k)).write_text('v1\n{"nextBatchWatermarkMs":%d}' % watermarks[min(k + 1, 2)])
        records.append({"query_id": "5d9a862d-0000-4000-8000-000000000001", "run_id": f"r{k}", "run_tag": f"t{k}",
                        "batch_id": k, "executed": True, "input_rows": None, "rows_dropped_by_watermark": 1,
                        "late_rule": RULE, "sources": [{"description": "FileStreamSource[landing]"}],
                        "requested_conf": {"spark.sql.shuffle.partitions": "2"}})
        if allow_multiple is not None:
            records[-1]["requested_conf"][ALLOW_MULTIPLE] = allow_multiple
        if spark_version is not None:
            records[-1]["spark_version"] = spark_version
    folder = checkpoint / "sources" / "0"
    (folder / "0").write_text("v1\n" + entries[0])
    (folder / "1.compact").write_text("v1\n" + entries[0] + "\n" + entries[1])
    (folder / "2").write_text("v1\n" + entries[2])
    (root / "ck.progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return checkpoint, landing


#: A source whose rows the job parses with its own code, no pre-watermark function declared: only a
#: Spark replay through a declared function could know its late rows, and none can run.
OWN_PARSING = [{"event_time": "dep_time", "schema": {}, "required": {}, "parsing": "job", "format": "csv"}]


def build_unknown(root: Path, run_tag: str = "day-1") -> tuple[Path, Path]:
    """:func:`build`'s checkpoint, its three batches one run (``run_tag``) of a job attached with its
    own parsing and no pre-watermark function: no replay record (``<checkpoint>.replay.jsonl``)
    exists, so no batch can be replayed and the run's late rows are unknown. Spark's input rows are
    recorded (2, 11, 3), as a real run records them.

    :return: ``(checkpoint, landing)``.
    """
    checkpoint, landing = build(root)
    log = root / "ck.progress.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    for record, rows in zip(records, (2, 11, 3)):
        record.update(run_id="r", run_tag=run_tag, input_rows=rows,
                      late_rule={**record["late_rule"], "inputs": OWN_PARSING})
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    return checkpoint, landing
