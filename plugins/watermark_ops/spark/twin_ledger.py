"""The late-row ledger of a run from the job's batch twin: every batch of the run in one Spark job.

The twin (:mod:`watermark_ops.spark.twin`) gives the frame that enters ``withWatermark`` computed in
batch over all the files of the run. Each of its rows keeps its file (``_metadata.file_path``), and
the checkpoint's file source log says which batch read which file
(:func:`watermark_ops.core.ledger.plan.plan_batches`), so one Spark job tags every row with its batch
id and that batch's late watermark (a literal map from the file) and brings back the event time of
every row entering the watermark, and the content of the late ones, together with the windows to
correct (one union, one action; the reject queries' rows in a second job when some rows did not enter
the watermark, below). The batch's own rule and
watermark then judge each row in Python (:func:`watermark_ops.core.ledger.plan.tally`, the rule of
the Python replay and of the per-batch Spark replay), and one record per batch is appended to the
replay log (:mod:`watermark_ops.core.ledger.replayed`: the faces read it as they read the
pre-watermark replay's).

The rows the job sets aside: its other queries over the same files that carry a reason column (the
declared ``reason_column``, else one named ``reason``, ``reject_reason``, ``rejection_reason``,
``quarantine_reason`` or ``error``) are its reject queries; so is another query whose rows come from
the run's files (they keep ``_metadata.file_path``) without a reason column, named by its
``queryName`` (else its sink folder's name), when the evidence says its rows are ones the watermarked
frame leaves out: for every batch, the rows entering the watermark plus that query's rows are at
most the rows the batch read (``numInputRows``; per file, the raw rows, for a batch without a
progress record). A copy of every row (a raw archive) fails that test and is not a reject query.
Their rows come back one by one (no
aggregation, so no shuffle: a job sets few rows aside) and are counted per batch and reason in
Python, with one example each (its file and the row as the job keeps it); they are asked in a second
Spark job, and only when a batch's rows entering the watermark are fewer than the rows it read. A
batch's rows read are Spark's own ``numInputRows`` for it; the rows that neither enter the watermark nor reach a reject
query are ``filtered_by_job``. The twin reads the very files the checkpoint's source log names;
one that changed or went away since the stream listed it (its modification time against the log's
``timestamp``) is a problem of the record, and so are more rows made than read (the ledger then
calls the batch not replayed), never a silent number. Only a batch without a progress record has
its raw rows counted by the twin (one aggregation per file).

A row's line in its file cannot travel through the job's own projections (they drop every column
the twin could add; only the hidden file column survives them). For the rows shown (late rows and
one example per reason), a local JSON-lines or CSV file is read in Python and the line is the one
line whose landed values hold most of the row's values (:func:`locate_lines`); a row that matches
no line, or several equally, has no line (None), never a guessed one.

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from typing import Any

from watermark_ops.core.ledger.plan import BatchPlan, ReplayRow, tally
from watermark_ops.core.ledger.replayed import FILTERED_BY_JOB, replay_record
from watermark_ops.spark.twin import CannotTwin, Twin, TwinQuery

log = logging.getLogger("watermark_ops.spark")

__all__ = ["REASON_COLUMNS", "file_key", "late_expression", "locate_lines", "twin_records"]

#: Column names that make another query of the job a reject query (after the declared reason column).
REASON_COLUMNS = ("reason", "reject_reason", "rejection_reason", "quarantine_reason", "error")
_KEY, _EVENT_US, _EVENT, _REASON, _ROWS, _KIND = (
    "_wo_file", "_wo_event_us", "_wo_event", "_wo_reason", "_wo_rows", "_wo_kind")
_SCHEME = re.compile(r"^file:/+")


def file_key(uri: str) -> str:
    """One spelling of a file's URI for matching the source log with ``_metadata.file_path``
    (``file:///a`` and ``file:/a`` → ``/a``; other URIs as they are, both sides URL-encoded alike)."""
    return _SCHEME.sub("/", str(uri))


def _texts(value: Any) -> set[str]:
    """The spellings a landed value may have for a row's value: its text, and a number's float text."""
    if value is None or isinstance(value, (dict, list)):
        return set()
    text = str(value).strip()
    found = {text} if text else set()
    try:
        found.add(repr(float(text)))
    except ValueError:
        pass
    return found


def locate_lines(uri: str, fmt: str, options: dict[str, Any], events: list[dict[str, Any]]) -> list[int | None]:
    """The 1-based line of each row in a local JSON-lines or CSV file, or its position in a local
    Parquet file, by content (module docstring).

    :param events: rows as the job made them (``{column: value}``).
    :return: one line per event, None where no line or several lines match best, or the file is not
        a local file of those formats.
    """
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(uri)
    if parts.scheme not in ("", "file") or fmt not in ("json", "csv", "parquet") or not events:
        return [None] * len(events)
    path = unquote(parts.path) if parts.scheme else uri
    index: dict[str, set[int]] = {}
    try:
        if fmt == "parquet":  # a row's position in the file, 1-based (LateRow.line of a columnar file)
            import pyarrow.parquet as pq

            for number, landed in enumerate(pq.read_table(path).to_pylist(), start=1):
                for value in landed.values():
                    for spelling in _texts(value):
                        index.setdefault(spelling, set()).add(number)
            return _best_lines(index, events)
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            if fmt == "json":
                for number, text in enumerate(handle, start=1):
                    try:
                        landed = json.loads(text)
                    except ValueError:
                        landed = {"_": text.strip()}
                    for value in (landed.values() if isinstance(landed, dict) else [landed]):
                        for spelling in _texts(value):
                            index.setdefault(spelling, set()).add(number)
            else:
                import csv

                header = str(options.get("header", "false")).lower() == "true"
                for number, fields in enumerate(csv.reader(handle), start=1):
                    if header and number == 1:
                        continue
                    for value in fields:
                        for spelling in _texts(value):
                            index.setdefault(spelling, set()).add(number)
    except (OSError, ImportError, ValueError):  # unreadable, no pyarrow, not Parquet after all: no line
        return [None] * len(events)
    return _best_lines(index, events)


def _best_lines(index: dict[str, set[int]], events: list[dict[str, Any]]) -> list[int | None]:
    """Per event, the one line whose values hold most of its values (None: none, or a tie)."""
    lines: list[int | None] = []
    for event in events:
        hits: dict[int, int] = {}
        for value in event.values():
            matched: set[int] = set()
            for spelling in _texts(value):
                matched |= index.get(spelling, set())
            for number in matched:
                hits[number] = hits.get(number, 0) + 1
        best = max(hits.values(), default=0)
        top = [number for number, count in hits.items() if count == best]
        lines.append(top[0] if best and len(top) == 1 else None)
    return lines


def late_expression(rule: Any, event_us: Any, late_us: Any) -> Any:
    """Spark's late test of a row (``rule``: :class:`watermark_ops.core.ledger.rule.LateRule`) as a
    column: dropped from at least one window. A time window's earliest end above the event time
    ``t`` (epoch µs) is ``s + size`` with ``s = (t - size) - pmod(t - size - offset, slide) + slide``,
    the first window start after ``t - size``; a session row's one-row session ends at ``t + gap``."""
    from pyspark.sql import functions as F

    if rule.kind == "window_end":
        size, slide = F.lit(rule.window_ms * 1000), F.lit((rule.slide_ms or rule.window_ms) * 1000)
        before = event_us - size
        return (before - F.pmod(before - F.lit(rule.offset_ms * 1000), slide) + slide + size) <= late_us
    if rule.kind == "session":
        return (event_us + F.lit(rule.gap_ms * 1000)) <= late_us
    return event_us <= late_us


def _key_column():
    from pyspark.sql import functions as F

    return F.regexp_replace(F.col("_metadata.file_path"), "^file:/+", "/")


def _with_key(frame: Any, what: str) -> Any:
    """``frame`` with its rows' file key; :class:`CannotTwin` when the rows lost their file."""
    try:
        keyed = frame.withColumn(_KEY, _key_column())
        keyed.columns  # noqa: B018 - analysis happens here (over Connect, on the schema request)
        return keyed
    except Exception as exc:  # noqa: BLE001 - Spark's analysis error, summarised
        raise CannotTwin(f"{what} do not keep the file they came from (Spark's hidden _metadata.file_path: the job "
                         f"joins, unions or aggregates before it): {str(exc).splitlines()[0][:200]}; declare "
                         "pre_watermark instead") from exc


def _query_label(query: TwinQuery) -> str:
    """A query's name as a reason: its ``queryName``, else its sink folder's last part, else ``rejected``."""
    path = str(query.path or "").rstrip("/")
    return query.name or (path.rsplit("/", 1)[-1] if path else "") or "rejected"


def _reject_queries(twin: Twin, main: TwinQuery, reason_column: str | None) -> list[tuple[TwinQuery, str | None]]:
    """The job's other queries that may hold the rows it sets aside: ``(query, its reason column)``,
    the column None for a query without one (a reject query only when :func:`_unproven` keeps it)."""
    found = []
    for query in twin.queries:
        if query is main:
            continue
        columns = list(query.frame.columns)
        found.append((query, next((c for c in ((reason_column,) if reason_column else ()) + REASON_COLUMNS
                                   if c in columns), None)))
    return found


def _unproven(rejects: dict[tuple[str, str], tuple[int, str]], unnamed: set[str], plans: list[BatchPlan],
              keyed: dict[str, tuple[BatchPlan, int, str]], rows: list[Any], read: dict[str, int]) -> set[str]:
    """The labels in ``unnamed`` (queries without a reason column) whose rows are not proven rows the
    watermarked frame leaves out: in some batch, the rows entering the watermark plus theirs exceed
    the rows the batch read (Spark's ``numInputRows``; for a batch without it, per file, ``read``)."""
    entering: dict[str, int] = {}
    for row in rows:
        entering[row[_KEY]] = entering.get(row[_KEY], 0) + 1
    out = set()
    for label in unnamed:
        theirs = {key: n for (key, reason), (n, _) in rejects.items() if reason == label}
        for plan in plans:
            keys = [file_key(uri) for _, uri in plan.files]
            total = plan.spark_rows()["spark_input_rows"]
            mine = sum(entering.get(k, 0) + theirs.get(k, 0) for k in keys)
            if (total is not None and mine > total) or (total is None and any(
                    entering.get(k, 0) + theirs.get(k, 0) > read.get(k, 0) for k in keys)):
                log.info("the job's query %s holds rows that also enter the watermark (batch %d): not a reject "
                         "query", label, plan.batch_id)
                out.add(label)
                break
    return out


def twin_records(spark: Any, plans: list[BatchPlan], twin: Twin, main: TwinQuery, watermark_column: str,
                 reason_column: str | None = None, *, query_id: str | None = None, run_tag: str | None = None,
                 source: Any = None, extra_parts: list[Any] | None = None) -> tuple[list[dict[str, Any]], list[Any]]:
    """The replay-log records of ``plans`` (the run's replayable batches, ascending) from the twin.

    :param twin: what the twin run captured. :param main: its query on the declared checkpoint.
    :param watermark_column: the column ``withWatermark`` is called on (a timestamp).
    :param reason_column: a column naming why a row is set aside (in the frame entering the
        watermark, or in a reject query), or None.
    :param source: the stream's reader settings (format, options), for the lines of the rows shown.
    :param extra_parts: more frames of the same row shape (``_wo_kind`` other than ``e``, ``r``, ``j``)
        to bring back in the same Spark job (the corrections' windows,
        :func:`watermark_ops.spark.corrections.window_parts`).
    :return: ``(one record per plan, the rows of extra_parts)``: the records are
        :func:`watermark_ops.core.ledger.replayed.replay_record`'s, with ``"method": "twin"``.
    :raises CannotTwin: no ``withWatermark`` on ``watermark_column``, or its rows lost their file.
    """
    from pyspark.sql import functions as F

    entering = next((frame for frame, column, _ in twin.watermarks if column == watermark_column), None)
    if entering is None:
        raise CannotTwin(f"the job's batch twin called no withWatermark on {watermark_column!r} (calls: "
                         f"{[c for _, c, _ in twin.watermarks]}); declare pre_watermark instead")
    rules = {(p.rule.kind, p.rule.window_ms, p.rule.slide_ms, p.rule.offset_ms, p.rule.gap_ms) for p in plans}
    if len(rules) != 1:
        raise CannotTwin(f"the run's batches were recorded with {len(rules)} late rules: expected one per run")
    rule = plans[0].rule
    keyed: dict[str, tuple[BatchPlan, int, str]] = {}
    for plan in plans:
        for order, (_, uri) in enumerate(plan.files):
            keyed[file_key(uri)] = (plan, order, uri)
    # The run's files as literals (Spark folds the map into one literal and the list into an InSet):
    # no broadcast of a small table, which is a Spark job of its own per use.
    table = sorted(keyed)
    late_us = F.element_at(F.create_map(*[F.lit(x) for k in table for x in (k, keyed[k][0].late_watermark_ms * 1000)]),
                           F.col(_KEY))
    frame = _with_key(entering, "the rows entering withWatermark")
    if watermark_column not in frame.columns:
        raise CannotTwin(f"the rows entering withWatermark have no column {watermark_column!r}")
    own_reason = reason_column if reason_column and reason_column in entering.columns else None
    shown = [c for c in entering.columns if c != _KEY]
    event_us = F.unix_micros(F.col(f"`{watermark_column}`"))
    late = late_expression(rule, event_us, late_us)
    reason = F.col(f"`{own_reason}`").cast("string") if own_reason else F.lit(None).cast("string")
    joined = frame.where(F.col(_KEY).isin(table))
    wanted = reason.isNotNull() | late
    parts = [joined.select(F.lit("e").alias(_KIND), F.col(_KEY), reason.alias(_REASON), event_us.alias(_EVENT_US),
                           F.when(wanted, F.to_json(F.struct(*[F.col(f"`{c}`") for c in shown]))).alias(_EVENT),
                           F.lit(1).cast("long").alias(_ROWS))]
    parts += list(extra_parts or [])
    unknown_read = any(plan.spark_rows()["spark_input_rows"] is None for plan in plans)
    if unknown_read:
        parts += _raw_counts(twin, table) + _set_aside(twin, main, reason_column, table)
    collected = _collect(parts)  # one Spark job for the run
    rows = [r for r in collected if r[_KIND] == "e"]
    if not unknown_read and _fewer_than_read(plans, keyed, rows):  # who set the other rows aside: a second job
        collected += _collect(_set_aside(twin, main, reason_column, table))
    unnamed = {_query_label(q) for q, column in _reject_queries(twin, main, reason_column) if column is None}
    read: dict[str, int] = {}
    rejects: dict[tuple[str, str], tuple[int, str]] = {}
    for row in collected:
        if row[_KIND] == "r":
            read[row[_KEY]] = read.get(row[_KEY], 0) + row[_ROWS]
        elif row[_KIND] == "j":
            before = rejects.get((row[_KEY], row[_REASON]))
            rejects[(row[_KEY], row[_REASON])] = (row[_ROWS] + (before[0] if before else 0),
                                                  before[1] if before else row[_EVENT])
    dropped = _unproven(rejects, unnamed, plans, keyed, rows, read) if unnamed else set()
    rejects = {k: v for k, v in rejects.items() if k[1] not in dropped}
    extra = [r for r in collected if r[_KIND] not in ("e", "r", "j")]
    changed = changed_files(plans)
    return [_record(plan, keyed, rows, read, rejects, query_id, run_tag, source, changed) for plan in plans], extra


#: Session settings while the twin's union is collected (restored after): the union has at most one
#: shuffle (the windows to correct, partial aggregates only), too little for adaptive execution to
#: adapt; with it on, Spark runs the shuffle's map stage as a job of its own, then optimises and
#: plans again for the rest (0.2-0.4 s of a driver that lives one run). Off, both stages are planned
#: once and the other parts' scans run beside the map stage; the shuffle keeps a few partitions.
BATCH_SETTINGS = {"spark.sql.adaptive.enabled": "false"}
MAX_SHUFFLE_PARTITIONS = 8


def _collect(parts: list[Any]) -> list[Any]:
    """The rows of the frames' union, in one Spark job (none for no frame), under :data:`BATCH_SETTINGS`."""
    if not parts:
        return []
    conf = parts[0].sparkSession.conf
    settings = dict(BATCH_SETTINGS)
    partitions = conf.get("spark.sql.shuffle.partitions")
    if partitions and partitions.isdigit() and int(partitions) > MAX_SHUFFLE_PARTITIONS:
        settings["spark.sql.shuffle.partitions"] = str(MAX_SHUFFLE_PARTITIONS)
    before = {key: conf.get(key) for key in settings}
    for key, value in settings.items():
        conf.set(key, value)
    try:
        return functools.reduce(lambda a, b: a.unionByName(b), parts).collect()
    finally:
        for key, value in before.items():
            conf.set(key, value)


def _fewer_than_read(plans: list[BatchPlan], keyed: dict[str, tuple[BatchPlan, int, str]], rows: list[Any]) -> bool:
    """True when a batch's rows entering the watermark are fewer than the rows the stream read
    (``numInputRows``): only then can a reject query hold rows of the run."""
    made: dict[int, int] = {}
    for row in rows:
        batch = keyed[row[_KEY]][0].batch_id
        made[batch] = made.get(batch, 0) + 1
    return any(made.get(plan.batch_id, 0) < (plan.spark_rows()["spark_input_rows"] or 0) for plan in plans)


def _set_aside(twin: Twin, main: TwinQuery, reason_column: str | None, table: list[str]) -> list[Any]:
    """The rows of the job's reject queries, one by one (kind ``j``): file key, reason, the row as JSON."""
    from pyspark.sql import functions as F

    parts = []
    for query, column in _reject_queries(twin, main, reason_column):
        try:
            frame = _with_key(query.frame, f"the rows of the job's query {query.name or query.path}")
        except CannotTwin as exc:
            if column is not None:  # without a reason column: a query of other rows (an aggregation), not rejects
                log.warning("%s: its rows are not counted as set aside", exc)
            continue
        shown = [c for c in query.frame.columns if c != _KEY]
        label = F.lit(_query_label(query) if column is None else (query.name or "rejected"))
        parts.append(frame.where(F.col(_KEY).isin(table)).select(
            F.lit("j").alias(_KIND), F.col(_KEY),
            (label if column is None else F.coalesce(F.col(f"`{column}`").cast("string"), label)).alias(_REASON),
            F.lit(None).cast("long").alias(_EVENT_US),
            F.to_json(F.struct(*[F.col(f"`{c}`") for c in shown])).alias(_EVENT),
            F.lit(1).cast("long").alias(_ROWS)))
    return parts


def _raw_counts(twin: Twin, table: list[str]) -> list[Any]:
    """The raw rows per file key of the twin's sources (kind ``r``), for batches without a progress
    record (no ``numInputRows``)."""
    from pyspark.sql import functions as F

    none = F.lit(None).cast("string")
    inputs = [_with_key(source.frame, "the raw rows").where(F.col(_KEY).isin(table)).select(F.col(_KEY))
              for source in twin.sources]
    if not inputs:
        return []
    return [functools.reduce(lambda a, b: a.unionByName(b), inputs).groupBy(_KEY).agg(F.count(F.lit(1)).alias(_ROWS))
            .select(F.lit("r").alias(_KIND), _KEY, none.alias(_REASON), F.lit(None).cast("long").alias(_EVENT_US),
                    none.alias(_EVENT), _ROWS)]


def changed_files(plans: list[BatchPlan]) -> dict[str, str]:
    """``{file URI: what changed}`` for the plans' files that went away or whose modification time
    is no longer the one the file source listed (``listed_ms``): the twin would not read what the
    stream read. A remote file whose store gives no modification time is not judged."""
    import os

    from watermark_ops.core.storage import uri_location

    found: dict[str, str] = {}
    remote: list[tuple[str, int]] = []
    for plan in plans:
        for uri, listed in plan.listed_ms.items():
            location = uri_location(uri)
            if "://" in location:
                remote.append((uri, listed))
                continue
            try:
                now = os.stat(location).st_mtime_ns // 1_000_000
            except OSError:
                found[uri] = "the file is gone since the stream read it"
                continue
            if now != listed:
                found[uri] = _modified(now, listed)
    if remote:
        found.update(_changed_remote(remote))
    return found


def _modified(now: int, listed: int) -> str:
    return f"the file was modified since the stream listed it (modification time {now}, listed {listed})"


def _changed_remote(files: list[tuple[str, int]]) -> dict[str, str]:
    """:func:`changed_files` for object-store URIs, asked concurrently (fsspec ``info``:
    ``LastModified`` on S3, ``last_modified`` on Azure, ``mtime``), compared to the second: a HEAD
    gives the time to the second where a listing (what the file source recorded) may give ms."""
    from concurrent.futures import ThreadPoolExecutor

    import fsspec

    from watermark_ops.core.storage import uri_location

    def judged(item: tuple[str, int]) -> str | None:
        uri, listed = item
        try:
            fs, path = fsspec.core.url_to_fs(uri_location(uri))
            info = fs.info(path)
        except FileNotFoundError:
            return "the file is gone since the stream read it"
        except Exception:  # noqa: BLE001 - a store this driver cannot reach: not judged
            return None
        stamp = info.get("LastModified") or info.get("last_modified") or info.get("mtime")
        now = int(stamp.timestamp() * 1000) if hasattr(stamp, "timestamp") else (
            int(float(stamp) * 1000) if isinstance(stamp, (int, float)) else None)
        return _modified(now, listed) if now is not None and now // 1000 != listed // 1000 else None

    with ThreadPoolExecutor(max_workers=min(32, len(files))) as pool:
        return {uri: what for (uri, _), what in zip(files, pool.map(judged, files)) if what is not None}


def _located(made: list[ReplayRow], source: Any) -> list[ReplayRow]:
    """``made`` with the line of each row that is shown (set aside, or late), found by content."""
    from dataclasses import replace

    if source is None:
        return made
    shown = [i for i, row in enumerate(made) if row.event is not None]
    by_file: dict[str, list[int]] = {}
    for i in shown:
        by_file.setdefault(made[i].file, []).append(i)
    located = list(made)
    for uri, indexes in by_file.items():
        lines = locate_lines(uri, source.format, source.options, [made[i].event for i in indexes])
        for i, line in zip(indexes, lines):
            located[i] = replace(made[i], line=line)
    return located


def _record(plan: BatchPlan, keyed: dict[str, tuple[BatchPlan, int, str]], rows: list[Any], read: dict[str, int],
            rejects: dict[tuple[str, str], tuple[int, str]], query_id: str | None, run_tag: str | None,
            source: Any = None, changed: dict[str, str] | None = None) -> dict[str, Any]:
    """One batch's replay record from the run's collected rows (``source``: the stream's reader
    settings, :class:`watermark_ops.spark.attach.Source`, for the lines of the rows shown;
    ``changed``: :func:`changed_files`)."""
    mine = {k: v for k, v in keyed.items() if v[0] is plan}
    order = {k: v[1] for k, v in mine.items()}
    made: list[ReplayRow] = []
    counted: dict[str, int] = {}
    entering_us: list[int] = []
    problems: list[str] = []
    for row in sorted((r for r in rows if r[_KEY] in mine), key=lambda r: order[r[_KEY]]):
        uri = mine[row[_KEY]][2]
        event = json.loads(row[_EVENT]) if row[_EVENT] is not None else None
        if row[_REASON] is not None:
            first = row[_REASON] not in counted
            counted[row[_REASON]] = counted.get(row[_REASON], 0) + 1
            if first:
                made.append(ReplayRow(uri, None, row[_REASON], row[_EVENT_US], event))
            continue
        if row[_EVENT_US] is None:
            problems.append(f"{uri}: a row entering the watermark has a null event time: Spark drops such rows "
                            "without counting them")
            continue
        entering_us.append(row[_EVENT_US])
        made.append(ReplayRow(uri, None, None, row[_EVENT_US], event))
    for (key, reason), (count, example) in sorted(rejects.items(), key=lambda kv: order.get(kv[0][0], 0)):
        if key not in mine:
            continue
        if reason not in counted:
            made.append(ReplayRow(mine[key][2], None, reason, None, json.loads(example) if example else None))
        counted[reason] = counted.get(reason, 0) + count
    made = _located(made, source)
    problems += [f"{uri}: {what}: the twin cannot read what the stream read" for uri, what in (changed or {}).items()
                 if uri in plan.listed_ms]
    spark_rows = plan.spark_rows()["spark_input_rows"]
    rows_read = spark_rows if spark_rows is not None else sum(read.get(k, 0) for k in mine)
    accounted = len(entering_us) + sum(counted.values())
    if accounted < rows_read:
        counted[FILTERED_BY_JOB] = rows_read - accounted
    elif accounted > rows_read:
        problems.append(f"the job's twin made {accounted} rows (entering the watermark or set aside) of {rows_read} "
                        f"rows the stream read (numInputRows) from the batch's {len(mine)} files: expected each row "
                        "once (a reject query that overlaps the watermarked rows, or other reader settings?)")
    batch = tally(plan, made, "spark", rows_read=rows_read, set_aside=counted)
    record = replay_record(batch, query_id, run_tag, [us // 1000 for us in entering_us], problems)
    record["method"] = "twin"
    return record
