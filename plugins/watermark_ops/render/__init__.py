"""The rendering layer: the core's results as text tables and JSON, for every face.

The terminal (``watermark-ops``), the Airflow task logs and XCom, and any later page all show the
same things the same way, so they all come here; no face imports another face. Tables are drawn
with ``rich`` (imported only when a table is drawn); the plain-text variants are the same tables
without colour, for logs.

What it draws (every input is plain data from :mod:`watermark_ops.core`):

* an audit (:class:`~watermark_ops.core.audit.AuditReport`): :func:`print_audit_report`,
  :func:`audit_report_text`, JSON by ``AuditReport.to_json``;
* a checkpoint's head and its stall classification (:class:`~watermark_ops.core.status.CheckpointStatus`,
  :class:`~watermark_ops.core.stall.Classification`): :func:`print_status`,
  :func:`print_classification`, JSON by :func:`status_document`;
* a lateness report (:class:`~watermark_ops.core.lateness.LatenessReport`):
  :func:`print_lateness_report`, JSON by ``LatenessReport.to_dict``;
* a late-row ledger (:class:`~watermark_ops.core.ledger.LateLedger`): :func:`print_late_ledger`,
  JSON by ``LateLedger.to_dict``.

Times are shown as ISO-8601 UTC with the epoch milliseconds beside them where a value is audited.

Importing this module loads only the audit's rules from the core (for the severity names); the
stall classification's and the lateness report's modules are imported by the functions that draw
them, so ``watermark-ops audit`` does not pay for them.
"""

from __future__ import annotations

import io
import sys
from typing import TYPE_CHECKING, Any

from watermark_ops.core.ledger.unknown import id_ranges  # batch ids as ranges, sorted: "0-3, 7"
from watermark_ops.core.rules import ERROR, INFO, WARNING
from watermark_ops.core.times import duration_ms, duration_text, iso_utc, watermark_text

if TYPE_CHECKING:  # annotations only: the modules are imported where they are drawn
    from watermark_ops.core.audit import AuditReport
    from watermark_ops.core.lateness import LatenessReport
    from watermark_ops.core.ledger import LateLedger
    from watermark_ops.core.stall import Classification
    from watermark_ops.core.status import CheckpointStatus
    from watermark_ops.core.thresholds import Thresholds

__all__ = [
    "DEFAULT_LIMIT",
    "audit_report_text",
    "print_audit_report",
    "print_classification",
    "print_late_ledger",
    "print_lateness_report",
    "print_state_store",
    "print_status",
    "signed_duration",
    "state_store_line",
    "watermark_text",
    "status_document",
    "terminal_console",
    "text_console",
]

#: The newest batches an audit table shows by default (older ones are counted in a note).
DEFAULT_LIMIT = 50

_SEVERITY_STYLE = {ERROR: "bold red", WARNING: "yellow", INFO: "cyan"}
_STATUS_STYLE = {"ok": "bold green", "violation": "bold red", "unreadable": "bold yellow"}


def _state_style(state: str) -> str:
    """The rich style of a stall state (:data:`watermark_ops.core.stall.STATES`)."""
    from watermark_ops.core.stall import ADVANCING, IDLE, JUMPED, LAGGING, NO_WATERMARK, STALLED, WATERMARK_UNKNOWN

    return {JUMPED: "bold red", STALLED: "bold red", LAGGING: "bold yellow", IDLE: "cyan",
            ADVANCING: "bold green", NO_WATERMARK: "blue", WATERMARK_UNKNOWN: "magenta"}.get(state, "bold")


# --------------------------------------------------------------------------------------------
# Consoles


def terminal_console():
    """A ``rich`` console on stdout: the terminal's width, or 160 columns when piped (logs, files).
    No emoji codes: a path or a message holding ``:x:`` is printed as it is (and rich's emoji
    table is not loaded)."""
    from rich.console import Console

    return Console(highlight=False, emoji=False, width=None if sys.stdout.isatty() else 160)


