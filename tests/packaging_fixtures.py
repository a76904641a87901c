"""Build the package's wheel the way a user's ``pip install`` would get it: from the files git
tracks (no caches, no egg-info), with ``uv build`` (an isolated build env)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# What setuptools reads to build the package: its metadata, the README it carries, setup.cfg (the
# egg_info folder's place, build/, which must exist) and the package's sources.
BUILD_INPUTS = ("pyproject.toml", "README.md", "setup.cfg", "build/.gitignore")


def uv() -> str:
    """The venv's ``uv`` (pinned in requirements.txt), else the one on PATH."""
    found = Path(sys.executable).parent / "uv"
    return str(found if found.exists() else "uv")


def copy_checkout(destination: Path) -> Path:
    """Copy the files a fresh clone would have (tracked, and new files git does not ignore) into
    ``destination`` and return it: a checkout to build in without touching this one."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def build_wheel(folder: Path) -> Path:
    """Copy the build inputs (:data:`BUILD_INPUTS`) and ``plugins/`` into ``folder/src``, build the
    wheel into ``folder/dist`` and return its path.

    :raises AssertionError: with uv's output when no wheel was built.
    """
    source = folder / "src"
    source.mkdir(parents=True)
    for name in BUILD_INPUTS:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "plugins", source / "plugins",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    result = subprocess.run([uv(), "build", "--wheel", "--out-dir", str(folder / "dist"), str(source)],
                            capture_output=True, text=True, timeout=600)
    wheels = sorted((folder / "dist").glob("watermark_ops-*.whl"))
    assert result.returncode == 0 and len(wheels) == 1, result.stdout + result.stderr
    return wheels[0]
