"""Restart preflight: will the next start of this checkpoint work? A pure function of what was read.

:func:`preflight` takes the read checkpoint (:func:`watermark_ops.core.checkpoint.read_checkpoint`,
whole), its state (:func:`watermark_ops.core.state.reader.read_state`), the confs the next run
asks for and the Spark version it runs, and answers ``go``, ``warn`` or ``no_go`` with findings,
each naming the file that proves it and a recovery recipe. What real Spark 4.2 restarts showed
(each case is restarted for real in the tests' corpus):

Refused by Spark at restart (``no_go``):

* ``metadata_missing``: offsets exist but ``metadata`` does not
  (``STREAMING_CHECKPOINT_MISSING_METADATA_FILE`` in 4.x; 3.5 silently started a new query id);
* ``offsets_hole``: ``offsets/H-1`` missing below the head ``offsets/H`` ("batch H-1 doesn't
  exist", ``MicroBatchExecution.validateOffsetLogAndGetPrevOffset``), unless the query records
  async progress tracking;
* ``log_unreadable``: a log file every restart reads (``metadata``, ``offsets/H``, ``offsets/H-1``,
  ``commits/H``) cannot be read or parsed;
* ``log_version_unsupported``: an offsets or commit log version newer than the runtime Spark reads
  (offsets v2 and commits v3 need 4.2, commits v2 needs 4.0: ``OffsetSeqLog``/``CommitLog`` ``MAX_VERSION``);
* ``state_file_missing``: a file of the chain the restart loads is not there (a delta or changelog
  after the base, the zip of the version, an SST file the zip names;
  ``CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS``);
* ``state_file_truncated`` / ``state_file_unreadable``: a file of that chain cut short (no lz4
  end block; ``CANNOT_LOAD_STATE_STORE.UNCATEGORIZED``, EOF) or corrupt;
* ``state_format_unsupported``: state files the runtime Spark cannot load (checkpoint format
  version 2 or operator metadata v2 before 4.0, RocksDB before 3.2, changelogs before 3.4);
* ``state_format_v2_with_hdfs``: the run asks for ``spark.sql.streaming.stateStore.
  checkpointFormatVersion=2`` while the provider that applies is the HDFS-backed one
  (``STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED``).

Accepted silently, with another value than asked (``warn``):

* ``conf_overridden``: a conf the run sets differs from the one frozen in the checkpoint
  (``offsets/H`` ``conf``: ``spark.sql.shuffle.partitions``, ``spark.sql.streaming.
  multipleWatermarkPolicy``, the state store provider, ...): the checkpoint's value applies
  (``OffsetSeqMetadata.setSessionConf``: one WARN line in the driver log is the only trace);
* ``state_format_version_differs``: the run asks for another checkpoint format version than the
  state files were written with (the format version is in no offsets ``conf``);
* ``log_file_unreadable``: an older log file cannot be read (restarts do not read it; the audit
  reports it).

For the record (``info``): ``in_flight_batch`` (the head has no commit: Spark re-runs it, an
ordinary crash shape), ``state_chain_long`` (the restart replays many files), ``new_checkpoint``
(nothing there yet: the run creates it).

What only the driver can tell (the query about to start is not in the files): a changed key or
value schema, a stateful operator added or removed, another number of sources, a changed source
path or window duration. The preflight never says ``go`` for those because of the files; it
cannot say ``no_go`` either.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from watermark_ops.core.state.model import PROVIDER_CONF, provider_of_class

__all__ = ["FORMAT_VERSION_CONF", "GO", "LEVELS", "NO_GO", "WARN", "PreflightFinding", "PreflightReport",
           "preflight", "spark_version_tuple", "verdict_line"]

GO, WARN, NO_GO = "go", "warn", "no_go"
#: A finding's level: ``no_go`` refuses the restart, ``warn`` lets it run with a warning, ``info`` says.
LEVELS = (NO_GO, WARN, "info")
#: The conf choosing the checkpoint format version (Spark 4.0+); not recorded in ``offsets/N``.
FORMAT_VERSION_CONF = "spark.sql.streaming.stateStore.checkpointFormatVersion"
_RESTORE = "restore it from a copy of the checkpoint (a backup, the object store's versioning)"


@dataclass(frozen=True)
class PreflightFinding:
    """One reason: ``code`` (stable), ``level`` (``no_go`` | ``warn`` | ``info``), ``file`` (the file
    that proves it, or where a missing one should be), ``message`` (what, with the values),
    ``recipe`` (what to do), ``batch_id`` (None: the checkpoint)."""

    code: str
    level: str
    file: str | None
    message: str
    recipe: str
    batch_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"code", "level", "file", "message", "recipe", "batch_id"}``."""
        return {"code": self.code, "level": self.level, "file": self.file, "message": self.message,
                "recipe": self.recipe, "batch_id": self.batch_id}


