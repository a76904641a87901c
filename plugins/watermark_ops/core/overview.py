"""What the watermark pages show: one row per watched checkpoint, and one checkpoint in depth.

:func:`overview_row` answers at a glance (query id, head batch, watermark, lag, stall state, the
audit's status and findings, the newest batch's time); :func:`sort_overview` puts problems
first. :func:`checkpoint_detail` adds the chart's series (watermark and batch time over batch
ids, the restart boundaries of the runs, the in-flight batch, the batches whose watermark went
backwards), per run the rows the late-row ledger found late and the drop rate they make (when its
sink or the launcher's Spark replay is there) beside Spark's own count (late partial aggregates),
the audit's findings with the file each names, and the delay-threshold advice on the job's own
event-time field (the late rule's: from the Spark replay of the job's own parsing, else the landing
folders' JSON lines). Both read only (the audit runs without
memory: nothing is remembered, nothing is written) and return JSON-ready dicts, the same ones the
web face serves as JSON and renders as HTML.

Nothing raises for a checkpoint that cannot be read: the problem is in the result (``error``
for a row, ``problems`` for the detail), so one bad checkpoint never hides the others.

All instants are epoch milliseconds UTC (``*_ms``) with ISO-8601 UTC text beside them.
Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from watermark_ops.core.audit import audit_checkpoint
from watermark_ops.core.progress import progress_log_path
from watermark_ops.core.rules import ERROR, INFO, WARNING
from watermark_ops.core.snapshot import read_snapshot
from watermark_ops.core.status import CheckpointStatus
from watermark_ops.core.thresholds import Thresholds
from watermark_ops.core.times import iso_utc, now_ms

__all__ = ["DEFAULT_CHART_LIMIT", "DEFAULT_PAGE_SIZE", "DEFAULT_RUNS_LIMIT", "MAX_PAGE_SIZE", "checkpoint_detail",
           "count_states", "empty_row", "overview_row", "page_of", "severity", "sort_overview", "state_key",
           "with_late_rows", "with_state_column"]

#: The newest batches the chart and the batch table show (older ones are counted, not drawn).
DEFAULT_CHART_LIMIT = 500
#: The newest runs whose late-row ledger files are read (``watermark_ops.render.html.RUNS_LIMIT`` lists as many).
DEFAULT_RUNS_LIMIT = 100

#: Overview rows per page (the page and its JSON take ``page`` and ``page_size``), and the most.
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

#: Overview order: lower first. Unreadable or violated, then alarms, then warnings, then the rest.
_RANK_ERROR, _RANK_ALARM, _RANK_WARNING, _RANK_OK, _RANK_NOT_YET = 0, 1, 2, 3, 4


def judged(snapshot, thresholds: Thresholds, at_ms: int | None, now: int | None = None) -> tuple:
    """``(status, audit report, classification or None, why not)`` of one read (a
    :class:`watermark_ops.core.snapshot.Snapshot`): pure functions of it, nothing is read. The
    audit runs without memory; the classification uses the progress records of the batches read."""
    from watermark_ops.core.classification import StallInputError, classify_snapshot

    checkpoint = snapshot.checkpoint
    status = CheckpointStatus.of(checkpoint)
    report = audit_checkpoint(checkpoint, None, now_ms=now, progress=snapshot.progress)
    try:
        return status, report, classify_snapshot(snapshot, thresholds, at_ms), None
    except StallInputError as exc:
        return status, report, None, str(exc)


def _problem_text(problem) -> str:
    return f"{problem.kind}: {problem.file}: {problem.message}"


def overview_row(location: str, thresholds: Thresholds, *, name: str | None = None, missing_ok: bool = False,
                 at_ms: int | None = None, filesystem: Any = None,
                 storage_options: dict[str, Any] | None = None, state_thresholds: Any = None) -> dict[str, Any]:
    """One overview row: the checkpoint's head, stall state and audit, read now.

    Reads the whole offset and commit logs (the audit needs them) and the end of the progress log.

    :param location: the checkpoint folder (local path or fsspec URL).
    :param thresholds: the stall thresholds of this checkpoint.
    :param name: what to call it (a job name); default the location.
    :param missing_ok: a missing checkpoint is "not run yet" (ranked last), not an error.
    :param at_ms: the evaluation instant (epoch ms UTC), default now.
    :param filesystem: / storage_options: how to reach the checkpoint and its progress log, as for
        :func:`~watermark_ops.core.checkpoint.read_checkpoint`.
    :return: ``{"name", "location", "query_id", "head_batch_id", "in_flight_batch",
        "watermark_ms", "watermark", "lag_ms", "lag_basis" ("data_interval" | "wall_clock" | None:
        :mod:`watermark_ops.core.freshness`), "state", "alarm", "reason", "audit_status",
        "findings", "errors", "warnings" (the audit's), "rules": [rule names of the findings],
        "skew_warnings": [the classification's partition-skew warnings],
        "latest_batch_ms", "latest_batch_time", "error": str | None, "rank": int}``; ``rank``
        orders the overview (0 unreadable or violated, 1 alarm, 2 a warning (audit, partition
        skew, a state finding), lagging, or ``watermark_unknown`` (may be a stall the evidence cannot
        prove), 3 healthy (``no_watermark`` too), 4 not run yet); ``state_store``: the compact state
        column (:func:`with_state_column`, judged with ``state_thresholds``, default the defaults);
        ``refused_restart``: the restart the driver refused, standing until a run succeeds
        (:func:`with_refused_restart`).
    """
    row = empty_row(location, name)
    try:
        snapshot = read_snapshot(location, progress="whole", filesystem=filesystem, storage_options=storage_options)
    except Exception as exc:  # a broken filesystem must not take the page down: the row says it
        row.update(error=f"cannot read the checkpoint: {exc!r}", rank=_RANK_ERROR)
        return row
    row = _row_of(row, snapshot.checkpoint, thresholds, at_ms, missing_ok, judged(snapshot, thresholds, at_ms))
    summary = None
    if snapshot.checkpoint.head_batch_id is not None:
        from watermark_ops.core.state.summary import read_state_summary

        summary = read_state_summary(location, snapshot.checkpoint, snapshot.records, filesystem=filesystem,
                                     storage_options=storage_options)
    from watermark_ops.core.state.diagnosis import refused_restart

    row = with_state_column(row, summary, state_thresholds)
    return with_refused_restart(row, refused_restart(location, filesystem=filesystem, storage_options=storage_options))


def with_refused_restart(row: dict[str, Any], refused: dict[str, Any] | None) -> dict[str, Any]:
    """``row`` with ``refused_restart``: the standing refused restart
    (:func:`watermark_ops.core.state.diagnosis.refused_restart`, its ``line`` the diagnosis), None
    without one. The job is not running: the row ranks with the alarms (problems first)."""
    row["refused_restart"] = refused
    if refused is not None and row["rank"] > _RANK_ALARM:
        row["rank"] = _RANK_ALARM
    return row


def with_late_rows(row: dict[str, Any], late: dict[str, Any] | None) -> dict[str, Any]:
    """``row`` with ``late_rows_uncorrected``: the rows its newest run dropped as late and no
    correction holds (dropped for good with an allowed lateness, else every late row), from
    ``late`` (``{"run_tag", "known", "rows_late", "rows_late_recovered", "rows_uncorrected"}``,
    kept by the run pattern's ledger task); None when unknown. A row whose newest run has some
    ranks with the warnings (problems first)."""
    uncorrected = (late or {}).get("rows_uncorrected") if (late or {}).get("known") else None
    row["late_rows_uncorrected"] = uncorrected if isinstance(uncorrected, int) else None
    row["late_run"] = (late or {}).get("run_tag")
    if row["late_rows_uncorrected"] and row["rank"] > _RANK_WARNING and not row["error"]:
        row["rank"] = _RANK_WARNING
    return row


def with_state_column(row: dict[str, Any], summary: Any, thresholds: Any = None) -> dict[str, Any]:
    """``row`` with its compact state column, ``state_store``: ``{"has_state_folder", "rows" (now,
    every operator), "chain_length" (the longest), "bounded": bool | None, "codes": [the state
    findings' rules], "operators": n}`` of a state summary
    (:class:`~watermark_ops.core.state.summary.StateSummary`; None without one); a healthy row
    with a state finding ranks as a warning."""
    if summary is None:
        row["state_store"] = None
        return row
    from watermark_ops.core.thresholds import DEFAULT_STATE_THRESHOLDS

    document = summary.document(thresholds or DEFAULT_STATE_THRESHOLDS)
    codes = sorted({f["code"] for f in document["findings"]})
    row["state_store"] = {"has_state_folder": document["has_state_folder"], "rows": document["rows"],
                          "chain_length": document["chain_length"], "bounded": document["bounded"], "codes": codes,
                          "operators": len(document["operators"])}
    if codes and row["rank"] > _RANK_WARNING and not row["error"]:
        row["rank"] = _RANK_WARNING
    return row


def _row_of(row: dict[str, Any], checkpoint, thresholds: Thresholds, at_ms: int | None, missing_ok: bool,
            read: tuple) -> dict[str, Any]:
    """Fill ``row`` from a checkpoint already read and judged: ``read`` = (status, report,
    classification, why_not) (:func:`judged`)."""
    missing = [p for p in checkpoint.problems if p.kind == "checkpoint_missing"]
    if missing:
        row.update(error=(f"not run yet: {missing[0].message}" if missing_ok else missing[0].message),
                   rank=_RANK_NOT_YET if missing_ok else _RANK_ERROR)
        return row
    status, report, classification, why_not = read
    row.update(
        query_id=status.query_id, head_batch_id=status.head_batch_id, in_flight_batch=status.in_flight_batch,
        watermark_ms=status.watermark_ms, watermark=iso_utc(status.watermark_ms),
        latest_batch_ms=status.latest_batch_timestamp_ms, latest_batch_time=iso_utc(status.latest_batch_timestamp_ms),
        audit_status=report.status, findings=len(report.findings), errors=len(report.by_severity(ERROR)),
        warnings=len(report.by_severity(WARNING)), rules=sorted({f.rule for f in report.findings}),
    )
    if classification is not None:
        row.update(state=classification.state, alarm=classification.alarm, lag_ms=classification.lag_ms,
                   lag_basis=classification.lag_basis,
                   reason=(classification.reasons or (None,))[0], skew_warnings=list(classification.warnings))
    fatal = [p for p in status.problems if p.batch_id is None]
    if status.exit_code == 2 or fatal:
        row["error"] = "; ".join(_problem_text(p) for p in (fatal or status.problems)[:3]) or why_not
    elif classification is None:
        row["error"] = why_not
    if row["error"] or report.status != "ok":
        row["rank"] = _RANK_ERROR
    elif row["alarm"]:
        row["rank"] = _RANK_ALARM
    elif row["warnings"] or row["skew_warnings"] or row["state"] in ("lagging", "watermark_unknown"):
        row["rank"] = _RANK_WARNING
    return row


def empty_row(location: str, name: str | None = None) -> dict[str, Any]:
    """An overview row with nothing read yet (every field of :func:`overview_row`, rank healthy):
    a face fills ``error`` and ``rank`` for a checkpoint it will not or cannot read."""
    return {
        "name": name or location, "location": location, "query_id": None, "head_batch_id": None,
        "in_flight_batch": None, "watermark_ms": None, "watermark": None, "lag_ms": None, "lag_basis": None,
        "state": None,
        "alarm": False, "reason": None, "audit_status": None, "findings": 0, "errors": 0, "warnings": 0,
        "rules": [], "skew_warnings": [], "latest_batch_ms": None, "latest_batch_time": None, "error": None,
        "rank": _RANK_OK, "state_store": None, "refused_restart": None,
    }


def state_key(row: dict[str, Any]) -> str:
    """The one state an overview row counts under (the dashboard's counts, the overview's
    ``state`` filter): ``"not_run"`` for a checkpoint not written yet, ``"error"`` for one that
    cannot be read or judged, else its watermark state (``advancing``, ``idle``, ``stalled``, ...;
    ``"unknown"`` without one)."""
    if row.get("error"):
        return "not_run" if str(row["error"]).startswith("not run yet") else "error"
    return row.get("state") or "unknown"


def severity(row: dict[str, Any]) -> str | None:
    """How an overview row counts in :func:`page_of`'s totals, the one severity the views show it
    with: ``"problem"`` (ranked unreadable, violated or alarming), ``"warning"`` (ranked warning:
    a warning finding, a state finding such as ``state_never_compacted``, uncorrected late rows,
    lagging), else None."""
    rank = row.get("rank", _RANK_OK)
    return "problem" if rank <= _RANK_ALARM else "warning" if rank == _RANK_WARNING else None


def sort_overview(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with problems first (by ``rank``), then by name."""
    return sorted(rows, key=lambda row: (row["rank"], str(row["name"])))


def page_of(rows: Sequence[dict[str, Any]], page: int = 1,
            page_size: int = DEFAULT_PAGE_SIZE) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One page of sorted overview rows, and what the page tells about the whole.

    :param rows: the rows (already sorted, problems first, and filtered for the viewer).
    :param page: 1-based; past the last page, the last page.
    :param page_size: rows per page (at least 1).
    :return: ``(the page's rows, each with its :func:`severity` as "severity", {"total": rows,
        "page": the page shown, "page_size", "pages",
        "problems": rows ranked unreadable, violated or alarming, "warnings": rows ranked warning})``.
    """
    size = max(1, int(page_size))
    pages = max(1, -(-len(rows) // size))
    shown = min(max(1, int(page)), pages)
    severities = [severity(r) for r in rows]
    return [{**r, "severity": severities[(shown - 1) * size + i]}
            for i, r in enumerate(rows[(shown - 1) * size:shown * size])], {
        "total": len(rows), "page": shown, "page_size": size, "pages": pages,
        "problems": severities.count("problem"), "warnings": severities.count("warning"),
    }


def count_states(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    """``{state: rows}``: how many rows count under each :func:`state_key` (the dashboard's counts)."""
    counts: dict[str, int] = {}
    for row in rows:
        key = state_key(row)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _runs(progress, query_id: str | None) -> list[dict[str, Any]]:
    """Per run of this query (progress log): its batches and Spark's count (late partial aggregates)."""
    from watermark_ops.core.lateness import drops_per_run

    records = [r for r in progress.records if query_id is None or r.get("query_id") in (None, query_id)]
    return [run.to_dict() for run in drops_per_run(records)]


def _input_rows(records: Iterable[dict[str, Any]], query_id: str | None) -> dict[int, int]:
    """Batch id -> its input rows (``input_rows`` of its progress record; the newest record wins)."""
    out: dict[int, int] = {}
    for record in records:
        if record.get("executed", True) is False or record.get("batch_id") is None:
            continue
        if query_id is not None and record.get("query_id") not in (None, query_id):
            continue
        out[int(record["batch_id"])] = int(record.get("input_rows") or 0)
    return out


def _chart(batches: Sequence[Any], runs: list[dict[str, Any]], regressed: set[int], limit: int,
           input_rows: dict[int, int] | None = None) -> dict[str, Any]:
    """The chart's series: the newest ``limit`` batches with offsets, each with its input rows
    (progress log; None without a record) and late rows (the ledger's count for that batch; None
    when unknown, never 0)."""
    with_offsets = [b for b in batches if b.has_offsets]
    shown = with_offsets[-limit:] if limit > 0 else with_offsets
    starts: dict[int, dict[str, Any]] = {}
    late: dict[int, int] = {}
    for index, run in enumerate(runs):
        if run["batch_ids"]:
            starts[run["batch_ids"][0]] = {"run": index + 1, "run_tag": run["run_tag"], "run_id": run["run_id"]}
        late.update(run.pop("_late_by_batch", None) or {})
    points = []
    for batch in shown:
        start = starts.get(batch.batch_id)
        points.append({
            "batch_id": batch.batch_id, "watermark_ms": batch.watermark_ms, "timestamp_ms": batch.timestamp_ms,
            "next_watermark_ms": batch.next_watermark_ms, "committed": batch.committed,
            "regressed": batch.batch_id in regressed, "run_start": start,
            "input_rows": (input_rows or {}).get(batch.batch_id),
            # a batch that read no row has none late; else the ledger's count, None when unknown
            "rows_late": 0 if (input_rows or {}).get(batch.batch_id) == 0 else late.get(batch.batch_id),
        })
    first_shown = shown[0].batch_id if shown else None
    return {
        "total": len(with_offsets), "shown": len(shown), "limit": limit,
        "first_shown_batch_id": first_shown, "points": points,
        "restarts": [dict(start, batch_id=batch_id) for batch_id, start in sorted(starts.items())
                     if first_shown is not None and batch_id >= first_shown],
    }


def _ledger_rows(late_sink: str, runs: list[dict[str, Any]], limit: int, problems: list[str],
                 filesystem: Any = None, storage_options: dict[str, Any] | None = None) -> None:
    """Set each run's ``rows_late``: the rows of ``<late_sink>/batch=<N>.jsonl`` over its
    batch ids (the late-row ledger's sink, :func:`watermark_ops.core.ledger.write_late_rows`: one
    JSON object per line, one file per batch that read landed files), for the newest ``limit``
    runs only (the others keep None: nothing of theirs is read). None as well for a run none of
    whose batches has a file. A file that cannot be read, or a line that is not a JSON object, is
    a problem naming the file (its valid rows still count)."""
    import json

    from watermark_ops.core.checkpoint import filesystem_for, open_storage
    from watermark_ops.core.ledger.unknown import batches_text

    shown = runs[-limit:] if limit > 0 else runs
    try:
        fs = filesystem_for(late_sink, filesystem)
        storage, folder = open_storage(late_sink, filesystem=fs,
                                       storage_options=storage_options if "://" in str(late_sink) else None)
    except Exception as exc:  # noqa: BLE001 - a bad sink location is named, the page still renders
        problems.append(f"late-row sink {late_sink} cannot be opened: {exc!r}")
        return
    paths = {batch_id: f"{folder}/batch={batch_id}.jsonl" for run in shown for batch_id in run["batch_ids"]}
    content = storage.read(list(paths.values()), probed=paths.values())
    found = 0
    for run in shown:
        total = None
        late: list[dict[str, Any]] = []
        for batch_id in run["batch_ids"]:
            raw = content(paths[batch_id])
            if isinstance(raw, FileNotFoundError):
                continue
            file = storage.display(paths[batch_id])
            if isinstance(raw, Exception):
                problems.append(f"late-row sink file {file} cannot be read: {raw!r}")
                continue
            found += 1
            rows = bad = 0
            for line in raw.splitlines():
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    row = None
                if isinstance(row, dict):
                    rows += 1
                    late.append(row)
                else:
                    bad += 1
            if bad:
                problems.append(f"late-row sink file {file}: {bad} line(s) are not a JSON object (not counted)")
            run.setdefault("_late_by_batch", {})[batch_id] = rows
            total = (total or 0) + rows
        run["rows_late"] = total
        run["_late"] = late if total is not None else None
        if total is None:
            run["late_rows_unknown_reason"] = (f"no batch=<N>.jsonl in the late-row sink {late_sink} for "
                                               f"{batches_text(run['batch_ids'])}: the ledger did not replay them (or "
                                               "they read no landed file)" if run["batch_ids"] else
                                               f"the run executed no batch: nothing of it in the late-row sink {late_sink}")
    if paths and not found:
        problems.append(f"late-row sink {late_sink}: no batch=<N>.jsonl for the batches of the runs shown")


def checkpoint_detail(location: str, thresholds: Thresholds, *, name: str | None = None,
                      landings: Iterable[str] = (), at_ms: int | None = None,
                      chart_limit: int = DEFAULT_CHART_LIMIT, late_sink: str | None = None,
                      runs_limit: int = DEFAULT_RUNS_LIMIT, filesystem: Any = None,
                      storage_options: dict[str, Any] | None = None, state_thresholds: Any = None) -> dict[str, Any]:
    """Everything the checkpoint page shows, read now (the whole offset and commit logs, the
    progress log, the landing folders).

    :param location: the checkpoint folder (local path or fsspec URL).
    :param thresholds: its stall thresholds.
    :param landings: landing folders of its inputs, for the delay-threshold advice (may be empty).
    :param at_ms: the evaluation instant (epoch ms UTC), default now.
    :param chart_limit: the newest batches drawn and listed (0: all).
    :param late_sink: the folder the late-row ledger wrote this checkpoint's late rows to
        (``<output>_late``, :func:`watermark_ops.core.ledger.write_late_rows`), None when unknown:
        each run's ``rows_late`` is then the rows of its batches' ``batch=<N>.jsonl`` (None when
        unknown or without a file); without a sink, the launcher's Spark replay records
        (``<checkpoint>.replay.jsonl``) where they exist. ``drop_rate`` is ``rows_late / input_rows``
        (None without rows), beside Spark's ``late_partial_aggregates_spark``.
    :param runs_limit: the newest runs whose ledger files are read (the page lists as many).
    :param filesystem: / storage_options: how to reach the checkpoint, its progress log, and the
        sink and landing folders on the same filesystem, as for
        :func:`~watermark_ops.core.checkpoint.read_checkpoint`.
    :return: ``{"name", "location", "evaluated_at_ms", "evaluated_at", "row": overview row fields
        (see :func:`overview_row`), "status": CheckpointStatus.to_dict(), "classification":
        Classification.to_dict() | None, "audit": {"status", "findings": [{"rule", "severity",
        "batch_id", "file", "message"}]}, "chart": {"total", "shown", "limit",
        "first_shown_batch_id", "points": [{"batch_id", "watermark_ms", "timestamp_ms",
        "next_watermark_ms", "committed", "regressed", "run_start", "input_rows", "rows_late"}], "restarts": [{"batch_id",
        "run", "run_tag", "run_id"}]}, "runs": [RunDrops.to_dict(), with ``rows_late_recovered``,
        ``rows_late_dropped`` and ``corrections`` when the checkpoint has corrections], "late_sink": str | None,
        "corrections": [correction's public fields, in the order made
        (:func:`watermark_ops.core.ledger.recovered.public_correction`)],
        "advice": [LandedLateness summaries], "advice_why": [why an input has no advice, in the job's
        terms], "problems": [str], "state_store": the state summary with each operator's rows over the
        chart's batch ids, "preflight": the restart preflight, "diagnosis": the last refused restart's | None}``
        (:func:`watermark_ops.core.state.detail.state_detail`, judged with ``state_thresholds``,
        a :class:`~watermark_ops.core.thresholds.StateThresholds`, default the defaults).
    """
    at = now_ms() if at_ms is None else at_ms
    problems: list[str] = []
    snapshot = read_snapshot(location, progress="whole", filesystem=filesystem, storage_options=storage_options)
    checkpoint, progress = snapshot.checkpoint, snapshot.progress
    if snapshot.progress_error:
        problems.append(snapshot.progress_error)
    status, report, classification, why_not = judged(snapshot, thresholds, at_ms, now=at)
    if classification is None and why_not:
        problems.append(f"no stall classification: {why_not}")
    problems.extend(_problem_text(p) for p in checkpoint.problems)
    runs = _runs(progress, checkpoint.query_id) if progress is not None else []
    if progress is not None:
        problems.extend(progress.problems)
    if late_sink:
        _ledger_rows(late_sink, runs, runs_limit, problems, filesystem, storage_options)
    elif runs:
        _replayed_rows(location, checkpoint.query_id, runs, runs_limit, problems, filesystem, storage_options,
                       progress.records if progress is not None else ())
    for run in runs:  # rows, from the ledger: never Spark's count of late partial aggregates; else unknown, never 0
        if not run["batch_ids"]:  # a run that executed no batch has no late row: 0, known (as the XCom and lateness)
            run["rows_late"], run["_late"] = 0, []
        run["drop_rate"] = run["rows_late"] / run["input_rows"] if run["rows_late"] is not None and run["input_rows"] \
            else None
        run["late_rows_known"] = run["rows_late"] is not None
        if run["late_rows_known"]:
            run["late_rows_unknown_reason"] = None
    corrections = _corrections(location, runs, problems, filesystem, storage_options)
    regressed = {f.batch_id for f in report.findings if f.rule == "watermark_regressed" and f.batch_id is not None}
    advice_why: list[str] = []
    advice = _advice(location, list(landings), progress.records if progress is not None else [], advice_why,
                     filesystem, storage_options)
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    row = _row_of(empty_row(location, name), checkpoint, thresholds, at_ms, False,
                  (status, report, classification, why_not))
    chart = _chart(report.batches, runs, regressed, chart_limit,
                   _input_rows(progress.records if progress is not None else (), checkpoint.query_id))
    state = _state_part(location, checkpoint, progress, chart, state_thresholds, filesystem, storage_options)
    problems.extend(state.pop("problems"))
    return {
        "name": name or location,
        "location": location,
        "evaluated_at_ms": at,
        "evaluated_at": iso_utc(at),
        "row": row,
        "status": status.to_dict(),
        "state": classification.state if classification else None,
        "classification": classification.to_dict() if classification else None,
        "audit": {"status": report.status,
                  "findings": [f.to_dict() for f in sorted(report.findings, key=lambda f: order[f.severity])]},
        "chart": chart,
        "runs": runs,
        "late_sink": late_sink or None,
        "corrections": corrections,
        "progress_log": progress_log_path(checkpoint.location),
        "advice": advice,
        "advice_why": advice_why,
        "problems": problems,
        **state,
    }


def _corrections(location: str, runs: list[dict[str, Any]], problems: list[str], filesystem: Any,
                 storage_options: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The checkpoint's corrections (each run's newest write, in the order made, their public fields)
    and, with any, each run's late rows split into recovered and dropped for good
    (:mod:`watermark_ops.core.ledger.recovered`); the rows the runs carried (``_late``) are dropped."""
    from watermark_ops.core.ledger.corrections import read_corrections
    from watermark_ops.core.ledger.recovered import public_correction, recovery

    try:
        corrections, bad = read_corrections(location, filesystem=filesystem, storage_options=storage_options)
    except OSError as exc:
        corrections, bad = [], [f"the corrections log of {location} cannot be read: {exc!r}"]
    problems.extend(bad)
    for run in runs:
        late = run.pop("_late", None)
        if corrections:
            run.update(recovery(late if run["rows_late"] is not None else None, corrections, run.get("run_tag")))
    return [public_correction(c) for c in corrections]


def _state_part(location: str, checkpoint, progress, chart: dict[str, Any], thresholds: Any, filesystem: Any,
                storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """:func:`watermark_ops.core.state.detail.state_detail` over the batch ids the chart shows."""
    from watermark_ops.core.state.detail import state_detail
    from watermark_ops.core.thresholds import DEFAULT_STATE_THRESHOLDS

    points = chart["points"]
    query_id = checkpoint.query_id
    records = [r for r in (progress.records if progress is not None else ())
               if query_id is None or r.get("query_id") in (None, query_id)]
    return state_detail(location, checkpoint, records,
                        batch_ids=(points[0]["batch_id"], points[-1]["batch_id"]) if points else None,
                        thresholds=thresholds or DEFAULT_STATE_THRESHOLDS, filesystem=filesystem,
                        storage_options=storage_options)


def _advice(location: str, landings: list[str], records: list[dict[str, Any]], why_not: list[str],
            filesystem: Any = None, storage_options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The observed lateness and delay-threshold advice of the checkpoint's inputs on the job's own
    event-time field (:func:`watermark_ops.core.lateness.lateness_inputs`); why not, in ``why_not``."""
    from watermark_ops.core.lateness import LatenessError, lateness_inputs

    try:
        inputs, why = lateness_inputs(location, landings, records, filesystem=filesystem,
                                      storage_options=storage_options)
    except (LatenessError, OSError) as exc:
        why_not.append(f"no delay-threshold advice: {exc}")
        return []
    why_not.extend(why)
    return [item.summary() for item in inputs]


def _replayed_rows(location: str, query_id: str | None, runs: list[dict[str, Any]], limit: int, problems: list[str],
                   filesystem: Any = None, storage_options: dict[str, Any] | None = None,
                   rules: Sequence[dict[str, Any]] = ()) -> None:
    """Set the newest ``limit`` runs' ``rows_late`` from the launcher's Spark replay records
    (``<checkpoint>.replay.jsonl``: the job's own parsing replayed after each run), summed over the
    run's batches when every one has an exact record; else left None (unknown, never a part of the
    run's rows), with ``late_rows_unknown_reason`` naming the batches and why (``rules``: the
    progress records, whose newest late rule says whether the job declared a pre-watermark function)."""
    from watermark_ops.core.lateness import newest_late_rule
    from watermark_ops.core.ledger.replayed import read_replay_log, replay_log_path
    from watermark_ops.core.ledger.unknown import batches_text

    try:
        records, bad = read_replay_log(location, query_id, filesystem=filesystem, storage_options=storage_options)
    except OSError as exc:
        problems.append(f"the Spark replay log of {location} cannot be read: {exc!r}")
        return
    problems.extend(bad)
    rule = newest_late_rule(rules) or {}
    undeclared = any(isinstance(i, dict) and i.get("parsing") == "job" and not i.get("pre_watermark")
                     for i in rule.get("inputs") or [])
    for run in (runs[-limit:] if limit > 0 else runs):
        missing = [b for b in run["batch_ids"] if b not in records]
        inexact = [b for b in run["batch_ids"] if b in records and records[b].get("problems")]
        if not records and undeclared:  # only the launcher's batch twin could replay it: say what to declare
            run["late_rows_unknown_reason"] = (
                "the job parses its own rows and declares no pre-watermark function, and no Spark replay records "
                f"exist ({replay_log_path(location)}; the launcher's batch twin says in its log why it made none): "
                "declare pre_watermark=\"module:function\" on the run pattern")
        elif not records:  # the same words for every run: the page says them once
            run["late_rows_unknown_reason"] = (f"no late-row sink is known for this checkpoint and it has no Spark "
                                               f"replay records ({replay_log_path(location)})")
        elif not missing and not inexact:  # every batch of the run replayed exactly: the run's figure
            run["_late_by_batch"] = {b: len(records[b]["late_rows"]) for b in run["batch_ids"]}
            run["rows_late"] = sum(run["_late_by_batch"].values())
            run["_late"] = [row for b in run["batch_ids"] for row in records[b]["late_rows"]]
        elif missing:
            run["late_rows_unknown_reason"] = (f"{batches_text(missing)}: no Spark replay record in "
                                               f"{replay_log_path(location)} and no late-row sink is known for this "
                                               "checkpoint")
        else:
            run["late_rows_unknown_reason"] = (f"the Spark replay of {batches_text(inexact)} was not exact: "
                                               f"{'; '.join(records[inexact[0]]['problems'])}")
