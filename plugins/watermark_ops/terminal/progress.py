"""The terminal face's sign of life during a long read: rich's progress bar, files read of files to read.

A first audit of a long history on object storage reads for a minute or more. While a command
runs, :func:`shown` listens to the core's reads (:func:`watermark_ops.core.storage.reporting_progress`)
and draws a transient bar on stderr, only when both stdout and stderr are a terminal and the
command prints no JSON: piped or ``--json`` output carries no progress at all.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any, Iterator

__all__ = ["shown", "wants_progress"]


def wants_progress(args: argparse.Namespace, stdout: Any = None, stderr: Any = None) -> bool:
    """True when a command's reads should draw a bar: no ``--json``, stdout and stderr terminals."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    if getattr(args, "json", False):
        return False
    return all(getattr(stream, "isatty", lambda: False)() for stream in (stdout, stderr))


@contextlib.contextmanager
def shown(args: argparse.Namespace) -> Iterator[None]:
    """Run the command's reads with a rich progress bar on stderr (``read 4,096 of 20,001 files``)
    when :func:`wants_progress`; otherwise with no callback at all (nothing is drawn or counted)."""
    from watermark_ops.core.storage import reporting_progress

    if not wants_progress(args):
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("reading files"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    task = None

    def on_progress(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            bar.start()
            task = bar.add_task("read", total=total)
        bar.update(task, completed=done, total=total)

    try:
        with reporting_progress(on_progress):
            yield
    finally:
        if task is not None:
            bar.stop()
