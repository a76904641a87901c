"""Build the package's wheel the way a user's ``pip install`` would get it: from the files git
tracks under ``plugins/`` (no caches, no egg-info), with ``uv build`` (an isolated build env)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_wheel(folder: Path) -> Path:
    """Copy ``pyproject.toml``, ``README.md`` and ``plugins/`` into ``folder/src``, build the wheel
    into ``folder/dist`` and return its path.

    :raises AssertionError: with uv's output when no wheel was built.
    """
    source = folder / "src"
    source.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "plugins", source / "plugins",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    uv = Path(sys.executable).parent / "uv"
    result = subprocess.run([str(uv if uv.exists() else "uv"), "build", "--wheel", "--out-dir", str(folder / "dist"),
                             str(source)], capture_output=True, text=True, timeout=600)
    wheels = sorted((folder / "dist").glob("watermark_ops-*.whl"))
    assert result.returncode == 0 and len(wheels) == 1, result.stdout + result.stderr
    return wheels[0]