def text_console(width: int = 160):
    """A ``rich`` console writing plain text (no colour, no markup codes) into a buffer:
    ``console.file.getvalue()`` is the text."""
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, no_color=True, force_terminal=False, highlight=False,
                   emoji=False, soft_wrap=False)


def signed_duration(ms: int | None) -> str:
    """A signed duration in ms, compact (:func:`~watermark_ops.core.times.duration_text`):
    ``+1 h 54 min``, ``-5 s``, ``0``; empty for None."""
    return "" if ms is None else duration_text(ms, signed=True)


# --------------------------------------------------------------------------------------------
# The audit


def _audit_batches_table(report: AuditReport, limit: int, width: int):
    """The batch table (newest ``limit``), with the restart boundary after the remembered head.

    Its cells are ``rich.text.Text`` values, not markup strings: nothing in them is markup, and
    rich parses a string cell again at every render (a third of the table's cost). When the table
    fits in ``width`` columns (the console's) its columns are given the widths rich would measure
    (each column's longest cell): the same table, without rich measuring 300 cells again; a
    narrower console leaves the measuring and folding to rich."""
    from rich.cells import cell_len
    from rich.table import Table
    from rich.text import Text

    shown = report.batches[-limit:] if limit and len(report.batches) > limit else report.batches
    total = (report.reads or {}).get("batches_in_logs") or len(report.batches)  # an incremental audit holds the newest
    boundary = report.remembered.head_batch_id if report.remembered and report.added_batch_ids else None
    previous = None
    if len(shown) < len(report.batches):
        earlier = report.batches[: len(report.batches) - len(shown)]
        previous = next((b.watermark_ms for b in reversed(earlier) if b.watermark_ms is not None), None)
    committed, in_flight = Text("committed"), Text("in flight", style="cyan")
    no_commit, no_offsets = Text("no commit", style="yellow"), Text("no offsets", style="yellow")
    rows = []
    for record in shown:
        if record.batch_id == report.in_flight_batch_id:
            commit = in_flight
        elif record.committed:
            commit = committed
        else:
            commit = no_commit if record.has_offsets else no_offsets
        change = None  # no change from an unset watermark (0): its first value is not a move
        if record.watermark_ms is not None and previous:
            change = record.watermark_ms - previous
        rows.append((
            Text(str(record.batch_id)),
            Text(watermark_text(record.watermark_ms)),
            Text("?" if record.watermark_ms is None else str(record.watermark_ms)),
            Text(signed_duration(change), style="red" if change is not None and change < 0 else ""),
            Text(iso_utc(record.timestamp_ms) or "?"),
            commit,
        ))
        if record.watermark_ms is not None:
            previous = record.watermark_ms
    columns = (("batch", "right"), ("watermark (UTC)", "left"), ("watermark ms", "right"),
               ("change", "right"), ("batch time (UTC)", "left"), ("commit", "left"))
    widths = [max([cell_len(header), *(cell_len(row[i].plain) for row in rows)])
              for i, (header, _) in enumerate(columns)]
    # rich's table: 2 of padding per column, the box's 2 edges and 5 lines between the columns
    fits = sum(widths) + 2 * len(columns) + len(columns) + 1 <= width
    table = Table(title=f"Batches ({total} in the logs)", title_justify="left")
    for (header, justify), measured in zip(columns, widths):
        table.add_column(header, justify=justify, overflow="fold", width=measured if fits else None)
    for row, record in zip(rows, shown):
        table.add_row(*row, end_section=record.batch_id == boundary)
    return table, total - len(shown)


