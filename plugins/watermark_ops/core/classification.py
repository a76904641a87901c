"""The stall classification: one checkpoint's watermark at an instant, from what was read.

:func:`classify` is a pure function of a checkpoint already read (its newest batches), the
progress records of those batches and, while the watermark is 0, the state operators' metadata:
nothing here opens a file (:mod:`watermark_ops.core.snapshot` reads; :mod:`watermark_ops.core.stall`
reads, then classifies). The states, their precedence and the evidence are described in
:mod:`watermark_ops.core.stall`, where the public names are importable too.

Pure core: imports neither Airflow nor Spark. Times are epoch milliseconds UTC (``int``) inside;
pendulum only at the edges (ISO-8601 text in :meth:`Classification.to_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from watermark_ops.core.checkpoint import Checkpoint
from watermark_ops.core.evidence import watermark_evidence
from watermark_ops.core.facts import BatchFacts, batch_facts, inputs_evidence, last_move, progress_by_batch
from watermark_ops.core.freshness import WALL_CLOCK, interval_document, judge_lag
from watermark_ops.core.partition_skew import PartitionSkew, partition_skew
from watermark_ops.core.reasons import advancing_reason, idle_reason, jumped_reason, stall_hints, stalled_reason
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS, Thresholds
from watermark_ops.core.times import duration_ms as _ms
from watermark_ops.core.times import duration_words as _words
from watermark_ops.core.times import iso_utc, now_ms

if TYPE_CHECKING:
    from watermark_ops.core.snapshot import Snapshot
    from watermark_ops.core.state.metadata import StateMetadata

__all__ = ["ADVANCING", "IDLE", "JUMPED", "LAGGING", "NO_WATERMARK", "POLICY_CONF", "STALLED", "STATES",
           "WATERMARK_UNKNOWN", "CheckpointMissing", "Classification", "StallInputError", "classify",
           "classify_snapshot"]

JUMPED, STALLED, LAGGING, IDLE, ADVANCING = "jumped", "stalled", "lagging", "idle", "advancing"
#: A query without an event-time watermark (proven), and one that may or may not have one (the
#: evidence cannot tell): see "Queries without a watermark" in :mod:`watermark_ops.core.stall`.
NO_WATERMARK, WATERMARK_UNKNOWN = "no_watermark", "watermark_unknown"
#: The states: the five of a watermarked query in precedence order (the first that applies is
#: reported), then the two that replace them when the watermark was never set (never alarms).
STATES = (JUMPED, STALLED, LAGGING, IDLE, ADVANCING, NO_WATERMARK, WATERMARK_UNKNOWN)
#: The offsets ``conf`` key of the multiple-watermark policy (``min`` | ``max``).
POLICY_CONF = "spark.sql.streaming.multipleWatermarkPolicy"


class StallInputError(ValueError):
    """The checkpoint cannot be classified: missing, not a checkpoint, or its head batch unreadable.

    :ivar location: the checkpoint location.
    :ivar problems: the reader's problems (``ReadProblem.to_dict()`` dicts), each naming its file.
    """

    def __init__(self, location: str, message: str, problems: Sequence[dict[str, Any]] = ()):
        super().__init__(f"{location}: {message}")
        self.location = location
        self.problems = list(problems)


class CheckpointMissing(StallInputError):
    """No checkpoint folder at the location (the job has not run yet, or a wrong path)."""


# --------------------------------------------------------------------------------------------
# The classification


@dataclass(frozen=True)
class Classification:
    """The state of a checkpoint's watermark at an instant, with its evidence (epoch ms UTC).

    :ivar state: one of :data:`STATES`.
    :ivar alarm: True for ``jumped``, ``stalled``, ``lagging`` and idleness past ``max_idle``; never
        for ``no_watermark`` and ``watermark_unknown``.
    :ivar applies: every state whose condition holds, in precedence order (``state`` is the first;
        ``advancing`` only when nothing else holds).
    :ivar reasons: one sentence per condition that holds (and why ``advancing`` when nothing does).
    :ivar hints: likely causes of a stall, read from the evidence.
    :ivar watermark_ms: the current watermark (what the next batch starts from); None without batches.
    :ivar emitted_through_ms: the watermark the latest *committed* batch ran with: append-mode
        windows ending at or before it are in the sink. Lower than ``watermark_ms`` until a batch
        runs with the new watermark (``availableNow``'s trailing no-data batch does at once;
        ``Trigger.Once`` one run later).
    :ivar lag_ms: the lag reference minus ``watermark_ms`` (ms); None while the watermark is 0
        (never set). The reference (``lag_basis``): the end of the data interval the newest progress
        record was stamped with, else the latest batch time (:mod:`watermark_ops.core.freshness`).
    :ivar lag_basis: ``"data_interval"`` (the newest progress record carries the run's data
        interval) or ``"wall_clock"`` (the latest batch's processing time); None without batches.
    :ivar data_interval: on the ``data_interval`` basis, ``{"start_ms", "end_ms", "batch_id"}`` of
        the stamp used (epoch ms UTC; the batch whose record carried it); else None. In
        :meth:`to_dict` also ``start`` and ``end`` as ISO-8601 UTC text.
    :ivar skew_ms: ``watermark_ms`` minus the latest batch time (positive: ahead of processing time).
    :ivar idle_ms: ``evaluated_at_ms`` minus the latest data batch's time; without any identified
        data batch, minus the first batch's time (a lower bound); None without batches.
    :ivar latest_batch / latest_data_batch: :class:`BatchFacts` or None.
    :ivar last_move: ``{"batch_id", "timestamp_ms", "from_ms", "to_ms"}`` of the latest batch in
        which the watermark moved, None if it never moved in the retained logs.
    :ivar flat_data_batches: the committed data batches since the last move (the stall evidence).
    :ivar jump: ``{"batch_id", "timestamp_ms", "from_ms", "to_ms"}``: the batch whose watermark
        first ran ahead of its processing time by more than ``max_skew`` (when jumped).
    :ivar inputs: per source (plan order): ``{"source", "description", "offset",
        "last_advanced_batch", "last_advanced_ms"}``.
    :ivar policy: the frozen ``spark.sql.streaming.multipleWatermarkPolicy`` (None if not recorded).
    :ivar problems: files that could not be read (each names its file) and bad progress-log lines.
    :ivar history: what was read (:func:`read_recent` reads only the newest batches):
        ``{"complete": bool (every batch file listed was read), "batches_read": int,
        "unread_batches": int (older batch ids listed, not read), "first_batch_id": int | None
        (the oldest batch read), "first_batch_ms": int | None (its batchTimestampMs, epoch ms
        UTC), "first_batch_time": ISO-8601 | None, "scope": str (the words the reasons use, e.g.
        "in the retained logs" or "in the 100 newest batches read (...)")}``.
    :ivar partition_skew: each partition's newest event time over the progress records read, the
        leader and how far each trails it (:class:`~watermark_ops.core.partition_skew.PartitionSkew`);
        None when the job records no per-partition event times.
    :ivar warnings: one sentence per partition trailing the leader by more than
        ``max_partition_skew``; warnings change neither ``state`` nor ``alarm``.
    :ivar watermark_evidence: whether the query has an event-time watermark
        (:func:`watermark_evidence`): ``{"has_watermark": True | False | None (cannot tell),
        "source": "checkpoint_logs" | "progress_log" | "state_metadata" | None, "evidence":
        [sentences], "state_operators": [StateOperator.to_dict()] | None (state not read)}``;
        None without batches.
    """

    location: str
    state: str
    alarm: bool
    applies: tuple[str, ...]
    reasons: tuple[str, ...]
    hints: tuple[str, ...]
    evaluated_at_ms: int
    thresholds: Thresholds
    query_id: str | None = None
    watermark_ms: int | None = None
    emitted_through_ms: int | None = None
    lag_ms: int | None = None
    lag_basis: str | None = None
    data_interval: dict[str, int] | None = None
    skew_ms: int | None = None
    idle_ms: int | None = None
    latest_batch: BatchFacts | None = None
    latest_data_batch: BatchFacts | None = None
    last_move: dict[str, Any] | None = None
    flat_data_batches: tuple[BatchFacts, ...] = ()
    jump: dict[str, Any] | None = None
    inputs: tuple[dict[str, Any], ...] = ()
    policy: str | None = None
    problems: tuple[str, ...] = field(default=())
    history: dict[str, Any] | None = None
    partition_skew: PartitionSkew | None = None
    warnings: tuple[str, ...] = ()
    watermark_evidence: dict[str, Any] | None = None

    @property
    def healthy(self) -> bool:
        """Not an alarm."""
        return not self.alarm

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every attribute, instants also as ISO-8601 UTC text (``watermark``,
        ``emitted_through``, ``evaluated_at``), batches as :meth:`BatchFacts.to_dict`."""
        return {
            "location": self.location,
            "state": self.state,
            "alarm": self.alarm,
            "applies": list(self.applies),
            "reasons": list(self.reasons),
            "hints": list(self.hints),
            "evaluated_at_ms": self.evaluated_at_ms,
            "evaluated_at": iso_utc(self.evaluated_at_ms),
            "query_id": self.query_id,
            "watermark_ms": self.watermark_ms,
            "watermark": iso_utc(self.watermark_ms),
            "emitted_through_ms": self.emitted_through_ms,
            "emitted_through": iso_utc(self.emitted_through_ms),
            "lag_ms": self.lag_ms,
            "lag_basis": self.lag_basis,
            "data_interval": interval_document(self.data_interval),
            "skew_ms": self.skew_ms,
            "idle_ms": self.idle_ms,
            "latest_batch": self.latest_batch.to_dict() if self.latest_batch else None,
            "latest_data_batch": self.latest_data_batch.to_dict() if self.latest_data_batch else None,
            "last_move": self.last_move,
            "flat_data_batches": [b.to_dict() for b in self.flat_data_batches],
            "jump": self.jump,
            "inputs": list(self.inputs),
            "policy": self.policy,
            "thresholds": self.thresholds.to_dict(),
            "problems": list(self.problems),
            "history": self.history,
            "partition_skew": self.partition_skew.to_dict() if self.partition_skew else None,
            "warnings": list(self.warnings),
            "watermark_evidence": self.watermark_evidence,
        }

    def summary(self) -> str:
        """One line: state, alarm, watermark, lag, latest batch, the number of warnings, first reason."""
        head = self.latest_batch
        parts = [
            f"{self.location}: {self.state}{' (ALARM)' if self.alarm else ''}",
            f"watermark {iso_utc(self.watermark_ms) or 'none'}",
            f"lag {_words(self.lag_ms)}" + (f" ({self.lag_basis.replace('_', ' ')})" if self.lag_basis else ""),
            f"latest batch {head.batch_id} at {iso_utc(head.timestamp_ms)}" if head else "no batch",
            *([f"{len(self.warnings)} warning(s): partition skew"] if self.warnings else []),
        ]
        return "; ".join(parts) + (f": {self.reasons[0]}" if self.reasons else "")


def _check_readable(checkpoint: Checkpoint) -> None:
    """Raise when the checkpoint cannot be classified at all (see :func:`classify`)."""
    as_dicts = [p.to_dict() for p in checkpoint.problems]
    fatal = [p for p in checkpoint.problems if p.batch_id is None and p.kind in ("checkpoint_missing", "not_a_checkpoint", "unreadable")]
    if any(p.kind == "checkpoint_missing" for p in fatal):
        raise CheckpointMissing(checkpoint.location, "no checkpoint folder at this location", as_dicts)
    if fatal:
        raise StallInputError(checkpoint.location, "; ".join(f"{p.kind}: {p.message}" for p in fatal), as_dicts)
    head_id = checkpoint.head_batch_id
    if head_id is not None and checkpoint.batch(head_id).offsets is None:
        raise StallInputError(
            checkpoint.location,
            f"the head batch's offsets file {checkpoint.batch(head_id).offsets_file} cannot be read: "
            + "; ".join(p.message for p in checkpoint.problems if p.batch_id == head_id),
            as_dicts,
        )


def _history(checkpoint: Checkpoint, facts: Sequence[BatchFacts]) -> dict[str, Any]:
    """What was read, for :attr:`Classification.history` (and the words the reasons use)."""
    first = facts[0] if facts else None
    read = len(checkpoint.batches)
    if checkpoint.complete:
        scope = "in the retained logs"
    else:
        since = f", since batch {first.batch_id} at {iso_utc(first.timestamp_ms)}" if first else ""
        scope = (f"in the {read} newest batches read ({checkpoint.unread_batches} older batches not read{since})")
    return {
        "complete": checkpoint.complete,
        "batches_read": read,
        "unread_batches": checkpoint.unread_batches,
        "first_batch_id": first.batch_id if first else None,
        "first_batch_ms": first.timestamp_ms if first else None,
        "first_batch_time": iso_utc(first.timestamp_ms) if first else None,
        "scope": scope,
    }


def classify(checkpoint: Checkpoint, progress_records: Iterable[dict[str, Any]] = (),
             thresholds: Thresholds = DEFAULT_THRESHOLDS, at_ms: int | None = None,
             extra_problems: Iterable[str] = (), state_metadata: StateMetadata | None = None) -> Classification:
    """Classify the watermark of an already read checkpoint at ``at_ms`` (see the module docstring).

    :param checkpoint: from :func:`watermark_ops.core.checkpoint.read_checkpoint`.
    :param progress_records: the job's progress-log records (``ProgressLog.records``), optional:
        they add input rows, observed event times and run ids to the evidence.
    :param thresholds: :class:`Thresholds`.
    :param at_ms: the evaluation instant, epoch ms UTC (default now).
    :param extra_problems: messages to carry into ``problems`` (e.g. bad progress-log lines).
    :param state_metadata: the state operators' metadata (:func:`read_state_metadata`), evidence of
        a watermark while the watermark is 0 (:func:`watermark_evidence`); None: not read (the
        readers, :func:`classify_at` and :func:`evaluate`, read it when :func:`needs_state_metadata`).
    :return: a :class:`Classification`.
    :raises CheckpointMissing: no checkpoint folder at the location.
    :raises StallInputError: not a checkpoint, or the head batch's offsets cannot be read.
    """
    at_ms = now_ms() if at_ms is None else at_ms
    problems = [f"{p.kind}: {p.file}: {p.message}" for p in checkpoint.problems] + list(extra_problems)
    _check_readable(checkpoint)
    by_batch, empty_triggers = progress_by_batch(progress_records, checkpoint.query_id, at_ms)
    facts = batch_facts(checkpoint, by_batch, at_ms)
    history = _history(checkpoint, facts)
    scope = history["scope"]
    base = dict(location=checkpoint.location, evaluated_at_ms=at_ms, thresholds=thresholds,
                query_id=checkpoint.query_id, problems=tuple(problems), history=history)
    if not facts:
        reason = (f"no batch at or before {iso_utc(at_ms)}" if checkpoint.batches
                  else "the checkpoint has no batch yet")
        return Classification(state=IDLE, alarm=False, applies=(IDLE,), reasons=(f"idle: {reason}",), hints=(), **base)

    head = facts[-1]
    policy = (checkpoint.batch(head.batch_id).conf or {}).get(POLICY_CONF)
    watermark = head.end_watermark_ms if head.committed and head.end_watermark_ms is not None else head.watermark_ms
    committed = [b for b in facts if b.committed]
    emitted_through = committed[-1].watermark_ms if committed else None
    judged = judge_lag(watermark, head.timestamp_ms, by_batch, head.batch_id)
    lag = judged.lag_ms
    skew = watermark - head.timestamp_ms
    data = [b for b in facts if b.is_data]
    latest_data = data[-1] if data else None
    idle = at_ms - (latest_data or facts[0]).timestamp_ms
    move = last_move(facts)
    flat = tuple(b for b in data if b.committed and b.next_watermark_ms is not None
                 and (move is None or b.batch_id > move["batch_id"]))
    t = thresholds
    applies: list[str] = []
    reasons: list[str] = []
    hints: list[str] = []
    jump = None
    evidence = watermark_evidence(watermark, by_batch, state_metadata)
    partitions = partition_skew((by_batch[k] for k in sorted(by_batch)), watermark_ms=watermark,
                                max_partition_skew_ms=_ms(t.max_partition_skew))
    common = dict(watermark_ms=watermark, emitted_through_ms=emitted_through, lag_ms=lag, lag_basis=judged.basis,
                  data_interval=judged.data_interval, skew_ms=skew, idle_ms=idle,
                  latest_batch=head, latest_data_batch=latest_data, last_move=move, flat_data_batches=flat,
                  inputs=inputs_evidence(facts, by_batch), policy=policy, partition_skew=partitions,
                  warnings=tuple(partitions.warnings()) if partitions else (), watermark_evidence=evidence, **base)
    has = evidence["has_watermark"]
    if watermark == 0 and (has is False or (has is None and flat)):
        # See "Queries without a watermark" in the module docstring: a state of its own, never an alarm.
        state = NO_WATERMARK if has is False else WATERMARK_UNKNOWN
        batches = (f"input arrived in {len(flat)} committed data batch(es) ({flat[0].batch_id}..{flat[-1].batch_id})"
                   if flat else "no committed data batch yet")
        if state == NO_WATERMARK:
            reasons.append(f"no_watermark: the query has no event-time watermark ({evidence['evidence'][0]}); "
                           f"{batches} and the watermark stays at 0 as Spark writes it for such a query: nothing to "
                           f"stall, lag or jump, not an alarm (the audit still checks the offset and commit logs)")
        else:
            reasons.append(f"watermark_unknown: cannot tell whether this query has a watermark: "
                           f"{'; '.join(evidence['evidence'])}. {batches[0].upper() + batches[1:]} and the watermark "
                           f"stayed at 0 (never set): with a watermark that is a stall (event times null for every "
                           f"row, or an input without data under 'min'), without one it is normal; not an alarm")
        applies.append(state)
        if latest_data is None or idle > _ms(t.idle_after):
            applies.append(IDLE)
            reasons.append(idle_reason(facts, latest_data, idle, t.max_idle is not None and idle > _ms(t.max_idle),
                                 empty_triggers, t, scope))
        return Classification(state=state, alarm=False, applies=tuple(applies), reasons=tuple(reasons),
                              hints=tuple(hints), **common)

    if t.max_skew is not None and skew > _ms(t.max_skew):
        applies.append(JUMPED)
        reason, jump = jumped_reason(facts, watermark, skew, t, checkpoint.complete)
        reasons.append(reason)
    stalled = stalled_reason(flat, move, watermark, t, scope)
    if stalled:
        applies.append(STALLED)
        reasons.append(stalled)
        hints = stall_hints(flat, head.keys, policy)
    if t.max_lag is not None and lag is not None and lag > _ms(t.max_lag):
        applies.append(LAGGING)
        basis = "" if judged.basis == WALL_CLOCK else "; judged against the data interval the run processed"
        reasons.append(f"lagging: the watermark {iso_utc(watermark)} is {_words(lag)} behind "
                       f"{judged.reference_words()} (max lag {_words(_ms(t.max_lag))}{basis})")
    idle_too_long = t.max_idle is not None and idle > _ms(t.max_idle)
    if latest_data is None or idle > _ms(t.idle_after):
        applies.append(IDLE)
        reasons.append(idle_reason(facts, latest_data, idle, idle_too_long, empty_triggers, t, scope))
    if not applies:
        reasons.append(advancing_reason(move, flat, idle, t))
    if watermark == 0:
        reasons.append("the watermark is 0: no watermarked input has set it yet (lag is undefined)")

    state = applies[0] if applies else ADVANCING
    alarm = state in (JUMPED, STALLED, LAGGING) or idle_too_long
    # Partition skew is evidence and a warning only: see "Partition skew: a warning, not a state" above.
    return Classification(state=state, alarm=alarm, applies=tuple(applies) or (ADVANCING,), reasons=tuple(reasons),
                          hints=tuple(hints), jump=jump, **common)


def classify_snapshot(snapshot: Snapshot, thresholds: Thresholds = DEFAULT_THRESHOLDS,
                      at_ms: int | None = None) -> Classification:
    """:func:`classify` of one read (:class:`watermark_ops.core.snapshot.Snapshot`): its checkpoint,
    its progress records, its problems (the progress log's, the state metadata's) and its state
    metadata. Nothing is read.

    :param at_ms: the evaluation instant (epoch ms UTC), default now (taken after the read).
    :raises CheckpointMissing: / :raises StallInputError: see :func:`classify`.
    """
    return classify(snapshot.checkpoint, snapshot.records, thresholds, now_ms() if at_ms is None else at_ms,
                    snapshot.problems, state_metadata=snapshot.state_metadata)
