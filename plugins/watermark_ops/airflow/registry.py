"""Zero-configuration discovery: every checkpoint a DAG task touches registers itself in Airflow.

Where: the asset state store (Airflow 3.3, AIP-103) of one asset, :data:`CHECKPOINT_REGISTRY`,
which every watermark-ops operator and sensor adds to its inlets (:func:`add_registry_inlet`;
an inlet emits no asset event and schedules nothing). Keys::

    index                              ["checkpoint:<location>", ...]   the record keys, sorted
    checkpoint:<normalised location>   {"checkpoint": location, "tasks": [task entry, ...]}

(the location normalised by :func:`watermark_ops.core.memory.memory_key`; past the 512-character
key column its SHA-256, :func:`watermark_ops.airflow.memory.state_store_key`). A task entry is
``{"dag_id", "task_id", "operator", "thresholds": {<threshold>: seconds | count | None} | None,
"landings": [folder], "late_sink": location | None, "asset": {"name", "uri"} | None,
"conn_id": Airflow connection id | None, "storage_options": {...} | None}``, one per (DAG id, task
id), sorted. ``conn_id`` (and, with it, the provider's ``storage_options``) is how the task reads
the checkpoint (:func:`watermark_ops.airflow.storage.checkpoint_filesystem`): the monitor and the
pages read it with the same connection. Storage options given without a connection (raw fsspec
options, which may hold credentials) are never recorded.

Why the asset state store: it is Airflow's own, reachable from a task through the Task SDK
(``AssetStateStoreAccessor.get``/``set``, no DB access from workers) and from the api-server
(``airflow.state.get_state_backend()``, whatever ``[state_store] backend`` is configured), and it
survives DAG runs. It has no list-keys call on the task side, hence the ``index`` key, which both
faces read, so the UI and the monitor see the same set.

Writers (:func:`register_checkpoint`, at the start of ``execute``): two ``get`` per task run; a
``set`` only when the task's entry or the index changes (idempotent). Two tasks registering at the
same instant can overwrite each other's update (the store has no compare-and-set); the lost one is
written again on that task's next run, which finds its entry or index key missing. A registry
failure never fails the task: it is logged as a warning.

Readers: :func:`monitor_checkpoints` (the ``watermark_monitor`` DAG, in a task with the registry
as inlet) and :func:`server_registry` (the UI pages, in the api-server). Both merge the registry
with the explicit entries of ``[watermark_ops]`` (:func:`watermark_ops.airflow.config.configured_checkpoints`)
through :func:`known_checkpoints`. A stale entry (a DAG deleted) stays until deleted through the
REST API (``DELETE /api/v2/assets/{asset_id}/state-store/{key}``).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Iterable

from airflow.sdk import Asset

from watermark_ops.airflow.memory import state_store_key

__all__ = [
    "CHECKPOINT_REGISTRY",
    "INDEX_KEY",
    "RECORD_PREFIX",
    "add_registry_inlet",
    "checkpoint_name",
    "known_checkpoints",
    "monitor_checkpoints",
    "package_asset",
    "read_registry",
    "record_key",
    "register_checkpoint",
    "server_registry",
    "task_registry",
]

log = logging.getLogger(__name__)

def package_asset(name: str, uri: str) -> Asset:
    """``Asset(name=name, uri=uri)`` for one of the package's own ``watermark-ops://<host>`` URIs,
    made without asking Airflow's providers manager for the scheme's normalizer.

    Why: ``Asset`` normalises a URI (``airflow.sdk.definitions.asset._sanitize_uri``) by asking the
    providers manager for its scheme's handler, and the first such question imports every
    provider's asset module, among them the Amazon provider's S3 hook (botocore, boto3): 0.4-0.5 s
    for a DAG file that only names the registry. No provider handles ``watermark-ops``, so the
    normalised URI is the URI with its scheme lower-cased and an empty path made ``/``, as
    ``_sanitize_uri`` makes it; it is built from an ``x-`` URI (which Airflow leaves alone) and set.
    The value equals ``Asset(name=name, uri=uri)`` (a test compares them); if the attrs class ever
    refuses, the plain construction is used.

    :param uri: ``scheme://host[/path]`` without query, fragment or user info.
    """
    scheme, rest = uri.split("://", 1)
    host, _, path = rest.partition("/")
    normalised = f"{scheme.lower()}://{host}/{path.rstrip('/')}"
    try:
        asset = Asset(name=name, uri=f"x-{normalised}")
        object.__setattr__(asset, "uri", normalised)  # attrs' own setattr would normalise again
        return asset
    except Exception:  # noqa: BLE001 - another Asset implementation: the ordinary way
        return Asset(name=name, uri=uri)


#: The asset whose state store holds the registry (an inlet of every watermark-ops operator and sensor).
CHECKPOINT_REGISTRY = package_asset("watermark_ops_checkpoints", "watermark-ops://checkpoints")
INDEX_KEY = "index"
RECORD_PREFIX = "checkpoint:"


def record_key(location: str) -> str:
    """``checkpoint:<normalised location>`` (its SHA-256 past the key column's 512 characters)."""
    return state_store_key(RECORD_PREFIX, location)


def add_registry_inlet(task: Any) -> None:
    """Add :data:`CHECKPOINT_REGISTRY` to ``task.inlets`` (once); call right after ``BaseOperator.__init__``."""
    if CHECKPOINT_REGISTRY not in task.inlets:
        task.inlets.append(CHECKPOINT_REGISTRY)


# -- writing (in a task) --------------------------------------------------------------------------


def _seconds(value: Any) -> float | int | None:
    return None if value is None else value.total_seconds()


def threshold_values(thresholds: Any) -> dict[str, Any]:
    """A :class:`~watermark_ops.core.thresholds.Thresholds` as constructor values (seconds, None when off)."""
    from dataclasses import fields

    return {f.name: getattr(thresholds, f.name) if f.name == "stall_batches" else _seconds(getattr(thresholds, f.name))
            for f in fields(thresholds)}


def register_checkpoint(context: Any, checkpoint: str, *, landings: Iterable[str] = (), late_sink: str | None = None,
                        asset: Asset | None = None, thresholds: Any = None, conn_id: str | None = None,
                        storage_options: dict[str, Any] | None = None) -> bool:
    """Record that the running task touches ``checkpoint`` (see the module docstring).

    :param context: the task's context (``ti``, ``task``, ``asset_state_store`` with the registry).
    :param checkpoint: the checkpoint's location (rendered), local path or fsspec URL.
    :param landings: the landing folders of its inputs (for the UI's delay-threshold advice).
    :param late_sink: where its late-row ledger is written.
    :param asset: the asset the task uses for it (its memory, completeness or partitions).
    :param thresholds: a ``Thresholds`` that defines its health (a stall sensor's; a sensor waiting
        for a target gives none), or None.
    :param conn_id: the Airflow connection the task reads the checkpoint with (e.g. an ``aws``
        connection for ``s3://``), or None (local, or the process's environment).
    :param storage_options: with ``conn_id``, the provider's storage options (recorded with it);
        ignored without one (raw fsspec options may hold credentials: never written to the registry).
    :return: True when something was written; False when nothing changed or the registry failed
        (logged as a warning; never raises).
    """
    try:
        store = _store(context)
        ti, task = context["ti"], context["task"]
        entry = {
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "operator": type(task).__name__,
            "thresholds": None if thresholds is None else threshold_values(thresholds),
            "landings": [str(item) for item in landings],
            "late_sink": None if late_sink is None else str(late_sink),
            "asset": None if asset is None else {"name": asset.name, "uri": asset.uri},
        }
        if conn_id:  # only when given: entries of tasks reading without a connection stay as they were
            entry["conn_id"] = str(conn_id)
            if storage_options:
                entry["storage_options"] = dict(storage_options)
        key = record_key(checkpoint)
        old = store.get(key, default=None)
        tasks = [t for t in (old or {}).get("tasks", []) if isinstance(t, dict)
                 and (t.get("dag_id"), t.get("task_id")) != (entry["dag_id"], entry["task_id"])]
        # Other keys of the record (the newest run's "late", record_late_rows) stay as they are,
        # whichever task of the run registers last.
        new = {**(old if isinstance(old, dict) else {}), "checkpoint": str(checkpoint),
               "tasks": sorted([*tasks, entry], key=lambda t: (str(t.get("dag_id")), str(t.get("task_id"))))}
        wrote = False
        if new != old:
            store.set(key, new)
            wrote = True
        index = store.get(INDEX_KEY, default=None)
        if not isinstance(index, list) or key not in index:
            store.set(INDEX_KEY, sorted({*(index if isinstance(index, list) else []), key}))
            wrote = True
        if wrote:
            log.info("registered checkpoint %s for %s.%s", checkpoint, entry["dag_id"], entry["task_id"])
        return wrote
    except Exception as exc:  # the registry is a convenience: never fail the task for it
        log.warning("checkpoint %s not registered in the watermark-ops registry (the task goes on): %r",
                    checkpoint, exc)
        return False


def record_late_rows(context: Any, checkpoint: str, run: dict[str, Any]) -> bool:
    """Keep the newest run's late rows on the checkpoint's registry record (``"late"``): the overview
    ranks a checkpoint whose newest run dropped rows for good with the warnings, and reads nothing more
    for it.

    :param run: :func:`watermark_ops.core.ledger.reconcile_run`'s result for the run.
    :return: True when written; False when unchanged, not registered, or the registry failed (a
        warning; never raises).
    """
    try:
        store = _store(context)
        key = record_key(checkpoint)
        old = store.get(key, default=None)
        if not isinstance(old, dict):
            return False
        recovered = run.get("rows_late_recovered")
        late = {"run_tag": run.get("run_tag"), "known": bool(run.get("late_rows_known")),
                "rows_late": run.get("rows_late"), "rows_late_recovered": recovered,
                # not corrected: dropped for good with an allowed lateness, else every late row
                "rows_uncorrected": run.get("rows_late_dropped") if recovered is not None else run.get("rows_late")}
        if old.get("late") == late:
            return False
        store.set(key, {**old, "late": late})
        return True
    except Exception as exc:  # the registry is a convenience: never fail the task for it
        log.warning("late rows of %s not kept in the watermark-ops registry (the task goes on): %r", checkpoint, exc)
        return False


# -- reading ----------------------------------------------------------------------------------------


def read_registry(get: Callable[[str], Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The registry's records through a key getter.

    :param get: ``key -> JSON value or None``.
    :return: ``(records, problems)``: the well-formed records (``{"checkpoint", "tasks"}``) in index
        order, and one message per key whose value is not a record (kept aside, never dropped silently).
    """
    index = get(INDEX_KEY)
    if index is None:
        return [], []
    if not isinstance(index, list):
        return [], [f"registry key {INDEX_KEY!r}: expected a list of keys, got {type(index).__name__}"]
    records, problems = [], []
    for key in index:
        value = get(key) if isinstance(key, str) else None
        if value is None:
            continue  # deleted (REST API) after the index was written
        if (not isinstance(value, dict) or not isinstance(value.get("checkpoint"), str)
                or not isinstance(value.get("tasks"), list) or not all(isinstance(t, dict) for t in value["tasks"])):
            problems.append(f"registry key {key!r}: expected {{'checkpoint': str, 'tasks': [object]}}, got {value!r:.200}")
            continue
        records.append(value)
    return records, problems


def _store(context: Any) -> Any:
    """The registry's accessor: the context's (the task has the registry as inlet), else one made
    by name. The second case is a mapped task whose ``partial()`` did not name the inlet: the
    context's accessors are built from the mapped task's declared inlets, and the execution API
    checks only that the asset exists (``execution_api/routes/asset_state_store.py``)."""
    try:
        return context["asset_state_store"][CHECKPOINT_REGISTRY]
    except KeyError:
        from airflow.sdk.execution_time.context import AssetStateStoreAccessor

        return AssetStateStoreAccessor(name=CHECKPOINT_REGISTRY.name)


def task_registry(context: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`read_registry` in a task (best with :data:`CHECKPOINT_REGISTRY` as inlet)."""
    store = _store(context)
    return read_registry(lambda key: store.get(key, default=None))


def server_registry(session: Any = None) -> tuple[list[dict[str, Any]], list[str]]:
    """:func:`read_registry` in a process with the metadata DB (the api-server): through the
    configured ``[state_store] backend`` (``airflow.state.get_state_backend``), the asset found by
    name. No such asset (no DAG with a watermark-ops task parsed yet): ``([], [])``."""
    from sqlalchemy import select

    from airflow.models.asset import AssetModel
    from airflow.state import AssetScope, get_state_backend
    from airflow.utils.session import create_session

    def read(s: Any) -> tuple[list[dict[str, Any]], list[str]]:
        asset_id = s.scalar(select(AssetModel.id).where(AssetModel.name == CHECKPOINT_REGISTRY.name,
                                                        AssetModel.active.has()))
        if asset_id is None:
            return [], []
        backend = get_state_backend()
        scope = AssetScope(asset_id=asset_id)

        def get(key: str) -> Any:
            raw = backend.get(scope, key, session=s)
            return None if raw is None else _unwrap(json.loads(raw))

        return read_registry(get)

    if session is not None:
        return read(session)
    with create_session() as s:
        return read(s)


def _unwrap(value: Any) -> Any:
    """A value a worker-side ``[workers] state_store_backend`` stored elsewhere (a marker with its
    reference, ``airflow.sdk.execution_time.context._wrap_external_ref``), read back through it."""
    if isinstance(value, dict) and len(value) == 1:
        from airflow.sdk.execution_time import context as sdk_context

        ref = sdk_context._unwrap_external_ref(value)
        if ref is not None:
            backend = sdk_context._get_worker_state_store_backend()
            if backend is None:
                raise ValueError("a registry value is stored through [workers] state_store_backend, "
                                 "which is not configured here")
            return backend.deserialize_asset_state_store_from_ref(ref)
    return value


# -- merging with the configuration ----------------------------------------------------------------


def checkpoint_name(tasks: Iterable[tuple[str, str]], location: str) -> str:
    """What a registered checkpoint is called wherever it is shown (the overview, its page, the
    monitor's alarms, the notifications): ``<DAG id> / <query>``, stable, readable, from what the
    registry holds. The query is the run pattern's group id of the tasks that registered it (the
    ``TaskGroup`` :func:`watermark_ops.airflow.run.watermarked_run` names after the job, also its
    spark-submit application name), with those tasks' DAGs; else the checkpoint folder's name, with
    every registering DAG (several are listed together: ``a, b / orders``). E.g.
    ``readings_hourly / readings_hourly``.

    :param tasks: ``(dag_id, task_id)`` of the tasks that registered the checkpoint.
    """
    tasks = [(str(d), str(t)) for d, t in tasks]
    grouped = [(d, t.rsplit(".", 1)[0]) for d, t in tasks if "." in t]
    if grouped:
        dags, query = sorted({d for d, _ in grouped}), sorted({g for _, g in grouped})[0]
    else:
        dags, query = sorted({d for d, _ in tasks}), str(location).rstrip("/").rsplit("/", 1)[-1] or str(location)
    return f"{', '.join(dags)} / {query}" if dags else query


def _unique_names(known: list[dict[str, Any]]) -> None:
    """Make the names of registered entries unique: a name two checkpoints share gets the folder's
    name after it, or, if that is shared too, the whole location (configured names stay as given)."""
    def shared(names: list[str]) -> set[str]:
        return {n for n in names if names.count(n) > 1}

    own = [k for k in known if k.get("named_by_registry")]
    first = [k["name"] for k in known]
    for k in own:
        if k["name"] in shared(first):
            k["name"] = f"{k['name']} ({str(k['checkpoint']).rstrip('/').rsplit('/', 1)[-1]})"
    second = [k["name"] for k in known]
    for k, name in zip(own, [k["name"] for k in own]):
        if name in shared(second):
            k["name"] = f"{name.rsplit(' (', 1)[0]} ({k['checkpoint']})"
    for k in known:
        k.pop("named_by_registry", None)


def known_checkpoints(registered: list[dict[str, Any]], configured: list[dict[str, Any]], *,
                      exclude_threshold_dags: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Every known checkpoint: the configured entries (in configuration order), then the registered
    ones no entry names (by location).

    :param registered: records of :func:`read_registry`.
    :param configured: entries of :func:`watermark_ops.airflow.config.configured_checkpoints`.
    :param exclude_threshold_dags: DAG ids whose registered thresholds are ignored (the monitor
        reading what its own sensors registered from the previous reading).
    :return: ``[{"name": str (the configured name, else :func:`checkpoint_name` of a registered one,
        unique among them; else the location), "checkpoint": location, "missing_ok": bool, "thresholds": {<threshold>:
        value}, "dag_ids": [str], "tasks": [{"dag_id", "task_id", "operator"}], "landings": [str],
        "late_sink": str | None, "late": the newest run's late rows (:func:`record_late_rows`) | None,
        "assets": [{"name", "uri"}], "note": str | None,
        "conn_id": str | None, "storage_options": dict | None,
        "registered": bool, "configured": bool}]``. ``conn_id`` / ``storage_options``: the
        configured ones, else those of the first task (by DAG id and task id) that registered a
        connection. Thresholds: the configured ones over those
        of the first task that registered thresholds (a ``WatermarkStallSensor``), by DAG id and task id;
        ``missing_ok``: the configured value, else True (a registered job may not have run yet).
    """
    from watermark_ops.core.memory import memory_key

    excluded = set(exclude_threshold_dags)
    by_key = {memory_key(r["checkpoint"]): r for r in registered}
    out: list[dict[str, Any]] = []

    def merged(entry: dict[str, Any] | None, record: dict[str, Any] | None) -> dict[str, Any]:
        tasks = sorted((record or {}).get("tasks", []), key=lambda t: (str(t.get("dag_id")), str(t.get("task_id"))))
        health = next((t["thresholds"] for t in tasks
                       if isinstance(t.get("thresholds"), dict) and t.get("dag_id") not in excluded), None) or {}
        location = (entry or record)["checkpoint"]
        dag_ids = list((entry or {}).get("dag_ids", []))
        dag_ids += sorted({str(t.get("dag_id")) for t in tasks} - set(dag_ids))
        landings = list((entry or {}).get("landings", []))
        landings += [x for t in tasks for x in t.get("landings") or [] if x not in landings]
        assets = []
        for t in tasks:
            if isinstance(t.get("asset"), dict) and t["asset"] not in assets:
                assets.append(t["asset"])
        late_sinks = [(entry or {}).get("late_sink")] + [t.get("late_sink") for t in tasks]
        if (entry or {}).get("conn_id"):
            conn_id, storage_options = entry["conn_id"], entry.get("storage_options")
        else:
            task = next((t for t in tasks if isinstance(t.get("conn_id"), str) and t["conn_id"]), {})
            conn_id, storage_options = task.get("conn_id"), task.get("storage_options")
        name = (entry or {}).get("name")
        named_by_registry = not name and bool(tasks)
        if named_by_registry:
            name = checkpoint_name([(t.get("dag_id"), t.get("task_id")) for t in tasks], location)
        return {
            "name": name or location,
            "named_by_registry": named_by_registry,
            "checkpoint": location,
            "missing_ok": entry["missing_ok"] if entry else True,
            "thresholds": {**health, **((entry or {}).get("thresholds") or {})},
            "dag_ids": dag_ids,
            "tasks": [{"dag_id": t.get("dag_id"), "task_id": t.get("task_id"), "operator": t.get("operator")}
                      for t in tasks],
            "landings": landings,
            "late_sink": next((s for s in late_sinks if s), None),
            "late": (record or {}).get("late") if isinstance((record or {}).get("late"), dict) else None,
            "assets": assets,
            "note": (entry or {}).get("note"),
            "conn_id": conn_id,
            "storage_options": storage_options if isinstance(storage_options, dict) else None,
            "registered": record is not None,
            "configured": entry is not None,
        }

    seen = set()
    for entry in configured:
        key = memory_key(entry["checkpoint"])
        seen.add(key)
        out.append(merged(entry, by_key.get(key)))
    for key in sorted(set(by_key) - seen):
        out.append(merged(None, by_key[key]))
    _unique_names(out)
    return out


def monitor_checkpoints(context: Any) -> list[dict[str, Any]]:
    """The ``watermark_monitor`` DAG's list of watched checkpoints, one entry per known checkpoint
    (:func:`known_checkpoints`), as :func:`watermark_ops.airflow.monitor.evaluate_entry` takes it::

        {"checkpoint": location, "missing_ok": bool, <threshold>: value, ...,
         "name": str (only when configured), "conn_id": str, "storage_options": dict (only when set)}

    ``conn_id`` / ``storage_options``: the configured entry's (``[watermark_ops]``), else a
    registered task's when the registry records one. Run in a task with
    :data:`CHECKPOINT_REGISTRY` as inlet; the thresholds its own DAG's tasks registered are
    ignored (they would be the previous reading's).

    :raises ValueError: for a bad ``[watermark_ops]`` configuration (the task fails, naming it).
    """
    from watermark_ops.airflow.config import configured_checkpoints

    registered, problems = task_registry(context)
    for problem in problems:
        log.warning("%s: kept aside, not watched", problem)
    known = known_checkpoints(registered, configured_checkpoints(), exclude_threshold_dags=[context["ti"].dag_id])
    out = []
    for k in known:
        item: dict[str, Any] = {"checkpoint": k["checkpoint"], "missing_ok": k["missing_ok"], **k["thresholds"]}
        if k.get("name") and k["name"] != k["checkpoint"]:  # configured, or DAG id / query of a registered one
            item["name"] = k["name"]
        if k.get("conn_id"):
            item["conn_id"] = k["conn_id"]
            if k.get("storage_options"):
                item["storage_options"] = k["storage_options"]
        out.append(item)
    return out
