"""Spark Connect for the watermarked jobs: a local server, the client session, the version check,
and stopping a dead client's queries on the server.

A Spark Connect server (``org.apache.spark.sql.connect.service.SparkConnectServer``, shipped in
pyspark 4's ``jars/spark-connect_2.13-<version>.jar``) is one long-lived Spark application; a job
run is then a thin client (``SparkSession.builder.remote("sc://host:port")``) that pays no JVM start.

* :func:`start_connect_server` starts one with ``spark-submit --class ...SparkConnectServer`` as the
  leader of its own process group, bound to 127.0.0.1 on a free port, and returns a
  :class:`ConnectServer` (its PID, ``sc://`` URL, ``stop()`` by PID);
* :func:`connect_session` builds the client session (optionally attached to a given server-side
  session id, so that a supervisor can reach the same session later) and :func:`check_versions`
  refuses a server whose Spark release is not the client's (:class:`ConnectVersionMismatch`);
* :func:`stop_session_queries` attaches to a session id and stops its active streaming queries: what
  the Airflow task does when its driver was killed or timed out, so that no orphan query keeps
  running on the server and writing the checkpoint.

The server is started with ``spark.sql.streaming.stopActiveRunOnRestart=false``: a second start of a
query whose checkpoint is active on the server is then refused by Spark
(``StreamingQueryManager.startQuery``: "Cannot start query with id ... as another query with same
id is already active") instead of stopping the running one (Spark's default).

Needs pyspark (imported inside the functions); the launcher itself is plain ``subprocess``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CONNECT_SERVER_CLASS", "ConnectServer", "ConnectServerError", "ConnectVersionMismatch",
           "check_versions", "connect_session", "free_port", "is_connect_session", "server_command",
           "start_connect_server", "stop_session_queries", "with_session_id"]

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: Server confs every launcher sets (besides binding and port): quiet, UTC, refuse a second active run.
SERVER_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.numRecentProgressUpdates": "1000",
    "spark.sql.streaming.stopActiveRunOnRestart": "false",
}


class ConnectServerError(RuntimeError):
    """The Spark Connect server did not start, or is unreachable; the message names its log."""


class ConnectVersionMismatch(RuntimeError):
    """Client (pyspark-client) and server Spark releases differ; nothing was started."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _spark_home() -> str:
    return str(Path(importlib.util.find_spec("pyspark").submodule_search_locations[0]))


def server_command(port: int, master: str = "local[2]", host: str = "127.0.0.1",
                   conf: dict[str, str] | None = None) -> list[str]:
    """The ``spark-submit`` command line of a Connect server bound to ``host:port``.

    :param master: the server's Spark master (``local[2]``, ``spark://host:port`` of a standalone cluster).
    :param conf: further ``--conf`` values (after :data:`SERVER_CONF`).
    """
    home = _spark_home()
    jars = sorted(Path(home, "jars").glob("spark-connect_*.jar"))
    if not jars:
        raise ConnectServerError(f"no spark-connect jar in {home}/jars: this pyspark cannot run a Connect server")
    command = [str(Path(home, "bin", "spark-submit")), "--class", CONNECT_SERVER_CLASS, "--master", master,
               "--name", "watermark-ops-connect"]
    settings = {**SERVER_CONF, "spark.connect.grpc.binding.address": host,
                "spark.connect.grpc.binding.port": str(port), "spark.driver.host": host,
                "spark.driver.bindAddress": host, **(conf or {})}
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, str(jars[0])]


@dataclass
class ConnectServer:
    """A Spark Connect server process started by :func:`start_connect_server`.

    ``pid`` leads its own process group (spark-submit's JVM and its Python workers); ``url`` is the
    client's ``sc://127.0.0.1:<port>``; ``log`` the server's stdout and stderr.
    """

    pid: int
    host: str
    port: int
    log: str
    process: subprocess.Popen | None = field(default=None, repr=False)
    command: list[str] = field(default_factory=list, repr=False)
    env: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    def alive(self) -> bool:
        """True while the server's process exists (not a zombie of this process)."""
        if self.process is not None:
            return self.process.poll() is None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def rss_bytes(self) -> int | None:
        """Resident memory of the server's process group (bytes, from /proc), None when gone."""
        total, found = 0, False
        for status in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = status.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.pid:  # field 5 of stat: the process group id
                found = True
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # field 24: rss pages
        return total if found else None

    def stop(self, grace_seconds: float = 15.0) -> None:
        """Stop the server's process group by its PID: SIGTERM, then SIGKILL after ``grace_seconds``."""
        _stop_group(self.pid, grace_seconds, self.process)

    def kill(self) -> None:
        """SIGKILL the server's process group at once (a crash, for tests)."""
        _stop_group(self.pid, 0.0, self.process)

    def restart(self, timeout_seconds: float = 120.0) -> "ConnectServer":
        """Stop the server if it runs, start it again on the same port, wait until it answers.

        :raises ConnectServerError: as :func:`start_connect_server`.
        """
        if self.alive():
            self.stop()
        self.process = _launch(self.command, self.env, self.log)
        self.pid = self.process.pid
        _wait_ready(self, timeout_seconds)
        return self


