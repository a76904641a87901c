"""Attach the recorder to an unmodified Structured Streaming script, in the launcher's process.

The way lineage tools attach to jobs they did not write (OpenLineage's Spark integration: a listener
named in the Spark conf, fed by the events Spark already emits) does not reach a Python driver's
own calls; the launcher (:mod:`watermark_ops.spark.launch`) therefore wraps, for as long as the job's
script runs, the few PySpark methods a streaming job goes through, on the classic and the Spark
Connect classes alike (over Connect the client *is* Python, so this works there too):

* ``DataStreamReader.format/schema/option/options`` and ``load/json/csv/parquet/orc/text``: each
  stream source's reader settings (format, schema, options, path) are captured, so that the
  ledger can read a batch's files exactly as the stream read them (:mod:`watermark_ops.spark.replay`);
* ``DataFrame.withWatermark``: the event-time column and delay threshold (and, when a partition
  column is declared, the per-partition event times observed before it: a pass-through ``observe``);
* ``DataStreamWriter.option/options/queryName/trigger`` and ``start/toTable``: each query's
  checkpoint location, name and Spark trigger; the checkpoint's lock is taken before the query
  starts (one driver per checkpoint, :mod:`watermark_ops.spark.lock`), the query is checked against
  what its checkpoint holds (:func:`watermark_ops.spark.restart.check_start`: a change the run does
  not accept raises :class:`~watermark_ops.spark.restart.RestartRefused`, the query is not
  started; what it starts with is recorded as ``started_with``) and registered
  with the progress recorder (:class:`watermark_ops.spark.recorder.ProgressRecorder`: a listener on
  a classic session; over Connect the waits below poll instead);
* ``StreamingQuery.awaitTermination`` / ``StreamingQueryManager.awaitAnyTermination``: over Connect,
  a wait without timeout becomes a loop of short waits that records the finished batches;
* ``SparkSession.stop``: a script that stops its own session leaves it to the launcher, which stops it
  after the last batch is recorded and replayed.

Everything is restored when the script ends (:meth:`Attachment.detach`); nothing in the script's
plan, sinks, trigger or checkpoint locations changes. Needs pyspark (imported inside the methods).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import unquote, urlsplit

from watermark_ops.core.progress import progress_log_path
from watermark_ops.core.state.plan import QueryShape
from watermark_ops.spark.lock import checkpoint_lock
from watermark_ops.spark.recorder import POLL_SECONDS, ProgressRecorder, observe_partition_event_times
from watermark_ops.spark.restart import check_start

log = logging.getLogger("watermark_ops.spark")

__all__ = ["Attachment", "Source", "StartedQuery", "same_location"]

_READ_METHODS = {"load": None, "json": "json", "csv": "csv", "parquet": "parquet", "orc": "orc", "text": "text"}
_CHECKPOINT_CONF = "spark.sql.streaming.checkpointLocation"


def same_location(a: str | None, b: str | None) -> bool:
    """Whether two locations name the same place: a path and its ``file:`` URI, with or without a
    trailing slash, relative or absolute (local); other URIs compared as text."""
    return a is not None and b is not None and _normal(a) == _normal(b)


def _normal(location: str) -> str:
    text = str(location).strip()
    parts = urlsplit(text)
    if parts.scheme in ("", "file"):
        return os.path.abspath(unquote(parts.path if parts.scheme else text)).rstrip("/")
    return text.rstrip("/")


@dataclass
class Source:
    """One stream source a script created: its reader settings, as given.

    :ivar format: ``json``, ``csv``, ``parquet``, ... (the reader's default ``parquet`` when none was set).
    :ivar schema: the schema given to the reader (a DDL string or a ``StructType``), None when none.
    :ivar options: the reader's options (text values).
    :ivar path: the folder (or file) read.
    """

    format: str
    schema: Any
    options: dict[str, str]
    path: str | None

    def schema_ddl(self) -> str | None:
        """The schema as DDL text (a ``StructType`` is written ``name TYPE, ...``), None without one."""
        if self.schema is None or isinstance(self.schema, str):
            return self.schema
        return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in self.schema.fields)


@dataclass
class StartedQuery:
    """A query the script started: ``query`` (a ``StreamingQuery``), its checkpoint, name and trigger,
    what it started with (its start check's ``QueryShape.to_dict()``, None when not checked), and
    when (``time.monotonic()`` seconds)."""

    query: Any
    checkpoint: str | None
    name: str | None
    spark_trigger: str | None
    started_with: dict[str, Any] | None = None
    started_at: float = field(default_factory=time.monotonic)


@dataclass
class Attachment:
    """What the launcher learns from a script while it runs, and the recorder it feeds.

    :param run_tag: stamped on every progress record (the DAG's run id).
    :param late_rules: ``callable(started query, first progress JSON) -> late rule | None``: the
        rule of a query, built once its first progress names its sources.
    :param lock_holder: what the checkpoint locks record about this driver (e.g. its Connect session).
    :param on_takeover: called with a dead holder's lock record when a lock is taken over.
    :param partition: ``(column, values)``: observe each batch's newest event time per value before
        the watermark (:func:`~watermark_ops.spark.recorder.observe_partition_event_times`), or None.
    :param accept_changes: the silent changes of the script's queries this run accepts
        (``window_duration``, ``watermark_delay``, ``source_path``).
    :param data_interval: the launching DAG run's ``{"start_ms", "end_ms"}`` (epoch ms UTC), stamped
        on every progress record; None: not stamped.
    :param before_start: ``callable(checkpoint, what the query starts with)`` called after its start
        check and before it starts; an exception it raises stops the run with nothing started.
    """

    run_tag: str | None
    late_rules: Callable[[StartedQuery, dict[str, Any]], dict[str, Any] | None]
    lock_holder: dict[str, Any] | None = None
    on_takeover: Callable[[dict[str, Any]], None] | None = None
    partition: tuple[str, tuple[str, ...]] | None = None
    accept_changes: tuple[str, ...] = ()
    data_interval: dict[str, int] | None = None
    before_start: Callable[[str, QueryShape | None], None] | None = None
    sources: list[Source] = field(default_factory=list)
    watermarks: list[tuple[str, str]] = field(default_factory=list)
    queries: list[StartedQuery] = field(default_factory=list)
    stop_requested: bool = False
    spark: Any = None
    recorder: ProgressRecorder | None = None
    locks: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _locked: list[str] = field(default_factory=list)
    _patches: list[tuple[Any, str, Any]] = field(default_factory=list)

    # ---------------------------------------------------------------- locks
    def lock(self, checkpoint: str) -> None:
        """Hold ``checkpoint``'s lock until :meth:`release` (once per checkpoint).

        :raises watermark_ops.spark.lock.CheckpointInUse: another live driver holds it.
        """
        if any(same_location(checkpoint, held) for held in self._locked):
            return
        self.locks.enter_context(checkpoint_lock(checkpoint, self.lock_holder, on_takeover=self.on_takeover))
        self._locked.append(checkpoint)

    def release(self) -> None:
        """Release every lock taken."""
        self.locks.close()
        self._locked.clear()

    # ---------------------------------------------------------------- patching
    def attach(self) -> None:
        """Wrap the PySpark methods (module docstring), classic and Spark Connect classes alike."""
        from pyspark.sql import session as classic_session
        from pyspark.sql.streaming import query as classic_query
        from pyspark.sql.streaming import readwriter as classic_rw

        try:
            from pyspark.sql.classic.dataframe import DataFrame as ClassicFrame
        except ImportError:  # pyspark 3.5: the classic DataFrame is pyspark.sql.dataframe's
            from pyspark.sql.dataframe import DataFrame as ClassicFrame
        modules = [(classic_rw.DataStreamReader, classic_rw.DataStreamWriter, ClassicFrame,
                    classic_query.StreamingQuery, classic_query.StreamingQueryManager, classic_session.SparkSession)]
        with contextlib.suppress(ImportError):  # a pyspark without the Connect client's dependencies
            from pyspark.sql.connect import dataframe as connect_dataframe
            from pyspark.sql.connect import session as connect_session
            from pyspark.sql.connect.streaming import query as connect_query
            from pyspark.sql.connect.streaming import readwriter as connect_rw

            modules.append((connect_rw.DataStreamReader, connect_rw.DataStreamWriter, connect_dataframe.DataFrame,
                            connect_query.StreamingQuery, connect_query.StreamingQueryManager,
                            connect_session.SparkSession))
        for reader, writer, frame, query, manager, session in modules:
            for name in ("format", "schema", "option", "options"):
                self._patch(reader, name, self._reader_setting(name))
            for name, fmt in _READ_METHODS.items():
                self._patch(reader, name, self._reader_load(fmt))
            self._patch(frame, "withWatermark", self._with_watermark)
            for name in ("option", "options", "queryName", "trigger"):
                self._patch(writer, name, self._writer_setting(name))
            self._patch(writer, "start", self._writer_start(table=False))
            self._patch(writer, "toTable", self._writer_start(table=True))
            self._patch(query, "awaitTermination", self._await_termination)
            self._patch(manager, "awaitAnyTermination", self._await_any)
            self._patch(session, "stop", self._session_stop)

    def detach(self) -> None:
        """Restore every wrapped method."""
        while self._patches:
            owner, name, original = self._patches.pop()
            setattr(owner, name, original)

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = owner.__dict__.get(name)
        if original is None:
            return
        self._patches.append((owner, name, original))
        setattr(owner, name, functools.wraps(original)(make(original)))

    # ---------------------------------------------------------------- readers
    @staticmethod
    def _settings(reader: Any) -> dict[str, Any]:
        settings = reader.__dict__.get("_watermark_ops_reader")
        if settings is None:
            settings = {"format": None, "schema": None, "options": {}}
            reader.__dict__["_watermark_ops_reader"] = settings
        return settings

    def _reader_setting(self, name: str) -> Callable[[Any], Any]:
        settings = self._settings

        def make(original: Any) -> Any:
            def wrapper(reader, *args, **kwargs):
                state = settings(reader)
                if name == "format" and args:
                    state["format"] = str(args[0])
                elif name == "schema" and args:
                    state["schema"] = args[0]
                elif name == "option" and len(args) >= 2 and args[1] is not None:
                    state["options"][str(args[0])] = _text(args[1])
                elif name == "options":
                    state["options"].update({str(k): _text(v) for k, v in kwargs.items() if v is not None})
                return original(reader, *args, **kwargs)
            return wrapper
        return make

    def _reader_load(self, fmt: str | None) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def wrapper(reader, *args, **kwargs):
                state = self._settings(reader)
                if state.get("loading"):  # Connect's json() calls load(): one source, not two
                    return original(reader, *args, **kwargs)
                state["loading"] = True
                try:
                    frame = original(reader, *args, **kwargs)  # sets schema/options through the wrapped setters
                finally:
                    state["loading"] = False
                path = args[0] if args else kwargs.get("path")
                chosen = fmt or kwargs.get("format") or state["format"] or "parquet"
                self.sources.append(Source(chosen, state["schema"], dict(state["options"]),
                                           str(path) if path is not None else None))
                return frame
            return wrapper
        return make

    # ---------------------------------------------------------------- the watermark
    def _with_watermark(self, original: Any) -> Any:
        def wrapper(frame, eventTime, delayThreshold):
            self.watermarks.append((str(eventTime), str(delayThreshold)))
            if self.partition is not None:
                column, values = self.partition
                frame = observe_partition_event_times(frame, column, values, event_time=str(eventTime))
            return original(frame, eventTime, delayThreshold)
        return wrapper

    # ---------------------------------------------------------------- writers and queries
    @staticmethod
    def _writer_state(writer: Any) -> dict[str, Any]:
        state = writer.__dict__.get("_watermark_ops_writer")
        if state is None:
            state = {"options": {}, "name": None, "trigger": None}
            writer.__dict__["_watermark_ops_writer"] = state
        return state

    def _writer_setting(self, name: str) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def wrapper(writer, *args, **kwargs):
                state = self._writer_state(writer)
                if name == "option" and len(args) >= 2:
                    state["options"][str(args[0])] = _text(args[1])
                elif name == "options":
                    state["options"].update({str(k): _text(v) for k, v in kwargs.items() if v is not None})
                elif name == "queryName" and args:
                    state["name"] = str(args[0])
                elif name == "trigger":
                    state["trigger"] = _trigger_name(kwargs)
                return original(writer, *args, **kwargs)
            return wrapper
        return make

    def _writer_start(self, table: bool) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def wrapper(writer, *args, **kwargs):
                state = self._writer_state(writer)
                options = {**state["options"], **{k: _text(v) for k, v in kwargs.items()
                                                   if k not in ("path", "format", "outputMode", "partitionBy",
                                                                "queryName", "tableName") and v is not None}}
                name = kwargs.get("queryName") or state["name"]
                spark = _session_of(writer)
                checkpoint = options.get("checkpointLocation")
                if checkpoint is None and spark is not None and name:
                    root = spark.conf.get(_CHECKPOINT_CONF, None)
                    checkpoint = f"{root.rstrip('/')}/{name}" if root else None
                shape = None
                if checkpoint is not None:
                    self.lock(checkpoint)  # CheckpointInUse: nothing is started
                    # RestartRefused: nothing is started
                    shape = check_start(_frame_of(writer), checkpoint, self.accept_changes, query_name=name,
                                        run_tag=self.run_tag).starting
                    if self.before_start is not None:
                        self.before_start(checkpoint, shape)
                else:
                    log.warning("query %s has no checkpointLocation the launcher can see: it is not recorded", name)
                query = original(writer, *args, **kwargs)
                started = StartedQuery(query, checkpoint, name, state["trigger"],
                                       shape.to_dict() if shape is not None else None)
                self.queries.append(started)
                if checkpoint is not None:
                    self._register(spark, started)
                return query
            return wrapper
        return make

    def _register(self, spark: Any, started: StartedQuery) -> None:
        from watermark_ops.spark.connect import is_connect_session

        if self.recorder is None:
            self.spark = spark
            self.recorder = ProgressRecorder(spark, self.run_tag, started.spark_trigger or "availableNow",
                                             listen=not is_connect_session(spark), data_interval=self.data_interval)
        rules = self.late_rules
        self.recorder.register(started.query, progress_log_path(started.checkpoint),
                               lambda progress: rules(started, progress), spark_trigger=started.spark_trigger,
                               started_with=started.started_with)

    def _await_termination(self, original: Any) -> Any:
        def wrapper(query, timeout=None):
            if timeout is not None or self.recorder is None or self.recorder.listens:
                return original(query, timeout) if timeout is not None else original(query)
            while not original(query, POLL_SECONDS):  # over Connect: record each finished batch meanwhile
                self.recorder.flush(query)
            return None
        return wrapper

    def _await_any(self, original: Any) -> Any:
        def wrapper(manager, timeout=None):
            if timeout is not None or self.recorder is None or self.recorder.listens:
                return original(manager, timeout) if timeout is not None else original(manager)
            while not original(manager, POLL_SECONDS):
                for started in self.queries:
                    self.recorder.flush(started.query)
            return None
        return wrapper

    def _session_stop(self, original: Any) -> Any:
        def wrapper(session):
            self.stop_requested = True
            log.info("the job stopped its Spark session: the launcher stops it after recording and replaying the run")
        return wrapper


def _text(value: Any) -> str:
    """An option value as Spark receives it (``True`` → ``"true"``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _trigger_name(kwargs: dict[str, Any]) -> str | None:
    """``trigger(availableNow=True)`` → ``"availableNow"``; ``once`` / ``processingTime`` / ``continuous``
    likewise; None for no keyword set."""
    for name in ("availableNow", "once", "processingTime", "continuous", "realTime"):
        if kwargs.get(name) not in (None, False):
            return name
    return None


def _frame_of(writer: Any) -> Any:
    """The streaming DataFrame a ``DataStreamWriter`` writes: classic ``_df``; over Spark Connect a
    DataFrame of the writer's input plan (``WriteStreamOperation``'s child)."""
    frame = writer.__dict__.get("_df")
    if frame is not None:
        return frame
    from pyspark.sql.connect.dataframe import DataFrame

    return DataFrame(writer._write_stream._child, writer._session)


def _session_of(writer: Any) -> Any:
    """The session a ``DataStreamWriter`` belongs to (classic ``_spark``, Connect ``_session``)."""
    spark = writer.__dict__.get("_spark") or writer.__dict__.get("_session")
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    return spark
