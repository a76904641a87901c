"""The driver's exit path: statuses, and ending the process even when the launcher is gone.

``run_driver(main)`` is the entry point of a job script (and of the package's launcher): logging,
the watchdog that ends the driver when spark-submit's JVM dies (:func:`exit_with_launcher`), and an
exit that skips interpreter finalization (:func:`exit_process`), where py4j used to deadlock.

Pure Python: no pyspark.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable

from watermark_ops.spark.session import quiet_py4j

__all__ = ["EXIT_CHECKPOINT_IN_USE", "EXIT_RESTART_REFUSED", "EXIT_SERVER_LOST", "EXIT_VERSION_MISMATCH",
           "exit_process", "exit_with_launcher", "hold_exit_handlers", "run_driver"]

#: The exit status of a driver that refused to start: another driver holds the checkpoint.
EXIT_CHECKPOINT_IN_USE = 3
#: The exit status of a Connect driver whose server runs another Spark release (nothing was started).
EXIT_VERSION_MISMATCH = 4
#: The exit status of a Connect driver that lost (or never reached) its server: the checkpoint is
#: left as Spark left it (a batch in flight is re-run by the next run).
EXIT_SERVER_LOST = 5
#: The exit status of a driver whose restart was refused: by its start check (a change of the query
#: the run did not accept; nothing started) or by Spark (a refusal the driver diagnosed). The last
#: ERROR line of its log, and ``<checkpoint>.diagnosis.json``, say what, which file, what to do.
#: (6 is the launcher's: the run's batches could not be replayed.)
EXIT_RESTART_REFUSED = 7


def run_driver(main: Callable[[], int]) -> None:
    """The entry point of every job script: ``run_driver(main)`` under ``if __name__ == "__main__"``.

    Sets up the driver's logging, starts :func:`exit_with_launcher`, runs ``main`` (which returns the exit status), prints any
    exception that escapes it, and always ends with :func:`exit_process`. A ``SystemExit`` from
    ``main`` (argparse's ``--help``: 0; a usage error: 2, its one line already on stderr) is the exit
    status, with no traceback. Letting an exception
    reach the interpreter's own exit is what hung drivers whose JVM was killed: finalization stops
    the daemon threads (the watchdog among them) and then deadlocks in py4j's ``__del__``. Even
    reporting can raise then (stderr is a broken pipe once the JVM is gone), hence the ``finally``.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_py4j()
    logging.captureWarnings(True)  # the Trigger.Once deprecation goes to the driver log
    exit_with_launcher()
    code = 1
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help (0) or usage error (2, its one line already on stderr)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported here, then the process ends with status 1
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001 - stderr is a broken pipe once the JVM is gone
            pass
    finally:
        exit_process(code)


def exit_with_launcher(poll_seconds: float = 1.0) -> bool:
    """Under spark-submit, end this Python driver as soon as the JVM that launched it is gone.

    spark-submit's JVM (``PythonRunner``) starts the Python driver as its child. Airflow's
    SparkSubmitOperator.on_kill kills that JVM; the Python process would then be left behind,
    sometimes for good (py4j threads keep it alive). A daemon thread polls ``os.getppid()`` and
    exits the process with status 143 when the parent changes. Without spark-submit (plain
    ``python job.py``, where Python is the JVM's parent) it does nothing.

    :param poll_seconds: how often the parent is checked.
    :return: True when the watchdog was started.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return False
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                # No logging here: a logging lock may be held by a thread that will never run again.
                os.write(2, f"spark-submit JVM (pid {parent}) is gone: stopping this driver\n".encode())
                os._exit(143)

    threading.Thread(target=watch, name="exit-with-launcher", daemon=True).start()
    return True


def exit_process(code: int) -> None:
    """Flush stdout/stderr and end the driver process now with ``code``, skipping interpreter
    finalization.

    After the spark-submit JVM died, normal finalization deadlocked here: py4j's ``__del__`` logs,
    and the logging lock was held by a daemon thread that finalization had frozen. Everything the
    job writes (sinks, checkpoint, progress log) is closed before this is called.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or broken pipe must not stop the exit
            pass
    os._exit(code)


def hold_exit_handlers() -> Callable[[], None]:
    """Hold the exit handlers a job script registers from now on, for the launcher to run once.

    The launcher's process ends with :func:`exit_process` (``os._exit``), which skips ``atexit``: a
    job's own handler (``atexit.register(write_success_marker)``) would never run. From this call on,
    ``atexit.register`` keeps the handlers of every module but pyspark's and py4j's (theirs stay
    with ``atexit``: they stop the JVM) and returns the function, as a decorator needs.

    :return: a function that restores ``atexit.register`` and runs the held handlers once, the last
        registered first (as Python's exit does); a handler that raises is printed, the others still run.
    """
    held: list[tuple[Callable[..., Any], tuple, dict]] = []
    original = atexit.register

    def register(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        if str(getattr(func, "__module__", "") or "").split(".")[0] in ("pyspark", "py4j"):
            return original(func, *args, **kwargs)
        held.append((func, args, kwargs))
        return func

    def run() -> None:
        atexit.register = original
        while held:
            func, args, kwargs = held.pop()
            try:
                func(*args, **kwargs)
            except Exception:  # noqa: BLE001 - as Python's exit does: printed, the next handler runs
                traceback.print_exc()

    atexit.register = register
    return run
