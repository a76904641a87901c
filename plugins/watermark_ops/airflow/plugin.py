"""The Airflow plugin of watermark-ops: the watermark pages in the Airflow UI.

Registered through the ``airflow.plugins`` entry point of the installed package (``pyproject.toml``),
nothing in the plugins folder. Airflow's api-server mounts the FastAPI app of
:mod:`watermark_ops.airflow.ui` at ``/watermark-ops`` and the UI shows it through ``external_views``:
**Watermarks** under Browse (the overview), and a **Watermark** tab on each DAG and task instance
(the page of the checkpoint that DAG or task touches; the overview when it touches none or several).

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

__all__ = ["URL_PREFIX", "PageRoots", "WatermarkOpsPlugin", "page_known", "page_roots"]

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


class WatermarkOpsPlugin(AirflowPlugin):
    """Registers the watermark pages (FastAPI app) and their places in the UI (external views)."""

    name = "watermark_ops"
    fastapi_apps = [{"app": create_app(page_roots, page_known), "url_prefix": URL_PREFIX, "name": "watermark-ops"}]
    external_views = [
        {"name": "Watermarks", "href": f"{URL_PREFIX}/", "destination": "nav", "category": "browse",
         "url_route": "watermarks"},
        {"name": "Watermark", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}", "destination": "dag",
         "url_route": "watermark-dag"},
        {"name": "Watermark", "href": f"{URL_PREFIX}/dags/{{DAG_ID}}?task_id={{TASK_ID}}",
         "destination": "task_instance", "url_route": "watermark-task"},
    ]
