"""Checkpoint roots: the only folders a web face may read checkpoints from.

A page address names a checkpoint as ``<root name>/<path relative to that root>``. Before
anything is read, :meth:`CheckpointRoots.locate` refuses a relative path that could leave its
root: ``..`` segments (also when they arrive percent-encoded as ``%2e%2e`` and were decoded by
the web framework), absolute paths, a scheme or drive (``s3://``, ``file:``, ``C:``), backslashes
and NUL bytes (:class:`PathRefused` with status 400), and then a path whose real location
(symlinks resolved, ``os.path.realpath``) is not inside the root's real location, or that does
not exist (status 404: the caller cannot tell a symlink out from a missing folder).

A root is a local folder or an object-store prefix (``s3://bucket/checkpoints``, any fsspec URL
``scheme://bucket/prefix``). Under a prefix there are no symlinks: the same segment checks apply
(400), then the checkpoint's URL is the prefix, ``/``, and the checked segments joined by ``/``,
so it can only name keys below ``<prefix>/`` (never ``s3://b/cp2/...`` for the root ``s3://b/cp``,
never another bucket); it must hold objects (a fresh listing of that prefix: 404 otherwise).

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import os
from urllib.parse import unquote
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CheckpointRoots", "PathRefused", "is_url"]


class PathRefused(ValueError):
    """A checkpoint path a face must not read.

    :ivar status: the HTTP status a web face answers with: 400 (the path is malformed or tries to
        leave its root) or 404 (no such root, nothing there, or it resolves outside the root).
    :ivar reason: what was wrong, in words (never the real location of a symlink's target).
    """

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def is_url(location: str) -> bool:
    """True for a URL with a scheme other than ``file://`` (an object-store location)."""
    return "://" in str(location) and not str(location).startswith("file://")


def _prefix(name: str, url: str) -> str:
    """An object-store root, checked: ``scheme://bucket[/prefix]`` without a trailing ``/``."""
    scheme, _, rest = url.partition("://")
    rest = rest.strip("/")
    segments = rest.split("/") if rest else []
    if (not scheme or not segments or any(s in ("", ".", "..") for s in segments)
            or any(c in url for c in "?#\\\x00")):
        raise ValueError(f"checkpoint root {name}={url!r}: expected a local folder or a URL "
                         f"scheme://bucket[/prefix] without '..', '?' or '#'")
    return f"{scheme}://{'/'.join(segments)}"


@dataclass(frozen=True)
class CheckpointRoots:
    """Named roots: local folders or object-store prefixes, e.g. ``{"runtime":
    "/srv/watermark-ops/checkpoints", "lake": "s3://bucket/checkpoints"}``.

    :ivar roots: root name → folder (absolute after :meth:`of`) or URL prefix (no trailing ``/``).
    :ivar access: root name → ``{"conn_id": str | None, "storage_options": dict | None}``, how a
        face reads an object-store root (an Airflow connection id is only carried here; the face
        builds the filesystem). Roots without an entry are read with the process's environment.
    """

    roots: dict[str, str]
    access: dict[str, dict[str, Any]] = field(default_factory=dict, kw_only=True)

    @classmethod
    def of(cls, roots: dict[str, Any]) -> CheckpointRoots:
        """Roots from a ``{name: folder or URL}`` mapping; a value may also be ``{"url": folder or
        URL, "conn_id": str, "storage_options": {...}}`` (local folders made absolute, not resolved).

        :raises ValueError: for a name that is empty or holds ``/``, a URL that is not
            ``scheme://bucket[/prefix]`` (or holds ``..``, ``?``, ``#``), or a malformed object value.
        """
        checked, access = {}, {}
        for name, value in roots.items():
            if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
                raise ValueError(f"checkpoint root name {name!r}: expected a non-empty name without '/'")
            options: dict[str, Any] = {}
            if isinstance(value, dict):
                unknown = set(value) - {"url", "conn_id", "storage_options"}
                if unknown or not isinstance(value.get("url"), str) or not value["url"]:
                    raise ValueError(f"checkpoint root {name}: expected a folder or URL, or an object "
                                     f"{{\"url\", \"conn_id\", \"storage_options\"}}, got {value!r}")
                if value.get("conn_id") is not None and not isinstance(value["conn_id"], str):
                    raise ValueError(f"checkpoint root {name}: conn_id must be a string, got {value['conn_id']!r}")
                if value.get("storage_options") is not None and not isinstance(value["storage_options"], dict):
                    raise ValueError(f"checkpoint root {name}: storage_options must be an object")
                options = {"conn_id": value.get("conn_id"), "storage_options": value.get("storage_options")}
                value = value["url"]
            if not isinstance(value, str) or not value:
                raise ValueError(f"checkpoint root {name}: expected a folder or URL, got {value!r}")
            if is_url(value):
                checked[name] = _prefix(name, value)
                if options:
                    access[name] = options
            else:
                checked[name] = os.path.abspath(os.path.expanduser(value.removeprefix("file://")))
        return cls(checked, access=access)

    def is_url(self, root: str) -> bool:
        """True when the root ``root`` is an object-store prefix."""
        return is_url(self.roots[root])

    def _url_dir_exists(self, root: str, url: str, filesystem: Any) -> bool:
        """Whether any object lies below ``url/`` (a fresh listing: a cached one may be stale)."""
        fs = filesystem
        if fs is None:
            import fsspec.core

            fs = fsspec.core.url_to_fs(url, **((self.access.get(root) or {}).get("storage_options") or {}))[0]
        path = fs._strip_protocol(url)
        fs.invalidate_cache(path)
        return bool(fs.isdir(path))

    def locate(self, root: str, relative: str, *, filesystem: Any = None) -> str:
        """The checkpoint folder a page address names, checked before anything under it is read.

        :param root: a root name.
        :param relative: the path below the root, ``/``-separated (already percent-decoded).
        :param filesystem: for an object-store root, the fsspec filesystem to check it with (e.g.
            the one of the root's ``conn_id``); None: fsspec from the URL, the root's
            ``storage_options`` and the environment. Unused for local roots.
        :return: a local root: the absolute real path of the folder (symlinks resolved), inside the
            root; an object-store root: ``<prefix>/<segments>``.
        :raises PathRefused: 400 for a malformed or escaping path, 404 for an unknown root, a
            path that resolves outside the root (a symlink out) or that is not a folder (holds
            no object, under a prefix).
        """
        if root not in self.roots:
            raise PathRefused(404, f"no checkpoint root named {root!r}")
        text = relative or ""
        if "\x00" in text or "\\" in text:
            raise PathRefused(400, "a checkpoint path must not hold backslashes or NUL bytes")
        if text.startswith("/") or ":" in text:
            raise PathRefused(400, "a checkpoint path is relative to its root: no absolute path, scheme or drive")
        segments = [s for s in text.split("/") if s not in ("", ".")]
        if any(s == ".." or unquote(s) in (".", "..") for s in segments):  # also a still-encoded %2e%2e
            raise PathRefused(400, "a checkpoint path must not hold '..' segments")
        if not segments:
            raise PathRefused(400, "name a checkpoint folder below the root")
        if self.is_url(root):
            target = self.roots[root] + "/" + "/".join(segments)
            if not self._url_dir_exists(root, target, filesystem):
                raise PathRefused(404, f"no checkpoint folder {'/'.join(segments)!r} under root {root!r}")
            return target
        base = os.path.realpath(self.roots[root])
        target = os.path.realpath(os.path.join(base, *segments))
        if os.path.commonpath([base, target]) != base or not os.path.isdir(target):
            raise PathRefused(404, f"no checkpoint folder {'/'.join(segments)!r} under root {root!r}")
        return target

    def address(self, location: str) -> tuple[str, str] | None:
        """The ``(root name, relative path)`` of a location inside a root (first root that holds
        it: by real path for a local one; for a URL, below ``<prefix>/`` with no ``..`` or empty
        segment), or None when no root holds it (the face must not read it)."""
        if is_url(location):
            url = location.rstrip("/")
            for name, prefix in self.roots.items():
                if is_url(prefix) and url.startswith(prefix + "/"):
                    segments = url[len(prefix) + 1:].split("/")
                    if all(s not in ("", ".", "..") for s in segments):
                        return name, "/".join(segments)
            return None
        path = os.path.realpath(location.removeprefix("file://"))
        for name, folder in self.roots.items():
            if is_url(folder):
                continue
            base = os.path.realpath(folder)
            if path != base and os.path.commonpath([base, path]) == base:
                return name, os.path.relpath(path, base).replace(os.sep, "/")
        return None