def print_audit_report(report: AuditReport, console: Any, limit: int = DEFAULT_LIMIT) -> None:
    """Print an audit report on a ``rich`` console: header, batch table, findings, summary.

    :param limit: the newest batches shown (0: all); older ones are counted in a note.
    """
    from rich.markup import escape
    from rich.table import Table

    console.print(f"[bold]Checkpoint[/] {escape(report.location)}")
    console.print(f"query id {escape(report.query_id or 'unknown (no readable metadata)')}")
    table, hidden = _audit_batches_table(report, limit, console.width)
    if report.batches:
        console.print(table)
    else:
        console.print("No batch in the offset or commit log.")
    if hidden:
        console.print(f"({hidden} earlier batches not shown; --limit 0 shows all)")
    reads = report.reads or {}
    if reads.get("mode") == "incremental":
        console.print(f"read {reads.get('new_batches', 0)} new batches only ({reads.get('batch_files', 0)} batch "
                      f"files, no listing) from the remembered view; a full re-read reads every file (--full)")
    if report.remembered is not None:
        added = (f"batches {report.added_batch_ids[0]}..{report.added_batch_ids[-1]} added since"
                 if report.added_batch_ids else "no batch added since")
        console.print(f"{added} the audit of {iso_utc(report.remembered.audited_at_ms)} "
                      f"(head {report.remembered.head_batch_id}, watermark {watermark_text(report.remembered.watermark_ms, 'unknown')})")
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
                 else f"{watermark_text(report.watermark_ms)} ({report.watermark_ms} ms)")
    in_flight = "none" if report.in_flight_batch_id is None else str(report.in_flight_batch_id)
    console.print(f"next batch starts from watermark {watermark}; in flight: {in_flight}")
    if report.state_store is not None:  # the stateful operators
        print_state_store(report.state_store, console)
    console.print(f"status [{_STATUS_STYLE[report.status]}]{report.status}[/] (exit {report.exit_code})")


def audit_report_text(report: AuditReport, limit: int = DEFAULT_LIMIT, width: int = 160) -> str:
    """:func:`print_audit_report` as plain text (no colour): the same table for logs (Airflow task log)."""
    console = text_console(width)
    print_audit_report(report, console, limit=limit)
    return console.file.getvalue()


# --------------------------------------------------------------------------------------------
# Status and stall classification


def status_document(status: CheckpointStatus, classification: Classification | None) -> dict[str, Any]:
    """The JSON of ``watermark-ops status --json``: :meth:`CheckpointStatus.to_dict` plus ``state``
    (None when the checkpoint cannot be classified) and ``classification`` (:meth:`Classification.to_dict`)."""
    document = status.to_dict()
    document["state"] = classification.state if classification else None
    document["classification"] = classification.to_dict() if classification else None
    return document


