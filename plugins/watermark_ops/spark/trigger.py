"""The Spark trigger of a run (availableNow, or the deprecated once) and what a restart owes.

* :func:`apply_spark_trigger` sets it on a ``DataStreamWriter``;
* :func:`checkpoint_watermark_policy`: the ``multipleWatermarkPolicy`` a checkpoint is frozen with;
* :func:`owed_trailing_batch` / :func:`land_tick`: a driver that died between a batch's commit and
  its trailing no-data batch leaves windows unemitted; an empty tick file makes the next run emit them.

Reads the checkpoint's newest offset and commit files with fsspec; no pyspark import.
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

from watermark_ops.core.progress import progress_log_path

log = logging.getLogger("watermark_ops.spark")

__all__ = ["CHECKPOINT_DEFAULT_POLICY", "FROZEN_CONFS", "POLICY_CONF", "SPARK_TRIGGERS", "apply_spark_trigger",
           "checkpoint_watermark_policy", "land_tick", "owed_trailing_batch", "tick_if_owed"]

SPARK_TRIGGERS = ("availableNow", "once")
POLICY_CONF = "spark.sql.streaming.multipleWatermarkPolicy"
# Confs that Spark freezes in the checkpoint at the first batch (offsets/N "conf") and silently
# overrides on every restart. Each run records what its session asked for, so the audit can report
# a request the checkpoint ignored (OffsetSeqMetadata.setSessionConf in OffsetSeq.scala).
FROZEN_CONFS = (POLICY_CONF, "spark.sql.shuffle.partitions")
# OffsetSeqMetadata.relevantSQLConfDefaultValues: a checkpoint whose offsets conf lacks the key
# (written before Spark 2.4) runs with the default policy.
CHECKPOINT_DEFAULT_POLICY = "min"


def apply_spark_trigger(writer, spark_trigger: str):
    """Set the Spark trigger on a ``DataStreamWriter``.

    :param spark_trigger: ``"availableNow"`` (default of every job: processes all input present at
        start in one or more micro-batches, then a trailing no-data batch when the watermark moved,
        so append-mode results appear in the same run) or ``"once"`` (``Trigger.Once``, deprecated
        by Spark since 3.4: exactly one micro-batch and no trailing no-data batch, so append-mode
        results of a window appear one run later).
    :raises ValueError: for any other name.
    """
    if spark_trigger == "availableNow":
        return writer.trigger(availableNow=True)
    if spark_trigger == "once":
        warnings.warn(
            "Trigger.Once is deprecated by Spark since 3.4: use availableNow. With once, each run is "
            "exactly one micro-batch and no trailing no-data batch, so append-mode windows closed "
            "by this run's watermark are emitted only by the next run.",
            FutureWarning,
            stacklevel=2,
        )
        return writer.trigger(once=True)
    raise ValueError(f"spark trigger must be one of {SPARK_TRIGGERS}, got {spark_trigger!r}")


def _head_offsets(checkpoint: str) -> tuple[Any, str, int, dict[str, Any]] | None:
    """``(filesystem, checkpoint root, head batch id, offsets metadata)`` of the newest ``offsets/N``.

    Reads line 2 (``OffsetSeqMetadata``, ``OffsetSeq.scala``) of ``<checkpoint>/offsets/<N>`` for
    the highest decimal N (other names, e.g. ``.N.crc`` and temp files, are ignored). None for a
    new checkpoint (no offsets file yet).

    :raises ValueError: naming the file when it is not ``v<N>`` followed by a JSON object line
        (Spark would refuse to restart from it as well).
    """
    import fsspec

    fs, root = fsspec.core.url_to_fs(str(checkpoint))
    root = root.rstrip("/")
    folder = root + "/offsets"
    if not fs.isdir(folder):
        return None
    ids = [int(name) for name in (p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(folder, detail=False))
           if name.isdigit()]
    if not ids:
        return None
    path = f"{folder}/{max(ids)}"
    lines = fs.cat_file(path).decode("utf-8", errors="replace").split("\n")
    try:
        if not lines[0].startswith("v"):
            raise ValueError("no version line")
        metadata = json.loads(lines[1]) if lines[1].strip() else {}
        if not isinstance(metadata, dict):
            raise ValueError("metadata is not a JSON object")
    except (IndexError, ValueError) as exc:
        raise ValueError(f"{path}: expected an offset log file ('v<N>' then a metadata JSON object) ({exc})") from exc
    return fs, root, max(ids), metadata


def checkpoint_watermark_policy(checkpoint: str) -> str | None:
    """The ``multipleWatermarkPolicy`` a checkpoint is frozen with, from its latest offsets file.

    :param checkpoint: checkpoint location (local path or fsspec URL).
    :return: ``"min"`` or ``"max"``; ``"min"`` when the conf lacks the key (Spark's default for
        old checkpoints); None for a new checkpoint (no offsets file yet).
    :raises ValueError: naming the file when the latest offsets file cannot be read (see :func:`_head_offsets`).
    """
    head = _head_offsets(checkpoint)
    if head is None:
        return None
    return str((head[3].get("conf") or {}).get(POLICY_CONF, CHECKPOINT_DEFAULT_POLICY))


def owed_trailing_batch(checkpoint: str) -> int | None:
    """The head batch id when its trailing no-data batch is owed, else None.

    Owed: ``commits/N`` of the head batch N exists and its ``nextBatchWatermarkMs`` is above the
    ``batchWatermarkMs`` N ran with (``CommitLog.scala``, ``OffsetSeq.scala``): the watermark moved
    and the windows it closes have not been emitted. Under availableNow Spark runs that batch right
    after N, so it is owed only when the driver died between the two. A batch the progress log
    records as run by Trigger.Once owes nothing: ``once`` emits its windows one run later by design.
    Spark does not run it on a restart without new input (``MicroBatchExecution`` decides on the
    *previous execution* of this process, which a restarted driver lacks).

    :raises ValueError: naming the file when the head offsets file cannot be read.
    """
    head = _head_offsets(checkpoint)
    if head is None:
        return None
    fs, root, batch_id, metadata = head
    commit = f"{root}/commits/{batch_id}"
    if not fs.exists(commit):
        return None  # in flight: Spark re-runs it, and its trailing batch follows
    lines = fs.cat_file(commit).decode("utf-8", errors="replace").split("\n")
    try:
        next_watermark = json.loads(lines[1]).get("nextBatchWatermarkMs")
    except (IndexError, ValueError, AttributeError):
        return None  # not ours to judge: Spark reports a corrupt commit when it restarts
    current = metadata.get("batchWatermarkMs")
    if not (isinstance(next_watermark, int) and isinstance(current, int) and next_watermark > current):
        return None
    if _run_by_once_trigger(checkpoint, batch_id):
        return None  # Trigger.Once never runs it: its windows appear one run later, by design
    return batch_id


def _run_by_once_trigger(checkpoint: str, batch_id: int) -> bool:
    """True when the progress log records ``batch_id`` as run by Trigger.Once (the newest record wins)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(progress_log_path(checkpoint))
    if not fs.exists(path):
        return False
    trigger = None
    for line in fs.cat_file(path).decode("utf-8", errors="replace").splitlines():
        if str(batch_id) not in line:  # cheap filter before parsing
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("batch_id") == batch_id:
            trigger = record.get("spark_trigger")
    return trigger == "once"


