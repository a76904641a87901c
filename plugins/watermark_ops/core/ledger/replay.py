"""The late-row ledger of a checkpoint: every row the watermark dropped, replayed batch by batch.

Spark counts only ``numRowsDroppedByWatermark``, and for an aggregation it counts late *partial
aggregates* (one per window, key and input partition: 48 late rows of one day showed as 8). The
ledger recovers the rows themselves without touching the job's plan: per batch, what it read and
which watermark judged it (:mod:`~watermark_ops.core.ledger.plan`), then the rows, from one of

* the launcher's Spark replay records (:mod:`~watermark_ops.core.ledger.replayed`,
  ``<checkpoint>.replay.jsonl``): the job's own parsing of any file format, replayed in Spark after
  the run: exact wherever it exists;
* the Python replay of landed JSON lines classified by the package's reader
  (:mod:`~watermark_ops.core.ledger.lines`): exact for that reader only. For any other source
  (another format, the job's own parsing, no recorded schema) the batch is *not replayed* here and
  a problem says why, never a guess.

A corrupt or missing log or landing file is a :class:`~watermark_ops.core.log_formats.ReadProblem`
naming it; the batches it concerns are left out (``replayed`` false), and nothing is fixed or
deleted. Pure core: no Airflow, no Spark.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

from watermark_ops.core.checkpoint import MAX_CONCURRENT_READS, Checkpoint, filesystem_for, open_storage, read_checkpoint
from watermark_ops.core.ledger.lines import classify_line
from watermark_ops.core.ledger.model import BatchLedger, LateLedger
from watermark_ops.core.ledger.plan import BatchPlan, ReplayRow, plan_batch, progress_records, tally
from watermark_ops.core.ledger.replayed import batch_from_record, read_replay_log
from watermark_ops.core.ledger.rule import LedgerError
from watermark_ops.core.log_formats import ReadProblem
from watermark_ops.core.partition_skew import partition_skew, skew_before_each_batch
from watermark_ops.core.progress import progress_log_path, read_progress_log
from watermark_ops.core.storage import uri_location

__all__ = ["late_ledger"]


class _LandedFiles:
    """Reads landed files by their file source URI: with the checkpoint's filesystem when the URI
    is on it (:func:`~watermark_ops.core.checkpoint.filesystem_for`), else by itself."""

    def __init__(self, filesystem: Any, storage_options: dict[str, Any] | None):
        self.filesystem = filesystem
        self.storage_options = storage_options

    def read(self, uri: str) -> bytes | Exception:
        location = uri_location(uri)
        fs = filesystem_for(location, self.filesystem)
        options = self.storage_options if fs is None and "://" in location else None
        storage, path = open_storage(location, filesystem=fs, storage_options=options)
        return storage.read([path])(path)


def _python_replay(plan: BatchPlan, landed: _LandedFiles, problems: list[ReadProblem]) -> BatchLedger:
    """The batch's landed JSON lines classified in Python (exact for the package's reader only)."""
    rule = plan.rule
    rows: list[ReplayRow] = []
    for index, uri in plan.files:
        event_field = rule.field_of(index)
        profile = rule.profile_of(index)
        if profile is None:
            problems.append(ReadProblem(
                "no_profile", uri, "cannot be exact: the late rule records no input for this source (how its rows "
                "are made: the classified reader's schema, watermark_ops.spark.late_rule(schema=...), or the job's "
                "pre-watermark function, declared on the run pattern)", plan.batch_id))
            return plan.unreplayed()
        why = profile.python_replay_problem()
        if why is not None and profile.parsing == "job" and profile.pre_watermark:
            why += "; the replay log (<checkpoint>.replay.jsonl) holds no record of this batch"
        if why is not None:
            problems.append(ReadProblem("not_exact", uri, f"cannot be exact in Python: {why}", plan.batch_id))
            return plan.unreplayed()
        raw = landed.read(uri)
        if isinstance(raw, Exception):
            problems.append(ReadProblem("unreadable", uri, f"cannot read the landed file the batch read: {raw!r}",
                                        plan.batch_id))
            return plan.unreplayed()
        for number, line in enumerate(raw.splitlines(), start=1):
            for reason, event_us, obj in classify_line(line, profile, event_field, plan.timestamp_ms,
                                                       rule.max_event_time_ahead_ms):
                rows.append(ReplayRow(uri, number, reason, event_us, obj))
    return tally(plan, rows, "python")


def late_ledger(checkpoint: Any, batch_ids: Iterable[int] | None = None, *, filesystem: Any = None,
                storage_options: dict[str, Any] | None = None, late_watermark: str | None = None) -> LateLedger:
    """Replay micro-batches of a checkpoint and list every row the watermark dropped.

    :param checkpoint: the query's checkpoint folder (local path or fsspec URL); its progress log
        ``<checkpoint>.progress.jsonl`` gives the late rule of each batch, its replay log
        ``<checkpoint>.replay.jsonl`` the launcher's Spark replay where there is one.
    :param batch_ids: the batches to replay (e.g. one run's, from ``run_report``); None: every
        batch with an offsets file.
    :param filesystem: / storage_options: as for :func:`~watermark_ops.core.checkpoint.read_checkpoint`,
        for the checkpoint, its logs and the landed files on the same filesystem (the file source's
        ``s3a://`` URIs are read as ``s3://`` with it); other landed files are read from their own
        URIs. On object storage the batches are replayed concurrently (at most
        :data:`~watermark_ops.core.checkpoint.MAX_CONCURRENT_READS` at once), each file source log
        folder listed once.
    :param late_watermark: None (default): each batch's watermark for late rows follows its
        progress record (:func:`~watermark_ops.core.ledger.rule.late_watermark_rule`); ``"previous"``
        or ``"current"`` forces one rule on every batch (a what-if, replayed in Python only: the
        Spark replay records judge by the recorded rule).
    :return: a :class:`~watermark_ops.core.ledger.model.LateLedger`; never raises for bad or missing
        files: each is a problem naming it, and the batches it concerns have ``replayed`` False.
    :raises OSError: when the progress log or the replay log exists but cannot be read.
    """
    if late_watermark not in (None, "previous", "current"):
        raise LedgerError(f"late_watermark must be None, 'previous' or 'current', got {late_watermark!r}")
    where = {"filesystem": filesystem, "storage_options": storage_options}
    storage, root = open_storage(checkpoint, **where)
    remote = storage.retry_delays != ()  # an object store (or another remote filesystem)
    if remote:  # the checkpoint and the progress log at once
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            state_future = pool.submit(read_checkpoint, checkpoint, **where)
            log_future = pool.submit(read_progress_log, progress_log_path(storage.display(root)), **where)
            state: Checkpoint = state_future.result()
            log = log_future.result()  # raises OSError here as the sequential read would
    else:
        state, log = read_checkpoint(checkpoint, **where), None
    problems: list[ReadProblem] = list(state.problems)
    records = progress_records(state.location, state.query_id, problems, where, log)
    replays, replay_problems = ({}, []) if late_watermark else read_replay_log(state.location, state.query_id, **where)
    problems.extend(ReadProblem("replay_log", state.location, message) for message in replay_problems)
    wanted = sorted(set(batch_ids)) if batch_ids is not None else [b.batch_id for b in state.batches
                                                                     if b.offsets_file is not None]
    skew_before = skew_before_each_batch(records)
    listings: dict[str, Any] = {}  # each file source log folder listed once per ledger
    landed = _LandedFiles(filesystem, storage_options)

    def one(batch_id: int) -> tuple[BatchLedger, list[ReadProblem], dict[str, dict[str, Any]]]:
        own: list[ReadProblem] = []
        own_unreplayable: dict[str, dict[str, Any]] = {}
        plan = plan_batch(state, storage, root, batch_id, records.get(batch_id), own, own_unreplayable,
                          late_watermark, listings)
        if not plan.ok:
            batch = plan.unreplayed() if plan.watermark_ms is not None else BatchLedger(batch_id, False,
                                                                                         **plan.spark_rows())
        elif batch_id in replays:
            batch, problem = batch_from_record(plan, replays[batch_id])
            if problem:
                own.append(ReadProblem("replay_log", state.location, problem, batch_id))
        else:
            batch = _python_replay(plan, landed, own)
        return replace(batch, skew_before=skew_before.get(batch_id)), own, own_unreplayable

    if remote and len(wanted) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT_READS, len(wanted))) as pool:
            results = list(pool.map(one, wanted))
    else:
        results = [one(batch_id) for batch_id in wanted]
    batches, unreplayable = [], {}
    for batch, own, own_unreplayable in results:  # in batch order, as a sequential replay adds them
        batches.append(batch)
        problems.extend(own)
        for source_id, entry in own_unreplayable.items():
            unreplayable.setdefault(source_id, {**entry, "batch_ids": []})["batch_ids"].extend(entry["batch_ids"])
    skew = None
    if wanted:  # the skew through the newest batch asked for, with the late rows of those replayed
        through = [records[k] for k in sorted(records) if k <= wanted[-1]]
        skew = partition_skew(through, watermark_ms=through[-1].get("watermark_ms") if through else None)
    if skew is not None:
        late: dict[str, int] = {}
        for batch in batches:
            if batch.replayed:
                for name, rows in batch.late_by(skew.column).items():
                    late[name] = late.get(name, 0) + rows
        skew = skew.with_late_rows(late)
    return LateLedger(checkpoint=state.location, query_id=state.query_id, batches=tuple(batches),
                      problems=tuple(problems), not_replayable=tuple(unreplayable.values()),
                      found=not any(p.kind in ("checkpoint_missing", "not_a_checkpoint") for p in state.problems),
                      partition_skew=skew)
