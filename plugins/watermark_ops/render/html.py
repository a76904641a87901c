"""The web pages of the rendering layer: the watermark overview and a checkpoint's page, as HTML.

Renders the dicts of :mod:`watermark_ops.core.overview` (the same ones the web face serves as
JSON) with Jinja2 (autoescaped: checkpoint paths, offsets and messages are data, never markup)
and draws the chart as inline SVG on the server: no script, no CDN, no font to fetch, so a page
works offline and in any browser. States and severities keep the terminal's colours
(:mod:`watermark_ops.render`): red for jumped, stalled, a violation and an error finding; yellow for
lagging and warnings; cyan for idle and for a query without a watermark (``no_watermark``); green
for advancing; grey for ``watermark_unknown`` (the evidence cannot tell whether it has one).

Every link is built from ``base``, the path the face is mounted at (``/watermark-ops``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

from watermark_ops.core.times import duration_words, iso_utc
from watermark_ops.render import signed_duration
from watermark_ops.render.corrections import CORRECTIONS_HTML

__all__ = ["checkpoint_page", "error_page", "overview_page", "state_chart_svg", "watermark_chart_svg"]

_STATE_CLASS = {"jumped": "bad", "stalled": "bad", "lagging": "warn", "idle": "info", "advancing": "good",
                "no_watermark": "info", "watermark_unknown": "none"}
_SEVERITY_CLASS = {"error": "bad", "warning": "warn", "info": "info"}
_AUDIT_CLASS = {"violation": "bad", "unreadable": "warn", "ok": "good"}

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:16px 24px;color:#1f2933;background:#fff}
h1{font-size:1.35rem;margin:0 0 4px} h2{font-size:1.05rem;margin:22px 0 6px}
a{color:#0b63c5} .muted{color:#616e7c;font-size:.85rem}
table{border-collapse:collapse;margin:4px 0 8px;font-size:.85rem}
th,td{border-bottom:1px solid #e4e7eb;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f7fa;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:.8rem;word-break:break-all}
.badge{display:inline-block;border-radius:4px;padding:1px 7px;font-weight:600;font-size:.8rem}
.badge.good{background:#e3f9e5;color:#05612b}.badge.bad{background:#ffe3e3;color:#a61b1b}
.badge.warn{background:#fff3c4;color:#8d5b00}.badge.info{background:#e0f2fe;color:#075985}
.badge.none{background:#eee;color:#555}
tr.bad td{background:#fff5f5} tr.bad td.err,td.err,.err{color:#a61b1b;font-weight:600}
tr.warnrow td{background:#fffbea} .warn-text{color:#8d5b00}
ul{margin:4px 0;padding-left:20px;font-size:.85rem}
"""

