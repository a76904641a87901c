"""The rendering layer for a checkpoint's state and the restart preflight: tables (rich) and JSON.

* :func:`state_document` / :func:`print_state`: a :class:`~watermark_ops.core.state.reader.CheckpointState`
  and its findings (:func:`watermark_ops.core.state.rules.state_findings`);
* :func:`preflight_document` / :func:`print_preflight`: a
  :class:`~watermark_ops.core.state.preflight.PreflightReport`.

The JSON documents are what ``watermark-ops state --json`` and ``watermark-ops preflight --json``
print, and what any later face (an Airflow task's XCom, the UI) shows. Like :mod:`watermark_ops.render`,
every input is plain data from the core; rich is imported only when a table is drawn.
"""

from __future__ import annotations

from typing import Any, Iterable

from watermark_ops.render import _SEVERITY_STYLE, _bytes_text

__all__ = ["finding_document", "preflight_document", "print_preflight", "print_state", "state_document"]

_VERDICT_STYLE = {"go": "bold green", "warn": "bold yellow", "no_go": "bold red"}
_LEVEL_STYLE = {"no_go": "bold red", "warn": "yellow", "info": "cyan"}


def finding_document(finding: Any) -> dict[str, Any]:
    """A state finding (:class:`watermark_ops.core.rules.Finding`) as JSON, with ``code`` (= its rule)."""
    return {"code": finding.rule, **finding.to_dict()}


def state_document(state: Any, findings: Iterable[Any]) -> dict[str, Any]:
    """``{"location", "has_state_folder", "committed_batch_id", "min_batches_to_retain", "operators":
    [...], "problems", "findings": [{"code", "rule", "severity", "batch_id", "file", "message"}]}``;
    each operator's ``rows`` are the rows held per batch read (``batch_ids`` beside them), newest last."""
    document = state.to_dict()
    document["findings"] = [finding_document(f) for f in findings]
    return document


def preflight_document(report: Any) -> dict[str, Any]:
    """``{"location", "verdict", "head_batch_id", "spark_version", "requested_conf", "findings":
    [{"code", "level", "file", "message", "recipe", "batch_id"}]}``."""
    return report.to_dict()


def _rows_text(op: Any, last: int = 6) -> str:
    shown = [b for b in op.batches if b.rows is not None][-last:]
    if not shown:
        return op.count_note or "-"
    text = " ".join(f"{b.batch_id}:{b.rows}" for b in shown)
    return f"{text} ({op.rows_source})"


def print_state(state: Any, findings: Iterable[Any], console: Any) -> None:
    """The operators as a table (id, name, provider, partitions x stores, bounded, rows per newest
    batches, chain, versions kept, bytes), then the findings."""
    from rich.table import Table

    findings = list(findings)
    console.print(f"[bold]state of[/bold] {state.location}  committed batch {state.committed_batch_id}  "
                  f"minBatchesToRetain {state.min_batches_to_retain}")
    if not state.has_state_folder:
        console.print("no state/ folder: a stateless query, or no batch has run yet")
    else:
        table = Table(show_lines=False)
        for column in ("op", "operator", "provider", "parts x stores", "bounded by watermark", "rows per batch (newest)",
                       "chain", "snapshot", "versions kept", "on disk"):
            table.add_column(column)
        for op in state.operators:
            provider = (op.provider or "?") + (" changelog" if op.changelog else "") + (
                f" v{op.format_version}" if op.format_version == 2 else "")
            bounded = {True: "[green]yes[/green]", False: "[bold red]NO[/bold red]", None: "?"}[op.bounded_by_watermark]
            table.add_row(str(op.operator_id), op.name or "?", provider, f"{op.partitions} x {len(op.stores)}", bounded,
                          _rows_text(op), str(op.chain_length),
                          "-" if op.snapshot_version is None else str(op.snapshot_version),
                          f"{op.versions_kept} ({op.oldest_version}-{op.latest_version})" if op.versions_kept else "0",
                          f"{_bytes_text(op.bytes_on_disk)} / {op.files_on_disk} files")
        console.print(table)
    _print_findings(console, [(f.severity, f.rule, f.file, f.message, None) for f in findings], _SEVERITY_STYLE)


def print_preflight(report: Any, console: Any) -> None:
    """The verdict in one line, then each finding with its file and recipe."""
    style = _VERDICT_STYLE.get(report.verdict, "bold")
    head = "no batch yet" if report.head_batch_id is None else f"head batch {report.head_batch_id}"
    console.print(f"[{style}]{report.verdict.upper().replace('_', '-')}[/{style}]  restart of {report.location} "
                  f"({head}{', Spark ' + report.spark_version if report.spark_version else ''})")
    _print_findings(console, [(f.level, f.code, f.file, f.message, f.recipe) for f in report.findings], _LEVEL_STYLE)


def _print_findings(console: Any, rows: list[tuple[str, str, str | None, str, str | None]],
                    styles: dict[str, str]) -> None:
    from rich.markup import escape

    if not rows:
        console.print("no findings")
        return
    for level, code, file, message, recipe in rows:
        style = styles.get(level, "bold")
        console.print(f"[{style}]{level}[/{style}] [bold]{code}[/bold] {escape(file or '')}")
        console.print(f"    {escape(message)}", soft_wrap=False)
        if recipe:
            console.print(f"    [bold]do:[/bold] {escape(recipe)}")
