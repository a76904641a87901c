"""watermark_wait: wait, in the triggerer, until a checkpoint's watermark reaches an instant.

Trigger it by hand (the form asks for the checkpoint and the target instant) or from another DAG
or script through the REST API, when downstream work must not start before the windows up to that
instant are final: one deferrable ``WatermarkReachedSensor`` hands the waiting to the triggerer
(``WatermarkTrigger`` polls the checkpoint; no worker slot is held), succeeds once a committed
batch ran with a watermark at or past the target, and fails when the watermark jumped ahead of
processing time, when the checkpoint does not exist, or after 6 hours.

Cheap to parse: no pyspark, no file I/O at module level.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag

from watermark_ops.airflow.sensors import WatermarkReachedSensor
from watermark_ops.examples.flights.settings import job_locations


@dag(
    dag_id="watermark_wait",
    schedule=None,
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=16,
    params={
        "checkpoint": Param(job_locations("flight_windows")["checkpoint"], type="string", minLength=1,
                            title="Checkpoint location", description="a local path or an fsspec URL"),
        "target": Param("2013-01-02T05:00:00Z", type="string", format="date-time", title="Target instant",
                        description="ISO-8601 with a zone: wait until the windows up to here are final"),
    },
    default_args={"retries": 0},
    tags=["watermark-ops", "on-call"],
    doc_md=__doc__,
)
def watermark_wait():
    WatermarkReachedSensor(
        task_id="wait_for_watermark",
        checkpoint="{{ params.checkpoint }}",
        target="{{ params.target }}",
        deferrable=True,
        max_lag=None,  # a replay of the past lags processing time by years
        poke_interval=5,
        timeout=timedelta(hours=6),
    )


watermark_wait()
