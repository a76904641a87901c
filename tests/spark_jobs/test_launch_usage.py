"""The launcher's command line: ``--help`` prints the help and exits 0; a usage error is one line on
stderr and exit 2, no traceback (``run_driver`` takes argparse's ``SystemExit`` as the exit status)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _launcher(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "watermark_ops.spark.launch", *argv], capture_output=True, text=True,
                          timeout=120)


def test_help_prints_the_declarations_and_exits_0():
    done = _launcher("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m watermark_ops.spark.launch") and "--allowed-lateness" in done.stdout
    assert "Traceback" not in done.stderr and "error" not in done.stderr


@pytest.mark.parametrize("argv, says", [
    (["--checkpoint", "ck"], "expected '-- JOB.py [its arguments]'"),
    (["--no-such-declaration", "--", "job.py"], "unrecognized arguments: --no-such-declaration"),
    (["--allowed-lateness", "soon", "--", "job.py"], "--allowed-lateness: allowed lateness: expected an interval"),
    (["--", "no_such_job.py"], "the job script no_such_job.py is not a file"),
    (["--window", "1 hour", "--"], "expected the job script after '--'"),
])
def test_a_usage_error_is_one_line_on_stderr_with_exit_2(argv, says):
    done = _launcher(*argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [done.stderr.strip()] and says in done.stderr, done.stderr
    assert done.stderr.startswith("python -m watermark_ops.spark.launch: error: ") and done.stdout == ""
