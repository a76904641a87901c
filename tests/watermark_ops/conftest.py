"""Fixtures shared by the package's tests (the Spark session and the Airflow DB are in ``tests/conftest.py``)."""

from __future__ import annotations

import json

import pytest

from tests.watermark_ops.lateness_fixtures import progress_record, write_jsonl


@pytest.fixture
def checkpoint_with_log(tmp_path):
    """``(checkpoint, landing)``: a progress log of two runs (Spark counts 12 late partial aggregates on
    day2; its late rule names the job's event-time field ``observed_at``) plus a bad line, and a
    landing folder of readings whose 04:00 observation arrives 2 hours behind the newest."""
    checkpoint = tmp_path / "checkpoints" / "job"
    log = tmp_path / "checkpoints" / "job.progress.jsonl"
    log.parent.mkdir(parents=True)
    rule = {"kind": "window_end", "event_time": "observed_at", "window_ms": 3_600_000}
    log.write_text("".join(json.dumps({**r, "late_rule": rule}) + "\n" for r in [
        progress_record("r1", 0, 1000, 0, 1_356_998_400_000, "day1"),
        progress_record("r1", 1, 0, 0, 1_356_998_401_000, "day1"),
        progress_record("r2", 2, 1000, 12, 1_357_084_800_000, "day2"),
    ]) + "garbage\n")
    landing = tmp_path / "landing"
    write_jsonl(landing / "w.jsonl", [  # (observed hour, arrival hour): the 04:00 one arrives 2 h behind
        {"station": "north", "observed_at": f"2013-01-01T{h:02d}:00:00Z", "arrived_at": f"2013-01-01T{a:02d}:00:00Z"}
        for h, a in ((5, 6), (6, 7), (4, 7), (7, 8))
    ])
    return str(checkpoint), str(landing)