def _stop_group(pid: int, grace_seconds: float, process: subprocess.Popen | None) -> None:
    sig = signal.SIGTERM if grace_seconds > 0 else signal.SIGKILL
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            break
        if process is None:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


def start_connect_server(log: str | os.PathLike, port: int | None = None, master: str = "local[2]",
                         host: str = "127.0.0.1", conf: dict[str, str] | None = None,
                         env: dict[str, str] | None = None, timeout_seconds: float = 120.0) -> ConnectServer:
    """Start a Spark Connect server and wait until it answers.

    :param log: file for the server's stdout and stderr (appended).
    :param port: the gRPC port; None: a free one.
    :param master: the server's Spark master.
    :param conf: further server ``--conf`` values (e.g. ``spark.sql.shuffle.partitions``).
    :param env: the server's environment (default: this process's, with this interpreter's ``bin``
        first on PATH and ``PYSPARK_PYTHON`` set to it, ``SPARK_LOCAL_IP=127.0.0.1``).
    :param timeout_seconds: how long to wait for the port to accept connections.
    :return: the running :class:`ConnectServer`.
    :raises ConnectServerError: when the process exits or the port does not open in time (the server
        is stopped then), naming the log.
    """
    port = port or free_port(host)
    bin_dir = os.path.dirname(sys.executable)
    environment = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
                   "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": host, **(env or {})}
    command = server_command(port, master, host, conf)
    process = _launch(command, environment, str(log))
    server = ConnectServer(pid=process.pid, host=host, port=port, log=str(log), process=process, command=command,
                           env=environment)
    _wait_ready(server, timeout_seconds)
    return server


def _launch(command: list[str], env: dict[str, str], log: str) -> subprocess.Popen:
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)


