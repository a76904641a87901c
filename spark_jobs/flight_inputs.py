"""The inputs of the flight jobs: landing folders of JSON lines read as classified streams.

Both landers write JSON lines, one event per line, into a landing folder: flights
(``watermark_ops.examples.flights.lander``, event time ``dep_time``) and weather observations
(``watermark_ops.examples.flights.weather_lander``, event time ``time_hour``). Each folder is read by the file
source with an explicit schema, and every row gets ``event_time`` (timestamp) and ``reason``
(null for a good row, else why it is kept aside). Nothing is dropped silently: the jobs keep bad
rows in a quarantine sink (:func:`quarantined`), so good rows + quarantined rows = input rows.

The rules (reasons, what the file source makes no row of, why ``future_event_time``) are those of
the recorder's :mod:`watermark_ops.spark.inputs`, which the late-row ledger replays; the flights add
``no_arrival`` (a diverted flight). The schemas are copies of the landers' event shapes; tests keep
them equal. This module ships next to the job scripts (spark-submit ``--py-files``).
"""

from __future__ import annotations

from watermark_ops.spark.inputs import ISO_DATE_TIME, check_interval, classified_json_stream, classify, json_reader
from watermark_ops.spark.inputs import quarantined as generic_quarantined

__all__ = ["EVENT_SCHEMA_DDL", "ISO_DATE_TIME", "QUARANTINE_REASONS", "WEATHER_MEASUREMENTS", "WEATHER_SCHEMA_DDL",
           "check_interval", "classified_events", "classified_json_stream", "classified_weather", "classify",
           "json_reader", "quarantined"]

# DDL of the lander's event (watermark_ops.examples.flights.lander); times are ISO-8601 UTC text, parsed in the job
# so that an unparseable value is caught and quarantined instead of silently becoming null.
EVENT_SCHEMA_DDL = (
    "id BIGINT, origin STRING, dest STRING, carrier STRING, flight INT, tailnum STRING, "
    "status STRING, sched_dep_time STRING, dep_time STRING, arr_time STRING, "
    "dep_delay DOUBLE, arr_delay DOUBLE, stream_time STRING, _corrupt_record STRING"
)
QUARANTINE_REASONS = ("invalid_encoding", "malformed_record", "null_event_time", "unparseable_event_time",
                      "future_event_time", "no_arrival")
# DDL of the weather lander's event (watermark_ops.examples.flights.weather_lander); time_hour is ISO-8601 UTC text,
# parsed in the job so that an unparseable value is quarantined instead of silently becoming null.
WEATHER_SCHEMA_DDL = (
    "id BIGINT, origin STRING, time_hour STRING, temp DOUBLE, dewp DOUBLE, humid DOUBLE, "
    "wind_dir DOUBLE, wind_speed DOUBLE, wind_gust DOUBLE, precip DOUBLE, pressure DOUBLE, "
    "visib DOUBLE, stream_time STRING, _corrupt_record STRING"
)
WEATHER_MEASUREMENTS = ("temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "precip", "pressure", "visib")


def classified_events(spark, landing: str, max_files_per_trigger: int | None = None,
                      max_event_time_ahead: str | None = None):
    """The flights landing folder as a stream of events with ``event_time`` (``dep_time``) and ``reason``.

    ``reason`` is null for a good row, else why the row is kept aside (see module docstring):
    the shared rules of :func:`classified_json_stream` plus ``no_arrival``.
    """
    return classified_json_stream(spark, landing, EVENT_SCHEMA_DDL, "dep_time",
                                  max_files_per_trigger, {"no_arrival": "arr_time"}, max_event_time_ahead)


def quarantined(events):
    """Bad flight rows with their reason, the raw line when malformed, and the file they came from;
    counted per micro-batch (``quarantine`` observed metrics), see :func:`watermark_ops.spark.inputs.quarantined`."""
    return generic_quarantined(events, ("id", "origin", "status", "dep_time", "arr_time", "stream_time"),
                               QUARANTINE_REASONS)


def classified_weather(spark, landing: str, max_files_per_trigger: int | None = None):
    """The weather landing folder as a stream with ``event_time`` (``time_hour``) and ``reason``.

    ``reason`` is null for a good row, else ``malformed_record``, ``null_event_time`` or
    ``unparseable_event_time``: the rules of :func:`classified_json_stream`, shared with
    :func:`classified_events`.
    """
    return classified_json_stream(spark, landing, WEATHER_SCHEMA_DDL, "time_hour", max_files_per_trigger)
