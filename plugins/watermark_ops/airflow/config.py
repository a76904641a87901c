"""The ``[watermark_ops]`` configuration section (``airflow.cfg`` or ``AIRFLOW__WATERMARK_OPS__<OPTION>``).

Every option is optional: the checkpoints DAG tasks touch register themselves
(:mod:`watermark_ops.airflow.registry`), so a deployment needs no configuration at all.

* ``checkpoint_roots``: JSON object of root name -> local folder or object-store prefix
  (``"s3://bucket/checkpoints"``), or -> ``{"url": prefix, "conn_id": Airflow connection,
  "storage_options": {...}}`` to read that prefix through a connection. The watermark pages read
  checkpoints under these roots (and nothing outside them), plus each registered checkpoint's own
  folder (exactly that one).
* ``checkpoints``: checkpoints to know although no DAG task touches them (or to give them
  thresholds, landings, a note): a JSON list of entries, or ``{"defaults": {...}, "checkpoints": [...]}``.
* ``monitor_config``: the path of a JSON file of the same form (read at every use).
* ``state_alarms``: the state findings the ``watermark_monitor`` DAG alarms on, comma-separated
  (default ``state_unbounded,state_growing``; ``none``: no state alarm, and the monitor does not
  read the state at all); an entry's ``state_alarms`` (a list) overrides it.

An entry::

    {"checkpoint": location (local path or fsspec URL), "name": str, "missing_ok": bool (default false),
     "note": str, "dag_ids": [DAG ids running its job], "landings": [landing folders of its inputs],
     "late_sink": location of its late-row ledger, "conn_id": Airflow connection to read the checkpoint,
     its landings and late sink with (e.g. an ``aws`` connection for ``s3://``), "storage_options": {...}
     (that connection's filesystem options, :func:`watermark_ops.airflow.storage.checkpoint_filesystem`),
     <threshold>: value, ...}

Thresholds are those of :class:`watermark_ops.core.thresholds.Thresholds` (ISO-8601 durations such
as ``PT6H``, seconds, or null to disable; ``stall_batches`` a count) and of the state findings,
:class:`watermark_ops.core.thresholds.StateThresholds` (``growing_batches``, ``max_chain``,
``max_versions_over_retain``: counts, or null to disable), with ``state_alarms`` (a list of state
rules, ``[]`` for none); ``defaults`` apply to every entry. ``$NAME`` / ``${NAME}`` in ``checkpoint``, ``landings`` and ``late_sink`` are expanded from the
environment when read (an unset variable is an error).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from watermark_ops.core.roots import CheckpointRoots

__all__ = ["DEFAULT_STATE_ALARMS", "ENTRY_KEYS", "HEALTH_KEYS", "SECTION", "STATE_THRESHOLD_KEYS", "THRESHOLD_KEYS",
           "configured_checkpoints", "configured_roots", "configured_state_alarms", "parse_entries", "state_alarm_rules"]

SECTION = "watermark_ops"
THRESHOLD_KEYS = ("idle_after", "max_idle", "max_lag", "max_skew", "stall_window", "stall_batches",
                  "max_partition_skew")
#: The state findings' thresholds (:class:`watermark_ops.core.thresholds.StateThresholds`) and the
#: state rules an entry alarms on: given like the stall's thresholds, kept with them.
STATE_THRESHOLD_KEYS = ("growing_batches", "max_chain", "max_versions_over_retain")
HEALTH_KEYS = (*THRESHOLD_KEYS, *STATE_THRESHOLD_KEYS, "state_alarms")
ENTRY_KEYS = ("checkpoint", "name", "missing_ok", "note", "dag_ids", "landings", "late_sink", "conn_id",
              "storage_options", *HEALTH_KEYS)
#: What the monitor alarms on by default: a state no watermark evicts, and one that grows anyway.
DEFAULT_STATE_ALARMS = ("state_unbounded", "state_growing")
_UNSET = re.compile(r"\$\{?\w+\}?")


def _option(name: str) -> str:
    from airflow.configuration import conf

    return (conf.get(SECTION, name, fallback="") or "").strip()


def configured_roots() -> CheckpointRoots:
    """``[watermark_ops] checkpoint_roots`` (JSON ``{name: folder or URL prefix}``, a value may be
    ``{"url", "conn_id", "storage_options"}``); none when unset.

    :raises ValueError: naming the option, for JSON that is not an object of strings or such
        objects, or a bad root (:meth:`CheckpointRoots.of`).
    """
    text = _option("checkpoint_roots")
    if not text:
        return CheckpointRoots({})
    try:
        roots = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"[{SECTION}] checkpoint_roots: expected a JSON object of name -> folder: {exc}") from exc
    if not isinstance(roots, dict) or not all(isinstance(v, (str, dict)) for v in roots.values()):
        raise ValueError(f"[{SECTION}] checkpoint_roots: expected a JSON object of name -> folder, URL or "
                         f"{{\"url\", \"conn_id\", \"storage_options\"}}, got {text!r}")
    try:
        return CheckpointRoots.of(roots)
    except ValueError as exc:
        raise ValueError(f"[{SECTION}] checkpoint_roots: {exc}") from exc


def state_alarm_rules(value: Any, where: str) -> tuple[str, ...]:
    """State rules from ``"a,b"`` / ``"none"`` / ``""`` (the default) / a list.

    :raises ValueError: naming ``where``, for an unknown rule or another type.
    """
    from watermark_ops.core.state.rules import STATE_RULES

    if value is None or (isinstance(value, str) and not value.strip()):
        return DEFAULT_STATE_ALARMS
    if isinstance(value, str):
        value = [] if value.strip().lower() == "none" else [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: state_alarms: expected a list of state rules, got {value!r}")
    unknown = sorted(set(value) - set(STATE_RULES))
    if unknown:
        raise ValueError(f"{where}: state_alarms: unknown state rules {unknown}; expected some of {sorted(STATE_RULES)}")
    return tuple(value)


def configured_state_alarms() -> tuple[str, ...]:
    """``[watermark_ops] state_alarms`` (default :data:`DEFAULT_STATE_ALARMS`; ``none``: ()).

    :raises ValueError: naming the option, for an unknown rule.
    """
    return state_alarm_rules(_option("state_alarms"), f"[{SECTION}]")


def configured_checkpoints() -> list[dict[str, Any]]:
    """The entries of ``monitor_config`` (the file) then of ``checkpoints`` (inline), validated;
    a location given twice keeps its first entry.

    :return: ``[{"checkpoint": str, "missing_ok": bool, "thresholds": {<threshold>: JSON value},
        "name": str | None, "note": str | None, "dag_ids": [str], "landings": [str],
        "late_sink": str | None, "conn_id": str | None, "storage_options": dict | None}]`` in configuration order; ``[]`` when neither option is set.
    :raises ValueError: naming the option or file and the entry, for bad JSON, an unknown key, a
        missing ``checkpoint``, a bad threshold or an unset environment variable.
    """
    entries: list[dict[str, Any]] = []
    path = _option("monitor_config")
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ValueError(f"{path}: cannot read the monitor config: {exc}") from exc
        entries += parse_entries(text, path)
    inline = _option("checkpoints")
    if inline:
        entries += parse_entries(inline, f"[{SECTION}] checkpoints")
    from watermark_ops.core.memory import memory_key

    out, seen = [], set()
    for entry in entries:
        key = memory_key(entry["checkpoint"])
        if key not in seen:
            seen.add(key)
            out.append(entry)
    return out


def parse_entries(text: str, where: str) -> list[dict[str, Any]]:
    """Validated entries of one JSON text (a list of entries, or ``{"defaults", "checkpoints"}``).

    :param where: what the text is (a file path or the option's name), for the error messages.
    :raises ValueError: as :func:`configured_checkpoints`, each message starting with ``where``.
    """
    from watermark_ops.core.thresholds import StateThresholds, Thresholds

    try:
        config = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where}: cannot read the monitor config: {exc}") from exc
    if isinstance(config, list):
        config = {"checkpoints": config}
    if not isinstance(config, dict) or not isinstance(config.get("checkpoints", []), list):
        raise ValueError(f"{where}: expected a list of entries or an object with a 'checkpoints' list")
    unknown = set(config) - {"defaults", "checkpoints", "about"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; expected 'defaults', 'checkpoints', 'about'")
    defaults = config.get("defaults") or {}
    if not isinstance(defaults, dict) or set(defaults) - set(HEALTH_KEYS):
        raise ValueError(f"{where}: defaults: unknown keys {sorted(set(defaults) - set(HEALTH_KEYS))}; "
                         f"expected {list(HEALTH_KEYS)}")
    out = []
    for index, entry in enumerate(config.get("checkpoints") or []):
        label = f"{where}: checkpoints[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{label}: expected an object, got {entry!r}")
        if set(entry) - set(ENTRY_KEYS):
            raise ValueError(f"{label}: unknown keys {sorted(set(entry) - set(ENTRY_KEYS))}; expected {list(ENTRY_KEYS)}")
        if not isinstance(entry.get("checkpoint"), str) or not entry["checkpoint"]:
            raise ValueError(f"{label}: 'checkpoint' (a location) is required")
        for key in ("landings", "dag_ids"):
            value = entry.get(key, [])
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ValueError(f"{label}: {key!r} must be a list of strings, got {value!r}")
        if entry.get("conn_id") is not None and not isinstance(entry["conn_id"], str):
            raise ValueError(f"{label}: 'conn_id' must be an Airflow connection id (a string), got {entry['conn_id']!r}")
        if entry.get("storage_options") is not None and not isinstance(entry["storage_options"], dict):
            raise ValueError(f"{label}: 'storage_options' must be an object, got {entry['storage_options']!r}")
        location = _expand(entry["checkpoint"], label)
        thresholds = {k: entry.get(k, defaults.get(k)) for k in HEALTH_KEYS if k in entry or k in defaults}
        try:
            Thresholds(**{k: v for k, v in thresholds.items() if k in THRESHOLD_KEYS})
            StateThresholds(**{k: v for k, v in thresholds.items() if k in STATE_THRESHOLD_KEYS})
            if "state_alarms" in thresholds:
                if not isinstance(thresholds["state_alarms"], list):
                    raise ValueError(f"state_alarms: expected a list of state rules, got {thresholds['state_alarms']!r}")
                state_alarm_rules(thresholds["state_alarms"], "entry")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{label} ({location}): {exc}") from exc
        out.append({
            "checkpoint": location,
            "missing_ok": bool(entry.get("missing_ok", False)),
            "thresholds": thresholds,
            "name": entry.get("name"),
            "note": entry.get("note"),
            "dag_ids": list(entry.get("dag_ids", [])),
            "landings": [_expand(item, label) for item in entry.get("landings", [])],
            "late_sink": _expand(entry["late_sink"], label) if entry.get("late_sink") else None,
            "conn_id": entry.get("conn_id"),
            "storage_options": entry.get("storage_options"),
        })
    return out


def _expand(text: str, label: str) -> str:
    expanded = os.path.expandvars(text)
    left = _UNSET.search(expanded)
    if left:
        raise ValueError(f"{label}: {text!r}: environment variable {left.group(0)} is not set")
    return expanded