def print_status(status: CheckpointStatus, console: Any) -> None:
    """Print a checkpoint's head as a two-column table, then the read problems."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(show_header=False, title=f"Checkpoint {escape(status.location)}", title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    watermark = "unknown" if status.watermark_ms is None else f"{iso_utc(status.watermark_ms)} ({status.watermark_ms} ms)"
    for label, value in (
        ("query id", status.query_id or "unknown"),
        ("head batch", "none" if status.head_batch_id is None else str(status.head_batch_id)),
        ("lowest batch retained", "none" if status.lowest_batch_id is None else str(status.lowest_batch_id)),
        ("next batch watermark", watermark),
        ("in-flight batch", "none" if status.in_flight_batch is None else str(status.in_flight_batch)),
        ("latest batch time", iso_utc(status.latest_batch_timestamp_ms) or "none"),
        *([("batches read", f"the {status.batches_read} newest ({status.unread_batches} older not read)")]
          if status.unread_batches else []),
    ):
        table.add_row(label, escape(value))
    console.print(table)
    for event in status.events:
        console.print(f"[cyan]{event['kind']}[/] {escape(event['message'])}")
    for problem in status.problems:
        console.print(f"[yellow]{problem.kind}[/] {escape(problem.file)}: {escape(problem.message)}")


def _words(delta: Any) -> str:
    return duration_text(duration_ms(delta))


def _thresholds_line(t: Thresholds) -> str:
    return (f"idle after {_words(t.idle_after)}, max idle {_words(t.max_idle) if t.max_idle else 'off'}, "
            f"max lag {_words(t.max_lag) if t.max_lag else 'off'}, max skew "
            f"{_words(t.max_skew) if t.max_skew else 'off'}, stall after {t.stall_batches} data batches"
            f" or {_words(t.stall_window) if t.stall_window else 'no window'}, max partition skew "
            f"{_words(t.max_partition_skew) if t.max_partition_skew else 'off'}")


def _evidence_rows(c: Classification) -> list[tuple[str, str]]:
    head, data = c.latest_batch, c.latest_data_batch
    rows = [
        ("current watermark", f"{watermark_text(c.watermark_ms, 'none')} ({c.watermark_ms} ms)"),
        ("emitted through", f"{iso_utc(c.emitted_through_ms) or 'none'}"),
        ("latest batch", f"{head.batch_id} at {iso_utc(head.timestamp_ms)}" + ("" if head.committed else " (in flight)")
         if head else "none"),
        ("latest data batch", f"{data.batch_id} at {iso_utc(data.timestamp_ms)}" if data else "none"),
        *_lag_rows(c),
        ("idle (evaluated at - latest data batch)", duration_text(c.idle_ms)),
        ("last move", f"batch {c.last_move['batch_id']}: {iso_utc(c.last_move['from_ms'])} -> {iso_utc(c.last_move['to_ms'])}"
         if c.last_move else f"none {(c.history or {}).get('scope', 'in the retained logs')}"),
        ("data batches since", ", ".join(str(b.batch_id) for b in c.flat_data_batches) or "none"),
        ("policy", c.policy or "not recorded"),
    ]
    if c.jump:
        rows.append(("jump", f"batch {c.jump['batch_id']}: {iso_utc(c.jump['from_ms'])} -> {iso_utc(c.jump['to_ms'])}"))
    for item in c.inputs:
        rows.append((f"input {item['source']}", f"offset {item['offset']}, last advanced in batch "
                                                f"{item['last_advanced_batch']}" + (f" ({item['description']})" if item["description"] else "")))
    rows.extend(_partition_rows(c.partition_skew))
    rows.extend(_watermark_evidence_rows(c.watermark_evidence))
    rows.append(("thresholds", _thresholds_line(c.thresholds)))
    return rows


def _lag_rows(c: Classification) -> list[tuple[str, str]]:
    """The lag and the basis it was judged on (:mod:`watermark_ops.core.freshness`)."""
    d = c.data_interval
    if c.lag_basis == "data_interval" and d:
        return [("lag (data interval end - watermark)", duration_text(c.lag_ms)),
                ("lag basis", f"data interval {iso_utc(d['start_ms'])} -> {iso_utc(d['end_ms'])}, stamped by the run "
                              f"pattern on batch {d['batch_id']}")]
    return [("lag (latest batch - watermark)", duration_text(c.lag_ms)),
            ("lag basis", "wall clock: the latest batch time (no data interval stamped on the newest progress record)")]


def _watermark_evidence_rows(evidence: dict[str, Any] | None) -> list[tuple[str, str]]:
    """Whether the query has a watermark (:func:`watermark_ops.core.stall.watermark_evidence`), shown
    only when it was in question (the watermark never set): the answer, why, the state operators read."""
    if not evidence or evidence.get("source") == "checkpoint_logs":
        return []
    answer = {True: "yes", False: "no", None: "cannot tell"}[evidence.get("has_watermark")]
    rows = [("has a watermark", f"{answer}" + (f" (from the {evidence['source'].replace('_', ' ')})"
                                                 if evidence.get("source") else ""))]
    rows.extend(("  evidence", sentence) for sentence in evidence.get("evidence") or [])
    operators = evidence.get("state_operators")
    if operators is not None:
        rows.append(("state operators", ", ".join(f"{op['operator_id']}: {op['name'] or 'no metadata'}"
                                                    for op in operators) or "none (no state/ folder or empty)"))
    return rows


def _partition_rows(skew: Any) -> list[tuple[str, str]]:
    """One evidence row per partition (:class:`~watermark_ops.core.partition_skew.PartitionSkew`):
    its newest event time so far, the batch that saw it, how far it trails the leader, late rows when counted."""
    if skew is None:
        return []
    trailing = {p.partition for p in skew.trailing}
    rows = []
    for p in skew.partitions:
        if p.event_time_max_ms is None:
            text = "no row in the batches read"
        else:
            gap = ("leader" if p.partition == skew.leader
                   else f"{duration_text(p.behind_leader_ms)} behind the leader {skew.leader}")
            over = (f" (over max partition skew {duration_text(skew.max_partition_skew_ms)})"
                    if p.partition in trailing else "")
            text = (f"newest event time {iso_utc(p.event_time_max_ms)} (batch {p.max_batch_id}), {gap}{over}; "
                    f"last rows in batch {p.last_data_batch_id}")
        if p.late_rows is not None:
            text += f"; {p.late_rows} late rows"
        rows.append((f"{skew.column} {p.partition}", text))
    return rows


def print_classification(c: Classification, console: Any) -> None:
    """Print a stall classification on a ``rich`` console: state, reasons, hints, evidence table."""
    from rich.markup import escape
    from rich.table import Table

    alarm = " [bold red](ALARM)[/]" if c.alarm else ""
    console.print(f"watermark state [{_state_style(c.state)}]{c.state}[/]{alarm} at {iso_utc(c.evaluated_at_ms)}")
    for reason in c.reasons:
        console.print(f"  - {reason}", highlight=False, markup=False)
    for hint in c.hints:
        console.print(f"  hint: {hint}", highlight=False, markup=False)
    for warning in c.warnings:
        console.print(f"  warning: {warning}", highlight=False, markup=False, style="yellow")
    table = Table(title="Evidence", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for label, value in _evidence_rows(c):
        table.add_row(label, escape(value))  # offsets and source descriptions hold [ ]
    console.print(table)


# --------------------------------------------------------------------------------------------
# Lateness


def _lateness_duration(ms: int | None) -> str:
    return "-" if ms is None else duration_text(ms)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.3g} %"


def _advice_title(item: dict[str, Any]) -> str:
    """What an advice table is about: the job's event-time field, and where its rows came from."""
    where = ("rows the job's own parsing made, replayed in Spark" if item.get("source") == "spark_replay"
             else f"landing {item['landing']}")
    return f"Observed lateness of {item['event_time_field'] or 'the event time'} — {where}"


