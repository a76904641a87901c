"""The Airflow plugin of watermark-ops: the watermark pages in the Airflow UI.

Airflow's api-server mounts the FastAPI app of :mod:`watermark_ops.airflow.ui` at
``/watermark-ops`` and the UI shows it through ``external_views``: **Watermarks** under Browse
(the overview), and a **Watermark** tab on each DAG and task instance (the page of the checkpoint
that DAG's job writes; the overview for a DAG without one).

Configuration (``airflow.cfg`` section ``[watermark_ops]`` or the matching environment variables):

* ``checkpoint_roots`` (``AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS``): a JSON object of root name →
  local folder; the pages read checkpoints under these folders only. Default
  ``{"runtime": "<runtime home>/checkpoints"}`` (``$WATERMARK_OPS_HOME``, see
  ``watermark_ops.examples.flights.settings``).
* The known checkpoints are those of the monitor's config (``$WATERMARK_OPS_MONITOR_CONFIG``,
  default ``dags/watermark_monitor.json``) and the pipeline's job (``flight_windows``), with their
  thresholds (:mod:`watermark_ops.examples.flights.watch`).
"""

from __future__ import annotations

import json

from airflow.plugins_manager import AirflowPlugin

from watermark_ops.airflow.ui import create_app
from watermark_ops.core.roots import CheckpointRoots

URL_PREFIX = "/watermark-ops"


def configured_roots() -> CheckpointRoots:
    """``[watermark_ops] checkpoint_roots`` (JSON ``{name: folder}``), default the runtime home's
    ``checkpoints`` folder.

    :raises ValueError: naming the option, for JSON that is not an object of strings.
    """
    from airflow.configuration import conf

    from watermark_ops.examples.flights.settings import runtime_home

    text = conf.get("watermark_ops", "checkpoint_roots", fallback=None)
    if not text:
        return CheckpointRoots.of({"runtime": str(runtime_home() / "checkpoints")})
    try:
        roots = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"[watermark_ops] checkpoint_roots: expected a JSON object of name -> folder: {exc}") from exc
    if not isinstance(roots, dict) or not all(isinstance(v, str) for v in roots.values()):
        raise ValueError(f"[watermark_ops] checkpoint_roots: expected a JSON object of name -> folder, got {text!r}")
    return CheckpointRoots.of(roots)


def known_checkpoints() -> list[dict]:
    """The monitor config's checkpoints (:func:`watermark_ops.examples.flights.watch.known_checkpoints`)."""
    from watermark_ops.examples.flights.watch import known_checkpoints as known

    return known()


class WatermarkOpsPlugin(AirflowPlugin):
    """Registers the watermark pages (FastAPI app) and their places in the UI (external views)."""

    name = "watermark_ops"
    fastapi_apps = [{"app": create_app(configured_roots, known_checkpoints), "url_prefix": URL_PREFIX,
                     "name": "watermark-ops"}]
    external_views = [
        {"name": "Watermarks", "href": f"{URL_PREFIX}/", "destination": "nav", "category": "browse",
         "url_route": "watermarks"},
        {"name": "Watermark", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}", "destination": "dag",
         "url_route": "watermark-dag"},
        {"name": "Watermark", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}?task_id={{TASK_ID}}",
         "destination": "task_instance", "url_route": "watermark-task"},
    ]
