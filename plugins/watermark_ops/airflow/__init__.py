"""The Airflow face of watermark-ops: thin operators, sensors, a trigger, a notifier over the core.

Each holds its parameters (templated where a DAG needs it), delegates the work to
:mod:`watermark_ops.core`, logs through :mod:`watermark_ops.render` and pushes the core's
``to_dict()`` shapes to XCom::

    operators   WatermarkAuditOperator: audit a checkpoint after each run; fails on a violation
    sensors     WatermarkStallSensor (healthy?) and WatermarkReachedSensor (complete up to T?)
    triggers    WatermarkTrigger: the deferrable sensors' polling in the triggerer
    notifiers   WatermarkWebhookNotifier: a JSON alert to a webhook connection
    memory      AssetStateStoreMemory: the audit's memory in Airflow's asset state store

Importing this package imports Airflow (``airflow.sdk``); the core does not.
"""

from watermark_ops.airflow.memory import AssetStateStoreMemory
from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier
from watermark_ops.airflow.operators import AUDIT_MEMORY_ASSET, WatermarkAuditOperator
from watermark_ops.airflow.sensors import WatermarkAlarm, WatermarkReachedSensor, WatermarkStallSensor
from watermark_ops.airflow.triggers import WatermarkTrigger

__all__ = [
    "AUDIT_MEMORY_ASSET",
    "AssetStateStoreMemory",
    "WatermarkAlarm",
    "WatermarkAuditOperator",
    "WatermarkReachedSensor",
    "WatermarkStallSensor",
    "WatermarkTrigger",
    "WatermarkWebhookNotifier",
]