def print_lateness_report(report: LatenessReport, console: Any) -> None:
    """Print a lateness report as rich tables: per run the rows late (the late-row ledger's) and the
    drop rate they make beside Spark's count (late partial aggregates), then the lateness and advice
    per input, on the job's own event-time field."""
    from rich.markup import escape
    from rich.table import Table

    document = report.to_dict()
    runs = Table(title=f"Late rows per run — {escape(document['checkpoint'])}")
    for name in ("run", "tag", "started (UTC)", "batches", "input rows", "late rows (ledger)",
                 "drop rate (late rows / input rows)", "late partial aggregates (Spark)"):
        runs.add_column(name, justify="left" if name in ("run", "tag", "started (UTC)", "batches") else "right")
    for run in document["runs"]:
        batch_ids = run["batch_ids"]
        runs.add_row(
            run["run_id"][:8], escape(run["run_tag"] or "-"), iso_utc(run["started_ms"]) or "-",
            f"{batch_ids[0]}–{batch_ids[-1]}" if batch_ids else "none", str(run["input_rows"]),
            *(("unknown", "unknown") if run["rows_late"] is None
              else (str(run["rows_late"]), _percent(run["drop_rate"]))),
            str(run["late_partial_aggregates_spark"]),
        )
    runs.caption = (f"no progress records in {escape(document['progress_log'])}" if not document["runs"] else
                    "Late rows: the late-row ledger's replay of the run's batches (unknown where it could not "
                    "replay them all, never 0). Spark's numRowsDroppedByWatermark counts late partial aggregates "
                    "of an aggregation, not rows.")
    console.print(runs)
    if document.get("late_rows_unknown_reason"):  # once for every run it concerns, not once per run or batch
        tags = ", ".join(r["run_tag"] or r["run_id"][:8] for r in document["runs"] if r["rows_late"] is None)
        console.print(f"[yellow]late rows unknown[/] for runs {escape(tags)}: "
                      f"{escape(document['late_rows_unknown_reason'])}", markup=True, highlight=False)
    for item in document["inputs"]:
        table = Table(title=escape(_advice_title(item)))
        table.add_column("keep drops below")
        table.add_column("delay threshold (withWatermark)")
        table.add_column("events still dropped (at most)", justify="right")
        for advice in item["advice"]:
            table.add_row(_percent(advice["target_drop_rate"]), advice["spark_interval"],
                          f"{advice['events_dropped']} ({_percent(advice['drop_rate'])})")
        table.caption = (
            f"{item['events']} events in {item['files']} files, {item['late_events']} behind the newest; "
            f"lateness p50 {_lateness_duration(item['p50_ms'])}, p99 {_lateness_duration(item['p99_ms'])}, "
            f"max {_lateness_duration(item['max_lateness_ms'])}; left out: {item['no_event_time']} without event "
            f"time, {item['malformed']} malformed. Thresholds are the smallest that keep drops below the target, "
            f"rounded up; the advice assumes a watermark that follows every event, and Spark moves it once per "
            f"micro-batch, which drops fewer."
        )
        console.print(table)
        for message in item["problems"]:
            console.print(f"[yellow]malformed:[/] {escape(message)}", markup=True, highlight=False)
    for message in document["problems"]:
        console.print(f"[yellow]note:[/] {escape(message)}", markup=True, highlight=False)


