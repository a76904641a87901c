"""Which checkpoints this deployment watches: the monitor's config file and the pipeline DAGs' jobs.

Read by the ``watermark_monitor`` DAG (one stall sensor per entry) and by the UI plugin
(``plugins/watermark_ops_ui.py``: one overview row per entry). The config file is
``dags/watermark_monitor.json``, or the file named by ``$WATERMARK_OPS_MONITOR_CONFIG``::

    {"defaults": {<threshold>: value, ...},
     "checkpoints": [{"checkpoint": <location>} | {"job": <job name>},
                     <threshold>: value, "missing_ok": bool, "note": str,
                     "landings": [landing folders of its inputs, for the UI's delay-threshold advice]}, ...]}

Thresholds are those of :class:`watermark_ops.core.thresholds.Thresholds` (ISO-8601 durations
such as ``PT6H``, seconds, or null to disable; ``stall_batches`` a count). A ``job`` entry names
a Spark job of this project: its checkpoint is under the runtime home
(:func:`watermark_ops.examples.flights.settings.job_locations`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from watermark_ops.examples.flights.settings import REPO_ROOT, job_locations

__all__ = ["CONFIG_ENV", "DEFAULT_CONFIG", "JOBS", "PIPELINE_JOB", "THRESHOLD_KEYS", "config_path",
           "known_checkpoints", "load_checkpoints"]

DEFAULT_CONFIG = REPO_ROOT / "dags" / "watermark_monitor.json"
CONFIG_ENV = "WATERMARK_OPS_MONITOR_CONFIG"
#: The job whose checkpoint is always watched (flights_pipeline's).
PIPELINE_JOB = "flight_windows"
THRESHOLD_KEYS = ("idle_after", "max_idle", "max_lag", "max_skew", "stall_window", "stall_batches",
                  "max_partition_skew")
#: The project's jobs: the DAG that runs each, and the landing folders of its inputs (keys of
#: :func:`~watermark_ops.examples.flights.settings.job_locations`).
JOBS = {
    "flight_windows": {"dag_id": "flights_pipeline", "landings": ("landing",)},
    "flight_weather": {"dag_id": "flight_weather", "landings": ("landing", "weather_landing")},
}


def config_path() -> str:
    """The monitor config in use: ``$WATERMARK_OPS_MONITOR_CONFIG`` or :data:`DEFAULT_CONFIG`."""
    return os.environ.get(CONFIG_ENV) or str(DEFAULT_CONFIG)


def load_checkpoints(path: str | os.PathLike) -> list[dict]:
    """The config file → one ``WatermarkStallSensor`` kwargs dict per checkpoint (for ``expand_kwargs``).

    :return: ``[{"checkpoint": str, "missing_ok": bool, <threshold>: JSON value, ...}]``, the
        flight_windows job included, duplicates (same location) dropped (first wins).
    :raises ValueError: naming the file and the entry, for bad JSON, an unknown key, an entry
        with neither or both of ``checkpoint`` and ``job``, or a bad threshold.
    """
    return [{k: v for k, v in entry.items() if k not in ("job", "note", "landings")} for entry in _entries(path)]


def known_checkpoints(path: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Every checkpoint this deployment knows: the config's entries with what the UI shows of them.

    :param path: the config file (default :func:`config_path`).
    :return: ``[{"name": job name or location, "checkpoint": location, "missing_ok": bool,
        "thresholds": {<threshold>: JSON value}, "dag_ids": [DAG ids running the job],
        "landings": [landing folders of its inputs], "note": str | None}]`` in config order.
    :raises ValueError: as :func:`load_checkpoints`.
    """
    known = []
    for entry in _entries(config_path() if path is None else path):
        job = JOBS.get(entry.get("job") or "")
        locations = job_locations(entry["job"]) if job else {}
        known.append({
            "name": entry.get("job") or entry["checkpoint"],
            "checkpoint": entry["checkpoint"],
            "missing_ok": entry["missing_ok"],
            "thresholds": {k: entry[k] for k in THRESHOLD_KEYS if k in entry},
            "dag_ids": [job["dag_id"]] if job else [],
            "landings": [locations[key] for key in job["landings"]] if job else list(entry.get("landings", [])),
            "note": entry.get("note"),
        })
    return known


def _entries(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The validated entries of the config file, each with ``checkpoint`` (location), ``missing_ok``,
    its thresholds (defaults applied), and ``job`` / ``note`` when given."""
    from watermark_ops.core.thresholds import Thresholds

    where = str(path)
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{where}: cannot read the monitor config: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("checkpoints", []), list):
        raise ValueError(f"{where}: expected an object with a 'checkpoints' list")
    defaults = config.get("defaults") or {}
    unknown = set(defaults) - set(THRESHOLD_KEYS)
    if unknown:
        raise ValueError(f"{where}: defaults: unknown keys {sorted(unknown)}; expected {list(THRESHOLD_KEYS)}")
    entries = list(config.get("checkpoints") or [])
    if not any(isinstance(e, dict) and e.get("job") == PIPELINE_JOB for e in entries):
        entries.append({"job": PIPELINE_JOB})
    allowed = {"checkpoint", "job", "missing_ok", "note", "landings", *THRESHOLD_KEYS}
    out, seen = [], set()
    for index, entry in enumerate(entries):
        label = f"{where}: checkpoints[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{label}: expected an object, got {entry!r}")
        if set(entry) - allowed:
            raise ValueError(f"{label}: unknown keys {sorted(set(entry) - allowed)}; expected {sorted(allowed)}")
        if ("checkpoint" in entry) == ("job" in entry):
            raise ValueError(f"{label}: give exactly one of 'checkpoint' (a location) and 'job' (a job name)")
        landings = entry.get("landings", [])
        if not isinstance(landings, list) or not all(isinstance(item, str) for item in landings):
            raise ValueError(f"{label}: 'landings' must be a list of folders, got {landings!r}")
        location = entry.get("checkpoint") or job_locations(entry["job"])["checkpoint"]
        thresholds = {k: entry.get(k, defaults.get(k)) for k in THRESHOLD_KEYS if k in entry or k in defaults}
        try:
            Thresholds(**thresholds)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{label} ({location}): {exc}") from exc
        if location in seen:
            continue
        seen.add(location)
        out.append({"checkpoint": location, "missing_ok": bool(entry.get("missing_ok", "job" in entry)), **thresholds,
                    **{k: entry[k] for k in ("job", "note", "landings") if k in entry}})
    return out
