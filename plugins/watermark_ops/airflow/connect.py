"""Run a watermarked job's driver on a Spark Connect server: the run pattern's ``launch="connect"``.

:class:`SparkConnectRunOperator` runs the same job script spark-submit would run, as a thin Python
client process (``python <application> <args> --remote sc://... --session-id <uuid> --conf k=v``),
against the server an Airflow connection of the Spark provider's ``spark_connect`` type names
(``SparkConnectHook(conn_id).get_connection_url()``). No JVM starts for the run: the server keeps
one Spark application alive across runs.

Supervision, as spark-submit's but for a server that outlives the client:

* the driver gets a fresh server-side session id per try; when the task is killed (``on_kill``),
  times out (``execution_timeout``) or fails otherwise while the driver runs, the operator ends the
  driver's process group and then attaches to that session and stops its active streaming queries
  (:func:`watermark_ops.spark.connect.stop_session_queries`), so no orphan query keeps writing the
  checkpoint;
* a second run of a checkpoint while one is active is refused by the driver's checkpoint lock
  (exit 3) and, on one server, by Spark itself (the server runs with
  ``spark.sql.streaming.stopActiveRunOnRestart=false``);
* exit 4: client and server are different Spark releases; exit 5: the server is down or was
  restarted mid-run (the checkpoint is left restartable); exit 7: the restart was refused (by the
  driver's start check, or by Spark): the task fails without retries with the driver's one-line
  diagnosis (read beside the checkpoint, else the driver's last "refused" line). Each fails the task
  with its own message.

The job's own modules are imported by the client process (its folder is on ``sys.path``); the
interpreter defaults to the worker's own (``sys.executable``), which must have pyspark-client
of the server's Spark release and watermark-ops.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any, Sequence

from airflow.sdk import BaseOperator

__all__ = ["SparkConnectRunOperator"]

_EXIT_MESSAGES = {
    3: "another driver holds the checkpoint (its lock, or the Spark Connect server runs a query on it): not started",
    4: "the Spark Connect server runs another Spark release than the client: not started (pin pyspark-client and "
       "the server's pyspark to one release)",
    5: "the Spark Connect server is down or was restarted during the run; the checkpoint is restartable: the next "
       "run re-runs the batch in flight",
    6: "the run's queries finished but its batches could not be replayed through the job's pre-watermark function "
       "(see the log above): the ledger names them as not replayed",
    7: "the restart was refused (the driver's start check, or Spark): see the driver's last ERROR line",
}
#: The exit status of a refused restart (``watermark_ops.spark.exits.EXIT_RESTART_REFUSED``).
_EXIT_REFUSED = 7


class SparkConnectRunOperator(BaseOperator):
    """Run a job script's driver against a Spark Connect server, supervised.

    :param application: the job script (what spark-submit would be given).
    :param application_args: its arguments (templated).
    :param conn_id: an Airflow connection of type ``spark_connect`` (default ``spark_connect_default``).
    :param conf: session confs passed as ``--conf KEY=VALUE`` (templated), e.g. ``spark.sql.shuffle.partitions``.
    :param env_vars: the driver's environment on top of the worker's (templated).
    :param python: the interpreter that runs the client (default: the worker's).
    :param stop_timeout: seconds to wait for the server while stopping a dead driver's queries.
    :param diagnosis_checkpoints: the checkpoints of the job's queries (templated): where a refused
        restart's diagnosis is read.
    :param checkpoint_conn_id: the Airflow connection to read them with (object storage).
    :return: (XCom) ``{"url", "session_id", "returncode"}``.
    :raises airflow.exceptions.AirflowException: for a non-zero exit, with the meaning of exit 3/4/5;
        ``AirflowFailException`` (no retries) with the diagnosis line for exit 7.
    """

    template_fields: Sequence[str] = ("application_args", "conf", "env_vars", "diagnosis_checkpoints")
    ui_color = "#e4f0e8"

    def __init__(self, *, application: str, application_args: Sequence[str] = (),
                 conn_id: str = "spark_connect_default", conf: dict[str, Any] | None = None,
                 env_vars: dict[str, Any] | None = None, python: str | None = None, stop_timeout: float = 30.0,
                 diagnosis_checkpoints: Sequence[str] = (), checkpoint_conn_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.application = application
        self.application_args = list(application_args)
        self.conn_id = conn_id
        self.conf = conf
        self.env_vars = env_vars
        self.python = python
        self.stop_timeout = stop_timeout
        self.diagnosis_checkpoints = list(diagnosis_checkpoints)
        self.checkpoint_conn_id = checkpoint_conn_id
        self._process: subprocess.Popen | None = None
        self._url: str | None = None
        self._session_id: str | None = None
        #: Ids of the queries the last try's driver left running on the server, stopped by this operator.
        self.stopped_queries: list[str] = []

    def command(self, url: str, session_id: str) -> list[str]:
        """The client's command line for ``url`` and ``session_id``: the application's arguments, then
        ``--remote``, ``--session-id`` and ``--conf``; for the package's launcher (arguments ``[its
        declarations] -- JOB.py [the job's]``) the Connect flags go before the ``--``, to the launcher."""
        connect = ["--remote", url, "--session-id", session_id]
        for key, value in (self.conf or {}).items():
            connect += ["--conf", f"{key}={value}"]
        args = [str(a) for a in self.application_args]
        if "--" in args:
            split = args.index("--")
            args = [*args[:split], *connect, *args[split:]]
        else:
            args = [*args, *connect]
        return [self.python or sys.executable, self.application, *args]

    def execute(self, context: Any) -> dict:
        from airflow.exceptions import AirflowException
        from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

        from watermark_ops.spark.connect import new_session_id

        self._url = SparkConnectHook(conn_id=self.conn_id).get_connection_url()
        self._session_id = new_session_id()
        started = int(time.time() * 1000)
        refusal = None
        env = {**os.environ, **{k: str(v) for k, v in (self.env_vars or {}).items()}}
        self.log.info("running %s on Spark Connect %s (session %s)", self.application, self._url, self._session_id)
        self._process = subprocess.Popen(self.command(self._url, self._session_id), stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, text=True,
                                         errors="replace", start_new_session=True)
        try:
            for line in self._process.stdout:
                self.log.info("%s", line.rstrip())
                if " refused by " in line and "restart of " in line:
                    refusal = line[line.find("restart of "):].rstrip()
            code = self._process.wait()
        except BaseException:  # timeout, kill, anything: no driver and no query may outlive the task
            self._terminate()
            raise
        finally:
            self._process.stdout.close()
        if code != 0:
            # A driver that failed may have left a query running (e.g. killed by a signal): stop it.
            if code < 0 or code not in _EXIT_MESSAGES:
                self._stop_queries()
            if code == _EXIT_REFUSED:
                from airflow.sdk.exceptions import AirflowFailException

                from watermark_ops.airflow.restart import refused_line

                line = refused_line(self.diagnosis_checkpoints, self.checkpoint_conn_id, context.get("run_id"),
                                    started) or refusal
                if line:
                    self.log.error("%s", line)
                    from watermark_ops.airflow.metrics import emit_refused_restarts

                    emit_refused_restarts(self.diagnosis_checkpoints[0], self.dag_id, 1, by="driver")
                    raise AirflowFailException(line)
            raise AirflowException(f"{self.application} on {self._url} exited with status {code}: "
                                   f"{_EXIT_MESSAGES.get(code, 'the streaming query failed (see the log above)')}")
        return {"url": self._url, "session_id": self._session_id, "returncode": code}

    def on_kill(self) -> None:
        """End the driver's process group, then stop its session's queries on the server."""
        self._terminate()

    def _terminate(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        self._stop_queries()

    def _stop_queries(self) -> None:
        if not (self._url and self._session_id):
            return
        from watermark_ops.spark.connect import stop_session_queries

        try:
            stopped = stop_session_queries(self._url, self._session_id, timeout_seconds=self.stop_timeout)
        except Exception as exc:  # noqa: BLE001 - a server that is gone holds no query either
            self.log.warning("could not stop the queries of session %s: %s", self._session_id, exc)
            return
        self.stopped_queries = stopped
        if stopped:
            self.log.warning("stopped %d streaming queries the driver left on the server: %s", len(stopped), stopped)
