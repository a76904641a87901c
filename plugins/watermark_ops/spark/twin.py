"""The job's batch twin: its own transformations computed as a Spark batch over chosen files.

A job attached through the launcher declares nothing about its parsing: its script reads a stream,
parses it inline (``raw.select(..., try_to_timestamp(...), col.try_cast(...))``), calls
``withWatermark``, and starts its queries (often a second one for the rows it rejects). After the
run, the launcher runs **the same script again** in the same driver with the stream APIs answered
by batch ones (:func:`run_twin`):

* ``spark.readStream`` answers a batch reader (``spark.read``) with the stream's own settings
  (format, schema, options; the stream-only options dropped) over the files the run's batches read,
  as the checkpoint's file source log names them (:func:`watermark_ops.core.ledger.plan.plan_batches`);
* ``DataFrame.withWatermark`` records the frame that enters it (the rows the watermark judges) and
  lets the script go on (on a batch frame Spark ignores the watermark);
* ``DataFrame.writeStream`` answers a writer that records each query (its frame, name, checkpoint
  location, format, output mode, path) and starts nothing: ``start`` / ``toTable`` return a
  finished stand-in query;
* the script runs up to its queries and no further: ``awaitTermination`` (on a query) and
  ``awaitAnyTermination`` (on ``spark.streams``) end it there, once it has started as many queries
  as the real run did (before that, as in a script that runs its queries one after the other, they
  return at once); a script that never awaits is ended right after it records that many queries
  (``queries=`` of :func:`run_twin`, the launcher passes the real run's count). Either end is
  :class:`_ScriptEnd`, a ``BaseException`` (the script's ``except Exception`` does not catch it)
  that :func:`run_twin` takes as a clean end (status 0): the script's epilogue (its logs, a
  ``_SUCCESS`` marker, a notification) runs once per run, in the real run only. ``atexit.register``
  is a no-op while the twin runs (it returns the function, as a decorator needs);
* ``SparkSession.stop`` is left to the launcher.

Nothing is written: a batch write (``DataFrame.write`` / ``writeTo``) while the twin runs stops it
with :class:`CannotTwin` (so does a source that is not a file source, or a ``readStream.table``):
the job's sinks, checkpoints and outputs are never touched. The twin's rows keep the file they came
from through the job's own projections and filters (Spark's hidden file metadata column
``_metadata.file_path``, ``FileSourceMetadataAttribute``), which maps each row to its micro-batch:
one Spark job per run, the batch id a column, not one job per batch (:mod:`watermark_ops.spark.twin_ledger`).

Why this mechanism and not a plan rewrite over Spark Connect (replacing the query's streaming read
in its protobuf plan with a batch read): the same Python wrapping works on the classic and the
Connect classes alike (the Connect client is Python too), it needs no knowledge of the plan's
encoding per Spark release, and it gives both the frame entering ``withWatermark`` and each query's
own result. What it needs: a script whose work before its queries is Spark's (reading, parsing,
``writeStream``); one that writes or calls external services before its queries cannot be twinned,
and says so in one line: declare ``pre_watermark`` then.

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

log = logging.getLogger("watermark_ops.spark")

__all__ = ["CannotTwin", "Twin", "TwinQuery", "TwinSource", "run_twin"]

#: File source options that only mean something to a stream (FileStreamSource's DataSource options).
STREAM_ONLY_OPTIONS = ("maxFilesPerTrigger", "maxBytesPerTrigger", "latestFirst", "fileNameOnly", "maxFileAge",
                       "cleanSource", "sourceArchiveDir", "maxCachedFiles", "discardCachedInputRatio")
_FILE_FORMATS = ("json", "csv", "parquet", "orc", "text", "avro", "xml", "binaryfile")
_WAY_OUT = "declare pre_watermark (the function from raw rows to the rows that enter withWatermark) instead"


class CannotTwin(RuntimeError):
    """The job cannot be run as its batch twin; the message names why and the way out (one line)."""


class _ScriptEnd(BaseException):
    """The twinned script reached its queries' end (an await, or its last query): stop it there."""


