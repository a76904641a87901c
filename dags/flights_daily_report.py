"""flights_daily_report: one report per New York day, once the day is final.

Scheduled with ``PartitionedAssetTimetable`` on ``flight_windows_days``, the partitioned asset on
which ``flights_pipeline``'s ``announce_days`` emits one event per New York calendar day that the
emitted-through watermark closed (partition key ``YYYY-MM-DD``; each day announced once, only
when every append-mode window of it is in the sink). The scheduler creates one run per partition
key (``IdentityMapper``), so each run reports one final day, and no day twice.

The report (``<runtime home>/reports/flights_daily/<day>.json``) is built from the windows' Parquet
sink and the late-row ledger's sink: departures, mean departure delay per origin airport, and the
late-row share (late rows of the day / (departures + late rows)). The task checks once more that the
day is final (the checkpoint's emitted-through watermark is at or past the day's end) and refuses a
run without a partition key.

Cheap to parse: no pandas, no file I/O at module level.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Asset, PartitionedAssetTimetable, dag, task

from watermark_ops.examples.flights.daily import DAY_ASSET_NAME, day_asset_uri
from watermark_ops.examples.flights.settings import job_locations, runtime_home

LOCATIONS = job_locations("flight_windows")
FLIGHT_WINDOWS_DAYS = Asset(name=DAY_ASSET_NAME, uri=day_asset_uri(LOCATIONS["output"]))


@dag(
    dag_id="flights_daily_report",
    schedule=PartitionedAssetTimetable(assets=FLIGHT_WINDOWS_DAYS),
    start_date=pendulum.datetime(2013, 1, 1, tz="America/New_York"),
    catchup=False,
    max_active_runs=1,
    tags=["watermark-ops", "report"],
    doc_md=__doc__,
)
def flights_daily_report():
    @task
    def daily_report(dag_run=None) -> dict:
        """The closed day's report (``watermark_ops.examples.flights.daily.daily_report``) to its JSON file."""
        from airflow.sdk.exceptions import AirflowFailException

        from watermark_ops.core.stall import evaluate
        from watermark_ops.core.thresholds import Thresholds
        from watermark_ops.examples.flights.daily import daily_report as build

        day = dag_run.partition_key
        if not day:
            raise AirflowFailException("flights_daily_report reports one partition: this run has no partition key "
                                       "(it is created by a flight_windows_days event, or triggered with one)")
        emitted = evaluate(LOCATIONS["checkpoint"], Thresholds(max_lag=None)).emitted_through_ms
        try:
            return build(day, LOCATIONS["output"], emitted, runtime_home() / "reports" / "flights_daily")
        except ValueError as exc:  # not a day, or not final: waiting or retrying cannot make it right
            raise AirflowFailException(str(exc)) from exc

    daily_report()


flights_daily_report()
