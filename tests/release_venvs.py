"""The pyspark release environments the suite caches: ``~/.cache/watermark-ops/pyspark-<release>``
(or ``$WATERMARK_OPS_RELEASE_VENVS``), one venv per release with that pyspark, pandas and pyarrow,
made once under a lock with uv (uv's cache holds the built pyspark wheels: the first build of a
release takes minutes, later ones seconds).

``tests/test_spark_releases.py`` adds the package's wheel to them; the tests of Spark's newest
checkpoint features (``tests/spark_jobs/test_spark43_checkpoints.py``) run plain pyspark scripts in
them and need no wheel.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from tests.packaging_fixtures import uv

CACHE = Path(os.environ.get("WATERMARK_OPS_RELEASE_VENVS", Path.home() / ".cache" / "watermark-ops"))


def release_venv(release: str) -> Path:
    """The venv of pyspark ``release`` (made once, under the release's lock), without watermark-ops."""
    venv = CACHE / f"pyspark-{release}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"pyspark-{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        python = venv / "bin" / "python"
        if not (venv / ".made").exists():
            subprocess.run([uv(), "venv", "-q", "--clear", "--python", sys.executable, str(venv)], check=True)
            wanted = [f"pyspark=={release}", "pandas<3", "pyarrow"]
            offline = subprocess.run([uv(), "pip", "install", "-q", "--offline", "--python", str(python), *wanted],
                                     capture_output=True, text=True)
            if offline.returncode != 0:  # not in uv's cache yet: from the index (a pyspark sdist builds once)
                subprocess.run([uv(), "pip", "install", "-q", "--python", str(python), *wanted], check=True,
                               timeout=1500)
            (venv / ".made").touch()
    return venv
