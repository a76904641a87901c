"""checkpoint_audit: on-call audit of a Structured Streaming checkpoint, triggered by hand from the UI.

Trigger it with the form ("Trigger DAG" in the Airflow UI): give the checkpoint location (a local
path or an fsspec URL; the default is the main job's checkpoint under the runtime home). The one
task, ``WatermarkAuditOperator``, reads the offset and commit logs without a JVM and proves that
the watermark never moved backwards, batch by batch and, through the memory it keeps in Airflow's
asset state store (shared with the audits after each pipeline run), across restarts and purges.

Its log shows the same table as ``watermark-ops audit CHECKPOINT`` in a terminal; the report (the
``--json`` shape) is in the task's XCom. A violation fails the run (no retries); an unreadable
checkpoint fails it too. A deliberate reset (the checkpoint was deleted on purpose, a new query id) is
accepted by giving its reason in the form's "Accept a deliberate reset" field.

Cheap to parse: no pyspark, no file I/O at module level.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from watermark_ops.airflow.operators import WatermarkAuditOperator
from watermark_ops.examples.flights.settings import job_locations


@dag(
    dag_id="checkpoint_audit",
    schedule=None,
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "checkpoint": Param(
            job_locations("flight_windows")["checkpoint"],
            type="string",
            minLength=1,
            title="Checkpoint location",
            description="The checkpoint folder of the streaming query: a local path or an fsspec URL "
                        "(s3://bucket/path, gs://..., abfs://..., hdfs://...).",
        ),
        "accept_reset": Param(
            "",
            type="string",
            title="Accept a deliberate reset (reason)",
            description="Empty: audit only. A reason (e.g. 'OPS-123: checkpoint deleted after a state schema "
                        "change') records that the checkpoint's new query id is a deliberate reset: who (the "
                        "triggering user), when and why are kept with the audit's memory, and the audit passes "
                        "with a reset_accepted note instead of a checkpoint_reset error. Give it with the first "
                        "audit after the reset (an audit reports a reset once; its memory then moves on).",
        ),
    },
    default_args={"retries": 0},
    tags=["watermark-ops", "on-call"],
    doc_md=__doc__,
)
def checkpoint_audit():
    WatermarkAuditOperator(task_id="audit", checkpoint="{{ params.checkpoint }}",
                           accept_reset="{{ params.accept_reset }}")


checkpoint_audit()
