"""The terminal face: ``watermark-ops`` (console script) and ``python -m watermark_ops``.

Subcommands::

    watermark-ops audit CHECKPOINT [--json] [--state FILE] [--limit N]
    watermark-ops status CHECKPOINT [--json]
    watermark-ops lateness CHECKPOINT [--json] [--landing DIR ...]   (watermark_ops.lateness)

``audit`` prints a table of the batches (batch id, watermark as ISO-8601 UTC and ms, change from
the previous batch, batch time, committed or in flight), a line between the batches an earlier
audit saw and those added since (the restart boundary), then the findings. ``--json`` prints the
report of :meth:`watermark_ops.audit.AuditReport.to_dict` instead. ``--state FILE`` remembers the
head in a JSON state file between audits (:class:`watermark_ops.memory.StateFileMemory`).
Exit status: 0 no error finding, 1 a rule is violated, 2 the checkpoint (or a file in it, or the
state file) cannot be read and nothing is violated.

``status`` prints the head: query id, head batch, the watermark the next batch starts from, the
in-flight batch. Exit 2 when the checkpoint or its head cannot be read, else 0.

Adding a subcommand (later issues)
----------------------------------
Subcommands live in a small registry: a module listed in :data:`COMMAND_MODULES` calls
:func:`register` with a :class:`Subcommand` when imported (:func:`build_parser` imports them).
Registering an existing name replaces it: to extend ``status``, register a ``status`` whose
arguments are :func:`status_arguments` plus its own and whose run reuses :func:`status_payload`,
:func:`render_status` and :func:`status_exit_code`. :func:`render_report` and :func:`report_text`
draw the audit table.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import sys
from dataclasses import dataclass
from typing import Any, Callable

from watermark_ops.audit import ERROR, INFO, WARNING, AuditReport, iso_utc, run_audit
from watermark_ops.checkpoint import Checkpoint, read_checkpoint
from watermark_ops.memory import MemoryFormatError, StateFileMemory

__all__ = [
    "COMMAND_MODULES",
    "Subcommand",
    "build_parser",
    "main",
    "register",
    "render_report",
    "render_status",
    "report_text",
    "status_arguments",
    "status_exit_code",
    "status_payload",
    "terminal_console",
]

DEFAULT_LIMIT = 50


@dataclass(frozen=True)
class Subcommand:
    """One ``watermark-ops`` subcommand.

    :ivar name: the word on the command line.
    :ivar help: one line for ``--help``.
    :ivar add_arguments: adds the subcommand's arguments to its ``argparse`` parser.
    :ivar run: runs it with the parsed arguments; returns the exit status.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


_REGISTRY: dict[str, Subcommand] = {}

#: Modules imported by :func:`build_parser` so that their :func:`register` calls run; a module
#: that is not there (yet) is skipped.
COMMAND_MODULES: list[str] = ["watermark_ops.lateness", "watermark_ops.stall"]


def register(command: Subcommand) -> Subcommand:
    """Add ``command`` to the CLI (replacing a registered one of the same name); returns it."""
    _REGISTRY[command.name] = command
    return command


