"""What the wheel tests of ``tests/precip_project/`` and ``tests/spells_project/`` share: three weekly
runs of a team's DAG through ``airflow dags test`` in a fresh environment with the wheel, the team's
``replay.py`` and ``check.py`` run in it, and the run pattern's figures per run.
The projects declare no window: the package reads it from the job's plan.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.packaging_fixtures import run_logged, user_environment

def three_runs(root: Path, wheel: Path, project: Path, dag_id: str, prefix: str, launch: str, dates: tuple,
               confs: dict[str, dict], connect: bool) -> dict:
    extra = {"AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": os.environ["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"]} if connect else {}
    home = root / "home"
    made = user_environment(root, wheel, project / "dags", {f"{prefix}_HOME": str(home), f"{prefix}_LAUNCH": launch,
                                                             **extra}, packages=("vega_datasets",))
    airflow = str(made["venv"] / "bin" / "airflow")

    def run(day: str) -> object:
        conf = ["-c", json.dumps(confs[day])] if day in confs else []
        return run_logged([airflow, "dags", "test", dag_id, day, *conf], made["env"], root, made["log"], timeout=900,
                          check=False)

    done = [run(day) for day in dates]
    return {**made, "home": home, "done": done}


def facts(made: dict, dag_id: str, checkpoint: Path) -> dict:
    done = run_logged([str(made["python"]), str(Path(__file__).parent / "precip_project" / "check.py"), dag_id,
                       str(checkpoint)], made["env"], made["root"], made["log"])
    return json.loads(done.stdout.strip().splitlines()[-1])


def replay(made: dict, script: Path, landing: Path, checkpoint: Path, sink: Path) -> tuple[int, dict, str]:
    """``(exit code, the replay's JSON, its stderr)`` of ``replay.py --check`` in the team's environment."""
    done = run_logged([str(made["python"]), str(script), "--check", str(landing), str(checkpoint), str(sink)],
                      made["env"], made["root"], made["log"], check=False)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def runs(facts: dict) -> list[tuple[str, dict, dict]]:
    """``[(run id, {task: XCom}, {task: state})]`` oldest first (task ids without their group)."""
    def short(mapping: dict) -> dict:
        return {task.rsplit(".", 1)[-1]: value for task, value in mapping.items()}

    return [(run_id, short(facts["xcom"].get(run_id, {})), short(facts["states"][run_id]))
            for run_id in sorted(facts["states"])]


def row_key(row: dict) -> tuple[str, int]:
    """A late row's landed file name and line, from the replay or from the package's JSON."""
    return Path(str(row.get("source_file", row.get("file", "")))).name, int(row["line"])


def windows_of(row: dict) -> set[tuple[int, int]]:
    return {(w["window_start_ms"], w["window_end_ms"]) for w in row["windows_dropped"]}


def late_by_run(runs: list, late_rows: list[dict], landing: Path) -> dict[str, list[dict]]:
    """``{run id: the replay's late rows it landed}``: each run lands one file, named by its week's
    start, so the i-th run (oldest first) landed the i-th file in name order."""
    order = [path.name for path in sorted(landing.glob("weather_*"))]
    return {run_id: [r for r in late_rows if Path(r["file"]).name == order[i]] for i, (run_id, _, _) in enumerate(runs)}
