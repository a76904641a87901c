"""The Airflow face of watermark-ops: thin operators, sensors, a trigger, a notifier over the core.

Each holds its parameters (templated where a DAG needs it), delegates the work to
:mod:`watermark_ops.core`, logs through :mod:`watermark_ops.render` and pushes the core's
``to_dict()`` shapes to XCom::

    operators   WatermarkAuditOperator: audit a checkpoint after each run; fails on a violation
    partitions  WatermarkPartitionsOperator: one partitioned asset event per day (or hour) the
                watermark newly closed, each announced once
    sensors     WatermarkStallSensor (healthy?) and WatermarkReachedSensor (complete up to T?)
    triggers    WatermarkTrigger: the deferrable sensors' polling in the triggerer
    notifiers   WatermarkWebhookNotifier: a JSON alert to a webhook connection
    memory      AssetStateStoreMemory: the audit's memory in Airflow's asset state store
    run         watermarked_run: the run pattern (spark-submit, progress, ledger, audit, completeness
                gate, partition events) as one TaskGroup
    registry    zero-configuration discovery: each task registers the checkpoint it touches
    config      the [watermark_ops] configuration section (roots, explicit checkpoints)
    plugin      WatermarkOpsPlugin (entry point ``airflow.plugins``): the UI pages (``ui``)
    provider    get_provider_info (entry point ``apache_airflow_provider``); hooks: the webhook hook

Importing a module of this package imports Airflow (``airflow.sdk``); the core does not. The
package itself imports its modules on first use of a name.
"""

import importlib

# Where each public name lives: imported on first use (PEP 562), so that a DAG file importing one
# operator does not pay for the others (DAG files must stay cheap to parse).
_HOMES = {
    "AUDIT_MEMORY_ASSET": "operators",
    "AssetStateStoreMemory": "memory",
    "WatermarkAlarm": "sensors",
    "WatermarkAuditOperator": "operators",
    "WatermarkPartitionsOperator": "partitions",
    "WatermarkReachedSensor": "sensors",
    "WatermarkStallSensor": "sensors",
    "WatermarkTrigger": "triggers",
    "WatermarkWebhookNotifier": "notifiers",
    "watermarked_run": "run",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f"watermark_ops.airflow.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'watermark_ops.airflow' has no attribute {name!r}")


__all__ = [
    "AUDIT_MEMORY_ASSET",
    "AssetStateStoreMemory",
    "WatermarkAlarm",
    "WatermarkAuditOperator",
    "WatermarkPartitionsOperator",
    "WatermarkReachedSensor",
    "WatermarkStallSensor",
    "WatermarkTrigger",
    "WatermarkWebhookNotifier",
    "watermarked_run",
]