@dataclass
class TwinSource:
    """One stream source the twin answered: its settings and the batch frame it returned.

    :ivar format: ``json``, ``csv``, ``parquet``, ... :ivar path: the folder the stream reads.
    :ivar frame: the batch DataFrame over the run's files (its raw rows).
    """

    format: str
    path: str | None
    frame: Any


@dataclass
class TwinQuery:
    """One query the script started while twinned: its batch frame and its writer's settings.

    :ivar frame: the query's result computed in batch (a DataFrame). :ivar name: ``queryName``.
    :ivar checkpoint: its ``checkpointLocation`` (None when none). :ivar format: the sink format.
    :ivar output_mode: ``append``/``update``/``complete`` (None when unset). :ivar path: the sink path.
    """

    frame: Any
    name: str | None = None
    checkpoint: str | None = None
    format: str | None = None
    output_mode: str | None = None
    path: str | None = None
    options: dict[str, str] = field(default_factory=dict)


@dataclass
class Twin:
    """What the twin run captured: the sources, the frames entering ``withWatermark``
    (``(frame, column, delay threshold)`` in call order) and the queries."""

    sources: list[TwinSource] = field(default_factory=list)
    watermarks: list[tuple[Any, str, str]] = field(default_factory=list)
    queries: list[TwinQuery] = field(default_factory=list)
    #: how many queries the real run started (None: unknown): the script ends after that many.
    expected: int | None = None

    def all_started(self) -> bool:
        """Whether the script has started every query the real run did (always, when unknown)."""
        return self.expected is None or len(self.queries) >= self.expected

    def query_for(self, checkpoint: str) -> TwinQuery | None:
        """The query whose checkpoint location is ``checkpoint`` (same place), None when none."""
        from watermark_ops.spark.attach import same_location

        return next((q for q in self.queries if same_location(q.checkpoint, checkpoint)), None)


class _Finished:
    """A stand-in ``StreamingQuery``: finished, no progress, no exception."""

    def __init__(self, query: TwinQuery, twin: Twin) -> None:
        self._query, self._twin = query, twin
        self.name = query.name
        self.id = self.runId = None
        self.isActive = False
        self.lastProgress = None
        self.recentProgress: list[Any] = []
        self.status = {"message": "twin", "isDataAvailable": False, "isTriggerActive": False}

    def awaitTermination(self, timeout: Any = None) -> bool | None:  # noqa: N802 - PySpark's name
        if self._twin.all_started():
            raise _ScriptEnd
        return True if timeout is not None else None

    def processAllAvailable(self) -> None:  # noqa: N802
        return None

    def stop(self) -> None:
        return None

    def exception(self) -> None:
        return None

    def explain(self, extended: bool = False) -> None:
        return None


class _Streams:
    """A stand-in ``StreamingQueryManager``: no active query, every wait returns at once."""

    def __init__(self, twin: Twin) -> None:
        self._twin = twin
        self.active: list[Any] = []

    def awaitAnyTermination(self, timeout: Any = None) -> bool | None:  # noqa: N802
        if self._twin.all_started():
            raise _ScriptEnd
        return True if timeout is not None else None

    def resetTerminated(self) -> None:  # noqa: N802
        return None

    def get(self, _id: Any) -> None:
        return None

    def addListener(self, _listener: Any) -> None:  # noqa: N802
        return None

    def removeListener(self, _listener: Any) -> None:  # noqa: N802
        return None


