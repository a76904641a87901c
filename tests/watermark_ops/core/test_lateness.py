"""Late-data accounting and advice: pure functions on known distributions, files, the report."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest

from tests.watermark_ops.lateness_fixtures import progress_record, write_jsonl
from watermark_ops.core.lateness import (
    Advice,
    LatenessError,
    advise,
    drops_per_run,
    landed_lateness,
    lateness_report,
    observed_lateness,
    smallest_delay_threshold,
    readable_threshold_ms,
    spark_interval,
    with_rows_late,
)

MINUTE, HOUR = 60_000, 3_600_000


def test_observed_lateness_is_distance_behind_the_newest_so_far():
    assert observed_lateness([10, 20, 15, 30, 5, 30, 29]) == [0, 0, 5, 0, 25, 0, 1]
    assert observed_lateness([]) == []


def test_advice_on_a_known_distribution():
    # 1000 events: 900 on time, 80 one minute late, 15 ten minutes, 4 an hour, 1 three hours.
    lateness = [0] * 900 + [MINUTE] * 80 + [10 * MINUTE] * 15 + [HOUR] * 4 + [3 * HOUR]
    one_percent, tenth = advise(lateness)
    # 1 %: at most 9 drops allowed; the 10th latest event is 10 minutes late, so it must be kept:
    # 10 min + 1 ms drops only the 5 events of 1 h and more.
    assert one_percent == Advice(0.01, 10 * MINUTE + 1, 5, 0.005)
    # 0.1 %: no drop allowed (1 would be 0.1 %, not below it): beyond the latest, 3 h.
    assert tenth == Advice(0.001, 3 * HOUR + 1, 0, 0.0)
    assert one_percent.delay_threshold == timedelta(minutes=10, milliseconds=1)
    # Shown rounded up to a unit people write: a longer threshold drops no more.
    assert one_percent.to_dict()["spark_interval"] == "11 minutes"
    assert one_percent.to_dict()["suggested_delay_threshold_ms"] == 11 * MINUTE
    # exactly 10 minutes would drop the 15 + 4 + 1 = 20 events at 10 minutes or more: 2 %
    assert sum(1 for x in lateness if x >= 10 * MINUTE) == 20


def test_smallest_delay_threshold_is_minimal_on_random_distributions():
    rng = random.Random(20130101)
    for _ in range(200):
        lateness = [int(rng.expovariate(1 / (30 * MINUTE))) for _ in range(rng.randint(1, 3000))]
        for rate in (0.01, 0.001, 0.5):
            threshold = smallest_delay_threshold(lateness, rate)
            dropped = sum(1 for x in lateness if x >= threshold)
            assert dropped < rate * len(lateness)
            assert threshold == 1 or sum(1 for x in lateness if x >= threshold - 1) >= rate * len(lateness)


def test_threshold_edge_cases():
    assert smallest_delay_threshold([], 0.01) == 0
    assert smallest_delay_threshold([0, 0, 0], 0.01) == 1  # on-time events: the smallest threshold keeps all
    with pytest.raises(LatenessError, match=r"max_drop_rate must be in \(0, 1\]"):
        smallest_delay_threshold([1], 0)
    with pytest.raises(LatenessError, match="lateness must be >= 0"):
        smallest_delay_threshold([5, -1], 0.5)
    assert spark_interval(2 * HOUR + 5 * MINUTE) == "2 hours 5 minutes"
    assert spark_interval(0) == "0 seconds"
    assert spark_interval(1500) == "1 second 500 milliseconds"
    # The advice's readable form: whole seconds, minutes under a day, hours from a day on; never shorter.
    assert [readable_threshold_ms(ms) for ms in (0, 1, 1500, 60_000, 8 * HOUR + 50 * MINUTE + 1, 30 * HOUR + 1)] == [
        0, 1000, 2000, 60_000, 8 * HOUR + 51 * MINUTE, 31 * HOUR]


def test_drops_per_run_groups_batches_by_run():
    records = [
        progress_record("r2", 2, 400, 8, 2000, "day2"), progress_record("r2", 3, 0, 0, 2100, "day2"),
        progress_record("r1", 0, 100, 0, 1000, "day1"), progress_record("r1", 1, 0, 0, 1100, "day1"),
        progress_record("r3", 4, 0, 0, 3000, "day3", executed=False),  # Trigger.Once restart with no input
    ]
    runs = drops_per_run(records)
    assert [(r.run_id, r.run_tag, r.batch_ids, r.input_rows, r.late_partial_aggregates_spark) for r in runs] == [
        ("r1", "day1", (0, 1), 100, 0), ("r2", "day2", (2, 3), 400, 8), ("r3", "day3", (), 0, 0)]
    # No ledger, no rate: Spark's 8 late partial aggregates are not 8 rows.
    assert [r.drop_rate for r in runs] == [None, None, None]
    assert runs[1].started_ms == 2000
    # The ledger's rows make the rate, only for a run whose every batch it replayed (a run that
    # executed no batch dropped none: 0, known; it read nothing, so no rate).
    runs = with_rows_late(runs, {0: 0, 1: 0, 2: 10, 3: 2})
    assert [(r.rows_late, r.drop_rate) for r in runs] == [(0, 0.0), (12, 0.03), (0, None)]
    partial = with_rows_late(runs, {2: 10})  # else unknown, never a part of the run's rows, and why
    assert [r.rows_late for r in partial] == [None, None, 0]
    assert [r.late_rows_unknown_reason for r in partial] == ["batches 0-1 not replayed", "batch 3 not replayed", None]
    document = json.loads(json.dumps(runs[1].to_dict()))
    assert (document["drop_rate"], document["rows_late"], document["late_partial_aggregates_spark"]) == (0.03, 12, 8)


def test_landed_lateness_follows_the_arrival_field_across_files(tmp_path):
    landing = tmp_path / "readings"
    # File names and line order disagree with the arrival order: the arrival field decides.
    write_jsonl(landing / "readings_b.jsonl", [
        {"id": 3, "observed_at": "2013-01-01T10:00:00Z", "arrived_at": "2013-01-01T13:00:00Z"},
        {"id": 4, "observed_at": None, "arrived_at": "2013-01-01T13:30:00Z"},  # no event time: skipped
    ])
    write_jsonl(landing / "readings_a.jsonl", [
        {"id": 1, "observed_at": "2013-01-01T11:00:00Z", "arrived_at": "2013-01-01T12:00:00Z"},
        {"id": 2, "observed_at": "2013-01-01T11:30:00Z", "arrived_at": "2013-01-01T14:00:00Z"},
        "{not json",
    ])
    (landing / ".readings_c.jsonl.tmp").write_text("ignored: a file being written")
    measured = landed_lateness(str(landing), "observed_at", arrival_field="arrived_at")
    assert measured.event_time_field == "observed_at" and measured.files == 2
    assert measured.lateness_ms == [0, HOUR, 0]  # 11:00, then 10:00 (1 h behind), then 11:30
    assert (measured.no_event_time, measured.malformed) == (1, 1)
    assert len(measured.problems) == 1 and "readings_a.jsonl:3: expected one JSON object per line" in measured.problems[0]
    summary = measured.summary()
    assert (summary["events"], summary["late_events"], summary["max_lateness_ms"]) == (3, 1, HOUR)
    assert summary["source"] == "landing"
    # Without an arrival field, the files' order: a, then b (11:00, 11:30, then 10:00 is 1 h 30 min behind).
    assert landed_lateness(str(landing), "observed_at").lateness_ms == [0, 0, HOUR + 30 * MINUTE]


def test_landed_lateness_errors_name_the_job_s_terms(tmp_path):
    with pytest.raises(LatenessError, match="no such landing folder"):
        landed_lateness(str(tmp_path / "missing"), "when")
    write_jsonl(tmp_path / "x" / "a.jsonl", [{"when": "2013-01-01T00:00:00Z"}])
    with pytest.raises(LatenessError, match="which field holds the event time") as raised:  # never guessed
        landed_lateness(str(tmp_path / "x"), None)
    assert "expected one of" not in str(raised.value)
    assert landed_lateness(str(tmp_path / "x"), event_time_field="when").lateness_ms == [0]
    write_jsonl(tmp_path / "y" / "a.jsonl", [{"when": 1356998400000}])  # epoch ms: the job's own parsing
    problem = landed_lateness(str(tmp_path / "y"), "when").problems[0]
    assert "a.jsonl:1: expected ISO-8601 instants with a zone in when" in problem and "Spark replay" in problem


def test_report_is_plain_data_and_json_ready(checkpoint_with_log):
    checkpoint, landing = checkpoint_with_log
    report = lateness_report(checkpoint, [landing])
    document = report.to_dict()
    assert json.loads(json.dumps(document)) == document  # JSON-ready (the DAG pushes it to XCom)
    assert document["progress_log"] == checkpoint + ".progress.jsonl" == report.progress_log
    # No checkpoint to replay: no rows, so no rate; Spark's count apart.
    assert [(r["run_tag"], r["rows_late"], r["drop_rate"], r["late_partial_aggregates_spark"]) for r in document["runs"]] \
        == [("day1", None, None, 0), ("day2", None, None, 12)]
    assert [run.run_tag for run in report.runs] == ["day1", "day2"]
    assert document["problems"] and "expected one JSON object per line" in document["problems"][0]
    (readings,) = document["inputs"]  # on the late rule's own field
    assert readings["event_time_field"] == "observed_at" and readings["max_lateness_ms"] == 2 * HOUR


def test_each_run_says_which_watermark_filtered_its_late_rows():
    rule = {"kind": "window_end", "event_time": "observed_at", "window_ms": HOUR}
    conf = "spark.sql.streaming.statefulOperator.allowMultiple"

    def record(run_id, batch_id, **extra):
        return {**progress_record(run_id, batch_id, 10, 1, 1000 * batch_id), "late_rule": rule, **extra}

    runs = drops_per_run([
        record("old", 0),  # no version, no conf: Spark >= 3.4's default assumed
        record("new", 1, spark_version="4.2.0", requested_conf={conf: "true"}),
        record("single", 2, spark_version="4.2.0", requested_conf={conf: "false"}),
        record("v33", 3, spark_version="3.3.4"),
        record("mixed", 4, requested_conf={conf: "true"}), record("mixed", 5, requested_conf={conf: "false"}),
        progress_record("nowatermark", 6, 10, 0, 6000),  # the quarantine query: no late rule
        record("corrupt", 7, requested_conf={conf: "maybe"}),
    ])
    by_run = {r.run_id: (r.late_watermark, r.late_watermark_assumed) for r in runs}
    assert by_run == {"old": ("previous", True), "new": ("previous", False), "single": ("current", False),
                      "v33": ("current", False), "mixed": ("mixed", False), "nowatermark": (None, False),
                      "corrupt": (None, False)}
    assert runs[0].to_dict()["late_watermark"] == "previous" and runs[0].to_dict()["late_watermark_assumed"] is True