_LAYOUT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{{ css }}</style></head>
<body>{% block body %}{% endblock %}</body></html>
"""

_OVERVIEW = """{% extends "layout" %}{% block body %}
<h1>Watermarks</h1>
<p class="muted" id="totals">{{ p.total }} checkpoint{{ '' if p.total == 1 else 's' }} ({{ p.problems }} with a problem, {{ p.warnings }} with a warning), problems first; read at
{{ evaluated_at }} (UTC). <a href="{{ base }}/api/checkpoints?page={{ p.page }}&amp;page_size={{ p.page_size }}">JSON</a></p>
{% if p.pages > 1 %}<p class="muted" id="pages">Page {{ p.page }} of {{ p.pages }} (rows {{ (p.page - 1) * p.page_size + 1 }}–{{ (p.page - 1) * p.page_size + rows|length }}):
{% if p.page > 1 %}<a href="{{ base }}/?page={{ p.page - 1 }}&amp;page_size={{ p.page_size }}" rel="prev">previous</a>{% endif %}
{% if p.page < p.pages %}<a href="{{ base }}/?page={{ p.page + 1 }}&amp;page_size={{ p.page_size }}" rel="next">next</a>{% endif %}</p>{% endif %}
<table id="overview">
<tr><th>checkpoint</th><th>state</th><th>watermark (UTC)</th><th>lag</th><th>head batch</th><th>in flight</th>
<th>audit</th><th>state store</th><th>newest batch (UTC)</th><th>query id</th></tr>
{% for row in rows %}
<tr class="{{ 'bad' if row.rank == 0 else '' }}" data-checkpoint="{{ row.name }}">
<td>{% if row.url %}<a href="{{ row.url }}">{{ row.name }}</a>{% else %}{{ row.name }}{% endif %}
<br><code class="muted">{{ row.location }}</code>
{% if row.error %}<div class="err">{{ row.error }}</div>{% endif %}
{% if row.refused_restart %}<div class="err refused-restart"><span class="badge bad">restart refused</span> {{ row.refused_restart.line }}</div>{% endif %}</td>
<td>{% if row.state %}<span class="badge {{ state_class(row.state) }}">{{ row.state }}</span>
{% if row.alarm %}<span class="badge bad">alarm</span>{% endif %}{% else %}<span class="badge none">unknown</span>{% endif %}
{% if row.reason %}<div class="muted">{{ row.reason }}</div>{% endif %}
{% for warning in row.skew_warnings %}<div class="warn-text">warning: {{ warning }}</div>{% endfor %}</td>
<td>{{ row.watermark or '-' }}</td><td>{{ words(row.lag_ms) }}{% if row.lag_basis %}<div class="muted lag-basis">{{ 'vs data interval end' if row.lag_basis == 'data_interval' else 'vs newest batch time' }}</div>{% endif %}</td>
<td class="num">{{ row.head_batch_id if row.head_batch_id is not none else '-' }}</td>
<td class="num">{{ row.in_flight_batch if row.in_flight_batch is not none else '-' }}</td>
<td>{% if row.audit_status %}<span class="badge {{ audit_class(row.audit_status) }}">{{ row.audit_status }}</span>
{{ row.findings }} finding{{ '' if row.findings == 1 else 's' }}{% if row.rules %}<div class="muted">{{ row.rules|join(', ') }}</div>{% endif %}
{% else %}-{% endif %}</td>
<td class="state-store">{% include "state_cell" %}</td>
<td>{{ row.latest_batch_time or '-' }}</td><td><code>{{ (row.query_id or '-')[:8] }}</code></td></tr>
{% endfor %}
</table>
<p class="muted" id="roots">{% if roots %}Checkpoint roots: {% for name, folder in roots.items() %}<code>{{ name }}</code> = <code>{{ folder }}</code>{{ ', ' if not loop.last }}{% endfor %}.
Besides the checkpoints DAG tasks registered (each read in its own folder), only checkpoints under these folders are read.{% else %}The checkpoints DAG tasks registered, each read in its own folder; no checkpoint root is configured (<code>[watermark_ops] checkpoint_roots</code>).{% endif %}</p>
{% endblock %}"""

_CHECKPOINT = """{% extends "layout" %}{% block body %}
<p class="muted"><a href="{{ base }}/">All watermarks</a> · <a href="{{ json_url }}">JSON</a></p>
<h1>{{ d.name }} {% if d.state %}<span class="badge {{ state_class(d.state) }}" id="state">{{ d.state }}</span>{% else %}<span class="badge none" id="state">unknown</span>{% endif %}
{% if c and c.alarm %}<span class="badge bad">alarm</span>{% endif %}
<span class="badge {{ audit_class(d.audit.status) }}" id="audit-status">audit: {{ d.audit.status }}</span>
{% include "restart_badge" %}</h1>
<p><code>{{ d.location }}</code></p>
{% if c %}<ul id="reasons">{% for reason in c.reasons %}<li>{{ reason }}</li>{% endfor %}
{% for hint in c.hints %}<li>hint: {{ hint }}</li>{% endfor %}
{% for warning in c.warnings %}<li class="warn-text">warning: {{ warning }}</li>{% endfor %}</ul>{% endif %}
<table id="head">
<tr><th>query id</th><td><code>{{ s.query_id or 'unknown' }}</code></td>
<th>watermark (next batch starts from)</th><td id="watermark">{{ s.watermark or 'unknown' }}{% if s.watermark_ms is not none %} <span class="muted">({{ s.watermark_ms }} ms)</span>{% endif %}</td></tr>
<tr><th>head batch</th><td>{{ s.head_batch_id if s.head_batch_id is not none else 'none' }}</td>
<th>in-flight batch</th><td>{{ s.in_flight_batch if s.in_flight_batch is not none else 'none' }}</td></tr>
<tr><th>newest batch time</th><td>{{ s.latest_batch_time or 'none' }}</td>
{% if c and c.lag_basis == 'data_interval' %}<th>lag (data interval end − watermark)</th><td id="lag">{{ words(c.lag_ms) }}
<div class="muted" id="lag-basis">judged against the data interval {{ c.data_interval.start }} → {{ c.data_interval.end }} the run processed (stamped on batch {{ c.data_interval.batch_id }})</div></td></tr>
{% else %}<th>lag (newest batch − watermark)</th><td id="lag">{{ words(c.lag_ms if c else none) }}{% if c %}
<div class="muted" id="lag-basis">wall clock: no data interval stamped on the newest progress record</div>{% endif %}</td></tr>{% endif %}
<tr><th>emitted through</th><td>{{ (c.emitted_through if c else none) or '-' }}</td>
<th>evaluated at</th><td>{{ d.evaluated_at }}</td></tr>
</table>

<h2>Watermark and batch time over batch ids</h2>
<p class="muted" id="chart-note">{% if d.chart.shown < d.chart.total %}Showing the newest {{ d.chart.shown }} of {{ d.chart.total }} batches (from batch {{ d.chart.first_shown_batch_id }}).{% else %}All {{ d.chart.total }} batches.{% endif %}
 Dashed lines: restarts (one per run); orange: the in-flight batch; red: a watermark that went backwards.</p>
{{ chart|safe }}
{% include "state" %}

