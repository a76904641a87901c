"""Shared fixtures: one real local[2] SparkSession, and a real Airflow home with a SQLite DB.

Airflow reads its configuration at import time, so the environment is set here, before any test
module imports Airflow. Every test session gets its own Airflow home and runtime folder under a
temporary directory: nothing a test writes lands in the developer's ``.runtime``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_SESSION_TMP = Path(tempfile.mkdtemp(prefix="watermark-ops-tests-"))

os.environ["WATERMARK_OPS_HOME"] = str(_SESSION_TMP / "runtime")
os.environ["AIRFLOW_HOME"] = str(_SESSION_TMP / "airflow")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_SESSION_TMP / 'airflow' / 'airflow.db'}"
os.environ.setdefault(
    "AIRFLOW_CONN_SPARK_DEFAULT",
    json.dumps({"conn_type": "spark", "host": "local[2]", "extra": {"deploy-mode": "client"}}),
)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# spark-submit (and the Spark driver's Python) come from the interpreter running the tests.
_BIN = str(Path(sys.executable).parent)
if not os.environ.get("PATH", "").startswith(_BIN + os.pathsep):
    os.environ["PATH"] = _BIN + os.pathsep + os.environ.get("PATH", "")
os.environ["PYSPARK_PYTHON"] = sys.executable
# Every JVM the tests start through spark-submit (the session's gateway, each job's spark-submit, the
# Spark Connect servers) starts fast: C1 only, the serial collector and one class-data archive of
# Spark's classes, dumped once per environment (tests/jvm_class_archive.py: a small spark-submit
# 15.4 -> 9.0 CPU seconds). The suite is CPU-bound on the 2 cores; a team's runs are untouched.
if "SPARK_SUBMIT_OPTS" in os.environ:
    _JVM_HEADER = f"JVM options: SPARK_SUBMIT_OPTS={os.environ['SPARK_SUBMIT_OPTS']!r} (from the environment)"
else:
    from tests.jvm_class_archive import jvm_options  # noqa: E402

    os.environ["SPARK_SUBMIT_OPTS"], _JVM_HEADER = jvm_options()
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
(_SESSION_TMP / "airflow").mkdir(parents=True, exist_ok=True)
# The example deployment's [watermark_ops] settings (its jobs' thresholds, the "runtime" root).
from watermark_ops.examples.flights.settings import airflow_config_env  # noqa: E402

os.environ.update(airflow_config_env())


#: The slowest test files (the junit times of a full run, slowest first). pytest-xdist hands out
#: files in collection order (``--no-loadscope-reorder`` in pyproject.toml), so these start first
#: and the two workers finish together, instead of one running a long file alone at the end while
#: the other has nothing left.
SLOWEST_FIRST = (
    "tests/test_spark_releases.py",
    "tests/watermark_ops/examples/test_deploy.py",
    "tests/dags/test_day_partitions.py",
    "tests/test_readings_project_wheel.py",
    "tests/test_temps_project_wheel.py",
    "tests/test_spells_project_wheel.py",
    "tests/test_precip_project_wheel.py",
    "tests/spark_jobs/test_spark43_checkpoints.py",
    "tests/test_user_project_wheel.py",
    "tests/dags/test_crash_restart.py",
    "tests/spark_jobs/test_connect_supervision.py",
    "tests/spark_jobs/test_late_ledger.py",
    "tests/spark_jobs/test_update_mode.py",
    "tests/watermark_ops/examples/flights/test_lander.py",
    "tests/dags/test_flights_pipeline.py",
    "tests/dags/test_connect_mode.py",
    "tests/spark_jobs/test_checkpoint_lock.py",
    "tests/spark_jobs/test_flight_windows.py",
    "tests/watermark_ops/core/test_fuzz.py",
    "tests/watermark_ops/airflow/test_metrics.py",
    "tests/spark_jobs/test_state_corpus.py",
)


def pytest_report_header(config):
    """Which JVM options the tests' JVMs start with (the class-data archive built, reused or why none)."""
    return _JVM_HEADER


