"""A real local deployment on 127.0.0.1: PostgreSQL, Airflow 3's services, a Spark standalone cluster.

``python -m watermark_ops.examples.deploy up|down|env`` (``make up`` / ``make down``). ``up`` starts,
as processes of their own (each the leader of its own process group, its PID recorded under
``<runtime>/deploy/pids``, its output in ``<runtime>/deploy/logs``):

* PostgreSQL from the machine's server binaries (``initdb`` once into ``<runtime>/deploy/postgres``,
  port :data:`PORTS` ``postgres``), Airflow's metadata database;
* a Spark standalone master (``spark-class org.apache.spark.deploy.master.Master``, from the pinned
  pyspark) and two workers with 1 core each;
* a Spark Connect server on that cluster (``spark-submit --class ...SparkConnectServer``, one core,
  ``spark.cores.max=1``, so that a spark-submit run still finds the other worker), gRPC on
  127.0.0.1 port :data:`PORTS` ``connect``: the ``spark_connect_default`` connection, which
  ``flights_pipeline`` uses under the deployment's ``WATERMARK_OPS_SPARK_LAUNCH`` (default ``connect``);
* Airflow 3 with the LocalExecutor: ``airflow db migrate`` first, then ``api-server``,
  ``scheduler``, ``dag-processor`` and ``triggerer``; Airflow's ``SimpleAuthManager`` with one
  user, ``admin``, whose password is in ``<runtime>/deploy/airflow/simple_auth_manager_passwords.json``.

It returns once the api-server's ``/api/v2/monitor/health`` reports the metadatabase, scheduler,
DAG processor and triggerer healthy and the Spark master has two alive workers, and prints the
UI's URL and the master's. ``spark_default`` points at the master (JSON form of the connection).
``down`` stops exactly what ``up`` started: each recorded process group, by its PID (SIGTERM, then
SIGKILL after a grace period). ``env`` prints the environment for ``airflow`` commands against
the deployment (``eval "$(python -m watermark_ops.examples.deploy env)"``).

Airflow's home is ``<runtime>/deploy/airflow``, apart from ``make run``'s SQLite home; the
landing zone, checkpoints and outputs are the runtime folder's, as for ``make run``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from watermark_ops.examples.flights.settings import REPO_ROOT, airflow_config_env, runtime_home

HOST = "127.0.0.1"
#: Ports on 127.0.0.1, none of them a default (a developer's own PostgreSQL, Airflow or Spark keeps its own),
#: and all below Linux's ephemeral range (32768-60999): a port in it can be taken by any outgoing
#: connection or port-0 server on the machine (PostgreSQL once found 55432 taken that way).
PORTS = {"postgres": 25432, "api": 28080, "spark": 17077, "spark_ui": 18081, "worker_ui": 18082, "connect": 15102}
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
WORKERS = 2


class DeployError(RuntimeError):
    """A service did not start or did not become healthy; the message names it and its log."""


def folder() -> Path:
    """``<runtime>/deploy``: the deployment's state (database files, Airflow home, PIDs, logs)."""
    return runtime_home() / "deploy"


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _postgres_bin(name: str) -> str:
    """A PostgreSQL server binary: on PATH, else Debian's ``/usr/lib/postgresql/<v>/bin``."""
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise DeployError(f"PostgreSQL's {name} was not found (install Debian's postgresql package)")


def spark_home() -> str:
    """The pinned pyspark's folder, which holds ``bin/spark-class`` and the jars."""
    import importlib.util

    return str(Path(importlib.util.find_spec("pyspark").origin).parent)


