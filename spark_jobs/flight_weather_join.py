"""Flights joined with the weather at their origin: a stream-stream join with two watermarks.

Inputs, each a file source with an explicit schema over its own landing folder:

* flights: the lander's JSON lines (``watermark_ops.examples.flights.lander``), event time ``dep_time`` (actual
  departure); read, classified and quarantined exactly as in ``flight_windows``
  (``flight_inputs.classified_events``, ``flight_inputs.quarantined``);
* weather: the weather lander's JSON lines (``watermark_ops.examples.flights.weather_lander``), event time
  ``time_hour`` (the observation hour), reaching the stream 1-3 hours after it; read and
  classified by the same rules (``flight_inputs.classified_weather``).

The query ``flight_weather``:

1. flights: good rows → ``withWatermark("dep_time", <flights delay threshold>)`` →
   ``dropDuplicatesWithinWatermark(["flight_id"])``: a re-landed file cannot double-count a flight
   (a duplicate is recognised while its first copy is within the watermark; later it is late);
2. weather: good rows → ``withWatermark("weather_time", <weather delay threshold>)``;
3. left-outer stream-stream join on the origin airport plus an event-time range, the weather
   observed in the hour before departure::

       weather_origin = origin
       AND weather_time >  dep_time - INTERVAL 1 HOUR
       AND weather_time <= dep_time

   The range lets Spark evict join state: a flight leaves the state once the watermark passes its
   departure (no weather still to come can match it), an observation once the watermark is an
   hour past it. A flight with a match is written as soon as both sides have arrived; a flight
   without one is written with null weather only when it leaves the state, i.e. when the
   watermark passes its departure (Spark's outer-join semantics);
4. append mode into a Parquet sink, exactly once through the checkpoint.

Two watermarks, one global watermark. Each input's own watermark is its maximum event time seen
minus its delay threshold; the query's watermark is the minimum (``--watermark-policy min``,
Spark's default: moves with the slower input, drops least) or the maximum (``max``: moves with the
faster one, drops more) of the two, per ``spark.sql.streaming.multipleWatermarkPolicy``. Spark
freezes the policy in the checkpoint at the first batch (``offsets/N`` ``conf``) and silently
ignores a different value on restart: this job reads the latest offsets file and logs a WARNING
that the checkpoint's policy wins. After a restart each input's own watermark starts again from
nothing, so under ``min`` the query's watermark cannot rise until both inputs have new data
(SPARK-50046).

Late rows (event time <= the watermark of the previous batch) are dropped and counted as
``numRowsDroppedByWatermark``: late flights by the deduplication operator, late observations by
the join operator, each as *raw rows* (nothing is aggregated before these operators, unlike
``flight_windows``), both in the progress record's ``rows_dropped_by_watermark``.

A second query, ``flight_weather_quarantine``, keeps bad records of both inputs aside in a
Parquet sink with ``input`` (``flights`` | ``weather``) and ``reason`` (``malformed_record``,
``null_event_time``, ``unparseable_event_time``, and for flights ``no_arrival``). Good rows +
quarantined rows = input rows. Every micro-batch of both queries is appended to
``<checkpoint>.progress.jsonl``.

Spark trigger: ``availableNow`` (default) ends each run with a no-data batch when the watermark
moved, so state is evicted and flights without weather are written in the same run. With the
deprecated ``once`` there is no such batch: they are written by the next run.

Usage (spark-submit or plain python)::

    spark-submit spark_jobs/flight_weather_join.py --landing FLIGHTS --weather-landing WEATHER \
        --checkpoint C --output O [--flights-delay-threshold "2 hours"] \
        [--weather-delay-threshold "3 hours"] [--watermark-policy min|max] [--trigger availableNow|once]

Exit status: 0 when both queries finished, 1 with the query's exception when one failed, 3 when
another driver holds the checkpoint (``<checkpoint>.lock``, see ``watermark_ops.spark.checkpoint_lock``): nothing was started.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # flight_inputs, upsert_sink, in client mode

from flight_inputs import (  # noqa: E402
    EVENT_SCHEMA_DDL,
    WEATHER_MEASUREMENTS,
    WEATHER_SCHEMA_DDL,
    classified_events,
    classified_weather,
    quarantined,
)
from watermark_ops.spark import (  # noqa: E402
    POLICY_CONF,
    add_run_arguments,
    checkpoint_watermark_policy,
    execute,
    late_rule,
    run_driver,
    run_queries,
)

log = logging.getLogger("watermark_ops.flight_weather_join")

QUERY_NAME = "flight_weather"
QUARANTINE_QUERY_NAME = "flight_weather_quarantine"
DEFAULT_FLIGHTS_DELAY_THRESHOLD = "2 hours"
DEFAULT_WEATHER_DELAY_THRESHOLD = "3 hours"
WATERMARK_POLICIES = ("min", "max")
JOIN_CONDITION = (
    "weather_origin = origin AND weather_time > dep_time - INTERVAL 1 HOUR AND weather_time <= dep_time"
)


@dataclass
class JoinConfig:
    """Where the job reads and writes, and how. Locations are local paths or Hadoop URIs.

    ``landing`` is the flights landing folder (the same flag as ``flight_windows``).
    Delay thresholds are Spark interval strings (``"2 hours"``).
    """

    landing: str
    weather_landing: str
    checkpoint: str
    output: str
    quarantine_output: str | None = None
    quarantine_checkpoint: str | None = None
    flights_delay_threshold: str = DEFAULT_FLIGHTS_DELAY_THRESHOLD
    weather_delay_threshold: str = DEFAULT_WEATHER_DELAY_THRESHOLD
    watermark_policy: str = "min"
    spark_trigger: str = "availableNow"
    run_tag: str | None = None
    max_files_per_trigger: int | None = None

    def __post_init__(self) -> None:
        if self.watermark_policy not in WATERMARK_POLICIES:
            raise ValueError(f"watermark policy must be one of {WATERMARK_POLICIES}, got {self.watermark_policy!r}")
        self.quarantine_output = self.quarantine_output or self.output.rstrip("/") + "_quarantine"
        self.quarantine_checkpoint = self.quarantine_checkpoint or self.checkpoint.rstrip("/") + "_quarantine"


def apply_watermark_policy(spark, checkpoint: str, requested: str) -> str | None:
    """Set the requested policy on the session; return the one the query will actually run with.

    A new checkpoint takes ``requested``. An existing one keeps the policy frozen in its offsets
    conf whatever the session says (``OffsetSeqMetadata.setSessionConf`` on restart); when that
    differs from ``requested`` a WARNING says so.

    :return: the effective policy, ``"min"`` or ``"max"``; None when the checkpoint's offsets
        could not be read here (logged as a WARNING; Spark still applies the checkpoint's policy,
        or reports the bad file itself).
    """
    spark.conf.set(POLICY_CONF, requested)
    try:
        frozen = checkpoint_watermark_policy(checkpoint)
    except (ValueError, OSError, ImportError) as exc:  # unreadable file, or a scheme fsspec lacks
        log.warning("could not read the watermark policy frozen in checkpoint %s (%s): Spark will apply "
                    "the checkpoint's own policy, whatever was requested (%r)", checkpoint, exc, requested)
        return None
    if frozen is None:
        return requested
    if frozen != requested:
        log.warning(
            "watermark policy %r requested, but checkpoint %s was started with %s=%s: the checkpoint's "
            "policy wins (Spark ignores the session value on restart); start a new checkpoint to change it",
            requested, checkpoint, POLICY_CONF, frozen,
        )
    return frozen


def flights_with_weather(flight_events, weather_events, flights_delay: str, weather_delay: str):
    """Good flights (watermarked, deduplicated) left-outer joined with good weather (watermarked).

    Output columns: ``flight_id, origin, dest, carrier, flight, dep_time (timestamp), dep_delay
    (minutes), weather_id, weather_time (timestamp)`` and the measurements of
    ``weather_lander`` (null when no observation matched).
    """
    from pyspark.sql import functions as F

    flights = (
        flight_events.where(F.col("reason").isNull())
        .select(F.col("id").alias("flight_id"), "origin", "dest", "carrier", "flight",
                F.col("event_time").alias("dep_time"), "dep_delay")
        .withWatermark("dep_time", flights_delay)
        .dropDuplicatesWithinWatermark(["flight_id"])
    )
    weather = (
        weather_events.where(F.col("reason").isNull())
        .select(F.col("id").alias("weather_id"), F.col("origin").alias("weather_origin"),
                F.col("event_time").alias("weather_time"), *WEATHER_MEASUREMENTS)
        .withWatermark("weather_time", weather_delay)
    )
    return flights.join(weather, F.expr(JOIN_CONDITION), "leftOuter").select(
        "flight_id", "origin", "dest", "carrier", "flight", "dep_time", "dep_delay",
        "weather_id", "weather_time", *WEATHER_MEASUREMENTS,
    )


def quarantined_both(flight_events, weather_events):
    """Bad rows of both inputs, with ``input`` (``flights`` | ``weather``) and their reason.

    Flights keep ``flight_inputs.quarantined``'s columns; weather rows add ``time_hour``.
    """
    from pyspark.sql import functions as F

    weather = weather_events.where(F.col("reason").isNotNull()).select(
        "reason", "id", "origin", "time_hour", "stream_time", "_corrupt_record",
        F.col("_metadata.file_path").alias("source_file"),
    )
    return (
        quarantined(flight_events).withColumn("input", F.lit("flights"))
        .unionByName(weather.withColumn("input", F.lit("weather")), allowMissingColumns=True)
    )


def _state_operators(query) -> list[dict]:
    """Per batch of this run: each stateful operator's name, rows dropped by watermark, rows held."""
    result = []
    for progress in query.recentProgress:
        raw = json.loads(progress.json)
        result.append({
            "batch_id": raw["batchId"],
            "operators": [
                {"operator": op.get("operatorName"),
                 "rows_dropped_by_watermark": int(op.get("numRowsDroppedByWatermark") or 0),
                 "state_rows": int(op.get("numRowsTotal") or 0)}
                for op in raw.get("stateOperators") or []
            ],
        })
    return result


