"""Freshness judged against the data interval (issue 36 item 3): a checkpoint of historical data
whose progress records carry the data interval of the run that wrote them lags by its interval's
end, not by the wall clock. A backfill of 2010 data is on time for its interval (no alarm in
``status``, the overview or the monitor); the same checkpoint whose watermark falls far behind its
interval's end lags (an alarm); a checkpoint without the stamp keeps the wall-clock lag.

Hand-made checkpoints (``checkpoint_fixtures.handmade_checkpoint``) plus a progress log written as
the recorder writes it: batch times are now (a backfill runs today), event times are 2010."""

from __future__ import annotations

import json

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops.stall_fixtures import now_ms
from watermark_ops.terminal import cli
from watermark_ops.core.freshness import DATA_INTERVAL, WALL_CLOCK, data_interval, judge_lag

HOUR = 3_600_000
#: The backfilled interval: 2010-06-01T00:00:00Z -> 2010-06-02T00:00:00Z.
START, END = 1_275_350_400_000, 1_275_436_800_000


def _backfill(root, last_watermark_ms: int, *, stamped: bool = True) -> str:
    """A checkpoint of three batches run a few minutes ago over 2010 data (the watermark moving in
    each, ending at ``last_watermark_ms``), with its progress log; each record stamped with the
    run's data interval unless ``stamped`` is False."""
    ran = now_ms() - 5 * 60_000
    chain = [(0, START), (START, START + HOUR), (START + HOUR, last_watermark_ms)]
    cf.handmade_checkpoint(str(root), chain, timestamp_ms=ran)
    records = []
    for batch_id, (watermark, _) in enumerate(chain):
        record = {"query_id": "7d1b2a3c-0000-4000-8000-000000000001", "run_id": "r1", "run_tag": "backfill__2010-06-01",
                  "batch_id": batch_id, "timestamp_ms": ran + 60_000 * batch_id, "watermark_ms": watermark,
                  "event_time_min_ms": START, "event_time_max_ms": last_watermark_ms, "executed": True,
                  "input_rows": 10, "sources": [{"description": "FileStreamSource[file:/landing]", "input_rows": 10}]}
        if stamped:
            record["data_interval"] = {"start_ms": START, "end_ms": END}
        records.append(record)
    (root.parent / f"{root.name}.progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(root)


def _status(capsys, checkpoint: str) -> dict:
    code = cli.main(["status", checkpoint, "--json"])
    out, _ = capsys.readouterr()
    assert code == 0, out
    return json.loads(out)["classification"]


def _monitor(checkpoint: str) -> dict:
    from watermark_ops.airflow.monitor import evaluate_entry

    return evaluate_entry({"checkpoint": checkpoint, "missing_ok": False})


def test_the_flags_are_parsed_as_the_run_pattern_renders_them():
    assert data_interval("2010-06-01 00:00:00+00:00", "2010-06-02T00:00:00Z") == {"start_ms": START, "end_ms": END}
    assert data_interval("2010-06-01T02:00:00+02:00", "2010-06-02T00:00:00") == {"start_ms": START, "end_ms": END}
    assert data_interval("None", "None") is None and data_interval("", None) is None  # a run without an interval
    with pytest.raises(ValueError, match="ends .* before it starts"):
        data_interval("2010-06-02T00:00:00Z", "2010-06-01T00:00:00Z")
    with pytest.raises(ValueError, match="ISO-8601"):
        data_interval("yesterday", "2010-06-01T00:00:00Z")
    # only the newest record decides; a malformed stamp is judged by the wall clock
    records = {0: {"data_interval": {"start_ms": START, "end_ms": END}}, 1: {}}
    assert judge_lag(END - HOUR, END + 10 * HOUR, records).basis == WALL_CLOCK
    assert judge_lag(END - HOUR, END + 10 * HOUR, records, head_batch_id=0).lag_ms == HOUR
    assert judge_lag(END - HOUR, 0, {0: {"data_interval": {"start_ms": END, "end_ms": START}}}).basis == WALL_CLOCK


def test_a_backfill_whose_watermark_reached_its_interval_end_is_on_time(tmp_path, capsys):
    checkpoint = _backfill(tmp_path / "cp", END - 2 * HOUR)  # 2 h behind its interval's end, 16 years behind now
    c = _status(capsys, checkpoint)
    assert c["lag_basis"] == DATA_INTERVAL and c["lag_ms"] == 2 * HOUR
    assert c["data_interval"] == {"start_ms": START, "end_ms": END, "batch_id": 2,
                                  "start": "2010-06-01T00:00:00Z", "end": "2010-06-02T00:00:00Z"}
    assert c["state"] != "lagging" and "lagging" not in c["applies"] and c["alarm"] is False
    cli.main(["status", checkpoint])
    text, _ = capsys.readouterr()
    assert "lag (data interval end - watermark)" in text and "2 h" in text
    assert "data interval 2010-06-01T00:00:00Z -> 2010-06-02T00:00:00Z" in text and "(ALARM)" not in text
    result = _monitor(checkpoint)
    assert result["alarm"] is False and result["payload"] is None and result["counted"] != "lagging"

    from watermark_ops.core.overview import overview_row
    from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS

    row = overview_row(checkpoint, DEFAULT_THRESHOLDS)
    assert row["lag_basis"] == DATA_INTERVAL and row["lag_ms"] == 2 * HOUR and row["alarm"] is False
    assert row["state"] != "lagging"


def test_a_backfill_whose_watermark_falls_far_behind_its_interval_end_lags(tmp_path, capsys):
    checkpoint = _backfill(tmp_path / "cp", START + 4 * HOUR)  # 20 h behind its interval's end
    c = _status(capsys, checkpoint)
    assert c["state"] == "lagging" and c["alarm"] is True
    assert c["lag_basis"] == DATA_INTERVAL and c["lag_ms"] == 20 * HOUR
    assert "behind the end of its data interval 2010-06-01T00:00:00Z -> 2010-06-02T00:00:00Z" in c["reasons"][0]
    result = _monitor(checkpoint)
    assert result["alarm"] is True and result["counted"] == "lagging"
    assert result["payload"]["lag_basis"] == DATA_INTERVAL and result["payload"]["lag_ms"] == 20 * HOUR


def test_a_checkpoint_without_the_stamp_keeps_the_wall_clock_lag(tmp_path, capsys):
    checkpoint = _backfill(tmp_path / "cp", END - 2 * HOUR, stamped=False)
    c = _status(capsys, checkpoint)
    assert c["lag_basis"] == WALL_CLOCK and c["data_interval"] is None
    assert c["lag_ms"] == c["latest_batch"]["timestamp_ms"] - (END - 2 * HOUR)  # years
    assert c["state"] == "lagging" and c["alarm"] is True
    assert "behind the latest batch time" in c["reasons"][0]
    cli.main(["status", checkpoint])
    text, _ = capsys.readouterr()
    assert "lag (latest batch - watermark)" in text and "wall clock" in text
    result = _monitor(checkpoint)
    assert result["alarm"] is True and result["payload"]["lag_basis"] == WALL_CLOCK