class _Reader:
    """A stand-in ``DataStreamReader``: settings recorded, loads answered by a batch read of the files."""

    def __init__(self, spark: Any, twin: Twin, files_for: Callable[[str | None], list[str]]) -> None:
        self._spark, self._twin, self._files_for = spark, twin, files_for
        self._format: str | None = None
        self._schema: Any = None
        self._options: dict[str, Any] = {}

    def format(self, source: str) -> "_Reader":
        self._format = str(source)
        return self

    def schema(self, schema: Any) -> "_Reader":
        self._schema = schema
        return self

    def option(self, key: str, value: Any) -> "_Reader":
        if value is not None:
            self._options[str(key)] = value
        return self

    def options(self, **options: Any) -> "_Reader":
        self._options.update({k: v for k, v in options.items() if v is not None})
        return self

    def table(self, name: str) -> Any:
        raise CannotTwin(f"the job reads the table {name!r} as a stream (readStream.table): only file sources can "
                         f"be twinned; {_WAY_OUT}")

    def load(self, path: Any = None, format: str | None = None, schema: Any = None, **options: Any) -> Any:  # noqa: A002
        if format is not None:
            self._format = format
        if schema is not None:
            self._schema = schema
        self.options(**options)
        return self._read(self._format or "parquet", path)

    def _by(self, fmt: str) -> Callable[..., Any]:
        def load(path: Any = None, schema: Any = None, **options: Any) -> Any:
            if schema is not None:
                self._schema = schema
            self.options(**options)
            return self._read(fmt, path)
        return load

    def __getattr__(self, name: str) -> Any:
        if name in _FILE_FORMATS:
            return self._by(name)
        raise AttributeError(name)

    def _read(self, fmt: str, path: Any) -> Any:
        if str(fmt).lower() not in _FILE_FORMATS:
            raise CannotTwin(f"the job reads a {fmt!r} stream: only file sources can be twinned (their files are "
                             f"named by the checkpoint's source log); {_WAY_OUT}")
        location = str(path) if path is not None else None
        files = self._files_for(location)
        reader = self._spark.read.format(fmt)
        if self._schema is not None:
            reader = reader.schema(self._schema)
        options = {k: v for k, v in self._options.items() if k not in STREAM_ONLY_OPTIONS}
        if location and not any(c in location for c in "*?[{") and "basePath" not in options:
            options["basePath"] = location  # partition columns of a partitioned landing, as the stream has them
        if files:
            frame = reader.options(**options).load(files)
        else:  # no file in this run for this source: its rows are none, with the stream's columns
            frame = reader.options(**options).load(location).limit(0)
        self._twin.sources.append(TwinSource(str(fmt).lower(), location, frame))
        return frame


class _Writer:
    """A stand-in ``DataStreamWriter``: settings recorded; ``start``/``toTable`` record the query."""

    def __init__(self, frame: Any, twin: Twin) -> None:
        self._query = TwinQuery(frame)
        self._twin = twin

    def format(self, source: str) -> "_Writer":
        self._query.format = str(source)
        return self

    def outputMode(self, mode: str) -> "_Writer":  # noqa: N802
        self._query.output_mode = str(mode).lower()
        return self

    def option(self, key: str, value: Any) -> "_Writer":
        self._query.options[str(key)] = str(value)
        return self

    def options(self, **options: Any) -> "_Writer":
        self._query.options.update({k: str(v) for k, v in options.items() if v is not None})
        return self

    def queryName(self, name: str) -> "_Writer":  # noqa: N802
        self._query.name = str(name)
        return self

    def trigger(self, *args: Any, **kwargs: Any) -> "_Writer":
        return self

    def partitionBy(self, *cols: Any) -> "_Writer":  # noqa: N802
        return self

    def clusterBy(self, *cols: Any) -> "_Writer":  # noqa: N802
        return self

    def foreach(self, f: Any) -> "_Writer":
        return self

    def foreachBatch(self, func: Any) -> "_Writer":  # noqa: N802
        self._query.format = self._query.format or "foreachBatch"
        return self

    def start(self, path: str | None = None, format: str | None = None, outputMode: str | None = None,  # noqa: A002,N803
              partitionBy: Any = None, queryName: str | None = None, **options: Any) -> _Finished:  # noqa: N803
        query = self._query
        query.path = str(path) if path is not None else options.get("path", query.options.get("path"))
        query.format = format or query.format
        query.output_mode = (outputMode or query.output_mode or "append").lower()
        query.name = queryName or query.name
        self.options(**options)
        query.checkpoint = query.options.get("checkpointLocation")
        self._twin.queries.append(query)
        if self._twin.expected is not None and len(self._twin.queries) >= self._twin.expected:
            raise _ScriptEnd  # the real run's last query: what follows is the script's epilogue
        return _Finished(query, self._twin)

    def toTable(self, tableName: str, format: str | None = None, outputMode: str | None = None,  # noqa: N802,N803,A002
                partitionBy: Any = None, queryName: str | None = None, **options: Any) -> _Finished:  # noqa: N803
        return self.start(None, format, outputMode, partitionBy, queryName, **options)


