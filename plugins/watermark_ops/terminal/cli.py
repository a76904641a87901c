"""The terminal face: ``watermark-ops`` (console script) and ``python -m watermark_ops``.

Subcommands (this module owns every one of them: arguments here, the work in
:mod:`watermark_ops.core`, the output through :mod:`watermark_ops.render`)::

    watermark-ops audit CHECKPOINT [--json] [--state FILE [--full]] [--limit N] [--no-state-store]
    watermark-ops status CHECKPOINT [--json] [--state FILE [--full]] [--no-state-store] [--at ISO-8601-INSTANT] [--max-lag PT6H|none] [--max-idle P1D]
                         [--idle-after PT15M] [--max-skew PT5M] [--stall-window PT1H] [--stall-batches 3]
                         [--max-partition-skew PT2H|none]
    watermark-ops lateness CHECKPOINT [--json] [--landing DIR ...] [--event-time-field F] [--arrival-field F]
    watermark-ops late CHECKPOINT [--json] [--sink DIR] [--batch N ...]
    watermark-ops corrections CHECKPOINT [--json]
    watermark-ops accept-reset CHECKPOINT --why TEXT --state FILE [--by NAME] [--json]
    watermark-ops state CHECKPOINT [--json] [--min-batches-to-retain N] [--growing-batches N] [--max-chain N]
    watermark-ops preflight CHECKPOINT [--conf KEY=VALUE ...] [--spark-version X] [--json]

    every subcommand also takes [--conn-id ID] [--storage-options JSON]

``audit`` prints a table of the batches (batch id, watermark as ISO-8601 UTC and ms, change from
the previous batch, batch time, committed or in flight), a line between the batches an earlier
audit saw and those added since (the restart boundary), then the findings. ``--json`` prints the
report of :meth:`watermark_ops.core.audit.AuditReport.to_dict` instead. ``--state FILE`` remembers
the head in a JSON state file between audits (:class:`watermark_ops.core.memory.StateFileMemory`),
with the checkpoint's remembered view (:mod:`watermark_ops.core.view`): the next audit reads only
``metadata`` and the new batches' files (by name, no listing) and says so; ``--full`` reads every
file again (the state file is updated as after any audit). ``status --state FILE`` reads what a
remembered view does not hold yet the same way. Both also show the stateful operators' state
store (:mod:`watermark_ops.core.state.summary`: operators, rows now, bounded by a watermark or
not, the chain a restart replays; the audit adds the state findings to its own, as warnings;
``--json``: ``state_store``), read again only when the head moved; ``--no-state-store`` skips it.
Exit status: 0 no error finding, 1 a rule is violated, 2 the checkpoint (or a file in it, or the
state file) cannot be read and nothing is violated.

``status`` prints the head (query id, head batch, the watermark the next batch starts from, the
in-flight batch) and the stall classification at ``--at`` (default now) with the thresholds as
flags (``--json`` adds ``state`` and ``classification``), and each partition's newest event time
and how far it trails the leading partition, with a warning past ``--max-partition-skew``. It reads what a sensor poke reads
(:func:`watermark_ops.core.stall.read_recent`): the newest batches and the end of the progress
log, so its cost does not grow with the checkpoint's history (``classification.history`` says
what was left unread; ``audit`` reads everything). Exit 2 when the checkpoint or its head
cannot be read, or for a bad flag value; else 0 (an alarm is in ``classification.alarm``).

``lateness`` prints per run the rows the watermark dropped (the late-row ledger's) and the drop
rate they make, beside Spark's own count (late partial aggregates, not rows), and, on the job's
own event-time field (its late rule's), the smallest delay threshold that keeps drops below 1 %
and 0.1 %: from the launcher's Spark replay for a job whose parsing is its own (any format), else
from the ``--landing`` folders' JSON lines. Exit 2 for bad input.

``late`` replays the checkpoint's micro-batches (offset log, the file source's log, the landed
files, the late rule of the progress log; :func:`watermark_ops.core.ledger.late_ledger`) and prints
every batch's late rows: rows late, the watermark missed, the worst lateness (watermark - window
end, or event time), late rows per value of the job's partition column, beside Spark's own count
(late partial aggregates), and which watermark each batch filtered late rows with (the
previous batch's since Spark 3.4, per the version and ``allowMultiple`` conf its progress record
names). ``--sink DIR`` also writes the late rows, one ``batch=<N>.jsonl`` per batch. Exit 0 when
every batch was replayed, or when the batches left out only lack a progress record with a
``late_rule`` (written before the job recorded it) and at least one batch was replayed; 2 when no
batch could be replayed (the message says why, e.g. no progress record with a ``late_rule``: the
job does not use the recorder), when a file it needs cannot be read (the message names it) or a
source cannot be replayed (not a file source).

With an allowed lateness (the checkpoint's ``<checkpoint>.corrections.jsonl`` holds corrections),
``lateness`` and ``late`` split the late rows into recovered (a correction holds them) and dropped
for good (text lines after their tables; JSON ``rows_late_recovered``, ``rows_late_dropped``,
``corrections`` per run, and ``corrections`` in ``late --json``). ``corrections`` lists the
corrections (:func:`watermark_ops.core.ledger.corrections.read_corrections`: each run's newest
write, in the order made): window (UTC), keys, emitted → corrected per value column, late rows,
run; ``--json``: ``{"corrections": [{"window_start_ms", "window_end_ms", "keys", "emitted",
"corrected", "late_rows", "run", "batch_id"}]}``. Exit 0, also with none; 2 when the log cannot be read.

``accept-reset`` records in the state file (``--state``, also ``--memory``; the file ``audit
--state`` uses) that the checkpoint was reset on purpose: the remembered query id replaced by
the one its ``metadata`` has now, by whom (``--by``, default the login name), when and why
(:func:`watermark_ops.core.memory.accept_reset`). The next ``audit --state`` reports that reset as
``reset_accepted`` (info) instead of failing with ``checkpoint_reset``; a reset to any other query
id still fails. Exit 0 when recorded; 2 when there is nothing to accept (no remembered audit, no
query id yet, the same query id) or the state file is malformed.

``state`` and ``preflight`` (the state of each stateful operator and its findings; will the next
restart work: go, warn or no-go) are registered here and live in :mod:`watermark_ops.terminal.state_cli`.

Checkpoints on object storage (``s3://``, ``gs://``, ``abfs://``, ...): a URL is read through
fsspec (for S3, s3fs with botocore), which honours the standard environment of its SDK: for S3
``AWS_ENDPOINT_URL`` (e.g. a MinIO or moto server), ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_DEFAULT_REGION``, ``AWS_PROFILE``.
``--storage-options JSON`` passes fsspec's storage options (for s3fs e.g. ``{"endpoint_url":
"http://127.0.0.1:9000", "key": ..., "secret": ...}`` or ``{"config_kwargs":
{"max_pool_connections": 64}}``); on S3 botocore's connection pool is raised to
:data:`watermark_ops.core.checkpoint.MAX_CONCURRENT_READS` unless given. ``--conn-id ID`` reads
through an Airflow connection instead (its endpoint, credentials and region, e.g. an ``aws``
connection; ``--storage-options`` are then the provider's options, botocore ``config_kwargs`` for
S3): only then is Airflow imported (:func:`watermark_ops.airflow.storage.checkpoint_filesystem`).
The progress log beside the checkpoint, the file source's landed files, ``--landing`` folders and
``--sink`` are read (written) with the same filesystem when they are on it. Files are read
concurrently, listings are fresh, and a throttled, missing or half-written object is read again
within a bound and then reported by name (exit 2), never fixed. A bad ``--storage-options`` or an
unknown ``--conn-id`` exits 2.

Each subcommand imports the core modules it needs when it runs (``audit`` loads neither the stall
classification, the lateness report nor pendulum), and the status flags' default durations are
put into words only when ``--help`` is printed: a terminal command pays only for what it uses.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields, replace

from watermark_ops import render
from watermark_ops.core.checkpoint import collector_paused
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS, Thresholds

__all__ = ["StorageArgumentError", "build_parser", "main", "storage_from_args", "thresholds_from_args"]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``watermark-ops`` parser with its subcommands (each sets ``run`` to its function).

    :param command: the subcommand about to be parsed (``argv[0]``): only it is added (argparse
        builds a parser per subcommand and a help formatter per argument, each looking up its
        words' translations: about 8 ms for all of them); None, or a word that names no
        subcommand (``--help``, a typo: the message lists them all), adds every subcommand."""
    parser = argparse.ArgumentParser(
        prog="watermark-ops",
        description="Audit and watch the watermark of Spark Structured Streaming checkpoints (no JVM needed).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subcommands = (
        ("audit", "prove that a checkpoint's watermark never moved backwards", _audit_arguments, _audit),
        ("status", "show a checkpoint's head and classify its watermark: advancing, idle, stalled, lagging or jumped",
         _status_arguments, _status),
        ("lateness", "late rows and drop rate per run, and the delay threshold that would keep drops below 1 and "
                     "0.1 percent, on the job's own event-time field",
         _lateness_arguments, _lateness),
        ("late", "every row the watermark dropped, recovered from the checkpoint and the landed files",
         _late_arguments, _late),
        ("corrections", "the windows an allowed lateness corrected: what the sink held, the result over every row, "
                        "the late rows recovered", _corrections_arguments, _corrections),
        ("accept-reset", "record that a checkpoint was reset on purpose, so the next audit accepts its new query id",
         _accept_reset_arguments, _accept_reset),
        *_state_subcommands(),
    )
    if command in {name for name, *_ in subcommands}:
        subcommands = tuple(item for item in subcommands if item[0] == command)
    for name, help_text, add_arguments, run in subcommands:
        sub = subparsers.add_parser(name, help=help_text, description=help_text,
                                    formatter_class=_LazyHelpFormatter)
        add_arguments(sub)
        _storage_arguments(sub)
        sub.set_defaults(run=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(words[0] if words else None).parse_args(words)
    try:
        args.where = storage_from_args(args)
    except StorageArgumentError as exc:
        print(f"watermark-ops {args.command}: {exc}", file=sys.stderr)
        return 2
    from watermark_ops.terminal.progress import shown

    with shown(args):  # a bar on a terminal during long reads; nothing when piped or with --json
        return args.run(args)


# --------------------------------------------------------------------------------------------
# where the checkpoint is: the environment, --storage-options, --conn-id


class StorageArgumentError(ValueError):
    """A bad ``--storage-options`` or ``--conn-id`` (the message names it and what was expected)."""


def _storage_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("object storage (s3://, gs://, abfs://, ...)")
    group.add_argument("--conn-id", metavar="ID",
                       help="read through this Airflow connection (e.g. an aws connection: endpoint, credentials, "
                            "region); imports Airflow. Default: the SDK's environment (AWS_ENDPOINT_URL, "
                            "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, ...)")
    group.add_argument("--storage-options", metavar="JSON",
                       help='fsspec storage options as a JSON object, e.g. \'{"endpoint_url": "http://127.0.0.1:9000"}\' '
                            "(with --conn-id: the provider's options, for S3 botocore config_kwargs)")


def storage_from_args(args: argparse.Namespace) -> dict:
    """``{"filesystem": fs | None, "storage_options": dict | None}`` for the core's readers, from
    ``--conn-id`` / ``--storage-options`` and the checkpoint's location.

    Without either, a URL is left to fsspec and its SDK's environment, with S3's connection pool
    raised to :data:`~watermark_ops.core.checkpoint.MAX_CONCURRENT_READS`; a local path is read
    with ``os``.

    :raises StorageArgumentError: ``--storage-options`` is not a JSON object, or ``--conn-id``
        names no connection (or no Airflow provider reads the location's scheme).
    """
    location = str(getattr(args, "checkpoint", "") or "")
    options = None
    if getattr(args, "storage_options", None):
        try:
            options = json.loads(args.storage_options)
        except ValueError as exc:
            raise StorageArgumentError(f"--storage-options is not JSON ({exc}): expected an object such as "
                                       '{"endpoint_url": "http://127.0.0.1:9000"}') from None
        if not isinstance(options, dict):
            raise StorageArgumentError(f"--storage-options must be a JSON object, got {args.storage_options!r}")
    if getattr(args, "conn_id", None):
        import contextlib

        # Airflow logs to stdout (e.g. "credentials retrieved"): keep stdout for the command's output.
        with contextlib.redirect_stdout(sys.stderr):
            from watermark_ops.airflow.storage import checkpoint_filesystem

            try:
                # An unknown connection is an error there, not an anonymous read.
                filesystem = checkpoint_filesystem(location, args.conn_id, options)
            except Exception as exc:  # AirflowNotFoundException, ValueError (no provider for the scheme), ...
                raise StorageArgumentError(f"--conn-id {args.conn_id}: {exc}") from None
        return {"filesystem": filesystem, "storage_options": None}
    scheme = location.split("://", 1)[0] if "://" in location else None
    if scheme in ("s3", "s3a", "s3n"):
        from watermark_ops.core.checkpoint import MAX_CONCURRENT_READS

        options = dict(options or {})
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("max_pool_connections", MAX_CONCURRENT_READS)
        options["config_kwargs"] = config
    return {"filesystem": None, "storage_options": options}


# --------------------------------------------------------------------------------------------
# audit


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint folder: local path or fsspec URL (s3://, gs://, ...)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--state", metavar="FILE",
                        help="JSON state file remembering the head between audits (created if missing)")
    parser.add_argument("--limit", type=int, default=render.DEFAULT_LIMIT, metavar="N",
                        help=f"newest batches in the table (default {render.DEFAULT_LIMIT}; 0: all)")
    _full_argument(parser)


def _full_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--full", action="store_true",
                        help="read every file again instead of what the state file's remembered view does not hold")
    parser.add_argument("--no-state-store", dest="state_store", action="store_false",
                        help="do not read the stateful operators' state (state/: rows, bound, chain)")


