"""Benchmark: how long each DAG file takes to import, cold and as Airflow's DAG processor parses it.

    .venv/bin/python benchmarks/dag_import_benchmark.py [--repeats 5]

Each figure is the median of ``--repeats`` fresh interpreters timing ``runpy.run_path(dag_file)``:

* ``cold``: the interpreter has imported ``airflow.sdk`` only, so the file pays for every module
  it imports (the Spark provider, ``requests``, the TaskFlow decorators, watermark_ops, pendulum);
* ``processor``: the interpreter has also imported the ``airflow.*`` modules the file imports, as
  the DAG processor does before it parses a file (``[dag_processor] parsing_pre_import_modules``,
  default True; ``airflow.utils.file.iter_airflow_imports``): what a parse costs in a deployment.

The goal of issue 9 is 0.3 s per file, of issue 36 0.1 s once Airflow is imported (``processor``).
Figures, not asserts; what keeps them low is asserted as a set of modules instead:
``tests/watermark_ops/test_layers.py`` (``HEAVY_AT_PARSE``: no provider hook, pyspark, s3fs,
botocore, pandas or rich is loaded by a DAG file's import, the run pattern's included).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CODE = """
import importlib, runpy, sys, time
sys.path.insert(0, sys.argv[2])
import airflow.sdk
if sys.argv[3] == "processor":
    from airflow.utils.file import iter_airflow_imports
    for module in iter_airflow_imports(sys.argv[1]):
        importlib.import_module(module)
t = time.perf_counter()
runpy.run_path(sys.argv[1])
print(time.perf_counter() - t)
"""


def import_seconds(dag_file: Path, mode: str, repeats: int) -> float:
    """Median seconds of ``runpy.run_path(dag_file)`` over ``repeats`` fresh interpreters."""
    runs = [
        float(subprocess.run([sys.executable, "-c", _CODE, str(dag_file), str(REPO / "plugins"), mode],
                             capture_output=True, text=True, check=True).stdout.split()[-1])
        for _ in range(repeats)
    ]
    return statistics.median(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"DAG file import, median of {args.repeats} fresh interpreters (seconds; goal 0.1 s as processor)")
    print(f"  {'file':28s} {'cold':>7s} {'processor':>10s}")
    for dag_file in sorted((REPO / "dags").glob("*.py")):
        cold = import_seconds(dag_file, "cold", args.repeats)
        processor = import_seconds(dag_file, "processor", args.repeats)
        print(f"  {dag_file.name:28s} {cold:7.3f} {processor:10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