{% if c and c.partition_skew %}{% set k = c.partition_skew %}
<h2>Event-time skew between the values of {{ k.column }}</h2>
<table id="skew"><tr><th>{{ k.column }}</th><th>newest event time (UTC)</th><th>behind the leader</th><th>behind the watermark</th><th>last data batch</th></tr>
{% for p in k.partitions %}<tr class="{{ 'warnrow' if p.partition in k.trailing else '' }}"><td>{{ p.partition }}{% if p.partition == k.leader %} (leader){% endif %}</td>
<td>{{ p.event_time_max or 'none seen' }}</td><td>{{ words(p.behind_leader_ms) }}</td><td>{{ words(p.behind_watermark_ms) }}</td>
<td class="num">{{ p.last_data_batch_id if p.last_data_batch_id is not none else '-' }}</td></tr>{% endfor %}</table>
<p class="muted">The partitions share one watermark, set by the leader; a partition trailing it by more than {{ words(k.max_partition_skew_ms) if k.max_partition_skew_ms is not none else '(off)' }} is a warning: its rows are the ones dropped as late. Batches {{ k.first_batch_id }}–{{ k.last_batch_id }} of the progress log.</p>
{% endif %}

<h2>Audit findings</h2>
{% set findings = d.audit.findings[:findings_limit] %}
{% if d.audit.findings|length > findings|length %}<p class="muted" id="findings-note">Showing the first {{ findings|length }} of {{ d.audit.findings|length }} findings (errors first; the JSON has them all).</p>{% endif %}
{% if d.audit.findings %}<table id="findings"><tr><th>severity</th><th>rule</th><th>batch</th><th>file</th><th>message</th></tr>
{% for f in findings %}<tr class="{{ 'bad' if f.severity == 'error' else '' }}">
<td><span class="badge {{ severity_class(f.severity) }}">{{ f.severity }}</span></td><td class="rule">{{ f.rule }}</td>
<td class="num">{{ f.batch_id if f.batch_id is not none else '-' }}</td><td><code>{{ f.file or '-' }}</code></td><td>{{ f.message }}</td></tr>
{% endfor %}</table>{% else %}<p id="findings">No findings: the watermark never moved backwards in the {{ d.chart.total }} batches retained.</p>{% endif %}
{% include "restart" %}

<h2>Rows dropped by the watermark, per run</h2>
{% set runs = d.runs[-runs_limit:] %}{% set first_run = d.runs|length - runs|length %}
{% if d.runs %}{% if first_run %}<p class="muted" id="runs-note">Showing the newest {{ runs|length }} of {{ d.runs|length }} runs.</p>{% endif %}<table id="runs"><tr><th>run</th><th>tag</th><th>started (UTC)</th><th>batches</th><th>input rows</th><th>late rows (ledger)</th><th>drop rate (late rows / input rows)</th><th>late partial aggregates (Spark)</th></tr>
{% for run in runs %}<tr><td class="num">{{ first_run + loop.index }}</td><td><code>{{ run.run_tag or run.run_id[:8] }}</code></td><td>{{ iso(run.started_ms) or '-' }}</td>
<td>{% if run.batch_ids %}{{ run.batch_ids[0] }}–{{ run.batch_ids[-1] }}{% else %}none{% endif %}</td>
<td class="num">{{ run.input_rows }}</td><td class="num ledger">{{ run.rows_late if run.rows_late is not none else 'unknown' }}{% if run.get('rows_late_recovered') is not none %}<br><span class="muted recovered">{{ run.rows_late_recovered }} recovered, {{ run.rows_late_dropped }} dropped</span>{% endif %}</td><td class="num">{{ percent(run.drop_rate) if run.rows_late is not none else 'unknown' }}</td><td class="num spark">{{ run.late_partial_aggregates_spark }}</td></tr>
{% endfor %}</table>{% set unknown = runs|selectattr('rows_late', 'none')|list %}{% if unknown %}<ul id="runs-unknown">{% for reason, group in unknown|groupby('late_rows_unknown_reason', default='not read') %}<li class="warn-text">Late rows unknown (never 0) for {{ 'run' if group|length == 1 else 'runs' }} {% for run in group %}<code>{{ run.run_tag or run.run_id[:8] }}</code>{{ ', ' if not loop.last }}{% endfor %}: {{ reason }}</li>{% endfor %}</ul>{% endif %}<p class="muted" id="runs-legend">{% if d.late_sink %}Late rows: every row the run's batches dropped, from the late-row ledger's sink <code>{{ d.late_sink }}</code> (<code>batch=N.jsonl</code>); unknown where a run's batches have no file.{% else %}Late rows: from the launcher's Spark replay of the job's own parsing where there is one; unknown otherwise (no late-row sink is known for this checkpoint).{% endif %}
The drop rate is late rows over input rows. Spark's count (<code>numRowsDroppedByWatermark</code>, from <code>{{ d.progress_log }}</code>) is taken after partial aggregation: for an aggregation it counts late partial aggregates, not rows.</p>
{% else %}<p class="muted">No progress records in <code>{{ d.progress_log }}</code>.</p>{% endif %}
{% include "corrections" %}

