"""Hostile files in the landing zone next to a real day of flights: the real job counts and keeps aside
every bad line, reports it per reason, and neither crashes nor lets a far-future time move the watermark.

One run of ``flight_windows.run`` (real Spark, ``local[2]``) over the landing folder. What Spark's
JSON file source makes of each hostile line was found empirically and is written next to it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pendulum
from pyspark.sql import functions as F

import flight_windows as fw
from watermark_ops.core.progress import run_report
from watermark_ops.examples.flights import lander

from tests.spark_jobs.flight_expectations import assert_sink_equals, expected_windows, landed_rows

NY = "America/New_York"
HUGE_CHARS = 20_000_000


def _offsets_watermarks(checkpoint: str) -> dict[int, int]:
    folder = Path(checkpoint) / "offsets"
    return {int(p.name): json.loads(p.read_text().splitlines()[1])["batchWatermarkMs"]
            for p in folder.iterdir() if p.name.isdigit()}


def _hostile_files(landing: Path, flight: dict) -> dict[str, list[tuple[bytes, str, int | str]]]:
    """Write the hostile files; per file name its lines as ``(bytes, expected reason, how to find its row)``:
    the row's ``id``, or for a malformed line a piece of its text (``_corrupt_record``)."""

    def line(**changes) -> str:
        return json.dumps({**flight, **changes})

    files = {
        # Each becomes one row with _corrupt_record = the line's text.
        "malformed.jsonl": [
            (line(id=9_000_001)[:60].encode(), "malformed_record", line(id=9_000_001)[:60]),  # truncated
            (b'["JFK", 1545, null]', "malformed_record", '["JFK", 1545, null]'),  # a JSON array
            (b"flight UA1545 departed late", "malformed_record", "flight UA1545 departed late"),
        ],
        # A value of the wrong type makes the whole row malformed (only the fields parsed before it are kept).
        "wrong_types.jsonl": [
            (line(id=9_000_002, flight="abc").encode(), "malformed_record", '"id": 9000002'),
            (line(id=9_000_003, dep_delay="late").encode(), "malformed_record", '"id": 9000003'),
            (line(id={}).encode(), "malformed_record", '"id": {}'),
            # Spark would take "NaN" as a double (poisoning the window's mean and max): allowNonNumericNumbers off.
            (line(id=9_000_004, dep_delay="NaN").encode(), "malformed_record", '"id": 9000004'),
            # A number for the event time is stringified; try_to_timestamp("12345") is the year 12345.
            (line(id=9_000_005, dep_time=12345).encode(), "unparseable_event_time", 9_000_005),
        ],
        "times.jsonl": [
            (line(id=9_000_006, dep_time=None).encode(), "null_event_time", 9_000_006),
            (line(id=9_000_007, dep_time="2099-01-01T12:00:00Z").encode(), "future_event_time", 9_000_007),
        ],
        "empty.jsonl": [],  # 0 bytes: no row at all
        # One line of 20 MB that is not JSON: one malformed row holding the whole text.
        "huge.jsonl": [(b"x" * HUGE_CHARS, "malformed_record", "x" * 50)],
        # Jackson rejects invalid UTF-8; Spark keeps the text with U+FFFD for each bad byte.
        "latin1.jsonl": [
            (line(id=9_000_008, tailnum="N\xe9").encode("latin-1").replace(b"\\u00e9", b"\xe9"),
             "invalid_encoding", '"id": 9000008'),
            (b"\xff\xfe\x00raw\x80bytes", "invalid_encoding", "\ufffd\ufffd\x00raw\ufffdbytes"),
        ],
    }
    for name, lines in files.items():
        (landing / name).write_bytes(b"".join(text + b"\n" for text, *_ in lines))
    return files