# --------------------------------------------------------------------------------------------
# The late-row ledger


def _batches(ids: list[int]) -> str:
    return f"batch {ids[0]}" if len(ids) == 1 else f"batches {id_ranges(ids)}"


def _worst_lateness_column(batches: list[dict[str, Any]]) -> str:
    """The worst-lateness column's name, saying what it measures per the late rule's kind."""
    kinds = {(b.get("rule") or {}).get("kind") for b in batches} - {None}
    measured = [{"window_end": "window end", "session": "session end", "event_time": "event time"}[k] for k in sorted(kinds)]
    return "worst lateness\n(watermark − " + (" or ".join(measured) or "window end") + ")"


def print_late_ledger(ledger: LateLedger, console: Any) -> None:
    """Print a late-row ledger as a rich table: per batch id, rows read, late, set aside, the
    watermark missed (the one the batch filtered late rows with, ISO-8601 UTC and ms; the caption
    says which, per Spark version and conf), the worst lateness (how far the watermark lay past the
    late row's window end, or its event time, per the late rule) and, when the job declared a
    partition column, the late rows per value of it (with how far that value trailed the leading
    one's event time entering the batch); then the totals against Spark's count (late partial
    aggregates), each value's newest event time, skew and late rows, the sources it cannot replay
    and the problems."""
    from rich.markup import escape
    from rich.table import Table

    document = ledger.to_dict()
    column = next((b["partition_column"] for b in document["batches"] if b.get("partition_column")), None)
    table = Table(title=f"Rows dropped by the watermark (late-row ledger) — {escape(document['checkpoint'])}")
    names = ["batch", "rows read", "late rows", "set aside", "watermark missed (UTC)", "watermark ms",
             _worst_lateness_column(document["batches"]), *([f"late per {column}"] if column else []),
             "late partial\naggregates (Spark)"]
    for name in names:
        table.add_column(escape(name), justify="right" if name in ("batch", "rows read", "late rows", "set aside",
                                                                    "watermark ms", names[-1]) else "left",
                         no_wrap=name == "watermark missed (UTC)", overflow="fold")
    for batch in document["batches"]:
        missed = batch["late_watermark"] if batch["late_watermark_ms"] is not None else batch["watermark"]
        missed_ms = batch["late_watermark_ms"] if batch["late_watermark_ms"] is not None else batch["watermark_ms"]
        if not batch["replayed"]:
            table.add_row(str(batch["batch_id"]), "-", "[yellow]unknown[/]", "-", missed or "-",
                          "-" if missed_ms is None else str(missed_ms), "[yellow]not replayed[/]",
                          *(["-"] if column else []), "-" if batch["late_partial_aggregates_spark"] is None
                          else str(batch["late_partial_aggregates_spark"]))
            continue
        behind = batch["behind_leader_before_ms"] or {}
        by_partition = ", ".join(
            f"{escape(name)} {rows}" + (f" (trailed {duration_text(behind[name])})" if behind.get(name) else "")
            for name, rows in batch["late_by_partition"].items())
        spark = batch["late_partial_aggregates_spark"]
        table.add_row(
            str(batch["batch_id"]), str(batch["rows_read"]),
            f"[bold]{batch['rows_late']}[/]" if batch["rows_late"] else "0",
            str(sum(batch["rows_quarantined"].values())), missed or "-", str(missed_ms),
            _lateness_duration(batch["worst_late_by_ms"]) if batch["worst_late_by_ms"] is not None else "-",
            *([by_partition or "-"] if column else []), "-" if spark is None else str(spark),
        )
    totals = document["totals"]
    reasons = ", ".join(f"{escape(reason)} {rows}" for reason, rows in totals["quarantined_by_reason"].items() if rows)
    unknown, replayed = document["batches_not_replayed"], totals["replayed_batch_ids"]
    table.caption = (  # unknown: the replayed batches' rows are theirs, never the ledger's figure
        (f"late rows unknown: {_batches(unknown)} not replayed" + (f"; in the replayed {_batches(replayed)}: "
                                                                   if replayed else "; ") if unknown else "")
        + (f"{totals['rows_late_replayed']} late rows of {totals['rows_read']} read, "
           f"{totals['rows_aggregated_replayed']} aggregated, {totals['rows_quarantined']} set aside"
           f"{f' ({reasons})' if reasons else ''}; " if replayed or not unknown else "") + "Spark counted "
        f"{totals['late_partial_aggregates_spark']} late partial aggregates (numRowsDroppedByWatermark: for a window "
        f"aggregation the late (window, key) groups of a partial aggregation, not rows)."
        + (f"\nPer window: {totals['window_drops']} (row, window) drops; {totals['rows_late_partly']} of the late rows "
           "were dropped from only some of their windows and kept in the others." if totals.get("window_drops") is not None
           and (totals["window_drops"] != totals["rows_late"] or totals["rows_late_partly"]) else "")
    )
    rules = {}
    for batch in document["batches"]:
        if batch["late_watermark_rule"]:
            rules.setdefault(batch["late_watermark_rule"]["reason"], []).append(batch["batch_id"])
    for reason, ids in rules.items():  # which watermark filtered late rows (Spark version and conf)
        table.caption += f"\nWatermark missed, batches {id_ranges(ids)}: {reason}."
    if not document["batches"]:
        table.caption = "no batch to replay"
    console.print(table)
    if ledger.partition_skew is not None:  # which value of the partition column trailed, and what it lost
        console.print(f"Event-time skew per {ledger.partition_skew.column} through batch "
                      f"{ledger.partition_skew.last_batch_id} (\"trailed\" above: behind the leader entering the batch):",
                      highlight=False)
        for label, text in _partition_rows(ledger.partition_skew):
            console.print(f"  {label}: {text}", highlight=False, markup=False)
    for source in document["not_replayable"]:
        console.print(f"[yellow]not replayable:[/] source {escape(str(source['source']))} "
                      f"({escape(source['description'] or 'unknown')}): offset {escape(str(source['offset']))} is not "
                      f"a file source's logOffset, its rows cannot be read back from the checkpoint (batches "
                      f"{escape(str(source['batch_ids']))})", markup=True, highlight=False)
    unknown = document["late_rows_unknown_reason"] or ""
    for group in document["problem_groups"]:  # a problem repeated per batch once, with its batch range
        if not (group["batch_ids"] and group["message"] in unknown):  # else said just below
            console.print(f"[yellow]{escape(group['text'])}[/]", markup=True, highlight=False)
    if unknown:
        console.print(f"[bold yellow]late rows unknown:[/] {escape(unknown)}", markup=True, highlight=False)


