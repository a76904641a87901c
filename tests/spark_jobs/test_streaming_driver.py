"""The driver side every job shares, where it can be checked without running a job."""

from __future__ import annotations

import pytest

from watermark_ops.spark import POLICY_CONF, checkpoint_watermark_policy, land_tick, owed_trailing_batch


def test_checkpoint_watermark_policy_reads_the_latest_offsets_file(tmp_path):
    offsets = tmp_path / "cp" / "offsets"
    assert checkpoint_watermark_policy(str(tmp_path / "cp")) is None  # new checkpoint
    offsets.mkdir(parents=True)
    (offsets / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"%s":"max"}}\n-\n' % POLICY_CONF)
    (offsets / ".1.crc").write_text("ignored")
    assert checkpoint_watermark_policy(str(tmp_path / "cp")) == "max"
    # Spark before 2.4 wrote no policy: those checkpoints run with the default, min.
    (offsets / "1").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n-\n')
    assert checkpoint_watermark_policy(str(tmp_path / "cp")) == "min"
    (offsets / "2").write_text("v1\nnot json\n")
    with pytest.raises(ValueError, match=r"offsets/2: expected an offset log file"):
        checkpoint_watermark_policy(str(tmp_path / "cp"))


def _batch(root, batch_id: int, watermark: int, next_watermark: int | None) -> None:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "commits").mkdir(exist_ok=True)
    (root / "offsets" / str(batch_id)).write_text(
        'v1\n{"batchWatermarkMs":%d,"batchTimestampMs":1,"conf":{}}\n{"logOffset":%d}' % (watermark, batch_id))
    if next_watermark is not None:
        (root / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":%d}' % next_watermark)


def test_a_trailing_batch_is_owed_only_after_a_commit_that_moved_the_watermark(tmp_path):
    root = tmp_path / "cp"
    assert owed_trailing_batch(str(root)) is None  # new checkpoint
    _batch(root, 0, 0, 5000)  # data batch committed, the watermark moved: its trailing batch is owed
    assert owed_trailing_batch(str(root)) == 0
    _batch(root, 1, 5000, 5000)  # the trailing batch ran
    assert owed_trailing_batch(str(root)) is None
    _batch(root, 2, 5000, None)  # in flight: Spark re-runs it, its trailing batch follows
    assert owed_trailing_batch(str(root)) is None
    # Trigger.Once never runs the trailing batch: nothing is owed after a batch it ran.
    (tmp_path / "cp.progress.jsonl").write_text('{"batch_id": 0, "spark_trigger": "availableNow"}\n'
                                                '{"batch_id": 3, "spark_trigger": "once"}\n')
    _batch(root, 3, 5000, 9000)
    assert owed_trailing_batch(str(root)) is None
    _batch(root, 4, 9000, 12000)  # no record: its driver died before the progress listener wrote one
    assert owed_trailing_batch(str(root)) == 4
    tick = land_tick(str(tmp_path / "landing"), str(root) + "/", 0)
    assert tick.endswith("/landing/watermark-ops-tick-cp-0.jsonl") and (tmp_path / "landing" / tick.rsplit("/", 1)[1]).read_bytes() == b""


def test_progress_record_copies_the_per_partition_event_times_out_of_observed_metrics():
    """The shape Spark 4.2 reports (``StreamingQueryProgress.observedMetrics``, a long per partition)."""
    from watermark_ops.spark import progress_record

    progress = {"id": "q", "runId": "r", "batchId": 3, "timestamp": "2026-01-01T00:00:00.000Z",
                "numInputRows": 5, "durationMs": {"addBatch": 1},
                "observedMetrics": {"event_time_max_ms_by_origin": {"EWR": 1357099320000, "JFK": None,
                                                                    "LGA": 1357092600000, "(other)": None}}}
    record = progress_record(progress, None, "availableNow")
    assert record["partition_column"] == "origin"
    # (other) is kept only when a row of an unnamed value came: here none did.
    assert record["event_time_max_ms_by_partition"] == {"EWR": 1357099320000, "JFK": None, "LGA": 1357092600000}
    progress["observedMetrics"]["event_time_max_ms_by_origin"]["(other)"] = 1357000000000
    assert progress_record(progress, None, "once")["event_time_max_ms_by_partition"]["(other)"] == 1357000000000
    # A query that observes no partition (the quarantine query) records null for both.
    plain = progress_record({**progress, "observedMetrics": {"quarantine": {"rows": 1}}}, None, "availableNow")
    assert plain["partition_column"] is None and plain["event_time_max_ms_by_partition"] is None


def test_observe_partition_event_times_refuses_no_partitions_or_the_other_bucket():
    from watermark_ops.spark import observe_partition_event_times

    for bad in ((), ("EWR", "(other)")):
        with pytest.raises(ValueError, match="expected partition values"):
            observe_partition_event_times(None, "origin", bad)