@dataclass(frozen=True)
class PreflightReport:
    """The answer: ``verdict`` (``go`` | ``warn`` | ``no_go``) and the ``findings`` behind it."""

    location: str
    verdict: str
    findings: tuple[PreflightFinding, ...] = ()
    head_batch_id: int | None = None
    spark_version: str | None = None
    requested_conf: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 go, 1 warn, 2 no-go (for the terminal)."""
        return {GO: 0, WARN: 1, NO_GO: 2}[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        """``{"location", "verdict", "head_batch_id", "spark_version", "requested_conf", "findings": [...]}``."""
        return {"location": self.location, "verdict": self.verdict, "head_batch_id": self.head_batch_id,
                "spark_version": self.spark_version, "requested_conf": dict(self.requested_conf),
                "findings": [f.to_dict() for f in self.findings]}


def verdict_line(report: PreflightReport) -> str:
    """The verdict in one readable line: for ``no_go`` (and ``warn``) the first such finding's
    reason, the file that proves it and the recipe (``(+N more: codes)`` when there are more)."""
    head = "no batch yet" if report.head_batch_id is None else f"head batch {report.head_batch_id}"
    worst = [f for f in report.findings if f.level == report.verdict]
    if not worst:
        return f"preflight go: restart of {report.location} ({head})"
    first = worst[0]
    more = f" (+{len(worst) - 1} more: {', '.join(f.code for f in worst[1:])})" if len(worst) > 1 else ""
    return (f"preflight {report.verdict}: restart of {report.location} ({head}): {first.code}: {first.message}"
            f" [{first.file}]. What to do: {first.recipe}{more}")


def spark_version_tuple(version: str | None) -> tuple[int, int] | None:
    """``"4.2.0"`` -> ``(4, 2)``; None for None or text without a major.minor."""
    if not version:
        return None
    parts = str(version).strip().split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0]) if len(parts) > 1 else 0
    except ValueError:
        return None


def _path(location: str, *parts: Any) -> str:
    return "/".join([location.rstrip("/"), *map(str, parts)])


def preflight(checkpoint: Any, state: Any = None, requested_conf: dict[str, str] | None = None,
              spark_version: str | None = None, progress_records: Iterable[dict[str, Any]] = (),
              max_chain: int | str | None = "auto") -> PreflightReport:
    """The verdict on restarting ``checkpoint`` (module docstring).

    :param checkpoint: a whole :class:`~watermark_ops.core.checkpoint.Checkpoint`.
    :param state: its :class:`~watermark_ops.core.state.reader.CheckpointState` (None: the state
        is not checked).
    :param requested_conf: the SQL confs the next run sets (``{key: value}``).
    :param spark_version: the runtime Spark version (``"4.2.0"``); None: not checked.
    :param progress_records: the job's progress records (async progress tracking is recorded there).
    :param max_chain: ``state_chain_long`` above this many files for one store (None: never;
        ``"auto"``: the checkpoint's ``minDeltasForSnapshot`` plus a margin, as
        :func:`watermark_ops.core.state.rules.compaction_limit`).
    """
    from watermark_ops.core.rules import BatchRecord, uses_async_progress_tracking

    requested = {str(k): str(v) for k, v in (requested_conf or {}).items()}
    location = checkpoint.location
    findings: list[PreflightFinding] = []
    add = findings.append
    kinds = {p.kind for p in checkpoint.problems}
    if "checkpoint_missing" in kinds:
        add(PreflightFinding("new_checkpoint", "info", location, "no checkpoint at this location: the run starts a "
                             "new query from its sources' starting offsets", "nothing to do"))
        return _report(location, findings, None, spark_version, requested)
    head = checkpoint.head_batch_id
    if head is not None and checkpoint.metadata_file is None:
        add(PreflightFinding("metadata_missing", NO_GO, _path(location, "metadata"),
                             f"metadata is missing while offsets/ holds batches up to {head}: Spark 4.x refuses to "
                             f"start (STREAMING_CHECKPOINT_MISSING_METADATA_FILE); 3.5 would start a new query id",
                             f"{_RESTORE}. It holds only {{\"id\": \"<query id>\"}}: the id is in the job's progress "
                             f"log (query_id) and in earlier audits; write back exactly that id"))
    records = [BatchRecord.from_batch(b) for b in checkpoint.batches]
    below = checkpoint.batch(head - 1) if head else None
    if head and (below is None or below.offsets_file is None):
        if not uses_async_progress_tracking(records, progress_records, checkpoint.query_id):
            add(PreflightFinding("offsets_hole", NO_GO, _path(location, "offsets", head - 1),
                                 f"offsets/{head - 1} is missing below the head offsets/{head}: the restart reads it "
                                 f"for the offsets batch {head} starts from and fails (\"batch {head - 1} doesn't "
                                 f"exist\", MicroBatchExecution)",
                                 f"{_RESTORE}; if no copy has it, the query cannot resume from this checkpoint: "
                                 f"start a new checkpoint (and re-read the input from where the sink stands)",
                                 head - 1))
    needed = {_path(location, "metadata")}
    if head is not None:
        needed |= {_path(location, "offsets", head), _path(location, "offsets", head - 1),
                   _path(location, "commits", head)}
    for problem in checkpoint.problems:
        if problem.kind == "unsupported_version":
            add(PreflightFinding("log_version_unsupported", NO_GO, problem.file, problem.message,
                                 "run a Spark release that reads this log version (the one that wrote it or newer)",
                                 problem.batch_id))
        elif problem.file in needed:
            add(PreflightFinding("log_unreadable", NO_GO, problem.file, f"[{problem.kind}] {problem.message}",
                                 f"every restart reads this file: {_RESTORE}; never edit it by hand",
                                 problem.batch_id))
        else:
            add(PreflightFinding("log_file_unreadable", WARN, problem.file, f"[{problem.kind}] {problem.message}",
                                 "restarts do not read this file, but the audit cannot check it: restore it from a "
                                 "copy when you can", problem.batch_id))
    runtime = spark_version_tuple(spark_version)
    if runtime is not None:
        findings += _log_versions(checkpoint, runtime, spark_version)
    unfinished = _unfinished_repartition(checkpoint, head)
    if unfinished is not None:
        add(unfinished)
    elif head is not None and checkpoint.has_commit_log and not checkpoint.batch(head).committed:
        add(PreflightFinding("in_flight_batch", "info", checkpoint.batch(head).offsets_file,
                             f"offsets/{head} has no commit: the run re-runs batch {head} with its own offsets "
                             f"(running now, or its driver died)",
                             "nothing to do, unless another driver is running this query now", head))
    conf = dict(checkpoint.batch(head).conf or {}) if head is not None and checkpoint.batch(head).conf else {}
    for key in sorted(set(requested) & set(conf)):
        if requested[key] != str(conf[key]):
            add(PreflightFinding("conf_overridden", WARN, checkpoint.batch(head).offsets_file,
                                 f"the run sets {key}={requested[key]} but the checkpoint froze {key}={conf[key]} at its "
                                 f"first batch: {conf[key]} applies, and Spark only logs a WARN line",
                                 f"remove {key} from the job (or set it to {conf[key]}); to really change it, start a "
                                 f"new checkpoint", head))
    if state is not None:
        findings += _state_findings(state, conf, requested, runtime, spark_version, max_chain)
    return _report(location, findings, head, spark_version, requested)


def _report(location: str, findings: list[PreflightFinding], head: int | None, spark_version: str | None,
            requested: dict[str, str]) -> PreflightReport:
    levels = {f.level for f in findings}
    verdict = NO_GO if NO_GO in levels else WARN if WARN in levels else GO
    order = {level: i for i, level in enumerate(LEVELS)}
    ordered = tuple(sorted(findings, key=lambda f: order[f.level]))
    return PreflightReport(location, verdict, ordered, head, spark_version, requested)


def _unfinished_repartition(checkpoint: Any, head: int | None) -> PreflightFinding | None:
    """NO-GO for an uncommitted head that is an offline repartition's batch
    (:func:`watermark_ops.core.batch_kinds.repartition_of`): Spark refuses every start
    (``STREAMING_UNFINISHED_REPARTITION_DETECTED``, ``MicroBatchExecution``, Spark 4.2+) until a
    repartition finishes it. The HDFS-backed provider cannot be repartitioned
    (``STATE_REPARTITION_INVALID_CHECKPOINT.UNSUPPORTED_PROVIDER``, ``OfflineStateRepartitionRunner``)."""
    from watermark_ops.core.batch_kinds import repartition_of

    if not head or not checkpoint.has_commit_log:
        return None
    batch, below = checkpoint.batch(head), checkpoint.batch(head - 1)
    if batch is None or batch.committed or batch.offsets is None or below is None or below.offsets is None:
        return None
    moved = repartition_of(below.offsets, batch.offsets)
    if moved is None:
        return None
    old, new = moved
    provider = str((batch.offsets.conf or {}).get("spark.sql.streaming.stateStore.providerClass", ""))
    hdfs = "HDFSBackedStateStoreProvider" in provider or not provider
    if hdfs:
        recipe = (f"the HDFS-backed state store cannot be repartitioned (Spark fails it UNSUPPORTED_PROVIDER), so "
                  f"retrying cannot finish it: move offsets/{head} (and its .crc) out of the checkpoint, as one "
                  f"file Spark wrote for the failed repartition (it repeats batch {head - 1}'s offsets); the query "
                  f"then resumes after batch {head - 1} with {old} partitions. watermark-ops changes no file")
    else:
        recipe = (f"finish the repartition before starting the query: StreamingCheckpointManager.repartition("
                  f"checkpoint, {new}) again with the same {new} partitions (Spark: \"Please retry the "
                  f"repartitioning operation and let it finish successfully\")")
    return PreflightFinding(
        "repartition_unfinished", NO_GO, batch.offsets_file,
        f"offsets/{head} is an unfinished state repartition from {old} to {new} partitions (same offsets, watermark "
        f"and batch time as batch {head - 1}, no commits/{head}): Spark refuses every start "
        f"(STREAMING_UNFINISHED_REPARTITION_DETECTED: \"The latest batch {head} is for an unfinished state "
        f"repartitioning\")", recipe, head)


def _log_versions(checkpoint: Any, runtime: tuple[int, int], spark_version: str | None) -> list[PreflightFinding]:
    out = []
    offsets_max = 2 if runtime >= (4, 2) else 1
    commits_max = 3 if runtime >= (4, 2) else 2 if runtime >= (4, 0) else 1
    for batch in checkpoint.batches:
        for entry, top, log in ((batch.offsets, offsets_max, "offset"), (batch.commit, commits_max, "commit")):
            if entry is not None and entry.version > top:
                out.append(PreflightFinding(
                    "log_version_unsupported", NO_GO, entry.file,
                    f"{log} log v{entry.version} in {entry.file}: Spark {spark_version} reads up to v{top} "
                    f"(INVALID_LOG_VERSION.MAX_SUPPORTED_VERSION)",
                    "run the Spark release that wrote this checkpoint (or a newer one)", batch.batch_id))
                return out  # one is enough: every later file has it too
    return out


def _state_findings(state: Any, conf: dict[str, str], requested: dict[str, str], runtime: tuple[int, int] | None,
                    spark_version: str | None, max_chain: int | str | None) -> list[PreflightFinding]:
    from watermark_ops.core.state.rules import compaction_limit

    out = []
    limit = compaction_limit(conf, max_chain)
    applied = provider_of_class(conf.get(PROVIDER_CONF)) or next(
        (op.provider for op in state.operators if op.provider), None)
    wants_v2 = requested.get(FORMAT_VERSION_CONF, "").strip() == "2"
    if wants_v2 and applied == "hdfs" and state.has_state_folder:
        out.append(PreflightFinding(
            "state_format_v2_with_hdfs", NO_GO, state.operators[0].folder if state.operators else state.location,
            f"the run sets {FORMAT_VERSION_CONF}=2 but the provider that applies is the HDFS-backed one (frozen in "
            f"the checkpoint): Spark refuses it (STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED)",
            f"leave {FORMAT_VERSION_CONF} at 1 for this checkpoint; format version 2 needs the RocksDB provider "
            f"from the first batch of a new checkpoint"))
    for op in state.operators:
        if op.format_version is not None and FORMAT_VERSION_CONF in requested and \
                requested[FORMAT_VERSION_CONF].strip() != str(op.format_version) and not (wants_v2 and applied == "hdfs"):
            out.append(PreflightFinding(
                "state_format_version_differs", WARN, op.folder,
                f"operator {op.operator_id}'s state files are checkpoint format version {op.format_version}; the "
                f"run sets {FORMAT_VERSION_CONF}={requested[FORMAT_VERSION_CONF]}",
                f"keep {FORMAT_VERSION_CONF}={op.format_version} for this checkpoint"))
        if runtime is not None:
            needs = []
            if op.format_version == 2 and runtime < (4, 0):
                needs.append(("checkpoint format version 2 state files", "4.0"))
            if op.provider == "rocksdb" and runtime < (3, 2):
                needs.append(("the RocksDB state store provider", "3.2"))
            if op.changelog and runtime < (3, 4):
                needs.append(("RocksDB changelog checkpointing", "3.4"))
            for what, since in needs:
                out.append(PreflightFinding(
                    "state_format_unsupported", NO_GO, op.folder,
                    f"operator {op.operator_id} holds {what}, which Spark {spark_version} cannot load (since {since})",
                    f"run Spark {since} or newer", None))
        needed = {f.path for c in op.chains for f in c.replay} | {
            c.needed_zip.path for c in op.chains if c.needed_zip is not None} | {
            f.path for c in op.chains for f in c.files if f.kind == "snapshot" and f.version == c.base_version}
        for missing in op.missing_files:
            out.append(PreflightFinding(
                "state_file_missing", NO_GO, missing,
                f"operator {op.operator_id}: {missing} is missing, and the restart loads state version "
                f"{op.target_version} through it (CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS)",
                f"{_RESTORE}. Without it that partition's state cannot be rebuilt: start a new checkpoint and "
                f"re-read the input, or read what remains with Spark's state data source (format 'statestore') "
                f"on a copy", op.target_version - 1 if op.target_version else None))
        for problem in op.problems:
            if problem.file not in needed:
                out.append(PreflightFinding("state_file_unreadable", WARN, problem.file,
                                            f"[{problem.kind}] {problem.message}",
                                            "the restart does not load this file; restore it from a copy when you can",
                                            problem.batch_id))
                continue
            code = "state_file_truncated" if problem.kind == "truncated" else "state_file_unreadable"
            out.append(PreflightFinding(
                code, NO_GO, problem.file,
                f"operator {op.operator_id}: [{problem.kind}] {problem.message}; the restart loads state version "
                f"{op.target_version} through this file (CANNOT_LOAD_STATE_STORE)",
                f"{_RESTORE}; never truncate or rewrite it by hand. Without a copy: start a new checkpoint and "
                f"re-read the input", problem.batch_id))
        if limit is not None and op.chain_length > limit:
            out.append(PreflightFinding(
                "state_chain_long", "info", op.folder,
                f"operator {op.operator_id}: the restart replays {op.chain_length} "
                f"{'changelog' if op.changelog else 'delta'} files per partition and store "
                f"({op.partitions} partitions): no snapshot since version {op.snapshot_version or 0}",
                "see state_never_compacted (watermark-ops state): a maintenance interval shorter than a run"))
    for problem in state.problems:
        out.append(PreflightFinding("state_file_unreadable", WARN, problem.file, f"[{problem.kind}] {problem.message}",
                                    "check the storage's permissions and the file", problem.batch_id))
    return out