def run(spark, config: JoinConfig) -> dict:
    """Run (restart) both queries once with the configured Spark trigger and wait for them.

    :return: ``{"flight_weather": {"query_id", "batches": [progress records],
        "state_operators": [{"batch_id", "operators": [{"operator", "rows_dropped_by_watermark",
        "state_rows"}]}], "watermark_policy": {"requested", "effective"}},
        "flight_weather_quarantine": {"query_id", "batches", "state_operators"}}``; records are
        those of this run (shape in ``watermark_ops.spark.recorder``); ``effective`` is None when the
        checkpoint's policy could not be read.
    :raises pyspark.errors.StreamingQueryException: when a query failed (after recording its
        batches and stopping the other query).
    """
    effective = apply_watermark_policy(spark, config.checkpoint, config.watermark_policy)
    flight_events = classified_events(spark, config.landing, config.max_files_per_trigger)
    weather_events = classified_weather(spark, config.weather_landing, config.max_files_per_trigger)
    joined = flights_with_weather(flight_events, weather_events,
                                  config.flights_delay_threshold, config.weather_delay_threshold)
    plans = [
        (QUERY_NAME, joined, config.checkpoint, config.output),
        (QUARANTINE_QUERY_NAME, quarantined_both(flight_events, weather_events),
         config.quarantine_checkpoint, config.quarantine_output),
    ]
    # Deduplication and the join drop rows by event time (one field and delay threshold per source,
    # in plan order: flights, weather); recorded on every progress record for the late-row ledger.
    rules = {QUERY_NAME: late_rule("event_time", ["dep_time", "time_hour"],
                                   [config.flights_delay_threshold, config.weather_delay_threshold],
                                   schema=[EVENT_SCHEMA_DDL, WEATHER_SCHEMA_DDL],
                                   required_fields=[{"no_arrival": "arr_time"}, {}])}
    result = {
        query.name: {"query_id": str(query.id), "batches": records, "state_operators": _state_operators(query)}
        for query, records in run_queries(spark, plans, config.spark_trigger, config.run_tag,
                                          tick_landing=config.landing, late_rules=rules)
    }
    result[QUERY_NAME]["watermark_policy"] = {"requested": config.watermark_policy, "effective": effective}
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--landing", required=True, help="landing folder of the flights lander's JSON-lines files")
    parser.add_argument("--weather-landing", required=True, help="landing folder of the weather lander's files")
    parser.add_argument("--output", required=True, help="Parquet sink of the joined rows")
    parser.add_argument("--quarantine-output", help="Parquet sink of bad records (default <output>_quarantine)")
    parser.add_argument("--quarantine-checkpoint", help="default <checkpoint>_quarantine")
    parser.add_argument("--flights-delay-threshold", default=DEFAULT_FLIGHTS_DELAY_THRESHOLD,
                        help=f"watermark delay threshold of the flights (default {DEFAULT_FLIGHTS_DELAY_THRESHOLD!r})")
    parser.add_argument("--weather-delay-threshold", default=DEFAULT_WEATHER_DELAY_THRESHOLD,
                        help=f"watermark delay threshold of the weather (default {DEFAULT_WEATHER_DELAY_THRESHOLD!r})")
    parser.add_argument("--watermark-policy", choices=WATERMARK_POLICIES, default="min",
                        help="multipleWatermarkPolicy for a NEW checkpoint (default min); an existing "
                             "checkpoint keeps its own and a WARNING says so")
    add_run_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = JoinConfig(
        landing=args.landing, weather_landing=args.weather_landing, checkpoint=args.checkpoint,
        output=args.output, quarantine_output=args.quarantine_output,
        quarantine_checkpoint=args.quarantine_checkpoint,
        flights_delay_threshold=args.flights_delay_threshold,
        weather_delay_threshold=args.weather_delay_threshold, watermark_policy=args.watermark_policy,
        spark_trigger=args.spark_trigger, run_tag=args.run_tag, max_files_per_trigger=args.max_files_per_trigger,
    )
    code, result = execute(QUERY_NAME, args, lambda spark: run(spark, config))
    if code:
        return code
    policy = result[QUERY_NAME]["watermark_policy"]
    log.info("watermark policy: %s (requested %s)", policy["effective"], policy["requested"])
    return 0


if __name__ == "__main__":
    run_driver(main)
