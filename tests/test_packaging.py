"""The package others ``pip install`` into their Airflow: the wheel's contents and entry points, the
declared dependencies against what the code imports, the provider info against Airflow's own schema,
and Airflow loading the plugin exactly once (``[core] lazy_discover_providers`` True and False).

The import rules (no generic module imports the example; only ``watermark_ops.spark`` imports
pyspark) are checked with the other layer rules in ``tests/watermark_ops/test_layers.py``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from tests.packaging_fixtures import copy_checkout, uv

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "plugins" / "watermark_ops"
PLUGIN_ENTRY = "watermark_ops = watermark_ops.airflow.plugin:WatermarkOpsPlugin"
PROVIDER_ENTRY = "provider_info = watermark_ops.airflow.provider:get_provider_info"


def _project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


# --- the wheel ---------------------------------------------------------------------------------


def test_the_wheel_has_both_entry_points_and_no_example(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
        meta = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert not [n for n in names if "/examples/" in n or n.startswith("watermark_ops/examples")]
    modules = {n for n in names if n.endswith(".py")}
    assert {"watermark_ops/airflow/plugin.py", "watermark_ops/airflow/provider.py", "watermark_ops/airflow/registry.py",
            "watermark_ops/core/audit.py", "watermark_ops/terminal/cli.py"} <= modules
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # The React views' bundle and manifest (make ui), and nothing else of ui/ (no sources, no node_modules).
    assert {"watermark_ops/airflow/static/watermark-views.umd.js", "watermark_ops/airflow/static/watermark-views.json"} <= set(names)
    assert not [n for n in names if "node_modules" in n or n.endswith((".ts", ".tsx"))]
    groups = dict(re.findall(r"^\[([^\]]+)\]\n((?:.+\n?)+)", entry_points, re.M))
    assert PLUGIN_ENTRY in groups["airflow.plugins"].splitlines()
    assert PROVIDER_ENTRY in groups["apache_airflow_provider"].splitlines()
    from packaging.requirements import Requirement

    required = {}
    for text in re.findall(r"^Requires-Dist: (.+)$", meta, re.M):
        requirement = Requirement(text)
        required.setdefault(requirement.name, []).append(requirement)
    # Airflow only with the airflow extra: a Spark driver installs the base and the spark extra.
    (airflow,) = required["apache-airflow"]
    assert str(airflow.marker) == 'extra == "airflow"' and "3.2.0" in airflow.specifier
    assert "3.1.9" not in airflow.specifier
    base = {name for name, reqs in required.items() if any(r.marker is None for r in reqs)}
    assert base == {"pendulum", "fsspec", "msgspec", "lz4"}, base
    (pyspark,) = required["pyspark"]  # only as the spark extra: the Airflow side never imports it
    assert str(pyspark.marker) == 'extra == "spark"' and "3.5.0" in pyspark.specifier and "4.3.0" in pyspark.specifier
    # No module in the wheel imports the example it leaves out (module level or in a function).
    with zipfile.ZipFile(wheel) as archive:
        assert [n for n in sorted(modules) if any(name.startswith("watermark_ops.examples")
                                                  for name in _imported(archive.read(n).decode()))] == []


def _imported(source: str) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return names


def test_dependencies_cover_every_third_party_import():
    """Each top-level module the package imports (outside examples/; module level or in a function)
    comes from the standard library, the package itself, or a declared distribution: what a Spark
    driver imports (the core and the spark layer) from the base install (the spark layer: plus the
    ``spark`` extra), the faces from the ``airflow`` extra too."""
    project = _project()
    declared = {_requirement_name(r) for r in project["dependencies"]}
    extras = {name: {_requirement_name(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    assert {"airflow", "cli", "spark", "s3", "gcs", "azure", "postgres", "duckdb"} <= set(extras)
    providers = metadata.packages_distributions()
    missing = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        if parts[0] == "examples":
            continue
        if parts[0] == "spark":
            allowed = declared | extras["spark"]
        elif parts[0] == "core" or parts == ("__init__.py",):
            allowed = declared
        else:
            allowed = declared | extras["airflow"] | extras["cli"]
        for top in sorted({name.split(".")[0] for name in _imported(path.read_text())}):
            if top in sys.stdlib_module_names or top in ("watermark_ops", "__future__"):
                continue
            dists = {d.lower().replace("_", "-") for d in providers.get(top, [])}
            if not dists & allowed:
                missing.append(f"{path.relative_to(PACKAGE)}: {top} (from {sorted(dists) or 'nowhere'})")
    assert missing == []
    # Ranges, never pins: the package goes into other teams' environments.
    assert not [r for r in project["dependencies"] if "==" in r]


# --- the provider info ---------------------------------------------------------------------------


def test_provider_info_validates_against_airflows_schema():
    import jsonschema

    import airflow
    from watermark_ops.airflow.hooks import WatermarkWebhookHook
    from watermark_ops.airflow.provider import get_provider_info

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == _project()["name"]  # the providers manager refuses a mismatch
    assert "plugins" not in info  # the plugin comes from the airflow.plugins entry point only
    (connection,) = info["connection-types"]
    assert connection["connection-type"] == WatermarkWebhookHook.conn_type
    assert connection["hook-class-name"] == f"{WatermarkWebhookHook.__module__}.{WatermarkWebhookHook.__name__}"
    from airflow.sdk import BaseNotifier
    from airflow.sdk.module_loading import import_string

    assert all(issubclass(import_string(path), BaseNotifier) for path in info["notifications"])
    assert set(info["config"]["watermark_ops"]["options"]) == {"checkpoint_roots", "checkpoints", "monitor_config",
                                                             "overview_max_age", "state_alarms", "ui_views"}


# --- Airflow loads it: the installed distribution's entry points -----------------------------------


def _airflow_env(tmp_path: Path, lazy: bool, checkout: Path = REPO) -> dict[str, str]:
    """Airflow's environment in ``checkout`` as the Makefile sets it (its plugins folder, plugins/ and
    spark_jobs/ on sys.path)."""
    env = dict(os.environ)
    env.update({
        "AIRFLOW_HOME": str(tmp_path / f"airflow-{lazy}"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(checkout / "plugins"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(checkout / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": str(lazy),
        "PYTHONPATH": os.pathsep.join([str(checkout / "plugins"), str(checkout / "spark_jobs")]),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
    })
    return env


def _plugin_import_errors(env: dict[str, str], cwd: Path = REPO) -> dict[str, str]:
    """The plugin manager's import errors (``airflow plugins`` does not print them), loaded in a fresh
    interpreter started in ``cwd`` (on its sys.path, as for any ``python -c``)."""
    errors = subprocess.run([sys.executable, "-c", "import json; from airflow import plugins_manager as m; "
                             "print(json.dumps(m.get_import_errors()))"],
                            env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert errors.returncode == 0, errors.stderr[-2000:]
    return json.loads(errors.stdout.strip().splitlines()[-1])


def test_the_installed_distribution_declares_this_pyprojects_entry_points():
    dist = metadata.distribution(_project()["name"])
    found = {(e.group, f"{e.name} = {e.value}") for e in dist.entry_points}
    assert ("airflow.plugins", PLUGIN_ENTRY) in found and ("apache_airflow_provider", PROVIDER_ENTRY) in found, (
        f"the environment's watermark-ops ({dist.version}) was installed from an older pyproject.toml: "
        "reinstall it (make venv)")


@pytest.mark.parametrize("lazy", [True, False])
def test_airflow_loads_the_plugin_once_without_import_errors(tmp_path, lazy):
    env = _airflow_env(tmp_path, lazy)
    airflow = str(Path(sys.executable).parent / "airflow")
    listed = subprocess.run([airflow, "plugins", "-o", "json"], env=env, capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    plugins = json.loads(listed.stdout)
    ours = [p for p in plugins if p["name"] == "watermark_ops"]
    assert len(ours) == 1, plugins
    assert "watermark_ops.airflow.plugin:WatermarkOpsPlugin" in ours[0]["source"]
    assert [a["url_prefix"] for a in ours[0]["fastapi_apps"]] == ["/watermark-ops"]
    assert _plugin_import_errors(env) == {}


def test_building_the_package_in_a_checkout_changes_nothing_its_airflow_loads(tmp_path):
    """``uv build`` (an sdist, then the wheel from it) and ``pip wheel .`` run inside a checkout. By
    default setuptools writes ``watermark_ops.egg-info`` beside the package, into plugins/, which is
    on sys.path here: importlib.metadata then finds the distribution twice and Airflow reported
    "Plugin 'watermark_ops' already registered" as an import error. setup.cfg puts it in build/."""
    checkout = copy_checkout(tmp_path / "checkout")
    built = subprocess.run([uv(), "build", "--out-dir", str(tmp_path / "dist"), str(checkout)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    wheeled = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                              "--wheel-dir", str(tmp_path / "pip-dist"), "."],
                             cwd=checkout, capture_output=True, text=True, timeout=600)
    assert wheeled.returncode == 0, wheeled.stdout + wheeled.stderr
    assert len(list((tmp_path / "dist").glob("*.whl"))) == 1 and len(list((tmp_path / "pip-dist").glob("*.whl"))) == 1
    # Metadata only where no sys.path of this checkout looks (the root: `python -c` started here).
    on_sys_path = [checkout, checkout / "plugins", checkout / "dags", checkout / "spark_jobs"]
    assert [str(m) for folder in on_sys_path for m in folder.glob("*.*-info")] == []
    assert (checkout / "build" / "watermark_ops.egg-info").is_dir()
    assert _plugin_import_errors(_airflow_env(tmp_path, False, checkout), cwd=checkout) == {}


def test_airflow_lists_the_provider(tmp_path):
    env = _airflow_env(tmp_path, True)
    listed = subprocess.run([str(Path(sys.executable).parent / "airflow"), "providers", "list", "-o", "json"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert listed.returncode == 0, listed.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(listed.stdout)}
    assert providers["watermark-ops"]["version"] == metadata.version("watermark-ops")