# --------------------------------------------------------------------------------------------
# The state store under an audit or a status (watermark_ops.core.state.summary; the state and
# preflight commands' own tables are in watermark_ops.render.state)


def _bytes_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def state_store_line(document: dict[str, Any] | None) -> str:
    """One line for a state summary (:meth:`~watermark_ops.core.state.summary.StateSummary.document`):
    ``"2 operators, 1,204 rows, chain 6, not bounded (state_unbounded)"``; ``"stateless"`` without
    ``state/``; ``""`` for None."""
    if document is None:
        return ""
    if not document["has_state_folder"]:
        return "stateless (no state/ folder)"
    parts = [f"{len(document['operators'])} operator{'' if len(document['operators']) == 1 else 's'}"]
    if document["rows"] is not None:
        parts.append(f"{document['rows']:,} rows")
    if document["chain_length"] is not None:
        parts.append(f"chain {document['chain_length']}")
    bounded = {True: "bounded by the watermark", False: "NOT bounded by a watermark", None: "bound unknown"}
    parts.append(bounded[document["bounded"]])
    codes = sorted({f["code"] for f in document["findings"]})
    return ", ".join(parts) + (f" ({', '.join(codes)})" if codes else "")


def print_state_store(document: dict[str, Any], console: Any, *, with_findings: bool = False) -> None:
    """The state summary under an audit or a status: one line, then a row per operator (id, name,
    bounded, rows now and of which batch, the chain a restart replays), then its findings when
    ``with_findings`` (an audit prints them with its own)."""
    from rich.markup import escape
    from rich.table import Table

    console.print(f"[bold]state store[/bold] {escape(state_store_line(document))}"
                  f"{'' if document['depth'] == 'full' else ' (rows only; the chain: watermark-ops state)'}")
    if not document["operators"]:
        return
    table = Table(show_lines=False)
    for column in ("op", "operator", "bounded by watermark", "rows (batch)", "chain", "snapshot", "on disk"):
        table.add_column(column)
    for op in document["operators"]:
        bounded = {True: "[green]yes[/green]", False: "[bold red]NO[/bold red]", None: "?"}[op["bounded_by_watermark"]]
        rows = "-" if op["rows"] is None else f"{op['rows']} ({op['rows_batch_id']}, {op['rows_source']})"
        table.add_row(str(op["operator_id"]), op["name"] or "?", bounded, escape(rows if op["rows"] is not None
                                                                                  else op["count_note"] or "-"),
                      "-" if op["chain_length"] is None else str(op["chain_length"]),
                      "-" if op["snapshot_version"] is None else str(op["snapshot_version"]),
                      "-" if op["bytes_on_disk"] is None else _bytes_text(op["bytes_on_disk"]))
    console.print(table)
    for f in document["findings"] if with_findings else ():
        style = _SEVERITY_STYLE.get(f["severity"], "bold")
        console.print(f"[{style}]{f['severity']}[/{style}] [bold]{f['code']}[/bold] {escape(f['file'] or '')}")
        console.print(f"    {escape(f['message'])}", soft_wrap=False)