def environment() -> dict[str, str]:
    """The environment of every Airflow process of the deployment (and of ``airflow`` commands against it)."""
    home = folder() / "airflow"
    database = f"airflow@{HOST}:{PORTS['postgres']}/airflow"
    env = {
        **os.environ,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "WATERMARK_OPS_HOME": str(runtime_home()),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://{database}",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC": f"postgresql+asyncpg://{database}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{HOST}:{PORTS['api']}/execution/",
        "AIRFLOW__API__BASE_URL": f"http://{HOST}:{PORTS['api']}",
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "simple_auth_manager_passwords.json"),
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "True",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": f"spark://{HOST}",
                                                  "port": PORTS["spark"], "extra": {"deploy-mode": "client"}}),
        "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT": json.dumps({"conn_type": "spark_connect", "host": HOST,
                                                          "port": PORTS["connect"]}),
        # How flights_pipeline runs its Spark job here: on the Connect server unless told otherwise.
        "WATERMARK_OPS_SPARK_LAUNCH": os.environ.get("WATERMARK_OPS_SPARK_LAUNCH", "connect"),
        "SPARK_HOME": spark_home(),
        "SPARK_LOCAL_IP": HOST,
        "PYSPARK_PYTHON": sys.executable,
        # The example's [watermark_ops] settings for this deployment's runtime home: its jobs'
        # thresholds and landing folders, and the pages' "runtime" root.
        **airflow_config_env(runtime_home()),
    }
    for name in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__FERNET_KEY"):
        secret = home / f".{name.lower()}"
        if secret.exists():
            env[name] = secret.read_text().strip()
    return env


def _start(name: str, command: list[str], env: dict[str, str], **as_user: str) -> int:
    """Start ``command`` as the leader of a new process group (as ``user``/``group`` when given);
    record its PID; return it."""
    logs, pids = folder() / "logs", folder() / "pids"
    logs.mkdir(parents=True, exist_ok=True)
    pids.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.log", "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                   cwd=str(folder()), **as_user)
    (pids / f"{name}.pid").write_text(str(process.pid))
    return process.pid


