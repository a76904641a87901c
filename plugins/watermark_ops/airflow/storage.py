"""Where a checkpoint's filesystem comes from in Airflow: an Airflow connection (``conn_id``).

Every Airflow face (operators, sensors, triggers, the monitor, the watermark pages) takes a
``conn_id`` next to a checkpoint location and hands the core the filesystem built here; the core
itself never imports Airflow (it takes ``filesystem=``). With a ``conn_id``, the filesystem is
Airflow's own, the one behind ``ObjectStoragePath(location, conn_id=conn_id)``
(``airflow.sdk.io.get_fs(scheme, conn_id, storage_options)``), e.g. the Amazon provider's
``get_fs`` (``apache-airflow-providers-amazon[s3fs]``), which builds s3fs from the ``aws``
connection: endpoint, credentials, region, and its ``storage_options`` as botocore ``config_kwargs``.
Without one, the core resolves the location itself: a local path is read with ``os``, a URL through
fsspec with the process's environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...).
"""

from __future__ import annotations

import json
import threading
from typing import Any

__all__ = ["DEFAULT_POOL_CONNECTIONS", "checkpoint_filesystem"]

#: botocore's ``max_pool_connections`` default is 10, which would cap the core's concurrent reads
#: (:data:`watermark_ops.core.checkpoint.MAX_CONCURRENT_READS`); a connection's own
#: ``config_kwargs`` or the caller's ``storage_options`` override it.
DEFAULT_POOL_CONNECTIONS = 32

_cache: dict[tuple[str, str, str], Any] = {}
_lock = threading.Lock()


def checkpoint_filesystem(location: Any, conn_id: str | None = None,
                          storage_options: dict[str, Any] | None = None) -> Any:
    """The fsspec filesystem to read ``location`` with, or None to let the core resolve it.

    :param location: a local path or URL (``s3://bucket/prefix``), or an ``ObjectStoragePath``.
    :param conn_id: an Airflow connection id (e.g. an ``aws`` connection); None: no filesystem
        here (the core reads local paths with ``os`` and URLs through fsspec with
        ``storage_options`` and the environment).
    :param storage_options: with ``conn_id``, the provider's storage options (for S3: botocore
        ``config_kwargs``, e.g. ``{"max_pool_connections": 64}``).
    :return: an fsspec ``AbstractFileSystem`` (one per scheme, connection and options in this
        process: the connection is looked up once), or None.
    :raises airflow.exceptions.AirflowNotFoundException: when ``conn_id`` names no connection.
    :raises ValueError: when no Airflow provider registers a filesystem for the location's scheme.
    """
    if not conn_id:
        return None
    from airflow.sdk.io import get_fs

    scheme = str(location).split("://", 1)[0] if "://" in str(location) else "file"
    options = dict(storage_options or {})
    if scheme in ("s3", "s3a", "s3n"):
        options.setdefault("max_pool_connections", DEFAULT_POOL_CONNECTIONS)
    key = (scheme, conn_id, json.dumps(options, sort_keys=True, default=str))
    with _lock:
        fs = _cache.get(key)
    if fs is None:
        from airflow.sdk import BaseHook

        # The Amazon provider falls back to anonymous access for a connection it cannot find: look
        # it up first, so that a misspelt conn_id is an error, not an anonymous read.
        BaseHook.get_connection(conn_id)
        fs = get_fs(scheme, conn_id, options or None)
        with _lock:
            fs = _cache.setdefault(key, fs)
    return fs