def test_hostile_landing_files_are_counted_kept_aside_and_reported(spark, tmp_path):
    landing = tmp_path / "landing"
    config = fw.JobConfig(landing=str(landing), checkpoint=str(tmp_path / "ck"), output=str(tmp_path / "out"),
                          max_event_time_ahead="1 hour", run_tag="bad-run")
    start = pendulum.datetime(2013, 1, 1, tz=NY)
    day = lander.land_interval(start, start.add(days=1), config.landing)
    flight = next(r for r in map(json.loads, Path(day["path"]).read_text().splitlines()) if r["status"] == "landed")
    hostile = _hostile_files(landing, flight)
    assert (landing / "latin1.jsonl").read_bytes().count(b"\xe9") == 1  # a raw Latin-1 byte, not \u00e9
    lines_landed = day["records"] + sum(len(lines) for lines in hostile.values())

    result = fw.run(spark, config)  # finishes: no exception

    # Every line landed is a row read by each query: Spark's own input count.
    for name in (fw.QUERY_NAME, fw.QUARANTINE_QUERY_NAME):
        assert sum(b["input_rows"] for b in result[name]["batches"]) == lines_landed, name

    rows = spark.read.parquet(config.quarantine_output).select(
        "reason", "id", "dep_time", F.regexp_extract("source_file", r"([^/]+)$", 1).alias("file"),
        F.when(F.length("_corrupt_record") < 10_000, F.col("_corrupt_record")).otherwise(
            F.substring("_corrupt_record", 1, 80)).alias("text"), F.length("_corrupt_record").alias("length"),
    ).toPandas().itertuples()  # the raw bytes are stored as valid UTF-8, so Arrow and pandas can read them
    rows = [r._replace(id=None if r.id != r.id else int(r.id)) for r in rows]  # NaN: no id
    day_file = Path(day["path"]).name
    day_rows = landed_rows([day])
    # The day's own bad rows: cancelled and diverted flights.
    day_bad = Counter((r.reason, r.id) for r in rows if r.file == day_file)
    assert day_bad == Counter({("null_event_time", i): 1 for i in day_rows[day_rows.status == "cancelled"].id}
                              | {("no_arrival", i): 1 for i in day_rows[day_rows.status == "diverted"].id})
    # Each hostile line: once, in the sink, with its reason and its file.
    hostile_rows = [r for r in rows if r.file != day_file]
    for name, lines in hostile.items():
        for _, reason, key in lines:
            found = [r for r in hostile_rows if r.file == name and r.reason == reason
                     and (r.id == key if isinstance(key, int) else key in (r.text or ""))]
            assert len(found) == 1, (name, reason, key, [(r.reason, r.id, r.text) for r in rows if r.file == name])
            hostile_rows.remove(found[0])
    assert hostile_rows == []
    (huge,) = [r for r in rows if r.file == "huge.jsonl"]
    assert huge.length == HUGE_CHARS  # the whole line is kept, not cut
    (future,) = [r for r in rows if r.reason == "future_event_time"]
    assert future.dep_time == "2099-01-01T12:00:00Z"

    # The observed metrics agree with the sink, per reason; so does the report pushed to XCom.
    sink_counts = Counter(r.reason for r in rows)
    observed = Counter()
    for batch in result[fw.QUARANTINE_QUERY_NAME]["batches"]:
        metrics = (batch.get("observed_metrics") or {}).get("quarantine") or {}
        observed.update({k: int(v) for k, v in metrics.items() if k != "rows" and int(v)})
    assert observed == sink_counts
    report = run_report(config.checkpoint, "bad-run")
    assert report["quarantined_by_reason"] == {r: sink_counts.get(r, 0) for r in report["quarantined_by_reason"]}
    assert sum(report["quarantined_by_reason"].values()) == report["quarantined_rows"] == len(rows)

    # Good rows: exactly the day's departed-and-arrived flights, in windows emitted or still open;
    # none dropped as late (one run), so good + quarantined = lines landed.
    emitted, dropped, _, final_watermark = expected_windows([day])
    windows = spark.read.parquet(config.output).toPandas()
    assert_sink_equals(windows, emitted)
    good = int((day_rows.dep_time.notna() & day_rows.arr_time.notna()).sum())
    assert dropped == 0 and report["late_partial_aggregates_spark"] == 0
    assert good + len(rows) == lines_landed
    assert 0 < windows.departures.sum() <= good

    # The watermark is the day's (max good departure − 2 hours): not moved by 2099 nor by "12345".
    watermarks = _offsets_watermarks(config.checkpoint)
    assert max(watermarks.values()) == final_watermark == report["last_watermark_ms"]
    assert final_watermark < pendulum.datetime(2013, 1, 3, tz="UTC").int_timestamp * 1000

    print(f"lines landed {lines_landed} (day {day['records']}), good {good}, quarantined {dict(sink_counts)}")