def _get_json(url: str) -> object | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _wait(what: str, ready, timeout_s: float, log: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(1)
    raise DeployError(f"{what} not ready after {timeout_s:.0f} s; see {folder() / 'logs' / log}")


def _database_user() -> dict[str, str]:
    """``subprocess`` keyword arguments that run PostgreSQL as an unprivileged user: ``initdb`` and
    ``postgres`` refuse to run as root, so as root they run as the ``postgres`` user of Debian's
    package (the data folder is handed to it); as anyone else, as that user."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise DeployError("PostgreSQL refuses to run as root and there is no 'postgres' user to run it as") from None
    return {"user": "postgres", "group": "postgres"}


def _postgres(env: dict[str, str]) -> None:
    data, sockets = folder() / "postgres", folder() / "postgres-sockets"
    as_user = _database_user()
    for path in (data, sockets):
        path.mkdir(parents=True, exist_ok=True)
        if as_user:
            shutil.chown(path, as_user["user"], as_user["group"])
    data.chmod(0o700)
    if not (data / "PG_VERSION").exists():
        init = subprocess.run([_postgres_bin("initdb"), "-D", str(data), "-U", "airflow", "--auth=trust", "-E", "UTF8"],
                              capture_output=True, text=True, **as_user)
        if init.returncode:
            raise DeployError(f"initdb failed: {init.stderr.strip()[-1000:]}")
    _start("postgres", [_postgres_bin("postgres"), "-D", str(data), "-p", str(PORTS["postgres"]),
                        "-c", f"listen_addresses={HOST}", "-k", str(sockets)], env, **as_user)
    ready = [_postgres_bin("pg_isready"), "-h", HOST, "-p", str(PORTS["postgres"]), "-U", "airflow"]
    _wait("PostgreSQL", lambda: subprocess.run(ready, capture_output=True).returncode == 0, 60, "postgres.log")
    exists = subprocess.run([_postgres_bin("psql"), "-h", HOST, "-p", str(PORTS["postgres"]), "-U", "airflow",
                             "-d", "postgres", "-tAc", "SELECT 1 FROM pg_database WHERE datname = 'airflow'"],
                            capture_output=True, text=True, check=True).stdout.strip()
    if exists != "1":
        subprocess.run([_postgres_bin("createdb"), "-h", HOST, "-p", str(PORTS["postgres"]), "-U", "airflow",
                        "airflow"], check=True)


def _spark(env: dict[str, str]) -> None:
    spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
    _start("spark-master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST,
                            "--port", str(PORTS["spark"]), "--webui-port", str(PORTS["spark_ui"])], env)
    for index in range(WORKERS):
        work = folder() / "spark-work" / str(index + 1)
        work.mkdir(parents=True, exist_ok=True)
        _start(f"spark-worker-{index + 1}", [
            spark_class, "org.apache.spark.deploy.worker.Worker", "--host", HOST, "--cores", "1", "--memory", "2g",
            "--webui-port", str(PORTS["worker_ui"] + index), "--work-dir", str(work),
            f"spark://{HOST}:{PORTS['spark']}"], env)


def _spark_connect(env: dict[str, str]) -> None:
    """The Spark Connect server, a client-mode application of the standalone cluster (one core)."""
    from watermark_ops.spark.connect import server_command

    _start("spark-connect", server_command(PORTS["connect"], master=f"spark://{HOST}:{PORTS['spark']}", host=HOST,
                                           conf={"spark.cores.max": "1", "spark.sql.shuffle.partitions": "4"}), env)


def connect_ready() -> bool:
    """True when the Connect server's gRPC port accepts connections."""
    import socket

    try:
        with socket.create_connection((HOST, PORTS["connect"]), timeout=1):
            return True
    except OSError:
        return False


def master_state() -> dict | None:
    """The Spark master's JSON status (``/json/`` of its UI: ``status``, ``aliveworkers``, ``workers``), None when down."""
    state = _get_json(f"http://{HOST}:{PORTS['spark_ui']}/json/")
    return state if isinstance(state, dict) else None


def airflow_health() -> dict | None:
    """The api-server's ``/api/v2/monitor/health`` document, None when it does not answer."""
    health = _get_json(f"http://{HOST}:{PORTS['api']}/api/v2/monitor/health")
    return health if isinstance(health, dict) else None


def _healthy(health: dict | None) -> bool:
    parts = ("metadatabase", "scheduler", "dag_processor", "triggerer")
    return bool(health) and all((health.get(p) or {}).get("status") == "healthy" for p in parts)


def up() -> dict[str, str]:
    """Start the deployment (see the module docstring) and wait until it is healthy.

    :return: ``{"airflow": UI URL, "spark": master URL, "spark_ui": master UI URL, "connect": sc:// URL}``.
    :raises DeployError: naming the service and its log when one does not become healthy (what
        was started is stopped again).
    """
    if running():
        raise DeployError(f"a deployment is already running (PIDs in {folder() / 'pids'}); `make down` first")
    taken = [f"{name} {port}" for name, port in PORTS.items() if not _port_free(port)]
    if taken:
        raise DeployError(f"ports in use on {HOST}: {', '.join(taken)} (another server holds them; stop it, "
                          f"or change PORTS in {__name__})")
    home = folder() / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    for name, make in (("AIRFLOW__API_AUTH__JWT_SECRET", lambda: secrets.token_urlsafe(32)),
                       ("AIRFLOW__CORE__FERNET_KEY", _fernet_key)):
        secret = home / f".{name.lower()}"
        if not secret.exists():
            secret.write_text(make())
    (home / "simple_auth_manager_passwords.json").write_text(json.dumps({"admin": "admin"}))
    env = environment()
    try:
        _postgres(env)
        _spark(env)
        migrate = subprocess.run([_bin("airflow"), "db", "migrate"], env=env, capture_output=True, text=True)
        if migrate.returncode:
            raise DeployError(f"airflow db migrate failed:\n{migrate.stdout[-2000:]}{migrate.stderr[-2000:]}")
        _start("api-server", [_bin("airflow"), "api-server", "--host", HOST, "--port", str(PORTS["api"])], env)
        for service in SERVICES[1:]:
            _start(service, [_bin("airflow"), service], env)
        _wait("Spark master with two workers",
              lambda: (master_state() or {}).get("aliveworkers") == WORKERS, 120, "spark-master.log")
        _spark_connect(env)
        _wait("Spark Connect server", connect_ready, 180, "spark-connect.log")
        _wait("Airflow (api-server health: metadatabase, scheduler, dag processor, triggerer)",
              lambda: _healthy(airflow_health()), 240, "api-server.log")
    except BaseException:
        down()
        raise
    return {"airflow": f"http://{HOST}:{PORTS['api']}", "spark": f"spark://{HOST}:{PORTS['spark']}",
            "spark_ui": f"http://{HOST}:{PORTS['spark_ui']}", "connect": f"sc://{HOST}:{PORTS['connect']}"}


def _port_free(port: int) -> bool:
    """True when a server can listen on ``HOST:port`` now (bound and released at once)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no obstacle
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _fernet_key() -> str:
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode()


def running() -> dict[str, int]:
    """``{service: pid}`` of the recorded processes still alive."""
    alive = {}
    for pid_file in sorted((folder() / "pids").glob("*.pid")):
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, 0)
            alive[pid_file.stem] = pid
        except ProcessLookupError:
            pass
    return alive


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status when this process started it (``up`` and ``down`` in one
    process, as in the tests): a dead child stays a zombie, and its process group with it, until
    its parent waits for it. Elsewhere (``make down``) it is not our child and there is nothing to do."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def down(grace_s: float = 30.0) -> list[str]:
    """Stop every process group ``up`` started, by its recorded PID (SIGTERM, then SIGKILL after
    ``grace_s``); nothing else is signalled. Returns the services stopped."""
    pids = folder() / "pids"
    stopped = []
    order = [*SERVICES, "spark-connect", *(f"spark-worker-{i + 1}" for i in range(WORKERS)), "spark-master", "postgres"]
    for name in order:
        pid_file = pids / f"{name}.pid"
        if not pid_file.exists():
            continue
        pid = int(pid_file.read_text())
        try:
            os.killpg(pid, signal.SIGINT if name == "postgres" else signal.SIGTERM)  # SIGINT: PostgreSQL's fast shutdown
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                _reap(pid)
                os.killpg(pid, 0)
                time.sleep(0.2)
            os.killpg(pid, signal.SIGKILL)
            _reap(pid)
        except ProcessLookupError:
            pass
        pid_file.unlink()
        stopped.append(name)
    return stopped


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="A local deployment: PostgreSQL, Airflow 3, a Spark standalone cluster.")
    parser.add_argument("command", choices=["up", "down", "env"])
    args = parser.parse_args(argv)
    if args.command == "env":
        for key, value in environment().items():
            if key.startswith(("AIRFLOW", "WATERMARK_OPS", "SPARK", "PYSPARK")):
                print(f"export {key}={json.dumps(value)}")
        return 0
    if args.command == "down":
        stopped = down()
        print("stopped: " + (", ".join(stopped) or "nothing was running"))
        return 0
    started = time.monotonic()
    try:
        urls = up()
    except DeployError as exc:
        print(f"make up failed: {exc}", file=sys.stderr)
        return 1
    print(f"Deployment up in {time.monotonic() - started:.0f} s (PIDs in {folder() / 'pids'}, logs in {folder() / 'logs'}):\n"
          f"  Airflow UI      {urls['airflow']}   (log in as admin / admin)\n"
          f"  Spark master    {urls['spark']}   (UI {urls['spark_ui']})\n"
          f"  Spark Connect   {urls['connect']}   (spark_connect_default)\n"
          f"  stop it with    make down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
