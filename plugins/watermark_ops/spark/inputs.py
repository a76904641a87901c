"""Landing folders of JSON lines read as classified streams: what a job reads so that the late-row
ledger (``watermark_ops.core.ledger``, which replays the landed files) classifies every line exactly
as the job did.

Each folder is read by the file source with an explicit schema, and every row gets ``event_time``
(timestamp) and ``reason`` (null for a good row, else why it is kept aside). Nothing is dropped
silently: the job keeps bad rows in a quarantine sink (:func:`quarantined`), so good rows +
quarantined rows = input rows, and the ledger's balance holds.

Reasons, the first that applies: ``invalid_encoding`` (the line is not valid UTF-8: Spark's JSON
reader rejects the whole line and keeps its raw bytes), ``malformed_record`` (the line is not a JSON
object of the schema: truncated, plain text, ``{}``, a value of the wrong type in any field,
``NaN``/``Infinity`` for a number, or a value longer than Jackson's 20,000,000-character limit),
``null_event_time``, ``unparseable_event_time`` (anything but ISO-8601 date-time text with a zone,
e.g. ``2013-01-01T10:17:00Z``: Spark would otherwise read a bare number such as ``12345`` as the
year 12345, or a zone-less text in the session zone), ``future_event_time`` (only with a
``max_event_time_ahead``: the event time lies beyond the batch's processing time plus that
tolerance), then the job's own ``required_fields`` reasons.

What the file source does not make a row of: an empty file and a blank line (no record), and
anything after the first JSON value of a line; a line holding a JSON *array of objects* becomes
one row per object.

Why ``future_event_time``: one future-dated record moves the watermark ahead of processing time
for good (the watermark never goes back), and every later on-time row is then dropped as late.
Processing time is Spark's ``current_timestamp()``, which a micro-batch evaluates as its own
``batchTimestampMs`` (the offsets file keeps it), so a re-run of a crashed batch classifies every
row exactly as the first attempt did.

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import re

__all__ = ["BASE_QUARANTINE_REASONS", "ISO_DATE_TIME", "LANDED_EVENT_TIME", "check_interval", "classified_json_stream",
           "classify", "column", "json_reader", "quarantined"]

#: The reasons every classified stream can give (a job adds its ``required_fields`` reasons).
BASE_QUARANTINE_REASONS = ("invalid_encoding", "malformed_record", "null_event_time", "unparseable_event_time",
                           "future_event_time")
# What the landers write (``2013-01-01T10:17:00Z``) and other ISO-8601 date-times with a zone; checked before
# try_to_timestamp, which also takes a bare number as a year ("12345" is the year 12345: a watermark jump).
ISO_DATE_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})$"
_INTERVAL = re.compile(r"^\s*\d+\s+(second|minute|hour|day)s?(\s+\d+\s+(second|minute|hour|day)s?)*\s*$")



def check_interval(value: str | None) -> str | None:
    """``value`` when it is a Spark interval of whole seconds, minutes, hours or days (``"1 hour"``,
    ``"2 hours 30 minutes"``), None for None.

    :raises ValueError: for anything else, naming the value.
    """
    if value is not None and not _INTERVAL.match(value):
        raise ValueError(f"expected an interval such as '1 hour' or '2 days 6 hours', got {value!r}")
    return value


def classified_json_stream(spark, landing: str, schema_ddl: str, event_time_field: str,
                           max_files_per_trigger: int | None = None, required_fields: dict[str, str] | None = None,
                           max_event_time_ahead: str | None = None):
    """A landing folder of JSON lines as a stream with ``event_time`` (timestamp) and ``reason``.

    File source with an explicit schema (``schema_ddl`` must include ``_corrupt_record STRING``),
    ``PERMISSIVE`` mode, ``allowNonNumericNumbers`` off (a ``NaN`` or ``Infinity`` number, quoted
    or not, makes the line malformed instead of poisoning a window's mean and max). The event time
    is parsed in the job (ISO-8601 date-time with a zone, :data:`ISO_DATE_TIME`, then
    ``try_to_timestamp``) so that an unparseable value is caught instead of silently becoming null
    or a far-off year. ``reason`` is null for a good row, else the first that applies:
    ``invalid_encoding`` (the line is not valid UTF-8; its text is in ``_corrupt_record``),
    ``malformed_record`` (the line is not a JSON object of the schema, or has none of its fields;
    its text is in ``_corrupt_record``), ``null_event_time``, ``unparseable_event_time``, ``future_event_time``
    when ``max_event_time_ahead`` (a Spark interval, :func:`check_interval`) is given and the event
    time is later than the batch's processing time plus it, then ``required_fields``' reasons
    (``{reason: field}``: the field is null).

    :raises ValueError: when ``max_event_time_ahead`` is not such an interval.
    """
    reader = spark.readStream
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    raw = json_reader(reader, schema_ddl).json(landing)
    return classify(raw, schema_ddl, event_time_field, required_fields, max_event_time_ahead)


def json_reader(reader, schema_ddl: str):
    """A ``DataStreamReader`` or ``DataFrameReader`` set up as the jobs read JSON lines: the
    explicit schema, ``PERMISSIVE`` mode with ``_corrupt_record``, ``allowNonNumericNumbers`` off."""
    return reader.schema(schema_ddl).option("mode", "PERMISSIVE").option(
        "columnNameOfCorruptRecord", "_corrupt_record").option("allowNonNumericNumbers", "false")


def column(name: str):
    """``F.col`` of a field *name* taken literally: backticks around it (doubled inside), so that a
    name with a dot, a space, a dash or a reserved word is one top-level field, not an expression."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


#: The column :func:`classify` keeps a landed field's text under when that field is itself named
#: ``event_time`` (the parsed timestamp takes the name ``event_time``; the text stays for the quarantine).
LANDED_EVENT_TIME = "event_time_landed"


def classify(raw, schema_ddl: str, event_time_field: str, required_fields: dict[str, str] | None = None,
             max_event_time_ahead: str | None = None):
    """``raw`` (rows read by :func:`json_reader`, streaming or batch) with ``event_time`` and
    ``reason`` added by the rules of :func:`classified_json_stream`.

    Both columns are computed from the landed fields in one projection (``withColumns``), so a
    landed field that is itself named ``event_time`` is judged as landed, then replaced by the
    parsed timestamp; its text stays in :data:`LANDED_EVENT_TIME`. Field names are used as column
    references, never pasted into SQL text: any name works (spaces, dashes, reserved words).

    :param schema_ddl: the DDL ``raw`` was read with (kept for the signature; the fields checked are
        ``raw``'s own columns but ``_corrupt_record``).
    :raises ValueError: when ``max_event_time_ahead`` is not an interval (:func:`check_interval`).
    """
    from pyspark.sql import functions as F

    landed = column(event_time_field)
    event_time = F.when(landed.rlike(ISO_DATE_TIME), F.try_to_timestamp(landed))
    # Every field of the schema is referenced here, on purpose: Spark's JSON reader parses only the
    # columns a query reads, and a wrong-typed field it does not read does not make the line malformed.
    # Without this, the windows query and the quarantine query (which read different columns) would
    # disagree on which rows are bad, and a row could be neither counted nor kept aside.
    fields = [name for name in raw.columns if name != "_corrupt_record"]
    no_field = ~F.greatest(*(column(name).isNotNull() for name in fields))  # {} or only unknown keys
    reason = (
        # Jackson rejects invalid UTF-8; Spark keeps the line's raw bytes in _corrupt_record.
        F.when(~F.expr("is_valid_utf8(_corrupt_record)"), F.lit("invalid_encoding"))
        .when(F.col("_corrupt_record").isNotNull() | no_field, F.lit("malformed_record"))
        .when(landed.isNull(), F.lit("null_event_time"))
        .when(event_time.isNull(), F.lit("unparseable_event_time"))
    )
    if check_interval(max_event_time_ahead):
        latest = F.expr(f"current_timestamp() + INTERVAL '{max_event_time_ahead}'")
        reason = reason.when(event_time > latest, F.lit("future_event_time"))
    for name, field in (required_fields or {}).items():
        reason = reason.when(column(field).isNull(), F.lit(name))
    added = {"event_time": event_time, "reason": reason}
    if event_time_field == "event_time":
        added[LANDED_EVENT_TIME] = landed
    # One projection: every expression reads the landed columns, before event_time is replaced.
    classified = raw.withColumns(added)
    return _with_reasons(classified, required_fields)


def _with_reasons(frame, required_fields: dict[str, str] | None):
    """``frame`` carrying the reasons it can give (:data:`BASE_QUARANTINE_REASONS` plus the job's
    ``required_fields``), for :func:`quarantined` to count each one."""
    frame._watermark_ops_reasons = (*BASE_QUARANTINE_REASONS, *(r for r in (required_fields or {})
                                                               if r not in BASE_QUARANTINE_REASONS))
    return frame


def quarantined(events, columns=None, reasons=None):
    """The bad rows of a classified stream with their ``reason``, the raw line (``_corrupt_record``,
    made valid UTF-8: U+FFFD for each invalid sequence) and the file they came from (``source_file``).

    Counted per micro-batch with ``Dataset.observe`` (metrics ``quarantine``: ``rows`` and one
    count per reason), which Spark reports in the batch's progress as ``observedMetrics`` and the
    recorder writes to the progress log: the ledger's balance reads ``quarantine.rows``.

    :param events: a frame from :func:`classified_json_stream`.
    :param columns: the columns kept besides ``reason``, ``_corrupt_record`` and ``source_file``
        (default: every column of the schema read).
    :param reasons: the reasons counted one by one; default: those ``events`` can give (the base
        ones plus the ``required_fields`` reasons :func:`classify` was given), else the base ones.
    """
    from pyspark.sql import functions as F

    if reasons is None:
        reasons = getattr(events, "_watermark_ops_reasons", BASE_QUARANTINE_REASONS)
    keep = list(columns) if columns is not None else [
        c for c in events.columns if c not in ("reason", "event_time", "_corrupt_record")]
    bad = events.where(F.col("reason").isNotNull()).select(
        "reason", *(column(name) for name in keep),
        # A Parquet string must be UTF-8 (Arrow, pandas refuse the raw bytes): U+FFFD for each invalid sequence.
        F.expr("make_valid_utf8(_corrupt_record)").alias("_corrupt_record"),
        F.col("_metadata.file_path").alias("source_file"),
    )
    counts = [F.count(F.lit(1)).alias("rows")] + [
        F.sum(F.when(F.col("reason") == reason, 1).otherwise(0)).alias(reason) for reason in reasons
    ]
    return bad.observe("quarantine", *counts)