def _classes() -> list[tuple[Any, Any]]:
    """``(SparkSession class, DataFrame class)`` pairs: classic (3.5's and 4.x's) and Spark Connect's."""
    from pyspark.sql import session as classic_session

    try:
        from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame
    except ImportError:  # pyspark 3.5: the classic DataFrame is pyspark.sql.dataframe's
        from pyspark.sql.dataframe import DataFrame as ClassicFrame
    pairs = [(classic_session.SparkSession, ClassicFrame)]
    with contextlib.suppress(ImportError):  # a pyspark without the Connect client's dependencies
        from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        pairs.append((ConnectSession, ConnectFrame))
    return pairs


@contextlib.contextmanager
def _twinned(twin: Twin, files_for: Callable[[str | None], list[str]]) -> Iterator[None]:
    """The stream APIs answered by batch ones (module docstring), restored on exit."""
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, value: Any) -> None:
        if name in owner.__dict__:
            saved.append((owner, name, owner.__dict__[name]))
            setattr(owner, name, value)

    def refuse_write(_frame: Any) -> Any:
        raise CannotTwin(f"the job writes a batch result (DataFrame.write) while it sets up its queries: the twin "
                         f"never writes; {_WAY_OUT}")

    import atexit

    patch(atexit, "register", lambda func, *args, **kwargs: func)  # the real run's exit handlers only
    for session_class, frame_class in _classes():
        original = frame_class.__dict__.get("withWatermark")

        def with_watermark(frame, eventTime, delayThreshold, _original=original):  # noqa: N803 - PySpark's names
            twin.watermarks.append((frame, str(eventTime), str(delayThreshold)))
            return _original(frame, eventTime, delayThreshold)

        patch(session_class, "readStream", property(lambda spark: _Reader(spark, twin, files_for)))
        patch(session_class, "streams", property(lambda spark: _Streams(twin)))
        patch(session_class, "stop", lambda spark: None)
        patch(frame_class, "withWatermark", with_watermark)
        patch(frame_class, "writeStream", property(lambda frame: _Writer(frame, twin)))
        patch(frame_class, "write", property(refuse_write))
        patch(frame_class, "writeTo", lambda frame, *a, **k: refuse_write(frame))
    try:
        yield
    finally:
        while saved:
            owner, name, value = saved.pop()
            setattr(owner, name, value)


def run_twin(run_script: Callable[[], int], files_for: Callable[[str | None], list[str]],
             queries: int | None = None) -> Twin:
    """Run the job's script as its batch twin (module docstring) and return what it captured.

    :param run_script: runs the job's script as ``__main__`` with its own arguments; returns its exit
        status and lets :class:`CannotTwin` through (the launcher's ``_run_script``).
    :param files_for: a stream source's path (as the script gave it) → the file URIs its batch read
        takes (the run's files of that source, from the checkpoint's source log).
    :param queries: how many queries the real run started: the script is ended right after it
        records that many (its epilogue not run); None when unknown (then ended at its first await).
    :raises CannotTwin: the job cannot be twinned (a non-file source, a batch write, a script that
        failed or captured no ``withWatermark``); the message is one line with the way out.
    """
    twin = Twin(expected=queries or None)
    with _twinned(twin, files_for):
        try:
            code = run_script()
        except _ScriptEnd:  # the script reached its queries' end: a clean end
            code = 0
    if code != 0:
        raise CannotTwin(f"the job's script ended with status {code} when run as its batch twin (it may do work "
                         f"before its queries that only a stream run can do); {_WAY_OUT}")
    if not twin.sources:
        raise CannotTwin(f"the job's script read no file stream when run as its batch twin; {_WAY_OUT}")
    return twin
