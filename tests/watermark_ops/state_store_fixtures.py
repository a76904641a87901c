"""A small real stateful checkpoint for the faces' state tests, written by real PySpark.

A job unlike the example: JSON lines of ``{"id", "event_time", "kind"}`` (four files, each ten
minutes of events later than the one before, ids never repeated), read with ``maxFilesPerTrigger``
1 by one availableNow run, so the checkpoint has a batch per file. No progress log (not the
package's recorder): rows are counted from the state files.

``dedupe_ids``: ``withWatermark("event_time", "10 minutes").dropDuplicates(["id"])``, the mistake
seen in production: the watermark advances but the state key holds no event-time column, so no
watermark can evict the state (``state_unbounded``) and its rows rise batch after batch with
nothing removed (``state_growing`` over :data:`GROWING_BATCHES` batches). A bounded state with
the recorder's progress log is the example job's (``checkpoint_fixtures.restart_history``).

Built once per test process (:func:`state_checkpoints`) on the shared ``spark`` fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

SCHEMA = "id BIGINT, event_time TIMESTAMP, kind STRING"
FILES = 4
#: ``state_growing`` over this many batches (the default, 10, needs more batches than these tests pay for).
GROWING_BATCHES = 3

_BUILT: dict[str, dict[str, str]] = {}


def _land(landing: Path) -> None:
    """The files, each modified a second after the one before: the file source reads them in
    modification time order (a later file read first would make the earlier one's rows late)."""
    landing.mkdir(parents=True)
    first = time.time() - FILES
    for n in range(FILES):
        rows = [{"id": n * 100 + i, "event_time": f"2024-05-01T08:{n * 10 + i:02d}:00Z", "kind": "ab"[i % 2]}
                for i in range(8)]
        path = landing / f"part-{n}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (first + n, first + n))


def _run(spark, frame, checkpoint: Path) -> None:
    query = (frame.writeStream.format("noop").outputMode("append").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()


def state_checkpoints(spark, root: Path) -> dict[str, str]:
    """``{"dedupe_ids": path, "landing": path}`` (module docstring), built once per process under
    ``root``; copy the checkpoint before changing it."""
    if _BUILT:
        return dict(_BUILT["paths"])
    landing = root / "landing"
    shutil.rmtree(root, ignore_errors=True)
    _land(landing)

    def source():
        return (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(landing))
                .withWatermark("event_time", "10 minutes"))

    paths = {"landing": str(landing)}
    dedupe = root / "checkpoints" / "dedupe_ids"
    _run(spark, source().dropDuplicates(["id"]), dedupe)
    paths["dedupe_ids"] = str(dedupe)
    _BUILT["paths"] = paths
    return dict(paths)


def copy_checkpoint(source: str, dest: Path) -> str:
    """A copy of a checkpoint (``.crc`` side files too) at ``dest``: what a test may change."""
    shutil.copytree(source, dest)
    return str(dest)