def pytest_collection_modifyitems(config, items):
    """Run the files of :data:`SLOWEST_FIRST` first, in that order; every other file after them in
    the order collected (a stable sort: each file's tests stay together and in order)."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session")
def spark():
    """One real SparkSession (``local[2]``, 2 shuffle partitions, UTC) for the whole test run.

    Each streaming query started on it with an existing checkpoint is a real restart of that
    query, exactly as a new driver would do, without paying the JVM start each time.
    """
    import logging

    from watermark_ops.spark import build_session

    # py4j logs connection closes at INFO from __del__, after pytest has closed its streams:
    # the "--- Logging error ---" noise would otherwise follow pytest's closing summary line.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = build_session("watermark-ops-tests", master="local[2]", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(autouse=True, scope="module")
def _shared_session_keeps_its_confs(request):
    """After each test file, the shared session's 2 shuffle partitions are put back if the file
    changed them (an unset leaves Spark's 200: the next file's stateful queries then run 100 times
    the tasks and time out, and a timed-out py4j call leaves the gateway out of step for the rest
    of the worker). Reported as a warning, so that the file that did it can be mended."""
    yield
    if "pyspark" not in sys.modules:  # no Spark in this worker yet: nothing to put back
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is None or type(session).__module__ != "pyspark.sql.session":  # none, or a Connect client
        return
    if session.conf.get("spark.sql.shuffle.partitions") != "2":
        import warnings

        warnings.warn(f"{request.module.__name__} left spark.sql.shuffle.partitions="
                      f"{session.conf.get('spark.sql.shuffle.partitions')}; put back to 2", stacklevel=1)
        session.conf.set("spark.sql.shuffle.partitions", "2")


@pytest.fixture(scope="session")
def airflow_db():
    """A fresh, migrated SQLite metadata DB for this test session (real Airflow, no mocks)."""
    from airflow.utils.db import resetdb

    resetdb()
    yield os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """The package's wheel, built once per test session (:func:`tests.packaging_fixtures.build_wheel`)."""
    from tests.packaging_fixtures import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 API (moto's standalone server on a free 127.0.0.1 port) for this test session,
    stopped by its PID at the end (:mod:`watermark_ops.examples.s3server`)."""
    from watermark_ops.examples.s3server import start_s3_server

    server = start_s3_server(log=_SESSION_TMP / "moto.log")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def aws_conn_id(s3_server):
    """An Airflow ``aws`` connection (from the environment, ``AIRFLOW_CONN_WATERMARK_S3``) to the
    session's S3 server: what ``ObjectStoragePath(..., conn_id=...)`` and the faces' ``conn_id`` use."""
    from watermark_ops.examples.s3server import aws_connection

    os.environ["AIRFLOW_CONN_WATERMARK_S3"] = aws_connection(s3_server.endpoint_url)
    yield "watermark_s3"
    os.environ.pop("AIRFLOW_CONN_WATERMARK_S3", None)


@pytest.fixture(scope="session")
def connect_server():
    """A real Spark Connect server (``local[2]``, 127.0.0.1, a free port, 2 shuffle partitions) for
    this test session, and the Airflow connection ``spark_connect_default`` to it (from the
    environment); stopped by its PID at the end (:func:`watermark_ops.spark.connect.start_connect_server`)."""
    from watermark_ops.spark.connect import start_connect_server

    server = start_connect_server(_SESSION_TMP / "spark-connect.log",
                                  conf={"spark.sql.shuffle.partitions": "2"})
    os.environ["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"] = json.dumps(
        {"conn_type": "spark_connect", "host": server.host, "port": server.port})
    yield server
    os.environ.pop("AIRFLOW_CONN_SPARK_CONNECT_DEFAULT", None)
    server.stop()


@pytest.fixture(scope="session")
def state_checkpoints(spark):
    """A small real stateful checkpoint (``tests/watermark_ops/state_store_fixtures.py``): a dedup
    no watermark can evict whose rows grow. Read only: copy it before changing it."""
    from tests.watermark_ops.state_store_fixtures import state_checkpoints as build

    return build(spark, _SESSION_TMP / "state_store")