def build_parser() -> argparse.ArgumentParser:
    """The ``watermark-ops`` parser with every registered subcommand."""
    for module in COMMAND_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # the module is there but something it imports is not
                raise
    parser = argparse.ArgumentParser(
        prog="watermark-ops",
        description="Audit and watch the watermark of Spark Structured Streaming checkpoints (no JVM needed).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in _REGISTRY.values():
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(sub)
        sub.set_defaults(_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    return args._run(args)


# --------------------------------------------------------------------------------------------
# Human output


def _delta(ms: int | None) -> str:
    """A signed duration, compact: ``+1h 54m``, ``-5s``, ``0``."""
    if ms is None:
        return ""
    if ms == 0:
        return "0"
    sign, rest = ("+" if ms > 0 else "-"), abs(ms)
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    if rest or not parts:
        parts.append(f"{rest}ms")
    return sign + " ".join(parts[:2])


_SEVERITY_STYLE = {ERROR: "bold red", WARNING: "yellow", INFO: "cyan"}
_STATUS_STYLE = {"ok": "bold green", "violation": "bold red", "unreadable": "bold yellow"}


def render_report(report: AuditReport, console, limit: int = DEFAULT_LIMIT) -> None:
    """Print an audit report on a ``rich`` console: header, batch table, findings, summary.

    :param limit: the newest batches shown (0: all); older ones are counted in a note.
    """
    from rich.markup import escape
    from rich.table import Table

    console.print(f"[bold]Checkpoint[/] {escape(report.location)}")
    console.print(f"query id {escape(report.query_id or 'unknown (no readable metadata)')}")
    shown = report.batches[-limit:] if limit and len(report.batches) > limit else report.batches
    table = Table(title=f"Batches ({len(report.batches)} in the logs)", title_justify="left")
    for column, justify in (("batch", "right"), ("watermark (UTC)", "left"), ("watermark ms", "right"),
                            ("change", "right"), ("batch time (UTC)", "left"), ("commit", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    boundary = report.remembered.head_batch_id if report.remembered and report.added_batch_ids else None
    previous = None
    if len(shown) < len(report.batches):
        earlier = report.batches[: len(report.batches) - len(shown)]
        previous = next((b.watermark_ms for b in reversed(earlier) if b.watermark_ms is not None), None)
    for record in shown:
        if record.batch_id == report.in_flight_batch_id:
            commit = "[cyan]in flight[/]"
        elif record.committed:
            commit = "committed"
        else:
            commit = "[yellow]no commit[/]" if record.has_offsets else "[yellow]no offsets[/]"
        change = None
        if record.watermark_ms is not None and previous is not None:
            change = record.watermark_ms - previous
        table.add_row(
            str(record.batch_id),
            iso_utc(record.watermark_ms) or "?",
            "?" if record.watermark_ms is None else str(record.watermark_ms),
            f"[red]{_delta(change)}[/]" if change is not None and change < 0 else _delta(change),
            iso_utc(record.timestamp_ms) or "?",
            commit,
            end_section=record.batch_id == boundary,
        )
        if record.watermark_ms is not None:
            previous = record.watermark_ms
    if report.batches:
        console.print(table)
    else:
        console.print("No batch in the offset or commit log.")
    if len(shown) < len(report.batches):
        console.print(f"({len(report.batches) - len(shown)} earlier batches not shown; --limit 0 shows all)")
    if report.remembered is not None:
        added = (f"batches {report.added_batch_ids[0]}..{report.added_batch_ids[-1]} added since"
                 if report.added_batch_ids else "no batch added since")
        console.print(f"{added} the audit of {iso_utc(report.remembered.audited_at_ms)} "
                      f"(head {report.remembered.head_batch_id}, watermark {iso_utc(report.remembered.watermark_ms)})")
    if report.findings:
        findings = Table(title="Findings", title_justify="left")
        for column in ("severity", "rule", "batch", "file", "message"):
            findings.add_column(column, overflow="fold")
        for finding in report.findings:
            findings.add_row(f"[{_SEVERITY_STYLE[finding.severity]}]{finding.severity}[/]", finding.rule,
                             "" if finding.batch_id is None else str(finding.batch_id), escape(finding.file or ""),
                             escape(finding.message))
        console.print(findings)
    else:
        console.print("No findings.")
    watermark = ("unknown" if report.watermark_ms is None
                 else f"{iso_utc(report.watermark_ms)} ({report.watermark_ms} ms)")
    in_flight = "none" if report.in_flight_batch_id is None else str(report.in_flight_batch_id)
    console.print(f"next batch starts from watermark {watermark}; in flight: {in_flight}")
    console.print(f"status [{_STATUS_STYLE[report.status]}]{report.status}[/] (exit {report.exit_code})")


def report_text(report: AuditReport, limit: int = DEFAULT_LIMIT, width: int = 160) -> str:
    """:func:`render_report` as plain text (no colour): the same table for logs (Airflow task log)."""
    from rich.console import Console

    buffer = io.StringIO()
    render_report(report, Console(file=buffer, width=width, no_color=True, force_terminal=False,
                                  highlight=False, soft_wrap=False), limit=limit)
    return buffer.getvalue()


def terminal_console():
    """A console on stdout: the terminal's width, or 160 columns when piped (logs, files)."""
    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


# --------------------------------------------------------------------------------------------
# audit


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint folder: local path or fsspec URL (s3://, gs://, ...)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    parser.add_argument("--state", metavar="FILE",
                        help="JSON state file remembering the head between audits (created if missing)")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                        help=f"newest batches in the table (default {DEFAULT_LIMIT}; 0: all)")


def _audit(args: argparse.Namespace) -> int:
    try:
        memory = StateFileMemory(args.state) if args.state else None
        report = run_audit(args.checkpoint, memory)
    except MemoryFormatError as exc:
        print(f"watermark-ops: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(report.to_json())
    else:
        render_report(report, terminal_console(), limit=args.limit)
    return report.exit_code


register(Subcommand("audit", "prove that a checkpoint's watermark never moved backwards", _audit_arguments, _audit))


# --------------------------------------------------------------------------------------------
# status


def status_payload(checkpoint: Checkpoint) -> dict[str, Any]:
    """The head of a checkpoint as JSON-ready values::

        {"location", "query_id", "head_batch_id", "lowest_batch_id", "watermark_ms", "watermark",
         "in_flight_batch", "latest_batch_timestamp_ms", "latest_batch_time",
         "problems": [{"kind", "file", "message", "batch_id"}]}

    ``watermark_ms`` is the watermark the next batch starts from (epoch ms UTC);
    ``latest_batch_timestamp_ms`` the head batch's ``batchTimestampMs``.
    """
    head = checkpoint.batch(checkpoint.head_batch_id) if checkpoint.head_batch_id is not None else None
    with_offsets = [b.batch_id for b in checkpoint.batches if b.offsets_file is not None]
    latest_ms = head.timestamp_ms if head is not None else None
    return {
        "location": checkpoint.location,
        "query_id": checkpoint.query_id,
        "head_batch_id": checkpoint.head_batch_id,
        "lowest_batch_id": min(with_offsets) if with_offsets else None,
        "watermark_ms": checkpoint.next_watermark_ms,
        "watermark": iso_utc(checkpoint.next_watermark_ms),
        "in_flight_batch": checkpoint.in_flight_batch_id,
        "latest_batch_timestamp_ms": latest_ms,
        "latest_batch_time": iso_utc(latest_ms),
        "problems": [p.to_dict() for p in checkpoint.problems],
    }


def status_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``watermark-ops status``: ``CHECKPOINT [--json]``."""
    parser.add_argument("checkpoint", help="checkpoint folder: local path or fsspec URL")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def status_exit_code(checkpoint: Checkpoint, payload: dict[str, Any]) -> int:
    """2 when the checkpoint cannot be read (missing, not a checkpoint, unlistable) or its head's
    watermark is unknown (head files unreadable), else 0."""
    unreadable_head = payload["head_batch_id"] is not None and payload["watermark_ms"] is None
    missing = any(p.kind in ("checkpoint_missing", "not_a_checkpoint", "unreadable") and p.batch_id is None
                  for p in checkpoint.problems)
    return 2 if unreadable_head or missing else 0


def render_status(checkpoint: Checkpoint, payload: dict[str, Any], console) -> None:
    """Print :func:`status_payload`'s head as a two-column table, then the read problems."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_header=False, title=f"Checkpoint {escape(payload['location'])}", title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    watermark = "unknown" if payload["watermark_ms"] is None else f"{payload['watermark']} ({payload['watermark_ms']} ms)"
    for label, value in (
        ("query id", payload["query_id"] or "unknown"),
        ("head batch", "none" if payload["head_batch_id"] is None else str(payload["head_batch_id"])),
        ("lowest batch retained", "none" if payload["lowest_batch_id"] is None else str(payload["lowest_batch_id"])),
        ("next batch watermark", watermark),
        ("in-flight batch", "none" if payload["in_flight_batch"] is None else str(payload["in_flight_batch"])),
        ("latest batch time", payload["latest_batch_time"] or "none"),
    ):
        table.add_row(label, escape(value))
    console.print(table)
    for problem in checkpoint.problems:
        console.print(f"[yellow]{problem.kind}[/] {escape(problem.file)}: {escape(problem.message)}")


def _status(args: argparse.Namespace) -> int:
    checkpoint = read_checkpoint(args.checkpoint)
    payload = status_payload(checkpoint)
    if args.json:
        print(json.dumps(payload))
    else:
        render_status(checkpoint, payload, terminal_console())
    return status_exit_code(checkpoint, payload)


register(Subcommand("status", "show a checkpoint's head: query id, head batch, watermark, in-flight batch",
                    status_arguments, _status))