def _wait_ready(server: ConnectServer, timeout_seconds: float) -> None:
    """Wait until the server's port accepts connections; stop it and raise ConnectServerError if not."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if server.process is not None and server.process.poll() is not None:
            raise ConnectServerError(f"the Spark Connect server exited with status {server.process.returncode}; "
                                     f"see {server.log}")
        with contextlib.suppress(OSError), socket.create_connection((server.host, server.port), timeout=1):
            return
        time.sleep(0.3)
    server.stop()
    raise ConnectServerError(f"the Spark Connect server did not open {server.host}:{server.port} within "
                             f"{timeout_seconds:.0f} s; see {server.log}")


def with_session_id(url: str, session_id: str) -> str:
    """``url`` (``sc://host:port[/;params]``) with its ``session_id`` parameter set to ``session_id``."""
    base, _, params = url.partition(";")
    kept = [p for p in params.split(";") if p and not p.startswith("session_id=")]
    return base.rstrip("/") + "/;" + ";".join([*kept, f"session_id={session_id}"])


def is_connect_session(spark) -> bool:
    """True for a Spark Connect client session (``pyspark.sql.connect.session.SparkSession``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_session(url: str, session_id: str | None = None, conf: dict[str, str] | None = None):
    """A Spark Connect client session on ``url`` (``sc://host:port``, as the provider's
    ``SparkConnectHook.get_connection_url()`` gives it), its versions checked.

    :param session_id: a UUID4 text: attach to (or create) that server-side session, so that a
        supervisor can reach it later (:func:`stop_session_queries`); None: a new one.
    :param conf: session confs set on it (``spark.sql.shuffle.partitions`` ...).
    :raises ConnectVersionMismatch: see :func:`check_versions` (the session is stopped first).
    :raises pyspark.errors.PySparkException: when the server cannot be reached.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(with_session_id(url, session_id) if session_id else url)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.create()
    bound_retries(spark)
    try:
        check_versions(spark)
    except ConnectVersionMismatch:
        with contextlib.suppress(Exception):
            spark.stop()
        raise
    return spark


#: Retries of a Connect call that finds the server unavailable: 50 ms × 4^k backoff capped at 10 s, 6 retries,
#: so a lost server fails the call after about 25 s (pyspark's default waits at least 10 minutes).
RETRY_POLICY = {"max_retries": 6, "backoff_multiplier": 4.0, "initial_backoff": 50, "max_backoff": 10_000}


def bound_retries(spark, **policy) -> None:
    """Bound how long ``spark`` (a Connect session) retries a call while its server is unreachable
    (:data:`RETRY_POLICY`, overridden by ``policy``): a run on a server that went down fails within
    about half a minute instead of after pyspark's default of ten minutes or more."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    spark.client.set_retry_policies([DefaultPolicy(**{**RETRY_POLICY, **policy})])


def check_versions(spark) -> str:
    """Compare the client's pyspark release with the server's Spark release (``spark.version``).

    Client and server must be one Spark release (pin ``pyspark`` and ``pyspark-client`` to it): the
    Connect protocol and the plans a client sends change between releases.

    :return: the common version.
    :raises ConnectVersionMismatch: naming both versions, before any query is started.
    """
    import pyspark

    client, server = pyspark.__version__, spark.version
    if client.split("+")[0] != str(server).split("+")[0]:
        raise ConnectVersionMismatch(
            f"Spark Connect client is pyspark {client} but the server runs Spark {server}: pin pyspark-client and "
            f"the server's pyspark to one Spark release")
    return client


#: What pyspark sets in ``os.environ`` when a process creates a Connect session: it marks the whole
#: process as a Connect client (``is_remote()``), and child processes inherit it, so a spark-submit
#: started afterwards by the same process builds a Connect session instead of its own and fails
#: with CONNECT_URL_NOT_SET.
CONNECT_MODE_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@contextlib.contextmanager
def connect_mode_env():
    """Restore :data:`CONNECT_MODE_VARIABLES` as they were when the block ends: for a process that is
    not a Connect client itself (an Airflow worker, a test run) and briefly uses a Connect session."""
    saved = {name: os.environ.get(name) for name in CONNECT_MODE_VARIABLES}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def stop_session_queries(url: str, session_id: str, timeout_seconds: float = 30.0) -> list[str]:
    """Attach to the server-side session ``session_id`` and stop its active streaming queries.

    What a supervisor does after killing a client driver: the queries the driver started keep
    running on the server (and writing the checkpoint) until someone stops them.

    :return: the ids of the queries stopped (empty when none was active).
    :raises ConnectServerError: when the server does not answer within ``timeout_seconds``.
    """
    import threading

    outcome: dict = {}

    def work() -> None:
        try:
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.remote(with_session_id(url, session_id)).create()
            bound_retries(spark, max_retries=3)
            stopped = []
            for query in spark.streams.active:
                query.stop()
                stopped.append(str(query.id))
            outcome["stopped"] = stopped
            spark.stop()  # releases the server-side session (a released session's queries stop too)
        except Exception as exc:  # noqa: BLE001 - reported to the caller
            outcome["error"] = exc

    with connect_mode_env():  # the caller (an Airflow worker) is no Connect client: leave its environment as it was
        thread = threading.Thread(target=work, name="stop-session-queries", daemon=True)
        thread.start()
        thread.join(timeout_seconds)
    if thread.is_alive():
        raise ConnectServerError(f"Spark Connect server {url} did not answer within {timeout_seconds:.0f} s "
                                 f"while stopping the queries of session {session_id}")
    if "error" in outcome:
        raise ConnectServerError(f"could not stop the queries of session {session_id} on {url}: "
                                 f"{outcome['error']}") from outcome["error"]
    return outcome["stopped"]


def new_session_id() -> str:
    """A fresh server-side session id (UUID4 text) for :func:`connect_session`."""
    return str(uuid.uuid4())


def main(argv: list[str] | None = None) -> int:
    """``python -m watermark_ops.spark.connect --port P [--host H] [--master M] [--driver-host D] [--conf K=V]``:
    run a Spark Connect server in the foreground (this process becomes spark-submit), e.g. as a
    container's command (docker-compose.yaml's ``spark-connect``: ``--host 0.0.0.0 --driver-host spark-connect``)."""
    import argparse

    parser = argparse.ArgumentParser(description="Run a Spark Connect server in the foreground.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1", help="the gRPC bind address (default 127.0.0.1)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-host", help="the address executors reach the server's driver at (default --host)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    conf = dict(item.split("=", 1) for item in args.conf)
    if args.driver_host:
        conf.update({"spark.driver.host": args.driver_host, "spark.driver.bindAddress": "0.0.0.0"})
    command = server_command(args.port, args.master, args.host, conf)
    os.execvp(command[0], command)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