<h2>Delay-threshold advice</h2>
{% if d.advice %}{% for item in d.advice %}<table class="advice"><tr><th colspan="3">Event time: <code class="event-time-field">{{ item.event_time_field }}</code> — {% if item.source == 'spark_replay' %}the rows the job's own parsing made, replayed in Spark{% else %}landing <code>{{ item.landing }}</code>{% endif %}</th></tr>
<tr><th>keep drops below</th><th>delay threshold (withWatermark)</th><th>events still dropped (at most)</th></tr>
{% for a in item.advice %}<tr><td>{{ percent(a.target_drop_rate) }}</td><td><code>{{ a.spark_interval }}</code></td><td class="num">{{ a.events_dropped }} ({{ percent(a.drop_rate) }})</td></tr>{% endfor %}
</table><p class="muted">{{ item.events }} events in {{ item.files }} files; lateness p50 {{ words(item.p50_ms) }}, p99 {{ words(item.p99_ms) }}, max {{ words(item.max_lateness_ms) }}. The smallest thresholds that keep drops below each target, rounded up.</p>{% endfor %}
{% else %}<p class="muted" id="no-advice">No advice: {% if d.get('advice_why') %}{{ d.advice_why|join('; ') }}{% else %}no landing folder is registered for this checkpoint, and the launcher has no Spark replay of it{% endif %}.</p>{% endif %}

