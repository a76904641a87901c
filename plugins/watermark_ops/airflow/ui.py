"""The watermark pages in the Airflow UI: a FastAPI app that Airflow's api-server mounts.

Routes (under the mount prefix, ``/watermark-ops`` in :mod:`watermark_ops.airflow.plugin`)::

    GET /[?page=N&page_size=M]              overview: every known checkpoint, problems first, paged
                                            (HTML; default 100 rows a page, at most 1,000)
    GET /api/checkpoints[?page=N&page_size=M&dag_id=D&state=S]    the same page as JSON, with the
                                            totals and the count per state; dag_id: that DAG's
                                            checkpoints (403 if the user may not read it); state:
                                            the rows counted under it (core.overview.state_key)
    GET /api/dags/{dag_id}/runs/{run_id}    that DAG run's batches, late rows, corrections and
                                            restart preflight, per checkpoint of the DAG
    GET /static/watermark-views.umd.js      the React views (Airflow's react_apps), unauthenticated
    GET /checkpoints/{root}/{path}[?limit=N]     one checkpoint's page (HTML); the chart draws the
                                                 newest N batches (default 500, 0: all)
    GET /api/checkpoints/{root}/{path}[?limit=N] the same data as JSON
    GET /dags/{dag_id}[?task_id=...]        the page of the checkpoint the task (else the DAG)
                                            touches, when it is one (the link from the DAG and
                                            task-instance views); else the overview

The overview is one shared evaluation of every known checkpoint
(:class:`watermark_ops.core.overview_cache.SharedOverview`: each checkpoint read only for what
changed since the last look, at most one refresh at a time, served for ``[watermark_ops]
overview_max_age`` seconds), then filtered per user and paged. The endpoints are synchronous
(FastAPI runs them in its threadpool): nothing is read on the api-server's event loop.

Every route requires an authenticated Airflow user, exactly as the rest of the UI: the JWT of the
``Authorization: Bearer`` header or of the UI's ``_token`` cookie, checked by the api-server's own
``airflow.api_fastapi.core_api.security.get_user`` (plugin apps are open by default; this one is
not). No token: 401; an invalid one: 403.

Who sees what (:mod:`watermark_ops.airflow.access`, Airflow's auth manager decides): a checkpoint
is shown (overview row, page, JSON, the DAG tab's link) only to a user who may read at least one DAG
claiming it (that registered it or that its ``[watermark_ops]`` entry names in ``dag_ids``); one no
DAG claims, only to a user who may read assets (admins). A page, JSON or DAG-tab URL of a
checkpoint the user may not see: 403, before the checkpoint is read.

A page reads only checkpoints under the roots ``roots()`` gives
(:class:`watermark_ops.core.roots.CheckpointRoots`; the plugin adds each registered checkpoint's own
folder, :class:`watermark_ops.airflow.plugin.PageRoots`): a path that could escape is refused (400 or
404) before anything is read. A root may be an object-store prefix (``s3://bucket/checkpoints``,
read through the root's ``conn_id``, else the checkpoint's registered or configured ``conn_id``,
else the environment: :func:`_filesystem`) with the same confinement. The pages only read: the audit runs without memory, nothing is
written to a checkpoint or anywhere else. A checkpoint that cannot be read shows its error on
its row (the overview) or its page, never a 500.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from fastapi import Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from watermark_ops.core.overview import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, empty_row
from watermark_ops.core.overview_cache import Job, SharedOverview
from watermark_ops.core.roots import CheckpointRoots, PathRefused

__all__ = ["DEFAULT_MAX_AGE", "STATIC_DIR", "create_app", "require_user", "run_part"]

#: Seconds one evaluation of the overview serves every later view (``[watermark_ops]
#: overview_max_age``): within it a view reads nothing; past it the next view reads what changed.
DEFAULT_MAX_AGE = 10.0

#: The folder of the React views' built bundle and its manifest (``ui/``, built by ``make ui``).
STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")

#: A known checkpoint, as :func:`watermark_ops.airflow.registry.known_checkpoints` gives it:
#: ``{"name", "checkpoint", "missing_ok", "thresholds", "dag_ids", "tasks", "landings", "note", ...}``,
#: with ``"late_sink"`` (the late-row ledger's sink folder, ``batch=<N>.jsonl`` files) when a task
#: registered one: the checkpoint page shows its rows per run beside Spark's count.
Known = dict[str, Any]


async def require_user(request: Request) -> Any:
    """The authenticated Airflow user of a request (the api-server's ``get_user``: bearer token
    first, then the UI's ``_token`` cookie).

    :raises fastapi.HTTPException: 401 without a token, 403 for an invalid one.
    """
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    credentials = await bearer_scheme(request)
    return await get_user(request, None, credentials)


def create_app(roots: Callable[[], CheckpointRoots], known: Callable[[], list[Known]], *,
               chart_limit: int | None = None, max_age: float | None = None) -> FastAPI:
    """The app: pages and JSON over :mod:`watermark_ops.core.overview`, rendered by
    :mod:`watermark_ops.render.html`.

    :param roots: returns the checkpoint roots (read per request: configuration changes apply
        without a restart).
    :param known: returns the known checkpoints (read per request).
    :param chart_limit: the newest batches a checkpoint page draws (default
        :data:`watermark_ops.core.overview.DEFAULT_CHART_LIMIT`).
    :param max_age: seconds one evaluation of the overview serves later views (every viewer's);
        None: ``[watermark_ops] overview_max_age``, read per request, default :data:`DEFAULT_MAX_AGE`.
    """
    app = FastAPI(title="watermark-ops", dependencies=[Depends(require_user)], docs_url=None, redoc_url=None,
                  openapi_url=None)

    def base(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/")

    shared = SharedOverview(max_age=DEFAULT_MAX_AGE if max_age is None else max_age,
                            failed_row=lambda job, exc: _failed_row({"checkpoint": job.location, "name": None}, exc))
    app.state.overview = shared  # the shared evaluation (its memory and refresh count), for tests and benchmarks
    # The React views' bundle (no data in it): a mount, outside the app's authentication, as Airflow
    # serves its own UI's assets. Missing until `make ui` built it (the wheel carries it).
    from fastapi.staticfiles import StaticFiles

    app.mount("/static", StaticFiles(directory=STATIC_DIR, check_dir=False), name="static")

    def rows(request: Request, user: Any) -> tuple[list[dict[str, Any]], CheckpointRoots, str]:
        """Every row this user may see, problems first: one shared evaluation of every known
        checkpoint (:class:`~watermark_ops.core.overview_cache.SharedOverview`), then the user's
        filter (:func:`~watermark_ops.airflow.access.visible_entries`)."""
        from watermark_ops.airflow.access import visible_entries
        from watermark_ops.core.overview import sort_overview, with_late_rows
        from watermark_ops.core.times import iso_utc, now_ms

        try:
            checkpoint_roots = roots()
        except ValueError as exc:  # a bad checkpoint_roots option: one row names it, nothing is read
            return [_error_row("checkpoint roots", str(exc))], CheckpointRoots({}), iso_utc(now_ms())
        entries = _known_or_error(known)
        addresses: dict[str, Any] = {}

        def address_of(location: str) -> Any:  # each location resolved once per request
            if location not in addresses:
                addresses[location] = checkpoint_roots.address(location)
            return addresses[location]

        jobs, failed = [], {}
        for entry in entries:
            address = None if entry.get("config_error") else address_of(entry["checkpoint"])
            if address is None:
                continue
            try:
                jobs.append(_job(entry, _filesystem(entry, checkpoint_roots, address[0])))
            except Exception as exc:  # bad thresholds, an unknown connection: that row says so
                failed[_job_key(entry)] = _failed_row(entry, exc)
        evaluation = shared.evaluate(jobs, max_age=_max_age(max_age))
        out = []
        for entry in visible_entries(user, entries, same=_place(checkpoint_roots, address_of)):
            if entry.get("config_error"):  # the config itself cannot be read: one row says so
                out.append(entry)
                continue
            address = address_of(entry["checkpoint"])
            if address is None:
                row = _not_under_roots(entry)
                row["address"] = None
            else:
                # A checkpoint named by its location is shown by its address: root/path.
                shown = f"{address[0]}/{address[1]}" if entry["name"] == entry["checkpoint"] else entry["name"]
                key = _job_key(entry)
                row = with_late_rows(dict(failed.get(key) or evaluation.rows[key], name=shown), entry.get("late"))
                row["url"] = f"{base(request)}/checkpoints/{address[0]}/{address[1]}"
                row["address"] = f"{address[0]}/{address[1]}"
            row["dag_ids"] = entry.get("dag_ids", [])
            out.append(row)
        return sort_overview(out), checkpoint_roots, iso_utc(evaluation.at_ms)

    # Sync endpoints: FastAPI runs them in its threadpool, off the api-server's event loop.
    @app.get("/", response_class=HTMLResponse)
    def overview(request: Request, page: int = Query(1, ge=1),
                 page_size: int = Query(DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE),
                 user: Any = Depends(require_user)) -> Response:
        from watermark_ops.core.overview import page_of
        from watermark_ops.render.html import overview_page

        found, checkpoint_roots, at = rows(request, user)
        shown, paging = page_of(found, page, page_size)
        return HTMLResponse(overview_page(shown, base=base(request), roots=checkpoint_roots.roots, evaluated_at=at,
                                          paging=paging))

    @app.get("/api/checkpoints")
    def overview_json(request: Request, page: int = Query(1, ge=1),
                      page_size: int = Query(DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE),
                      dag_id: str | None = None, state: str | None = None,
                      user: Any = Depends(require_user)) -> Response:
        # dag_id: that DAG's checkpoints (403 for a DAG the user may not read); state: the rows
        # counted under that state (core.overview.state_key); "states" counts before that filter.
        from watermark_ops.airflow.access import may_read_dag
        from watermark_ops.core.overview import count_states, page_of, state_key

        if dag_id is not None and not may_read_dag(user, dag_id):
            return JSONResponse({"detail": f"DAG {dag_id}: not readable by this user"}, 403)
        found, checkpoint_roots, at = rows(request, user)
        if dag_id is not None:
            found = [row for row in found if dag_id in row.get("dag_ids", ())]
        for row in found:  # what the views count and filter by, named by the server alone
            row["state_key"] = state_key(row)
        states = count_states(found)
        if state:
            found = [row for row in found if row["state_key"] == state]
        shown, paging = page_of(found, page, page_size)
        return JSONResponse({"evaluated_at": at, "roots": checkpoint_roots.roots, **paging, "states": states,
                             "checkpoints": shown})

    @app.get("/api/dags/{dag_id}/runs/{run_id}")
    def dag_run_json(request: Request, dag_id: str, run_id: str, user: Any = Depends(require_user)) -> Response:
        # For each checkpoint of the DAG the user may see: that run's batches, late rows,
        # corrections and the restart preflight (the progress log's run_tag is the DAG run id).
        from watermark_ops.airflow.access import may_read_dag

        if not may_read_dag(user, dag_id):
            return JSONResponse({"detail": f"DAG {dag_id}: not readable by this user"}, 403)
        found, _, _ = rows(request, user)
        out = []
        for row in found:
            if dag_id not in row.get("dag_ids", ()):
                continue
            item = {"name": row["name"], "address": row.get("address"), "error": row.get("error"), "runs": [],
                    "points": [], "corrections": [], "preflight": None, "problems": []}
            if row.get("address") and not row.get("error"):
                root, path = row["address"].split("/", 1)
                try:
                    item.update(run_part(detail(root, path, 0, user), run_id))
                except PathRefused as exc:
                    item["error"] = exc.reason
                except Exception as exc:  # noqa: BLE001 - unreadable storage: that checkpoint says so
                    item["error"] = f"cannot be read: {exc!r}"
            out.append(item)
        return JSONResponse({"dag_id": dag_id, "run_id": run_id, "checkpoints": out})

    def detail(root: str, path: str, limit: int | None, user: Any) -> dict[str, Any]:
        from watermark_ops.airflow.access import may_see_location
        from watermark_ops.core.overview import DEFAULT_CHART_LIMIT, checkpoint_detail

        checkpoint_roots = roots()
        fs = _filesystem(None, checkpoint_roots, root)
        exact = getattr(checkpoint_roots, "exact", {})
        if fs is None and root in exact and root not in checkpoint_roots.roots:  # a registered checkpoint's own root
            fs = _filesystem(_entry_for(known, checkpoint_roots, exact[root]), checkpoint_roots, None)
        # raises PathRefused before anything is read
        location = checkpoint_roots.locate(root, path, **_reading(fs))
        if not may_see_location(user, location, _known_or_error(known), same=_place(checkpoint_roots)):
            raise PathRefused(403, f"{root}/{path}: not shown to this user (no DAG claiming it may be read)")
        entry = _entry_for(known, checkpoint_roots, location)
        name = entry.get("name") if entry.get("name") not in (None, entry.get("checkpoint")) else f"{root}/{path}"
        if limit is None:
            limit = DEFAULT_CHART_LIMIT if chart_limit is None else chart_limit
        if fs is None:
            fs = _filesystem(entry, checkpoint_roots, root)
        return checkpoint_detail(location, _thresholds(entry), name=name, landings=entry.get("landings", ()),
                                 chart_limit=max(0, limit), late_sink=entry.get("late_sink"),
                                 state_thresholds=_state_thresholds(entry), **_reading(fs))

    @app.get("/checkpoints/{root}/{path:path}", response_class=HTMLResponse)
    def checkpoint(request: Request, root: str, path: str, limit: int | None = None,
                   user: Any = Depends(require_user)) -> Response:
        from watermark_ops.render.html import checkpoint_page, error_page

        try:
            data = detail(root, path, limit, user)
        except PathRefused as exc:
            return HTMLResponse(error_page("Checkpoint not shown", exc.reason, base=base(request)), exc.status)
        except Exception as exc:  # unreadable storage: say so on the page
            return HTMLResponse(error_page("Checkpoint cannot be read", f"{root}/{path}: {exc!r}", base=base(request)))
        return HTMLResponse(checkpoint_page(data, base=base(request),
                                            json_url=f"{base(request)}/api/checkpoints/{root}/{path}"))

    @app.get("/api/checkpoints/{root}/{path:path}")
    def checkpoint_json(root: str, path: str, limit: int | None = None, user: Any = Depends(require_user)) -> Response:
        try:
            data = detail(root, path, limit, user)
        except PathRefused as exc:
            return JSONResponse({"detail": exc.reason}, exc.status)
        except Exception as exc:
            return JSONResponse({"location": f"{root}/{path}", "error": f"cannot be read: {exc!r}"})
        return Response(json.dumps(data), media_type="application/json")

    @app.get("/dags/{dag_id}")
    def for_dag(request: Request, dag_id: str, task_id: str | None = None,
                user: Any = Depends(require_user)) -> Response:
        # task_id comes with the task-instance tab's link: the checkpoint that task touches, else the
        # DAG's one checkpoint; a DAG (or task) touching several leads to the overview.
        from watermark_ops.airflow.access import may_read_dag
        from watermark_ops.render.html import error_page

        if not may_read_dag(user, dag_id):  # every checkpoint it leads to is claimed by this DAG
            return HTMLResponse(error_page("Checkpoint not shown", f"DAG {dag_id}: not readable by this user",
                                           base=base(request)), 403)
        try:
            checkpoint_roots = roots()
        except ValueError:
            return RedirectResponse(f"{base(request)}/", 307)  # the overview names the bad option
        entries = [e for e in _known_or_error(known) if "checkpoint" in e and dag_id in e.get("dag_ids", ())]
        by_task = [e for e in entries if any(t.get("dag_id") == dag_id and t.get("task_id") == task_id
                                             for t in e.get("tasks", ()))]
        chosen = by_task if task_id and by_task else entries
        if len(chosen) == 1:
            address = checkpoint_roots.address(chosen[0]["checkpoint"])
            if address is not None:
                return RedirectResponse(f"{base(request)}/checkpoints/{address[0]}/{address[1]}", 307)
        return RedirectResponse(f"{base(request)}/", 307)

    return app


def run_part(detail: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The part of a checkpoint page (:func:`watermark_ops.core.overview.checkpoint_detail`) about one
    DAG run: ``{"runs": its runs (``run_tag`` equal to ``run_id``; ``number``: 1-based among the
    checkpoint's runs), "points": the chart points of
    their batches, "corrections": those made by it, "preflight": the checkpoint's restart preflight,
    "problems": the page's problems}``."""
    runs = [dict(run, number=index + 1) for index, run in enumerate(detail.get("runs", []))
            if run.get("run_tag") == run_id]
    batch_ids = {b for run in runs for b in run.get("batch_ids", ())}
    return {"runs": runs, "points": [p for p in detail["chart"]["points"] if p["batch_id"] in batch_ids],
            "corrections": [c for c in detail.get("corrections", []) if c.get("run") == run_id],
            "preflight": detail.get("preflight"), "problems": detail.get("problems", [])}


def _filesystem(entry: Known | None, checkpoint_roots: CheckpointRoots, root: str | None) -> Any:
    """The fsspec filesystem a page reads a checkpoint with, or None (a local folder, or a URL read
    through fsspec with the api-server's environment).

    Under an object-store root: the root's ``conn_id`` (``[watermark_ops] checkpoint_roots``,
    ``{"url", "conn_id", "storage_options"}``) or its fsspec ``storage_options``; else the
    checkpoint's own ``conn_id`` (registered by its tasks or configured,
    :func:`watermark_ops.airflow.registry.known_checkpoints`), through
    :func:`watermark_ops.airflow.storage.checkpoint_filesystem`.

    :raises airflow.exceptions.AirflowNotFoundException: a ``conn_id`` that names no connection
        (the page or row then says the checkpoint cannot be read).
    """
    from watermark_ops.airflow.storage import checkpoint_filesystem

    if root is not None and root in checkpoint_roots.roots and checkpoint_roots.is_url(root):
        access = checkpoint_roots.access.get(root) or {}
        if access.get("conn_id"):
            return checkpoint_filesystem(checkpoint_roots.roots[root], access["conn_id"], access.get("storage_options"))
        if access.get("storage_options"):
            import fsspec.core

            return fsspec.core.url_to_fs(checkpoint_roots.roots[root], **access["storage_options"])[0]
    if entry and entry.get("conn_id"):
        return checkpoint_filesystem(entry["checkpoint"], entry["conn_id"], entry.get("storage_options"))
    return None


def _reading(fs: Any) -> dict[str, Any]:
    """``{"filesystem": fs}`` for the core, or nothing (the core resolves the location itself)."""
    return {} if fs is None else {"filesystem": fs}


def _place(checkpoint_roots: CheckpointRoots,
           address: Callable[[str], Any] | None = None) -> Callable[[str], Any]:
    """Location -> its page address (two spellings of one folder are one place), else the
    normalised location: what :mod:`watermark_ops.airflow.access` adds claims up by.

    :param address: ``checkpoint_roots.address``, or a memo of it (one request resolves each
        location once)."""
    from watermark_ops.core.memory import memory_key

    resolve = address or checkpoint_roots.address

    def place(location: str) -> Any:
        return resolve(location) or memory_key(location)

    return place


def _known_or_error(known: Callable[[], list[Known]]) -> list[dict[str, Any]]:
    try:
        return list(known())
    except Exception as exc:  # a broken config file: one row names it, the page still renders
        return [_error_row("watermark monitor config", str(exc))]


def _error_row(name: str, error: str) -> dict[str, Any]:
    """An overview row for a configuration that cannot be read (ranked first)."""
    return dict(empty_row("", name), url=None, dag_ids=[], error=error, rank=0, config_error=True)


def _max_age(given: float | None) -> float:
    """``given``, else ``[watermark_ops] overview_max_age`` (seconds, read now), else :data:`DEFAULT_MAX_AGE`."""
    if given is not None:
        return given
    from airflow.configuration import conf

    try:
        return max(0.0, conf.getfloat("watermark_ops", "overview_max_age", fallback=DEFAULT_MAX_AGE))
    except (ValueError, TypeError):
        return DEFAULT_MAX_AGE


def _job_key(entry: Known) -> tuple:
    """What makes two entries one evaluated row: the location and how it is read and classified."""
    return (entry["checkpoint"], json.dumps({k: entry.get(k) for k in ("thresholds", "missing_ok", "conn_id",
                                                                        "storage_options")},
                                            sort_keys=True, default=str))


def _job(entry: Known, filesystem: Any) -> Job:
    """The shared evaluation's job of a known entry read with ``filesystem`` (:func:`_filesystem`;
    None: the core resolves the location).

    :raises Exception: bad thresholds.
    """
    return Job(key=_job_key(entry), location=entry["checkpoint"], thresholds=_thresholds(entry),
               missing_ok=bool(entry.get("missing_ok", False)), filesystem=filesystem,
               storage_options=None if filesystem is not None else entry.get("storage_options"),
               state_thresholds=_state_thresholds(entry))


def _thresholds(entry: Known):
    from watermark_ops.airflow.config import THRESHOLD_KEYS
    from watermark_ops.core.thresholds import Thresholds

    return Thresholds(**{k: v for k, v in entry.get("thresholds", {}).items() if k in THRESHOLD_KEYS})


def _state_thresholds(entry: Known):
    """The entry's state thresholds (``growing_batches``, ... given with the stall's)."""
    from watermark_ops.airflow.config import STATE_THRESHOLD_KEYS
    from watermark_ops.core.thresholds import StateThresholds

    return StateThresholds(**{k: v for k, v in entry.get("thresholds", {}).items() if k in STATE_THRESHOLD_KEYS})


def _entry_for(known: Callable[[], list[Known]], roots: CheckpointRoots, location: str) -> Known:
    """The known entry of a located checkpoint (its thresholds, landings), or an empty one."""
    for entry in _known_or_error(known):
        if "checkpoint" in entry and roots.address(entry["checkpoint"]) == roots.address(location):
            return entry
    return {}


def _not_under_roots(entry: Known) -> dict[str, Any]:
    return dict(empty_row(entry["checkpoint"], entry["name"]), url=None,
                error="not under a configured checkpoint root: not read", rank=0)


def _failed_row(entry: Known, exc: Exception) -> dict[str, Any]:
    return dict(empty_row(entry["checkpoint"], entry["name"]), url=None, error=f"cannot be read: {exc!r}", rank=0)
