"""A sign of life in task logs during a long read: one line every few seconds.

A first audit of a long history on object storage reads for a minute or more; the task that reads
it logs ``reading <checkpoint>: 4,096 of 20,001 files (20 %)`` at most once every
:data:`LOG_EVERY_S` seconds while the read lasts (a read shorter than that logs nothing), from the
core's progress callback (:func:`watermark_ops.core.storage.reporting_progress`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable, Iterator

__all__ = ["LOG_EVERY_S", "logged_progress"]

#: Seconds between two progress lines of a task log (and before the first one).
LOG_EVERY_S = 5.0


@contextlib.contextmanager
def logged_progress(what: str, *, every_s: float = LOG_EVERY_S, logger: logging.Logger | None = None,
                    clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
    """Run the reads inside with a progress line in the task log every ``every_s`` seconds.

    :param what: what is read, as the line names it (the checkpoint's location).
    :param every_s: seconds between lines (the first one ``every_s`` after the start).
    :param logger: where the lines go (default this module's logger: the task log).
    :param clock: seconds, monotonic (tests pass their own).
    """
    from watermark_ops.core.storage import reporting_progress

    log = logger or logging.getLogger(__name__)
    next_at = clock() + every_s

    def on_progress(done: int, total: int) -> None:
        nonlocal next_at
        now = clock()
        if now >= next_at:
            next_at = now + every_s
            log.info("reading %s: %s of %s files (%d %%)", what, f"{done:,}", f"{total:,}",
                     100 * done // total if total else 100)

    with reporting_progress(on_progress):
        yield


