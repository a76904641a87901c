"""The package's layers: the core is pure, each layer imports only the layers below it, no cycles,
no module over 600 lines.

Read from the source (every ``import`` statement, module level or inside a function), plus one
real interpreter that imports the whole core and the rendering layer and lists what came with them.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import watermark_ops

PACKAGE = Path(watermark_ops.__file__).resolve().parent

#: What each layer may import from the package (besides itself).
ALLOWED = {
    "core": {"core"},
    # the rendering layer shared by every face: text tables, JSON, the web pages (render.html), the
    # state documents (render.state), the corrections' tables (render.corrections)
    "render": {"core"},
    # the terminal face; the CLI imports airflow.storage lazily, only for --conn-id (an Airflow connection)
    "terminal": {"core", "render", "airflow"},
    "__main__": {"terminal"},
    "airflow": {"core", "render"},  # render.state: the run pattern's state/preflight XComs
    "spark": {"core"},  # the driver side of a user's job (pyspark); nothing else imports it
    "examples": {"core"},
    "__init__": {"core"},
}
#: Single modules another layer may import beyond ALLOWED: the Spark Connect client side
#: (:mod:`watermark_ops.spark.connect`: the server launcher, the version check, stopping a dead
#: client's queries) runs in the Airflow worker, which has pyspark-client, and in the example's
#: deployment and demo, which start the server.
ALLOWED_MODULES = {
    "airflow": {"watermark_ops.spark.connect"},
    "examples": {"watermark_ops.spark.connect"},
}
FORBIDDEN_IN_CORE = ("airflow", "pyspark", "argparse", "rich")
#: The most lines a module of the package may have (the example pipeline aside): a room a
#: newcomer can hold; a longer one is split by concept.
MAX_MODULE_LINES = 600
#: The only layer that may import pyspark (the Spark provider 6.x installs only pyspark-client).
SPARK_LAYER = "spark"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement of the file: ``from a.b import c`` names ``a.b.c``
    when that is a module of the package, else ``a.b``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names}
            submodules = {m for m in submodules if _is_module(m)}
            names.update(submodules)
            if len(submodules) < len(node.names):  # names defined in the module (or its __init__) itself
                names.add(node.module)
    return names


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent / dotted.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {i for i in _imports(path) if i in modules and i != name} for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def test_the_core_imports_neither_airflow_spark_argparse_nor_rich():
    offending = []
    for path in (PACKAGE / "core").rglob("*.py"):
        for name in _imports(path):
            if name.split(".")[0] in FORBIDDEN_IN_CORE:
                offending.append(f"{path.relative_to(PACKAGE)}: {name}")
    assert offending == []


def test_importing_the_core_and_the_rendering_layer_brings_none_of_them():
    code = ("import sys, json, watermark_ops, watermark_ops.render, watermark_ops.render.html, "
            "watermark_ops.render.state, watermark_ops.render.corrections, watermark_ops.core.checks, "
            "watermark_ops.core.lateness, watermark_ops.core.status, watermark_ops.core.overview; "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'pyspark', 'argparse', 'rich'})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(PACKAGE.parent)))
    assert json.loads(out.stdout) == []  # rich is imported only when a table is drawn


def test_each_layer_imports_only_the_layers_below_it():
    wrong = []
    for module, imported in _graph().items():
        layer = _layer(module)
        for target in imported:
            target_layer = _layer(target)
            if (target_layer != layer and target_layer not in ALLOWED[layer]
                    and target not in ALLOWED_MODULES.get(layer, ())):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, str] = {}  # "open" while on the DFS path, "done" after
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []


def test_only_the_spark_layer_imports_pyspark():
    """Module level or inside a function: the Airflow side (and the example) never imports pyspark."""
    offending = []
    for path in PACKAGE.rglob("*.py"):
        if _layer(_module_name(path)) == SPARK_LAYER:
            continue
        offending += [f"{path.relative_to(PACKAGE)}: {name}" for name in _imports(path)
                      if name.split(".")[0] in ("pyspark", "py4j")]
    assert offending == []


def test_generic_modules_never_import_the_example():
    offending = [f"{_module_name(path)} -> {name}" for path in PACKAGE.rglob("*.py")
                 if _layer(_module_name(path)) != "examples"
                 for name in _imports(path) if name.split(".")[:2] == ["watermark_ops", "examples"]]
    assert offending == []


def test_no_module_is_longer_than_600_lines():
    """Every module of the package (outside ``examples/``) at most :data:`MAX_MODULE_LINES` lines."""
    long = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "examples":
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long[relative.as_posix()] = lines
    assert long == {}


def test_generic_modules_name_no_example_word():
    """No module outside ``examples/`` names the example's fields, partitions or names (docstrings,
    comments, help texts and messages included): generic code names the job's own fields
    (its late rule's event time, its declared partition column) or a word of its own."""
    from tests.example_words import example_words_in

    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "examples":
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if example_words_in(line):
                found[f"{relative.as_posix()}:{number}"] = line.strip()
    assert found == {}


def test_the_example_word_check_catches_a_leak():
    from tests.example_words import example_words_in

    for leak in ("late per origin", "late_by_origin", 'EVENT_TIME_FIELDS = ("dep_time", "time_hour")',
                 "ordered by stream_time", "one airport's files", "e.g. EWR", "flight_windows"):
        assert example_words_in(leak), leak
    for fine in ("the batch in flight", "in-flight batch", "in_flight_batch", "the restart preflight",
                 "the original watermark", 'find_spec("pyspark").origin', "the station north"):
        assert not example_words_in(fine), fine


#: What parsing a DAG file must not import (issue 36: a DAG file parses in well under 0.1 s once
#: Airflow is imported): provider hooks, Spark, the object-storage backends, the rendering and
#: data libraries. Each is what a task needs when it runs, imported there.
HEAVY_AT_PARSE = ("airflow.providers.amazon", "airflow.providers.apache.spark.hooks", "pyspark", "s3fs", "gcsfs",
                  "adlfs", "botocore", "boto3", "pandas", "rich", "jinja2")
REPO = PACKAGE.parents[1]
#: A DAG a user writes with the run pattern (README), once per launch.
USER_DAG = """
import pendulum
from airflow.sdk import dag, task
from watermark_ops.airflow.run import watermarked_run

@dag(schedule="@hourly", start_date=pendulum.datetime(2024, 1, 1, tz="UTC"), catchup=False)
def user_job():
    @task
    def land():
        return None

    land() >> watermarked_run("hourly", application="/jobs/your_job.py", checkpoint="/ck/readings",
                              landings=["/landing"], application_args=["--landing", "/landing"],
                              late_sink="/out_late", launch=LAUNCH)

user_job()
"""
_NEW_MODULES = """
import json, runpy, sys
sys.path.insert(0, sys.argv[2])
import airflow, airflow.sdk
before = set(sys.modules)
runpy.run_path(sys.argv[1])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _heavy_modules_a_dag_file_loads(dag_file: Path) -> list[str]:
    """The modules of :data:`HEAVY_AT_PARSE` that importing ``dag_file`` loads in a fresh
    interpreter that has already imported Airflow (``airflow.sdk``), as the DAG processor has."""
    out = subprocess.run([sys.executable, "-c", _NEW_MODULES, str(dag_file), str(PACKAGE.parent)],
                         capture_output=True, text=True, check=True, cwd=str(REPO),
                         env=dict(os.environ, PYTHONPATH=str(PACKAGE.parent)))
    new = json.loads(out.stdout.strip().splitlines()[-1])
    return sorted(m for m in new if any(m == heavy or m.startswith(heavy + ".") for heavy in HEAVY_AT_PARSE))


def test_dag_files_import_no_provider_hook_spark_or_heavy_library_at_parse(tmp_path):
    """Every DAG file in dags/ and a user's DAG built with the run pattern (both launches): the
    modules their import loads after Airflow's hold none of :data:`HEAVY_AT_PARSE` (a set of
    modules, no timing: ``benchmarks/dag_import_benchmark.py`` gives the seconds)."""
    files = sorted((REPO / "dags").glob("*.py"))
    assert files
    for launch in ("submit", "connect"):
        user = tmp_path / f"user_{launch}.py"
        user.write_text(USER_DAG.replace("LAUNCH", repr(launch)))
        files.append(user)
    loaded = {f.name: _heavy_modules_a_dag_file_loads(f) for f in files}
    assert loaded == {name: [] for name in loaded}