{% if d.problems %}<h2>Problems</h2><ul id="problems">{% for p in d.problems %}<li class="err">{{ p }}</li>{% endfor %}</ul>{% endif %}
{% endblock %}"""

# --------------------------------------------------------------------------------------------
# The state store and the restart (core.state.detail, core.state.summary)

_STATE_CODES = {"state_unbounded": ("unbounded", "bad"), "state_growing": ("growing", "warn"),
                "state_never_compacted": ("not compacted", "warn"), "state_files_accumulating": ("files pile up", "warn"),
                "unreadable": ("unreadable", "bad")}
_VERDICT_CLASS = {"go": "good", "warn": "warn", "no_go": "bad"}
_LEVEL_CLASS = {"no_go": "bad", "warn": "warn", "info": "info"}

_STATE_CELL = """{% set st = row.state_store %}{% if st is none %}-{% elif not st.has_state_folder %}<span class="muted">stateless</span>
{% else %}{{ st.rows if st.rows is not none else '?' }} rows{% if st.chain_length is not none %}, chain {{ st.chain_length }}{% endif %}
{% for code in st.codes %}{% set b = state_badge(code) %}<span class="badge {{ b[1] }}" title="{{ code }}">{{ b[0] }}</span>{% endfor %}{% endif %}"""

_STATE = """{% set st = d.state_store %}
<h2 id="state-title">State store: rows held per stateful operator over batch ids</h2>
{% if st is none %}<p class="muted" id="state-note">The state could not be read (see the problems).</p>
{% elif not st.has_state_folder %}<p class="muted" id="state-note">No <code>state/</code> folder: a stateless query (or no batch ran yet).</p>
{% else %}<p class="muted" id="state-note">{{ state_line(st) }}. The same batch ids as the watermark chart; rows from the progress log, else counted from the state files.
Bytes on disk are not state size: eviction appends tombstones, bytes fall only when a snapshot is written.</p>
{{ state_chart|safe }}
<table id="state-store"><tr><th>op</th><th>operator</th><th>bounded by the watermark</th><th>rows now</th><th>chain a restart replays</th><th>newest snapshot</th><th>versions kept</th><th>on disk</th></tr>
{% for op in st.operators %}<tr class="{{ 'bad' if op.bounded_by_watermark == false else '' }}"><td class="num">{{ op.operator_id }}</td>
<td>{{ op.name or '?' }} <span class="muted">({{ op.provider or '?' }}, {{ op.partitions }} partition{{ '' if op.partitions == 1 else 's' }} × {{ op.stores|length }} store{{ '' if op.stores|length == 1 else 's' }})</span></td>
<td>{% if op.bounded_by_watermark %}<span class="badge good">yes</span>{% elif op.bounded_by_watermark == false %}<span class="badge bad">no</span>{% else %}<span class="badge none">?</span>{% endif %}<div class="muted">{{ op.bound_reason }}</div></td>
<td class="num">{{ op.rows if op.rows is not none else '-' }}{% if op.rows_batch_id is not none %} <span class="muted">(batch {{ op.rows_batch_id }}, {{ op.rows_source }})</span>{% endif %}{% if op.count_note %}<div class="muted">{{ op.count_note }}</div>{% endif %}</td>
<td class="num chain">{{ op.chain_length }}</td><td class="num">{{ op.snapshot_version if op.snapshot_version is not none else 'none' }}</td>
<td class="num">{{ op.versions_kept }}</td><td class="num">{{ size(op.bytes_on_disk) }}</td></tr>{% endfor %}</table>
{% if st.findings %}<table id="state-findings"><tr><th>severity</th><th>finding</th><th>batch</th><th>file</th><th>message</th></tr>
{% for f in st.findings %}<tr class="{{ 'bad' if f.severity == 'error' or f.code == 'state_unbounded' else 'warnrow' }}"><td><span class="badge {{ severity_class(f.severity) }}">{{ f.severity }}</span></td>
<td class="rule">{{ f.code }}</td><td class="num">{{ f.batch_id if f.batch_id is not none else '-' }}</td><td><code>{{ f.file or '-' }}</code></td><td>{{ f.message }}</td></tr>{% endfor %}</table>
{% else %}<p id="state-findings">No state finding: every operator is bounded, its rows do not only grow, its chain is short.</p>{% endif %}
{% endif %}"""

_RESTART_BADGE = """{% for code in (d.state_store.findings if d.state_store else [])|map(attribute='code')|unique %}{% set b = state_badge(code) %}<span class="badge {{ b[1] }} state-badge">state: {{ b[0] }}</span> {% endfor %}
{% if d.diagnosis %}<span class="badge bad" id="restart-badge">restart refused</span>{% elif d.preflight %}<span class="badge {{ verdict_class(d.preflight.verdict) }}" id="restart-badge">restart: {{ d.preflight.verdict|replace('_', '-') }}</span>{% endif %}"""

_RESTART = """<h2 id="restart-title">Next restart</h2>
{% if d.diagnosis %}{% set g = d.diagnosis %}<div id="diagnosis"><p class="err">{{ g.line }}</p>
<p class="muted">Refused by {{ 'Spark' if g.refused_by == 'spark' else 'watermark-ops (the start check, before Spark)' }}{% if g.timestamp_ms %} at {{ iso(g.timestamp_ms) }}{% endif %}{% if g.spark_error_class %}: <code>{{ g.spark_error_class }}</code>{% endif %}; from <code>{{ d.location }}.diagnosis.json</code>, removed by the next run that finishes.</p></div>{% endif %}
{% if d.preflight %}{% set p = d.preflight %}<p id="preflight">Preflight: <span class="badge {{ verdict_class(p.verdict) }}">{{ p.verdict|replace('_', '-') }}</span>
<span class="muted">what the files alone say about the next start (head batch {{ p.head_batch_id if p.head_batch_id is not none else 'none' }}); with the next run's confs and Spark: <code>watermark-ops preflight CHECKPOINT --conf KEY=VALUE --spark-version X</code>.</span></p>
{% if p.findings %}<table id="preflight-findings"><tr><th>level</th><th>code</th><th>file</th><th>what Spark does</th><th>recipe</th></tr>
{% for f in p.findings %}<tr class="{{ 'bad' if f.level == 'no_go' else '' }}"><td><span class="badge {{ level_class(f.level) }}">{{ f.level|replace('_', '-') }}</span></td><td class="rule">{{ f.code }}</td>
<td><code>{{ f.file or '-' }}</code></td><td>{{ f.message }}</td><td>{{ f.recipe }}</td></tr>{% endfor %}</table>{% endif %}
{% else %}<p class="muted" id="preflight">No preflight: nothing read.</p>{% endif %}"""

_ERROR = """{% extends "layout" %}{% block body %}
<p class="muted"><a href="{{ base }}/">All watermarks</a></p>
<h1>{{ title }}</h1><p class="err">{{ message }}</p>{% endblock %}"""


@lru_cache(maxsize=1)
def _environment():
    from jinja2 import DictLoader, Environment, StrictUndefined

    env = Environment(loader=DictLoader({"layout": _LAYOUT, "overview": _OVERVIEW, "checkpoint": _CHECKPOINT,
                                         "error": _ERROR, "state": _STATE, "state_cell": _STATE_CELL,
                                         "restart": _RESTART, "restart_badge": _RESTART_BADGE,
                                         "corrections": CORRECTIONS_HTML}),
                      autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(
        css=_CSS, iso=iso_utc, words=_words, percent=_percent,
        state_class=lambda state: _STATE_CLASS.get(state, "none"),
        severity_class=lambda severity: _SEVERITY_CLASS.get(severity, "none"),
        audit_class=lambda status: _AUDIT_CLASS.get(status, "none"),
        state_badge=lambda code: _STATE_CODES.get(code, (code, "warn")),
        verdict_class=lambda verdict: _VERDICT_CLASS.get(verdict, "none"),
        level_class=lambda level: _LEVEL_CLASS.get(level, "none"),
        state_line=_state_line, size=_size,
    )
    return env


def _state_line(document: dict[str, Any]) -> str:
    from watermark_ops.render import state_store_line

    return state_store_line(document)


def _size(n: int | None) -> str:
    from watermark_ops.render import _bytes_text

    return "-" if n is None else _bytes_text(n)


def _words(ms: int | None) -> str:
    return "-" if ms is None else signed_duration(ms) if ms < 0 else duration_words(ms)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{100 * rate:.3g} %"


def overview_page(rows: list[dict[str, Any]], *, base: str, roots: dict[str, str], evaluated_at: str,
                  paging: dict[str, Any] | None = None) -> str:
    """The overview: one row per checkpoint (:func:`watermark_ops.core.overview.overview_row`
    dicts, sorted, each with ``url``: its page, or None when it is not under a root).

    :param base: the path the face is mounted at, without a trailing ``/``.
    :param roots: root name → folder, listed under the table.
    :param evaluated_at: ISO-8601 UTC instant of the read.
    :param paging: when ``rows`` is one page: :func:`watermark_ops.core.overview.page_of`'s totals
        (``total``, ``page``, ``page_size``, ``pages``, ``problems``, ``warnings``); None: all rows.
    """
    if paging is None:
        from watermark_ops.core.overview import page_of

        rows, paging = page_of(rows, 1, max(1, len(rows)))
    return _environment().get_template("overview").render(
        title="Watermarks", rows=rows, base=base, roots=roots, evaluated_at=evaluated_at, p=paging)


#: The newest runs the late-rows table lists (``core.overview.DEFAULT_RUNS_LIMIT`` reads the ledger
#: files of as many), and the findings the findings table lists (errors first); the JSON has them all.
RUNS_LIMIT = 100
FINDINGS_LIMIT = 200


def checkpoint_page(detail: dict[str, Any], *, base: str, json_url: str, runs_limit: int = RUNS_LIMIT) -> str:
    """A checkpoint's page (:func:`watermark_ops.core.overview.checkpoint_detail`'s dict): head,
    state and reasons, the chart, the audit's findings with their files, late rows per run (the
    newest ``runs_limit``: Spark's late-group count beside the late-row ledger's rows, "—"
    without a sink; with corrections, the late rows recovered and dropped for good), the corrections
    (window UTC, keys, emitted → corrected, late rows, run), advice."""
    classification = detail.get("classification")
    return _environment().get_template("checkpoint").render(
        title=f"Watermark of {detail['name']}", d=detail, s=detail["status"], c=classification, base=base,
        json_url=json_url, runs_limit=runs_limit, findings_limit=FINDINGS_LIMIT, corrections_limit=RUNS_LIMIT * 5, chart=watermark_chart_svg(detail["chart"], detail["status"].get("in_flight_batch")),
        state_chart=state_chart_svg(detail.get("state_store"), detail["chart"]))


def error_page(title: str, message: str, *, base: str) -> str:
    """A page that says what could not be shown and why (a refused path, an unknown DAG)."""
    return _environment().get_template("error").render(title=title, message=message, base=base)


# --------------------------------------------------------------------------------------------
# The chart


_WIDTH, _PANEL, _GAP, _LEFT, _RIGHT, _TOP = 980, 190, 46, 150, 20, 22


def _scale(lo: float, hi: float, out_lo: float, out_hi: float) -> Callable[[float], float]:
    if hi <= lo:
        hi = lo + 1
    return lambda v: out_lo + (v - lo) * (out_hi - out_lo) / (hi - lo)


def _esc(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))


def _panel(points: list[dict[str, Any]], key: str, label: str, top: float, x: Callable[[float], float],
           color: str, marks: list[str]) -> None:
    values = [(p["batch_id"], p[key]) for p in points if p[key] is not None]
    bottom = top + _PANEL
    marks.append(f'<text x="{_LEFT}" y="{top - 6}" class="t">{_esc(label)}</text>')
    marks.append(f'<rect x="{_LEFT}" y="{top}" width="{_WIDTH - _LEFT - _RIGHT}" height="{_PANEL}" class="frame"/>')
    if not values:
        marks.append(f'<text x="{_LEFT + 10}" y="{top + 20}" class="t">no readable value</text>')
        return
    # A watermark of 0 is "not set yet" (before the first data batch): drawn on the bottom line,
    # kept out of the scale, which would otherwise start in 1970.
    unset = key == "watermark_ms" and any(v == 0 for _, v in values) and any(v > 0 for _, v in values)
    scaled = [v for _, v in values if not unset or v > 0]
    lo, hi = min(scaled), max(scaled)
    y_set = _scale(lo, hi, bottom - 24 if unset else bottom - 8, top + 8)

    def y(value: float) -> float:
        return bottom - 6 if unset and value == 0 else y_set(value)

    for value in sorted({lo, hi, (lo + hi) // 2}):
        marks.append(f'<text x="{_LEFT - 6}" y="{y(value) + 4:.1f}" class="t" text-anchor="end">'
                     f'{_esc((iso_utc(int(value)) or "").replace("T", " ").removesuffix("Z"))}</text>')
    if unset:
        marks.append(f'<text x="{_LEFT - 6}" y="{bottom - 2:.1f}" class="t" text-anchor="end">0 (not set yet)</text>')
    path = []
    for index, (batch_id, value) in enumerate(values):
        px, py = x(batch_id), y(value)
        if index:  # a step line: the value holds until the next batch
            path.append(f"L{px:.1f},{path_y:.1f}")
        path.append(f"{'M' if not index else 'L'}{px:.1f},{py:.1f}")
        path_y = py
    marks.append(f'<path d="{" ".join(path)}" fill="none" stroke="{color}" stroke-width="1.6"/>')
    if len(values) <= 120:
        marks.extend(f'<circle cx="{x(b):.1f}" cy="{y(v):.1f}" r="2.2" fill="{color}"/>' for b, v in values)
    for p in points:
        if p[key] is None:
            continue
        if key == "watermark_ms" and p["regressed"]:
            marks.append(f'<circle cx="{x(p["batch_id"]):.1f}" cy="{y(p[key]):.1f}" r="5" class="regressed">'
                         f'<title>batch {p["batch_id"]}: watermark went backwards</title></circle>'
                         f'<text x="{x(p["batch_id"]) + 7:.1f}" y="{y(p[key]) - 6:.1f}" class="t bad">'
                         f'batch {p["batch_id"]} regressed</text>')
        if not p["committed"]:
            marks.append(f'<circle cx="{x(p["batch_id"]):.1f}" cy="{y(p[key]):.1f}" r="5" class="inflight">'
                         f'<title>batch {p["batch_id"]}: in flight (offsets written, no commit)</title></circle>')


def watermark_chart_svg(chart: dict[str, Any], in_flight_batch: int | None = None) -> str:
    """Inline SVG: the watermark each batch ran with (offsets ``batchWatermarkMs``) and the batch
    time (``batchTimestampMs``) over batch ids, in two panels with their own time axes (a replay's
    event time and its processing time can be years apart); dashed verticals at each run's first
    batch, the in-flight batch circled orange, batches whose watermark went backwards in red.

    :param chart: ``checkpoint_detail(...)["chart"]``.
    :param in_flight_batch: the in-flight batch id, labelled on the axis.
    """
    points = chart["points"]
    height = _TOP + 2 * _PANEL + _GAP + 40
    marks = [f'<svg xmlns="http://www.w3.org/2000/svg" id="chart" width="{_WIDTH}" height="{height}" '
             f'viewBox="0 0 {_WIDTH} {height}" role="img" aria-label="watermark and batch time over batch ids">',
             "<style>.t{font:11px system-ui,sans-serif;fill:#3e4c59}.t.bad{fill:#c81e1e;font-weight:600}"
             ".frame{fill:#fbfcfd;stroke:#cbd2d9}.restart{stroke:#7b8794;stroke-dasharray:4 3}"
             ".regressed{fill:none;stroke:#c81e1e;stroke-width:2.4}.inflight{fill:none;stroke:#f97316;stroke-width:2.4}"
             "</style>"]
    if not points:
        marks.append(f'<text x="{_LEFT}" y="{_TOP + 20}" class="t">no batches</text></svg>')
        return "".join(marks)
    first, last = points[0]["batch_id"], points[-1]["batch_id"]
    x = _scale(first, last if last > first else first + 1, _LEFT + 8, _WIDTH - _RIGHT - 8)
    _panel(points, "watermark_ms", "watermark the batch ran with (event time, UTC)", _TOP, x, "#0b63c5", marks)
    second = _TOP + _PANEL + _GAP
    _panel(points, "timestamp_ms", "batch time (processing time, UTC)", second, x, "#6b21a8", marks)
    axis = second + _PANEL
    ticks = sorted({first, last, *(first + (last - first) * k // 4 for k in range(1, 4))})
    for tick in ticks:
        marks.append(f'<text x="{x(tick):.1f}" y="{axis + 14}" class="t" text-anchor="middle">{tick}</text>')
    marks.append(f'<text x="{(_LEFT + _WIDTH) / 2:.0f}" y="{axis + 30}" class="t" text-anchor="middle">batch id</text>')
    for restart in chart["restarts"]:
        px = x(restart["batch_id"])
        marks.append(f'<line x1="{px:.1f}" y1="{_TOP}" x2="{px:.1f}" y2="{axis}" class="restart">'
                     f'<title>run {restart["run"]} ({_esc(restart["run_tag"] or restart["run_id"])}) starts at batch '
                     f'{restart["batch_id"]}</title></line>')
        if len(chart["restarts"]) <= 40:
            marks.append(f'<text x="{px + 3:.1f}" y="{_TOP + 12}" class="t">run {restart["run"]}</text>')
    if in_flight_batch is not None and first <= in_flight_batch <= last:
        marks.append(f'<text x="{x(in_flight_batch):.1f}" y="{axis - 6}" class="t" text-anchor="end" '
                     f'fill="#f97316">batch {in_flight_batch} in flight</text>')
    marks.append("</svg>")
    return "".join(marks)


_OPERATOR_COLORS = ("#0b63c5", "#c2410c", "#15803d", "#7c3aed", "#be123c", "#0f766e")


def state_chart_svg(state_store: dict[str, Any] | None, chart: dict[str, Any]) -> str:
    """Inline SVG: the rows each stateful operator holds after each batch, over the batch ids of
    the watermark chart (the same x axis: its first and last batch drawn), one step line per
    operator (a dashed one for an operator no watermark bounds), a legend; "" without operators.

    :param state_store: ``checkpoint_detail(...)["state_store"]`` (operators with ``series``).
    :param chart: ``checkpoint_detail(...)["chart"]``.
    """
    operators = [op for op in (state_store or {}).get("operators", ()) if op.get("series")]
    points = chart["points"]
    if not operators or not points:
        return ""
    first, last = points[0]["batch_id"], points[-1]["batch_id"]
    x = _scale(first, last if last > first else first + 1, _LEFT + 8, _WIDTH - _RIGHT - 8)
    top, legend = _TOP, 16 * len(operators)
    height = top + _PANEL + 40 + legend
    bottom = top + _PANEL
    values = [v for op in operators for v in op["series"]["rows"] if v is not None]
    marks = [f'<svg xmlns="http://www.w3.org/2000/svg" id="state-chart" width="{_WIDTH}" height="{height}" '
             f'viewBox="0 0 {_WIDTH} {height}" role="img" aria-label="rows held per stateful operator over batch ids">',
             "<style>.t{font:11px system-ui,sans-serif;fill:#3e4c59}.frame{fill:#fbfcfd;stroke:#cbd2d9}</style>",
             f'<text x="{_LEFT}" y="{top - 6}" class="t">rows held after the batch (state store)</text>',
             f'<rect x="{_LEFT}" y="{top}" width="{_WIDTH - _LEFT - _RIGHT}" height="{_PANEL}" class="frame"/>']
    hi = max(values, default=0)
    y = _scale(0, hi if hi > 0 else 1, bottom - 8, top + 8)
    for value in sorted({0, hi, hi // 2}):
        marks.append(f'<text x="{_LEFT - 6}" y="{y(value) + 4:.1f}" class="t" text-anchor="end">{value:,}</text>')
    if not values:
        marks.append(f'<text x="{_LEFT + 10}" y="{top + 20}" class="t">no rows known for these batches</text>')
    for index, op in enumerate(operators):
        color = _OPERATOR_COLORS[index % len(_OPERATOR_COLORS)]
        known = [(b, v) for b, v in zip(op["series"]["batch_ids"], op["series"]["rows"]) if v is not None]
        path, previous = [], None
        for n, (batch_id, value) in enumerate(known):
            px, py = x(batch_id), y(value)
            if n:
                path.append(f"L{px:.1f},{previous:.1f}")
            path.append(f"{'M' if not n else 'L'}{px:.1f},{py:.1f}")
            previous = py
        dash = ' stroke-dasharray="6 3"' if op["bounded_by_watermark"] is False else ""
        if path:
            marks.append(f'<path d="{" ".join(path)}" fill="none" stroke="{color}" stroke-width="1.6"{dash}>'
                         f'<title>operator {op["operator_id"]} ({_esc(op["name"] or "?")})</title></path>')
        if len(known) <= 120:
            marks.extend(f'<circle cx="{x(b):.1f}" cy="{y(v):.1f}" r="2.2" fill="{color}"><title>batch {b}: {v} rows'
                         f'</title></circle>' for b, v in known)
        ly = bottom + 40 + 16 * index
        bound = {True: "bounded by the watermark", False: "NOT bounded: no watermark evicts it", None: "bound unknown"}
        marks.append(f'<line x1="{_LEFT}" y1="{ly - 4}" x2="{_LEFT + 24}" y2="{ly - 4}" stroke="{color}" '
                     f'stroke-width="2"{dash}/><text x="{_LEFT + 30}" y="{ly}" class="t">operator {op["operator_id"]} '
                     f'{_esc(op["name"] or "?")}: {bound[op["bounded_by_watermark"]]}</text>')
    ticks = sorted({first, last, *(first + (last - first) * k // 4 for k in range(1, 4))})
    for tick in ticks:
        marks.append(f'<text x="{x(tick):.1f}" y="{bottom + 14}" class="t" text-anchor="middle">{tick}</text>')
    marks.append(f'<text x="{(_LEFT + _WIDTH) / 2:.0f}" y="{bottom + 28}" class="t" text-anchor="middle">batch id</text>')
    marks.append("</svg>")
    return "".join(marks)