# The report's tens of thousands of values are acyclic: printing it (and importing rich) with the
# collector on would walk them all, as the read would (collector_paused; run_audit pauses it too).
@collector_paused()
def _audit(args: argparse.Namespace) -> int:
    from watermark_ops.core.audit import run_audit
    from watermark_ops.core.memory import MemoryFormatError, StateFileMemory

    try:
        memory = StateFileMemory(args.state) if args.state else None
        report = run_audit(args.checkpoint, memory, full=args.full, state_store=args.state_store, **args.where)
    except MemoryFormatError as exc:
        print(f"watermark-ops: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(report.to_json())
    else:
        render.print_audit_report(report, render.terminal_console(), limit=args.limit)
    return report.exit_code


def _accept_reset_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint folder: local path or fsspec URL (s3://, gs://, ...)")
    parser.add_argument("--why", required=True, metavar="TEXT",
                        help="why the reset is accepted: a ticket, what was deleted and why")
    parser.add_argument("--state", "--memory", dest="state", required=True, metavar="FILE",
                        help="the JSON state file the audits remember the head in (audit --state)")
    parser.add_argument("--by", metavar="NAME", help="who accepts (default: the login name)")
    parser.add_argument("--json", action="store_true", help="print the remembered head as one JSON object")


def _accept_reset(args: argparse.Namespace) -> int:
    import getpass

    from watermark_ops.core.checkpoint import read_checkpoint
    from watermark_ops.core.memory import MemoryFormatError, ResetAcceptanceError, StateFileMemory, accept_reset

    checkpoint = read_checkpoint(args.checkpoint, newest=1, **args.where)
    try:
        head = accept_reset(StateFileMemory(args.state), args.checkpoint, checkpoint.query_id, why=args.why,
                            by=args.by or getpass.getuser())
    except (ResetAcceptanceError, MemoryFormatError) as exc:
        print(f"watermark-ops: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(head.to_dict()))
        return 0
    acceptance = head.accepted_reset
    print(f"checkpoint {args.checkpoint}: reset from query id {acceptance.from_query_id} (head batch "
          f"{head.head_batch_id}, watermark {render.watermark_text(head.watermark_ms)}) to {acceptance.to_query_id} "
          f"{acceptance.describe()}; recorded in {args.state}, the next audit reports it as reset_accepted")
    return 0


# --------------------------------------------------------------------------------------------
# state, preflight (the arguments and the work in watermark_ops.terminal.state_cli)


def _state_subcommands() -> list[tuple]:
    from watermark_ops.terminal import state_cli

    return state_cli.SUBCOMMANDS


# --------------------------------------------------------------------------------------------
# status

_FLAG_HELP = {
    "idle_after": "no data batch for this long -> idle (durations: seconds or ISO-8601, e.g. PT6H, P1DT2H)",
    "max_idle": "idle longer than this -> alarm ('none' disables)",
    "max_lag": "lag above this -> lagging: data interval end (when the run pattern stamped it, else the latest "
               "batch time) - watermark ('none' disables)",
    "max_skew": "watermark ahead of the latest batch time by more than this -> jumped ('none' disables)",
    "stall_window": "data batches over this much time without a watermark move -> stalled ('none': count only)",
    "max_partition_skew": "a value of the job's partition column (a station, a region) whose newest event time trails "
                          "the leading one's by more than this -> a warning, not a state ('none' disables)",
}


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint folder: local path or fsspec URL")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--at", metavar="ISO-8601-INSTANT",
                        help="evaluation instant (default now), e.g. 2026-11-21T12:00:00Z; batches after it are ignored")
    parser.add_argument("--state", metavar="FILE",
                        help="JSON state file (audit --state's): read only what its remembered view does not hold, "
                             "and remember the view")
    _full_argument(parser)
    for item in fields(Thresholds):
        flag = "--" + item.name.replace("_", "-")
        if item.name == "stall_batches":
            parser.add_argument(flag, type=int, default=None, metavar="K",
                                help=f"data batches without a watermark move -> stalled (default {item.default})")
            continue
        parser.add_argument(flag, default=None, metavar="DURATION", help=f"{_FLAG_HELP[item.name]} (default %(shown)s)")


class _LazyHelpFormatter(argparse.HelpFormatter):
    """Fills in the help texts that need a core module (a threshold's default in words, through
    pendulum) when ``--help`` is printed, not when the parser is built: every command skips those imports."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text and "%(shown)s" in text:
            from watermark_ops.core.times import duration_ms, duration_words

            default = getattr(DEFAULT_THRESHOLDS, action.dest)
            text = text.replace("%(shown)s", duration_words(duration_ms(default)) if default is not None else "none")
        return text


def thresholds_from_args(args: argparse.Namespace) -> Thresholds:
    """The :class:`~watermark_ops.core.thresholds.Thresholds` of the parsed ``status`` flags
    (unset flags keep the defaults).

    :raises ValueError: for a bad duration, naming the flag.
    """
    overrides = {item.name: getattr(args, item.name) for item in fields(Thresholds)
                 if getattr(args, item.name, None) is not None}
    return replace(DEFAULT_THRESHOLDS, **overrides)


def _status(args: argparse.Namespace) -> int:
    from watermark_ops.core.classification import StallInputError, classify_snapshot
    from watermark_ops.core.memory import MemoryFormatError
    from watermark_ops.core.status import CheckpointStatus
    from watermark_ops.core.times import instant_ms

    try:
        thresholds = thresholds_from_args(args)
        at_ms = instant_ms(args.at) if args.at else None
    except ValueError as exc:
        print(f"watermark-ops status: {exc}", file=sys.stderr)
        return 2
    # The same read as the sensors: the newest batches only (from the remembered view with --state).
    try:
        snapshot, view = _status_snapshot(args, thresholds, at_ms)
    except MemoryFormatError as exc:
        print(f"watermark-ops: {exc}", file=sys.stderr)
        return 2
    status = CheckpointStatus.of(snapshot.checkpoint)
    try:
        classification = classify_snapshot(snapshot, thresholds, at_ms)
    except StallInputError:  # missing or unreadable: the status output already shows the problems
        classification = None
    state_store = _status_state_store(args, snapshot, view)
    from watermark_ops.core.state.diagnosis import refused_restart

    refused = refused_restart(args.checkpoint, **args.where)  # stands until a run succeeds
    if args.json:
        print(json.dumps(dict(render.status_document(status, classification), state_store=state_store,
                              refused_restart=refused)))
    else:
        console = render.terminal_console()
        render.print_status(status, console)
        if refused is not None:
            from rich.markup import escape

            console.print(f"[bold red]restart refused[/]: {escape(refused['line'])}")
        if classification is not None:
            render.print_classification(classification, console)
        if state_store is not None:
            render.print_state_store(state_store, console, with_findings=True)
        if view is not None and view.reads.get("mode") == "incremental":
            print(f"read from the remembered view in {args.state}: {view.reads.get('batch_files', 0)} new batch "
                  f"files, no listing (--full reads again)")
    return status.exit_code


def _status_snapshot(args: argparse.Namespace, thresholds: Thresholds, at_ms: int | None):
    """``(snapshot, view)``: the newest batches read afresh (view None), or from the state file's
    remembered view moved on (:func:`watermark_ops.core.advance.advance`) and kept again.

    :raises MemoryFormatError: a malformed state file (nothing written)."""
    from watermark_ops.core.snapshot import read_snapshot, snapshot_of, view_snapshot
    from watermark_ops.core.stall import read_recent, recent_batches

    newest = recent_batches(thresholds)
    if not args.state:
        return read_snapshot(args.checkpoint, newest=newest, at_ms=at_ms, **args.where), None
    from watermark_ops.core.advance import advance
    from watermark_ops.core.memory import StateFileMemory
    from watermark_ops.core.view import load_view, save_view

    memory = StateFileMemory(args.state)
    previous = load_view(memory, args.checkpoint)
    view = advance(args.checkpoint, previous, newest=max(newest, previous.newest if previous else 0),
                   progress="always", full=args.full, state_store="full" if args.state_store else None, **args.where)
    save_view(memory, args.checkpoint, view, previous=previous)
    snapshot = view_snapshot(view, newest)
    checkpoint = snapshot.checkpoint
    if at_ms is not None and not checkpoint.complete and sum(
            1 for b in checkpoint.batches if b.timestamp_ms is not None and b.timestamp_ms <= at_ms) < newest:
        checkpoint = read_recent(args.checkpoint, thresholds, at_ms=at_ms, **args.where)  # a past instant: widened
        snapshot = snapshot_of(checkpoint, args.checkpoint, **args.where)
    return snapshot, view


def _status_state_store(args: argparse.Namespace, snapshot, view) -> dict | None:
    """The state summary's document (with its findings) for ``status``: the view's, else read now
    beside the newest batches; None with ``--no-state-store`` or without a batch."""
    if not args.state_store or snapshot.checkpoint.head_batch_id is None:
        return None
    summary = view.state_store if view is not None else None
    if summary is None:
        from watermark_ops.core.state.summary import read_state_summary

        summary = read_state_summary(args.checkpoint, snapshot.checkpoint, snapshot.records, **args.where)
    return summary.document()


# --------------------------------------------------------------------------------------------
# lateness


def _lateness_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint location (its progress log is <checkpoint>.progress.jsonl)")
    parser.add_argument("--landing", action="append", metavar="DIR",
                        help="landing folder of an input's JSON lines, for the observed lateness (repeat per input; "
                             "not needed for a job the launcher replays in Spark)")
    parser.add_argument("--event-time-field", metavar="FIELD",
                        help="the job's event-time field (default: the one its late rule names in the progress log)")
    parser.add_argument("--arrival-field", metavar="FIELD",
                        help="a landed field telling when each event arrived, ISO-8601 (default: file name, then line)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _lateness(args: argparse.Namespace) -> int:
    from watermark_ops.core.lateness import LatenessError, lateness_report

    try:
        report = lateness_report(args.checkpoint, args.landing or (), event_time_field=args.event_time_field,
                                 arrival_field=args.arrival_field, **args.where)
    except (LatenessError, OSError) as exc:
        print(f"watermark-ops lateness: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        from watermark_ops.render.corrections import print_run_recovery

        console = render.terminal_console()
        render.print_lateness_report(report, console)
        print_run_recovery(report.to_dict()["runs"], console)
    return 0


# --------------------------------------------------------------------------------------------
# late (the late-row ledger)


def _late_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint folder of the query (its progress log gives the late rule)")
    parser.add_argument("--batch", type=int, action="append", metavar="N",
                        help="replay only this batch id (repeat; default: every batch in offsets/)")
    parser.add_argument("--sink", metavar="DIR", help="also write the late rows to DIR/batch=<N>.jsonl")
    parser.add_argument("--json", action="store_true", help="print the ledger as JSON (with every late row)")


def _late(args: argparse.Namespace) -> int:
    from watermark_ops.core.checkpoint import filesystem_for
    from watermark_ops.core.ledger import LedgerError, late_ledger, write_late_rows

    try:
        ledger = late_ledger(args.checkpoint, args.batch, **args.where)
        sink_options = args.where["storage_options"] if args.sink and "://" in args.sink else None
        written = write_late_rows(ledger, args.sink, filesystem=filesystem_for(args.sink, args.where["filesystem"]),
                                  storage_options=sink_options) if args.sink else []
        from watermark_ops.core.ledger.corrections import read_corrections
        from watermark_ops.render.corrections import late_recovery_document, print_late_recovery

        recovery = late_recovery_document(ledger, read_corrections(args.checkpoint, **args.where)[0])
    except (LedgerError, OSError) as exc:
        print(f"watermark-ops late: {exc}", file=sys.stderr)
        return 2
    if args.json:
        document = ledger.to_dict(rows=True)
        document["sink_files"] = written
        if recovery is not None:  # an allowed lateness: the late rows split by the corrections
            document["corrections"] = recovery
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        console = render.terminal_console()
        render.print_late_ledger(ledger, console)
        print_late_recovery(recovery, console)
        if written:
            print(f"wrote {len(written)} files to {args.sink}")
    if ledger.complete:
        return 0
    from watermark_ops.core.ledger import problem_lines

    no_rule = sorted({p.batch_id for p in ledger.problems if p.kind == "no_late_rule" and p.batch_id is not None})
    others = [p for p in ledger.problems if p.kind != "no_late_rule"]
    if no_rule:  # one line for every batch without a rule, not one per batch
        log = next(p.file for p in ledger.problems if p.kind == "no_late_rule")
        print(f"watermark-ops late: {log}: no progress record with a late_rule for batches {render.id_ranges(no_rule)} "
              "(written before the job recorded which rows it drops as late, or by a query without a watermark): "
              "left out", file=sys.stderr)
    for line in problem_lines(others):  # a problem repeated per batch once, with its batch range
        print(f"watermark-ops late: {line}", file=sys.stderr)
    for source in ledger.not_replayable:
        print(f"watermark-ops late: source {source['source']} is not replayable (offset {source['offset']})",
              file=sys.stderr)
    if ledger.batches and not any(b.replayed for b in ledger.batches):
        why = ("no progress record with a late_rule (the job does not use the watermark_ops.spark recorder)"
               if no_rule and not others and not ledger.not_replayable else "see the problems above")
        print(f"watermark-ops late: no batch could be replayed: {why}", file=sys.stderr)
        return 2
    return 0 if not others and not ledger.not_replayable and ledger.found else 2




# --------------------------------------------------------------------------------------------
# corrections (an allowed lateness's recovered late rows)


def _corrections_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint location (its corrections log is <checkpoint>.corrections.jsonl)")
    parser.add_argument("--json", action="store_true", help="print the corrections as one JSON object")


def _corrections(args: argparse.Namespace) -> int:
    from watermark_ops.core.ledger.corrections import read_corrections
    from watermark_ops.render.corrections import corrections_document, print_corrections

    try:
        corrections, problems = read_corrections(args.checkpoint, **args.where)
    except OSError as exc:
        print(f"watermark-ops corrections: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(corrections_document(corrections)))
        for problem in problems:
            print(f"watermark-ops corrections: not used: {problem}", file=sys.stderr)
    else:
        print_corrections(corrections, render.terminal_console(), checkpoint=args.checkpoint, problems=problems)
    return 0
