"""The inputs of the flight jobs: landing folders of JSON lines read as classified streams.

Both landers write JSON lines, one event per line, into a landing folder: flights
(``watermark_ops.examples.flights.lander``, event time ``dep_time``) and weather observations
(``watermark_ops.examples.flights.weather_lander``, event time ``time_hour``). Each folder is read by the file
source with an explicit schema, and every row gets ``event_time`` (timestamp) and ``reason``
(null for a good row, else why it is kept aside). Nothing is dropped silently: the jobs keep bad
rows in a quarantine sink (:func:`quarantined`), so good rows + quarantined rows = input rows.

Reasons, the first that applies: ``malformed_record`` (the line is not a JSON object of the
schema), ``null_event_time`` (for flights: a cancelled flight), ``unparseable_event_time``,
``future_event_time`` (only with a ``max_event_time_ahead``: the event time lies beyond the
batch's processing time plus that tolerance), and for flights ``no_arrival`` (a diverted flight).

Why ``future_event_time``: one future-dated record moves the watermark ahead of processing time
for good (the watermark never goes back), and every later on-time row is then dropped as late:
the ``jumped`` state of the stall classification. With the option such a row is kept aside instead
and never reaches ``withWatermark``. Processing time is Spark's ``current_timestamp()``, which a
micro-batch evaluates as its own ``batchTimestampMs`` (the offsets file keeps it), so a re-run of
a crashed batch classifies every row exactly as the first attempt did.

The schemas are copies of the landers' event shapes (this module cannot import the plugin package
under spark-submit); tests keep them equal. This module ships next to the job scripts, like
``streaming_driver``.
"""

from __future__ import annotations

import re

# DDL of the lander's event (watermark_ops.examples.flights.lander); times are ISO-8601 UTC text, parsed in the job
# so that an unparseable value is caught and quarantined instead of silently becoming null.
EVENT_SCHEMA_DDL = (
    "id BIGINT, origin STRING, dest STRING, carrier STRING, flight INT, tailnum STRING, "
    "status STRING, sched_dep_time STRING, dep_time STRING, arr_time STRING, "
    "dep_delay DOUBLE, arr_delay DOUBLE, stream_time STRING, _corrupt_record STRING"
)
QUARANTINE_REASONS = ("malformed_record", "null_event_time", "unparseable_event_time", "future_event_time",
                      "no_arrival")
_INTERVAL = re.compile(r"^\s*\d+\s+(second|minute|hour|day)s?(\s+\d+\s+(second|minute|hour|day)s?)*\s*$")

# DDL of the weather lander's event (watermark_ops.examples.flights.weather_lander); time_hour is ISO-8601 UTC text,
# parsed in the job so that an unparseable value is quarantined instead of silently becoming null.
WEATHER_SCHEMA_DDL = (
    "id BIGINT, origin STRING, time_hour STRING, temp DOUBLE, dewp DOUBLE, humid DOUBLE, "
    "wind_dir DOUBLE, wind_speed DOUBLE, wind_gust DOUBLE, precip DOUBLE, pressure DOUBLE, "
    "visib DOUBLE, stream_time STRING, _corrupt_record STRING"
)
WEATHER_MEASUREMENTS = ("temp", "dewp", "humid", "wind_dir", "wind_speed", "wind_gust", "precip", "pressure", "visib")


def check_interval(value: str | None) -> str | None:
    """``value`` when it is a Spark interval of whole seconds, minutes, hours or days (``"1 hour"``,
    ``"2 hours 30 minutes"``), None for None.

    :raises ValueError: for anything else, naming the value.
    """
    if value is not None and not _INTERVAL.match(value):
        raise ValueError(f"expected an interval such as '1 hour' or '2 days 6 hours', got {value!r}")
    return value


def classified_json_stream(spark, landing: str, schema_ddl: str, event_time_field: str,
                           max_files_per_trigger: int | None = None, required_fields: dict[str, str] | None = None,
                           max_event_time_ahead: str | None = None):
    """A landing folder of JSON lines as a stream with ``event_time`` (timestamp) and ``reason``.

    File source with an explicit schema (``schema_ddl`` must include ``_corrupt_record STRING``),
    ``PERMISSIVE`` mode. The event time is parsed in the job (``try_to_timestamp``) so that an
    unparseable value is caught instead of silently becoming null. ``reason`` is null for a good
    row, else the first that applies: ``malformed_record`` (the line is not a JSON object of the
    schema; its text is in ``_corrupt_record``), ``null_event_time``, ``unparseable_event_time``,
    ``future_event_time`` when ``max_event_time_ahead`` (a Spark interval, :func:`check_interval`)
    is given and the event time is later than the batch's processing time plus it, then
    ``required_fields``' reasons (``{reason: field}``: the field is null).
    """
    from pyspark.sql import functions as F

    reader = spark.readStream.schema(schema_ddl).option("mode", "PERMISSIVE").option(
        "columnNameOfCorruptRecord", "_corrupt_record")
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    raw = reader.json(landing)
    event_time = F.expr(f"try_to_timestamp({event_time_field})")
    reason = (
        F.when(F.col("_corrupt_record").isNotNull(), F.lit("malformed_record"))
        .when(F.col(event_time_field).isNull(), F.lit("null_event_time"))
        .when(event_time.isNull(), F.lit("unparseable_event_time"))
    )
    if check_interval(max_event_time_ahead):
        latest = F.expr(f"current_timestamp() + INTERVAL '{max_event_time_ahead}'")
        reason = reason.when(event_time > latest, F.lit("future_event_time"))
    for name, field in (required_fields or {}).items():
        reason = reason.when(F.col(field).isNull(), F.lit(name))
    return raw.withColumn("event_time", event_time).withColumn("reason", reason)


def classified_events(spark, landing: str, max_files_per_trigger: int | None = None,
                      max_event_time_ahead: str | None = None):
    """The flights landing folder as a stream of events with ``event_time`` (``dep_time``) and ``reason``.

    ``reason`` is null for a good row, else why the row is kept aside (see module docstring):
    the shared rules of :func:`classified_json_stream` plus ``no_arrival``.
    """
    return classified_json_stream(spark, landing, EVENT_SCHEMA_DDL, "dep_time",
                                  max_files_per_trigger, {"no_arrival": "arr_time"}, max_event_time_ahead)


def quarantined(events):
    """Bad rows with their reason, the raw line when malformed, and the file they came from.

    Counted per micro-batch with ``Dataset.observe`` (metrics ``quarantine``: ``rows`` and one
    count per reason), which Spark reports in the batch's progress as ``observedMetrics``.
    """
    from pyspark.sql import functions as F

    bad = events.where(F.col("reason").isNotNull()).select(
        "reason", "id", "origin", "status", "dep_time", "arr_time", "stream_time", "_corrupt_record",
        F.col("_metadata.file_path").alias("source_file"),
    )
    counts = [F.count(F.lit(1)).alias("rows")] + [
        F.sum(F.when(F.col("reason") == reason, 1).otherwise(0)).alias(reason) for reason in QUARANTINE_REASONS
    ]
    return bad.observe("quarantine", *counts)


def classified_weather(spark, landing: str, max_files_per_trigger: int | None = None):
    """The weather landing folder as a stream with ``event_time`` (``time_hour``) and ``reason``.

    ``reason`` is null for a good row, else ``malformed_record``, ``null_event_time`` or
    ``unparseable_event_time``: the rules of :func:`classified_json_stream`, shared with
    :func:`classified_events`.
    """
    return classified_json_stream(spark, landing, WEATHER_SCHEMA_DDL, "time_hour", max_files_per_trigger)
