"""Follow a checkpoint's newest batches from poke to poke at a constant cost: no listing.

The names the sensors used before the remembered view (:mod:`watermark_ops.core.view`) took their
place, kept for code that calls them: a :class:`Tail` is a :class:`~watermark_ops.core.view.View`,
and :func:`follow` moves one on over the offset and commit logs alone (no progress log, no state
metadata, no audit) with :func:`watermark_ops.core.advance.advance`, the one function that reads
what changed: ``metadata``, ``offsets/<head+1>`` by name, a stat of ``offsets/<head>``; new batches
by name; everything again (a bounded listing, as ``read_checkpoint(location, newest=N)``) when the
view no longer matches. Its :attr:`Tail.checkpoint` is what ``read_checkpoint(location,
newest=N)`` returns at that moment, under Spark's invariants.

Pure core: imports neither Airflow nor Spark. Times are epoch ms UTC.
"""

from __future__ import annotations

from typing import Any

from watermark_ops.core.view import VIEW_FORMAT, View

__all__ = ["TAIL_FORMAT", "Tail", "follow"]

#: The version of :meth:`Tail.to_dict`'s shape (the view's; ``from_dict`` refuses others).
TAIL_FORMAT = VIEW_FORMAT
#: The sensors' tail is the remembered view.
Tail = View


def follow(location: Any, previous: View | None = None, *, newest: int, filesystem: Any = None,
           storage_options: dict[str, Any] | None = None) -> View:
    """The newest ``newest`` batches of the checkpoint now, from the ``previous`` view (see the
    module docstring; :func:`watermark_ops.core.advance.advance` with the logs alone).

    :param location: the checkpoint folder (as for :func:`~watermark_ops.core.checkpoint.read_checkpoint`).
    :param previous: the view the last follow returned (or :meth:`View.from_dict` of it), None.
    :param newest: the window (at least 1), e.g. :func:`watermark_ops.core.stall.recent_batches`.
    :param filesystem: / storage_options: as for :func:`~watermark_ops.core.checkpoint.read_checkpoint`.
    :return: a :class:`~watermark_ops.core.view.View`; its ``checkpoint`` carries every problem
        (never raised for content), its ``requests`` what this follow cost (``listed``: it read again).
    :raises ValueError: ``newest`` below 1.
    """
    from watermark_ops.core.advance import advance

    if isinstance(newest, bool) or not isinstance(newest, int) or newest < 1:
        raise ValueError(f"newest must be a positive number of batches, got {newest!r}")
    if previous is not None and previous.newest != newest:
        previous = None  # another window: read it
    return advance(location, previous, newest=newest, progress="never", state=False, filesystem=filesystem,
                   storage_options=storage_options)
