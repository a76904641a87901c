"""The inputs both flight jobs read: schemas equal to the landers' events, bad rows classified (real Spark)."""

from __future__ import annotations

import json

import pendulum

from flight_inputs import (
    EVENT_SCHEMA_DDL,
    QUARANTINE_REASONS,
    WEATHER_MEASUREMENTS,
    WEATHER_SCHEMA_DDL,
    classified_events,
    quarantined,
)
from watermark_ops.spark import run_queries
from watermark_ops.examples.flights.lander import flight_events
from watermark_ops.examples.flights.weather_lander import MEASUREMENTS, weather_events


def _ddl_fields(ddl: str) -> list[str]:
    return [part.split()[0] for part in ddl.split(", ")]


def test_event_schema_matches_the_lander():
    """The jobs cannot import the plugin package under spark-submit: their copy of the shape is checked here."""
    (event, *_) = flight_events().events_reaching_stream(pendulum.parse("2013-01-01T12:00:00Z"),
                                                         pendulum.parse("2013-01-01T13:00:00Z"))
    assert _ddl_fields(EVENT_SCHEMA_DDL) == list(event) + ["_corrupt_record"]


def test_weather_schema_matches_the_weather_lander():
    """The job cannot import the plugin package under spark-submit: its copy of the shape is checked here."""
    (event,) = weather_events().events_reaching_stream(pendulum.parse("2013-01-01T07:00:00Z"),
                                                        pendulum.parse("2013-01-01T07:00:01Z"))
    assert _ddl_fields(WEATHER_SCHEMA_DDL) == list(event) + ["_corrupt_record"]
    assert WEATHER_MEASUREMENTS == MEASUREMENTS


def test_malformed_lines_are_quarantined_with_their_text(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    good = json.dumps({"id": 1, "origin": "JFK", "dest": "LAX", "status": "landed",
                       "dep_time": "2013-01-01T10:00:00Z", "arr_time": "2013-01-01T16:00:00Z", "dep_delay": 1.0})
    bad_time = json.dumps({"id": 2, "origin": "JFK", "status": "landed", "dep_time": "yesterday noon",
                           "arr_time": "2013-01-01T16:00:00Z"})
    (landing / "hand.jsonl").write_text("\n".join([good, "{not json", bad_time]) + "\n")
    output = str(tmp_path / "quarantine")
    plans = [("inputs_quarantine", quarantined(classified_events(spark, str(landing))), str(tmp_path / "ck"), output)]
    ((_, records),) = run_queries(spark, plans, "availableNow", None)
    quarantine = spark.read.parquet(output).toPandas().set_index("reason")
    assert sorted(quarantine.index) == ["malformed_record", "unparseable_event_time"]
    assert quarantine.loc["malformed_record", "_corrupt_record"] == "{not json"
    assert quarantine.loc["unparseable_event_time", "dep_time"] == "yesterday noon"
    assert quarantine.loc["malformed_record", "source_file"].endswith("hand.jsonl")
    # Dataset.observe counts them per micro-batch, one count per reason, in the progress record.
    (counts,) = [r["observed_metrics"]["quarantine"] for r in records if r["input_rows"]]
    assert counts == {"rows": 2, **{reason: 0 for reason in QUARANTINE_REASONS},
                      "malformed_record": 1, "unparseable_event_time": 1}
