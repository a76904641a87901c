"""The provider metadata Airflow reads through the ``apache_airflow_provider`` entry point.

``get_provider_info()`` returns a dict conforming to Airflow's runtime schema
``airflow/provider_info.schema.json`` (checked by ``tests/test_packaging.py``): the package name
(it must equal the distribution's, ``watermark-ops``), the connection type of the webhook
notifier's connection (:class:`watermark_ops.airflow.hooks.WatermarkWebhookHook`), the notifier,
and the ``[watermark_ops]`` configuration section. The UI plugin is *not* listed here: it is
registered through the ``airflow.plugins`` entry point only (a plugin listed in both places is
loaded twice when ``[core] lazy_discover_providers`` is False, and the second one is reported as an
import error: ``airflow.plugins_manager._get_plugins``).

Imports nothing from Airflow: the providers manager calls this while it discovers providers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PACKAGE_NAME", "get_provider_info"]

PACKAGE_NAME = "watermark-ops"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE_NAME)
    except PackageNotFoundError:  # imported from a source tree that is not installed
        return "0.1.0"


def _option(description: str, example: str | None) -> dict[str, Any]:
    return {"description": description, "version_added": "0.1.0", "type": "string", "example": example,
            "default": ""}


def get_provider_info() -> dict[str, Any]:
    """The provider's metadata (a fresh dict on every call).

    :return: ``{"package-name": "watermark-ops", "name", "description", "versions": [version],
        "connection-types": [{"connection-type": "watermark_ops_webhook", "hook-class-name", "hook-name"}],
        "notifications": [class path], "config": {"watermark_ops": {"description", "options"}}}``.
    """
    return {
        "package-name": PACKAGE_NAME,
        "name": "watermark-ops",
        "description": "Operations for Spark Structured Streaming jobs run as restartable event-time runs: "
                       "checkpoint audits (the watermark never moves backwards), stall alerts, completeness "
                       "as partitioned asset events, and watermark pages in the Airflow UI.\n",
        "versions": [_version()],
        "connection-types": [
            {
                "connection-type": "watermark_ops_webhook",
                "hook-class-name": "watermark_ops.airflow.hooks.WatermarkWebhookHook",
                "hook-name": "Watermark webhook",
            },
        ],
        "notifications": ["watermark_ops.airflow.notifiers.WatermarkWebhookNotifier"],
        "config": {
            "watermark_ops": {
                "description": "watermark-ops: which checkpoints the watermark pages and the monitor DAG know "
                               "besides the ones DAG tasks registered, and where the pages may read.",
                "options": {
                    "checkpoint_roots": _option(
                        "JSON object of root name -> local folder. The watermark pages read checkpoints "
                        "under these folders, and the registered checkpoints' own folders (exactly those).",
                        '{"prod": "/srv/streaming/checkpoints"}'),
                    "checkpoints": _option(
                        "Checkpoints no DAG task touches, to watch anyway: a JSON list of entries "
                        "({\"checkpoint\": location, thresholds, \"missing_ok\", \"landings\", \"late_sink\", "
                        "\"dag_ids\", \"name\", \"note\", state thresholds (\"growing_batches\", \"max_chain\", "
                        "\"max_versions_over_retain\"), \"state_alarms\": [state rules]}) or an object "
                        "{\"defaults\": {...}, \"checkpoints\": [...]}.",
                        '[{"checkpoint": "s3://bucket/checkpoints/orders", "max_lag": "PT1H"}]'),
                    "monitor_config": _option(
                        "Path of a JSON file of the same form as 'checkpoints' (read at every use; "
                        "$VARIABLES in locations are expanded).",
                        "/opt/airflow/config/watermark_checkpoints.json"),
                    "state_alarms": _option(
                        "The state findings the watermark_monitor DAG alarms on, comma-separated: "
                        "state_unbounded (no watermark can evict an operator's state), state_growing (rows "
                        "rise while the watermark advances and nothing is removed), state_never_compacted, "
                        "state_files_accumulating, unreadable. 'none': no state alarm (the monitor then does "
                        "not read the state). An entry's \"state_alarms\" list overrides it; its thresholds "
                        "(growing_batches, max_chain, max_versions_over_retain) are given like the stall's. "
                        "Default state_unbounded,state_growing.", "state_unbounded,state_growing"),
                    "overview_max_age": dict(_option(
                        "Seconds one evaluation of the watermark overview serves every later view (every "
                        "user's: each sees its own rows of it). Past it, the next view reads what changed "
                        "since (metadata and one probe per checkpoint when nothing did); 0: every view "
                        "looks. Default 10.", "10"), type="float", default="10"),
                    "ui_views": dict(_option(
                        "The React views the plugin adds to Airflow's UI, comma-separated, of: nav "
                        "(Browse > Watermarks, the overview and each checkpoint), dag (a tab on a DAG's "
                        "page), dag_run (a tab on a DAG run's page), dashboard (a widget on the home "
                        "page). Leave one out to turn it off; empty: none (the JSON and the "
                        "server-rendered pages under /watermark-ops stay). Read when the api-server "
                        "starts. Default nav,dag,dag_run,dashboard.", "nav,dag,dag_run,dashboard"),
                        default="nav,dag,dag_run,dashboard"),
                },
            },
        },
    }
