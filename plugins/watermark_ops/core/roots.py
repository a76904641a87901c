"""Checkpoint roots: the only folders a web face may read checkpoints from.

A page address names a checkpoint as ``<root name>/<path relative to that root>``. Before
anything is read, :meth:`CheckpointRoots.locate` refuses a relative path that could leave its
root: ``..`` segments (also when they arrive percent-encoded as ``%2e%2e`` and were decoded by
the web framework), absolute paths, a scheme or drive (``s3://``, ``file:``, ``C:``), backslashes
and NUL bytes (:class:`PathRefused` with status 400), and then a path whose real location
(symlinks resolved, ``os.path.realpath``) is not inside the root's real location, or that does
not exist (status 404: the caller cannot tell a symlink out from a missing folder).

Roots are local folders. Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["CheckpointRoots", "PathRefused"]


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


@dataclass(frozen=True)
class CheckpointRoots:
    """Named local root folders, e.g. ``{"runtime": "/srv/watermark-ops/checkpoints"}``.

    :ivar roots: root name → folder (absolute after :meth:`of`).
    """

    roots: dict[str, str]

    @classmethod
    def of(cls, roots: dict[str, str]) -> CheckpointRoots:
        """Roots from a ``{name: folder}`` mapping (folders made absolute, not resolved).

        :raises ValueError: for a name that is empty or holds ``/``, or a folder that is not a
            local path (a URL with a scheme).
        """
        checked = {}
        for name, folder in roots.items():
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"checkpoint root name {name!r}: expected a non-empty name without '/'")
            if "://" in str(folder):
                raise ValueError(f"checkpoint root {name}={folder!r}: only local folders can be roots")
            checked[name] = os.path.abspath(os.path.expanduser(str(folder)))
        return cls(checked)

    def locate(self, root: str, relative: str) -> str:
        """The checkpoint folder a page address names, checked before anything under it is read.

        :param root: a root name.
        :param relative: the path below the root, ``/``-separated (already percent-decoded).
        :return: the absolute real path of the folder (symlinks resolved), inside the root.
        :raises PathRefused: 400 for a malformed or escaping path, 404 for an unknown root, a
            path that resolves outside the root (a symlink out) or that is not a folder.
        """
        if root not in self.roots:
            raise PathRefused(404, f"no checkpoint root named {root!r}")
        text = relative or ""
        if "\x00" in text or "\\" in text:
            raise PathRefused(400, "a checkpoint path must not hold backslashes or NUL bytes")
        if text.startswith("/") or ":" in text:
            raise PathRefused(400, "a checkpoint path is relative to its root: no absolute path, scheme or drive")
        segments = [s for s in text.split("/") if s not in ("", ".")]
        if any(s == ".." for s in segments):
            raise PathRefused(400, "a checkpoint path must not hold '..' segments")
        if not segments:
            raise PathRefused(400, "name a checkpoint folder below the root")
        base = os.path.realpath(self.roots[root])
        target = os.path.realpath(os.path.join(base, *segments))
        if os.path.commonpath([base, target]) != base or not os.path.isdir(target):
            raise PathRefused(404, f"no checkpoint folder {'/'.join(segments)!r} under root {root!r}")
        return target

    def address(self, location: str) -> tuple[str, str] | None:
        """The ``(root name, relative path)`` of a local location inside a root (first root that
        holds it, by real path), or None when no root holds it (the face must not read it)."""
        if "://" in location and not location.startswith("file://"):
            return None
        path = os.path.realpath(location.removeprefix("file://"))
        for name, folder in self.roots.items():
            base = os.path.realpath(folder)
            if path != base and os.path.commonpath([base, path]) == base:
                return name, os.path.relpath(path, base).replace(os.sep, "/")
        return None
