"""The rendering of corrections: late rows recovered by an allowed lateness, for every face.

What it draws (plain data from :mod:`watermark_ops.core.ledger.recovered` and
:mod:`watermark_ops.core.ledger.corrections`; ``rich`` imported only when a table is drawn):

* the corrections of a checkpoint (``watermark-ops corrections``): :func:`print_corrections`, JSON
  by :func:`corrections_document`;
* a run's late rows split into recovered and dropped for good (``watermark-ops lateness`` and
  ``late``): :func:`print_run_recovery`, :func:`print_late_recovery`, :func:`late_recovery_document`;
* the checkpoint page's corrections table: :data:`CORRECTIONS_HTML` (a Jinja template that
  :mod:`watermark_ops.render.html` includes).

Windows are shown as ISO-8601 UTC; the JSON keeps epoch milliseconds UTC.
"""

from __future__ import annotations

from typing import Any, Iterable

from watermark_ops.core.times import iso_utc

__all__ = ["CORRECTIONS_HTML", "change_text", "corrections_document", "late_recovery_document", "print_corrections",
           "print_late_recovery", "print_run_recovery", "recovery_text", "window_text"]


def corrections_document(corrections: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """``{"corrections": [{"window_start_ms", "window_end_ms", "keys", "emitted", "corrected",
    "late_rows", "run", "batch_id"}]}`` in the order given (the log's ``write`` left out; a session
    window's correction lists in ``"retracts": [{"window_start_ms", "window_end_ms", "values"}]`` the sessions it replaces)."""
    from watermark_ops.core.ledger.recovered import public_correction

    return {"corrections": [public_correction(c) for c in corrections]}


def window_text(correction: dict[str, Any]) -> str:
    """``2013-01-02T05:00:00Z → 2013-01-02T06:00:00Z`` (a correction's window, UTC)."""
    return f"{iso_utc(correction['window_start_ms'])} → {iso_utc(correction['window_end_ms'])}"


def _count(n: int | None, word: str) -> str:
    """``1 correction``, ``2 corrections``."""
    n = n or 0
    return f"{n} {word}{'' if n == 1 else 's'}"


def _value(value: Any) -> str:
    return "-" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def change_text(correction: dict[str, Any]) -> str:
    """Each value column as ``name: emitted → corrected`` (``-`` where the sink held nothing), one a
    line; a session window's correction then names the sessions it retracts."""
    emitted = correction.get("emitted") or {}
    lines = [f"{name}: {_value(emitted.get(name))} → {_value(value)}"
             for name, value in (correction.get("corrected") or {}).items()]
    if correction.get("window_kind") == "session" or correction.get("retracts"):
        gone = correction.get("retracts") or []
        lines.append(f"retracts {_count(len(gone), 'session')}" + (":" if gone else " (a new session)"))
        lines += [f"  {window_text(r)} " + ", ".join(f"{k}={_value(v)}" for k, v in (r.get("values") or {}).items())
                  for r in gone]
    return "\n".join(lines)


def print_corrections(corrections: list[dict[str, Any]], console: Any, *, checkpoint: str,
                      problems: Iterable[str] = ()) -> None:
    """Print a checkpoint's corrections as a rich table: window (UTC), keys, emitted → corrected per
    value column, the late rows each adds, the run and batch; then the log lines not used."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"Corrections (late rows recovered) — {escape(checkpoint)}")
    for name in ("window (UTC)", "keys", "emitted → corrected", "late rows", "run", "batch"):
        table.add_column(name, justify="right" if name in ("late rows", "batch") else "left", overflow="fold")
    for c in corrections:
        keys = ", ".join(f"{k}={_value(v)}" for k, v in (c.get("keys") or {}).items()) or "-"
        table.add_row(window_text(c), escape(keys), escape(change_text(c)), _value(c.get("late_rows")),
                      escape(str(c.get("run") or "-")), _value(c.get("batch_id")))
    table.caption = ("no corrections (no allowed lateness declared, or no late row within it yet)" if not corrections
                     else f"{_count(len(corrections), 'correction')}, each run's newest write, in the order made; "
                          "'-' before the arrow: the sink never held that window and keys")
    console.print(table)
    for problem in problems:
        console.print(f"[yellow]not used:[/] {escape(problem)}", markup=True, highlight=False)


def print_run_recovery(runs: list[dict[str, Any]], console: Any) -> None:
    """After the lateness report's runs table: per run with corrections figures, its late rows split
    (``rows_late_recovered``, ``rows_late_dropped``, ``corrections``); nothing without them."""
    from rich.markup import escape

    shown = [r for r in runs if "rows_late_recovered" in r]
    if not shown:
        return
    console.print("Late rows recovered by corrections (allowed lateness), per run:", highlight=False)
    for run in shown:
        tag = escape(str(run.get("run_tag") or run.get("run_id", "")[:8]))
        console.print(f"  {tag}: {recovery_text(run)}", highlight=False)


def recovery_text(figures: dict[str, Any]) -> str:
    """``48 late = 30 recovered (12 corrections) + 18 dropped for good``; ``unknown`` parts when unknown."""
    if figures.get("rows_late_recovered") is None:
        return f"late rows unknown ({_count(figures.get('corrections'), 'correction')})"
    late = figures["rows_late_recovered"] + figures["rows_late_dropped"]
    return (f"{late} late = {figures['rows_late_recovered']} recovered ({_count(figures.get('corrections'), 'correction')}"
            f") + {figures['rows_late_dropped']} dropped for good")


def late_recovery_document(ledger: Any, corrections: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ledger's late rows split by the corrections, None without corrections:
    ``{"rows_late_recovered", "rows_late_dropped", "corrections", "by_batch": {batch id:
    {"recovered", "dropped"}}}`` over the replayed batches."""
    from watermark_ops.core.ledger.recovered import recovery, split_recovered

    if not corrections:
        return None
    rows = [row for batch in ledger.batches if batch.replayed for row in batch.late_rows]
    recovered, dropped = split_recovered(rows, corrections)
    by_batch = {str(b.batch_id): {"recovered": 0, "dropped": 0} for b in ledger.batches if b.replayed}
    for name, part in (("recovered", recovered), ("dropped", dropped)):
        for row in part:
            by_batch[str(row["batch_id"])][name] += 1
    return {**recovery(rows, corrections), "by_batch": by_batch}


def print_late_recovery(document: dict[str, Any] | None, console: Any) -> None:
    """The late-row ledger's split line (:func:`late_recovery_document`); nothing without corrections."""
    if document is None:
        return
    console.print(f"Corrections (allowed lateness): {recovery_text(document)} in the replayed batches",
                  highlight=False)


#: The checkpoint page's corrections table (``d.corrections``: the public fields, in the order made).
CORRECTIONS_HTML = """
{% set corrections = d.get('corrections') or [] %}
{% if corrections %}<h2>Corrections: late rows recovered</h2>
<table id="corrections"><tr><th>window (UTC)</th><th>keys</th><th>emitted → corrected</th><th>late rows</th><th>run</th><th>batch</th></tr>
{% for c in corrections[-corrections_limit:] %}<tr><td>{{ iso(c.window_start_ms) }} → {{ iso(c.window_end_ms) }}</td>
<td>{% for k, v in c['keys'].items() %}<code>{{ k }}={{ v }}</code>{{ ' ' if not loop.last }}{% endfor %}</td>
<td>{% for name, value in c.corrected.items() %}<code>{{ name }}</code>: {{ (c.emitted or {}).get(name, '-') if c.emitted else '-' }} → {{ value }}{{ '; ' if not loop.last }}{% endfor %}</td>
<td class="num">{{ c.late_rows }}</td><td><code>{{ c.run }}</code></td><td class="num">{{ c.batch_id }}</td></tr>
{% endfor %}</table><p class="muted" id="corrections-legend">{% if corrections|length > corrections_limit %}The newest {{ corrections_limit }} of {{ corrections|length }} corrections (the JSON has them all). {% endif %}Each window and keys the allowed lateness corrected, from <code>&lt;checkpoint&gt;.corrections.jsonl</code> (each run's newest write, in the order made): what the sink held (- : never emitted) and the result over every row of the window; the late rows it recovered. The corrections table beside the sink has the same rows.</p>{% endif %}
"""