def land_tick(landing: str, checkpoint: str, batch_id: int) -> str:
    """Land an empty JSON-lines file so that a restart without new input runs the owed batch.

    The file source sees a new file, so Spark runs batch ``batch_id + 1`` (zero rows) with the
    restored watermark: it emits the closed windows and evicts their state, as the trailing
    no-data batch would have. The name (``watermark-ops-tick-<checkpoint name>-<batch id>.jsonl``,
    never starting with ``_`` or ``.``, which the file source ignores) says why it is there.

    :return: the path of the tick file.
    """
    import fsspec

    fs, folder = fsspec.core.url_to_fs(str(landing))
    fs.makedirs(folder, exist_ok=True)
    name = str(checkpoint).rstrip("/").rsplit("/", 1)[-1]
    path = f"{folder.rstrip('/')}/watermark-ops-tick-{name}-{batch_id}.jsonl"
    fs.touch(path)
    return path


def tick_if_owed(landing: str | None, checkpoint: str | None) -> None:
    """Land an empty file in ``landing`` when ``checkpoint`` owes a trailing no-data batch (its last
    driver died between a batch's commit and that batch), so this run emits the windows it closes
    (the launcher calls it before the job's queries start); only in a landing of line formats (an
    empty JSON-lines or CSV file is no row; an empty Parquet file is an error). Nothing without both."""
    if not (landing and checkpoint):
        return
    owed = owed_trailing_batch(checkpoint)
    if owed is None:
        return
    names = [p.suffix for p in Path(landing).glob("*") if p.is_file()] if "://" not in landing else []
    if any(suffix in (".parquet", ".orc", ".avro") for suffix in names):
        log.warning("checkpoint %s owes the trailing batch after batch %d; its landing holds columnar files, where an "
                    "empty file is not valid: the windows it closes are emitted by the next run with input",
                    checkpoint, owed)
        return
    path = land_tick(landing, checkpoint, owed)
    log.warning("checkpoint %s: batch %d was committed but the trailing no-data batch after it never ran (its driver "
                "died); landed %s so that this run emits the windows it closes", checkpoint, owed, path)
