"""The Airflow plugin of watermark-ops: the watermark pages in the Airflow UI.

Registered through the ``airflow.plugins`` entry point of the installed package (``pyproject.toml``),
nothing in the plugins folder. Airflow's api-server mounts the FastAPI app of
:mod:`watermark_ops.airflow.ui` at ``/watermark-ops`` (the JSON, the server-rendered pages for curl
and old UIs, the views' bundle), and the UI loads the React views (``ui/``, AIP-68 ``react_apps``)
natively: **Watermarks** under Browse (the overview and each checkpoint), a **Watermark** tab on each
DAG (its checkpoints) and DAG run (that run's batches), and **Watermark states** on the home
dashboard. ``[watermark_ops] ui_views`` turns each off.

Which checkpoints (:func:`page_known`): those DAG tasks registered
(:mod:`watermark_ops.airflow.registry`) and those of ``[watermark_ops] checkpoints`` /
``monitor_config`` (:mod:`watermark_ops.airflow.config`). What a page may read (:func:`page_roots`):
the folders and prefixes of ``[watermark_ops] checkpoint_roots``, and each registered checkpoint's own
folder (local or on object storage), exactly that one (:class:`PageRoots`).
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from watermark_ops.airflow.ui import create_app
from watermark_ops.core.roots import CheckpointRoots, PathRefused, is_url

__all__ = ["URL_PREFIX", "VIEW_PLACES", "PageRoots", "WatermarkOpsPlugin", "page_known", "page_roots", "react_apps"]

log = logging.getLogger(__name__)

URL_PREFIX = "/watermark-ops"


@dataclass(frozen=True)
class PageRoots(CheckpointRoots):
    """The configured roots, plus single checkpoint folders a page may read and nothing beside them.

    :ivar exact: root name -> one checkpoint folder (local) or object-store location (a URL,
        read with the ``conn_id`` its tasks registered). Its one page address is
        ``<name>/<the folder's base name>``; any other path under that name is refused (404).
    """

    exact: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def name_for(location: str) -> str:
        """``registered-<12 hex of the SHA-256 of the normalised location>``: stable across requests."""
        from watermark_ops.core.memory import memory_key

        return "registered-" + hashlib.sha256(memory_key(location).encode()).hexdigest()[:12]

    def locate(self, root: str, relative: str, **kwargs: Any) -> str:
        """As :meth:`CheckpointRoots.locate`; for an exact root only its one folder.

        :raises PathRefused: 404 for another path under an exact root, or a folder that is gone.
        """
        if root in self.exact and root not in self.roots:
            location = self.exact[root]
            if relative != os.path.basename(location.rstrip("/")):
                raise PathRefused(404, f"no checkpoint folder {relative!r} under root {root!r}")
            if is_url(location):  # exactly that prefix: nothing else is named
                if not self._url_dir_exists(root, location, kwargs.get("filesystem")):
                    raise PathRefused(404, f"no checkpoint folder {relative!r} under root {root!r}")
                return location
            target = os.path.realpath(location)
            if not os.path.isdir(target):
                raise PathRefused(404, f"no checkpoint folder {relative!r} under root {root!r}")
            return target
        return super().locate(root, relative, **kwargs)

    def address(self, location: str) -> tuple[str, str] | None:
        """As :meth:`CheckpointRoots.address`; else the exact root holding exactly ``location``."""
        found = super().address(location)
        if found is not None:
            return found
        if is_url(location):
            for name, url in self.exact.items():
                if is_url(url) and url == location.rstrip("/"):
                    return name, url.rsplit("/", 1)[-1]
            return None
        path = os.path.realpath(location.removeprefix("file://"))
        for name, folder in self.exact.items():
            if not is_url(folder) and os.path.realpath(folder) == path:
                return name, os.path.basename(folder.rstrip("/"))
        return None


def page_known() -> list[dict[str, Any]]:
    """The known checkpoints (:func:`watermark_ops.airflow.registry.known_checkpoints`) for the pages.

    A bad ``[watermark_ops]`` configuration becomes one error row (the registered checkpoints are
    still listed); the registry's malformed records are logged and kept aside.
    """
    from watermark_ops.airflow.config import configured_checkpoints
    from watermark_ops.airflow.registry import known_checkpoints, server_registry
    from watermark_ops.core.overview import empty_row

    registered, problems = server_registry()
    for problem in problems:
        log.warning("%s: kept aside, not shown", problem)
    errors = []
    try:
        configured = configured_checkpoints()
    except ValueError as exc:
        configured = []
        errors.append(dict(empty_row("", "watermark-ops configuration"), url=None, dag_ids=[], error=str(exc),
                           rank=0, config_error=True))
    return errors + known_checkpoints(registered, configured)


def page_roots() -> PageRoots:
    """``[watermark_ops] checkpoint_roots`` plus an exact root for each registered checkpoint (local,
    or on object storage) that no configured root holds.

    :raises ValueError: for a bad ``checkpoint_roots`` (the overview names it).
    """
    from watermark_ops.airflow.config import configured_roots
    from watermark_ops.airflow.registry import server_registry

    roots = configured_roots()
    exact = {}
    for record in server_registry()[0]:
        location = record["checkpoint"]
        if roots.address(location) is not None:
            continue
        if is_url(location):  # read with the connection its tasks registered
            location = location.rstrip("/")
            if "/" in location.split("://", 1)[1]:  # a prefix below a bucket, not a whole bucket
                exact[PageRoots.name_for(location)] = location
        else:
            location = os.path.abspath(location.removeprefix("file://"))
            exact[PageRoots.name_for(location)] = location
    return PageRoots(roots.roots, exact, access=roots.access)


#: Each view's place in Airflow's UI (AIP-68 ``react_apps``), by destination; its ``name`` (the
#: label, and the global its component is set on) comes from the bundle's manifest.
VIEW_PLACES: dict[str, dict[str, Any]] = {
    "nav": {"category": "browse", "url_route": "watermarks"},
    "dag": {"url_route": "watermarks-dag"},
    "dag_run": {"url_route": "watermarks-run"},
    "dashboard": {"url_route": "watermarks-dashboard"},
}


def react_apps(views: str | None = None, static_dir: str | None = None) -> list[dict[str, Any]]:
    """The ``react_apps`` entries of the views that are on, in :data:`VIEW_PLACES` order.

    :param views: comma-separated destinations (``[watermark_ops] ui_views`` when None; default every one).
    :param static_dir: the folder of the built bundle and ``watermark-views.json`` (default
        :data:`watermark_ops.airflow.ui.STATIC_DIR`).
    :return: ``[{"name", "bundle_url": "/watermark-ops/static/watermark-views.umd.js?v=<sha256[:12]>",
        "destination", "url_route", ...}]``; empty, with a warning in the log, when the bundle was
        never built (a source checkout before ``make ui``), and for an unknown destination a warning.
    """
    import json

    from watermark_ops.airflow.ui import STATIC_DIR

    if views is None:
        from airflow.configuration import conf

        views = conf.get("watermark_ops", "ui_views", fallback=",".join(VIEW_PLACES))
    wanted = [v.strip() for v in views.split(",") if v.strip()]
    for unknown in [v for v in wanted if v not in VIEW_PLACES]:
        log.warning("[watermark_ops] ui_views: %r is no view (expected some of %s): ignored", unknown,
                    ", ".join(VIEW_PLACES))
    if not wanted:
        return []
    manifest_path = os.path.join(static_dir or STATIC_DIR, "watermark-views.json")
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            manifest = json.load(handle)
        names, bundle, digest = manifest["views"], manifest["bundle"], manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("the watermark views are off: their bundle's manifest %s cannot be read (%s); build it "
                    "with `make ui`", manifest_path, exc)
        return []
    return [{"name": names[d], "bundle_url": f"{URL_PREFIX}/static/{bundle}?v={digest[:12]}", "destination": d,
             **VIEW_PLACES[d]} for d in VIEW_PLACES if d in wanted and d in names]


class WatermarkOpsPlugin(AirflowPlugin):
    """Registers the watermark JSON and pages (FastAPI app) and the React views in the UI (``react_apps``:
    Browse > Watermarks, a DAG's tab, a DAG run's tab, the home dashboard; ``[watermark_ops] ui_views``)."""

    name = "watermark_ops"
    fastapi_apps = [{"app": create_app(page_roots, page_known), "url_prefix": URL_PREFIX, "name": "watermark-ops"}]
    react_apps = react_apps()
