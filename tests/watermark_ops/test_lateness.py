"""Late-data accounting and advice: pure functions on known distributions, files, the CLI hook."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest
from rich.console import Console

from watermark_ops import cli
from watermark_ops.lateness import (
    Advice,
    LatenessError,
    advise,
    command,
    drops_per_run,
    landed_lateness,
    lateness_report,
    observed_lateness,
    render_report,
    smallest_delay_threshold,
    spark_interval,
)

MINUTE, HOUR = 60_000, 3_600_000


def test_observed_lateness_is_distance_behind_the_newest_so_far():
    assert observed_lateness([10, 20, 15, 30, 5, 30, 29]) == [0, 0, 5, 0, 25, 0, 1]
    assert observed_lateness([]) == []


def test_advice_on_a_known_distribution():
    # 1000 events: 900 on time, 80 one minute late, 15 ten minutes, 4 an hour, 1 three hours.
    lateness = [0] * 900 + [MINUTE] * 80 + [10 * MINUTE] * 15 + [HOUR] * 4 + [3 * HOUR]
    one_percent, tenth = advise(lateness)
    # 1 %: at most 9 drops allowed; the 10th latest event is 10 minutes late, so it must be kept:
    # 10 min + 1 ms drops only the 5 events of 1 h and more.
    assert one_percent == Advice(0.01, 10 * MINUTE + 1, 5, 0.005)
    # 0.1 %: no drop allowed (1 would be 0.1 %, not below it): beyond the latest, 3 h.
    assert tenth == Advice(0.001, 3 * HOUR + 1, 0, 0.0)
    assert one_percent.delay_threshold == timedelta(minutes=10, milliseconds=1)
    assert one_percent.to_dict()["spark_interval"] == "10 minutes 1 milliseconds"
    # exactly 10 minutes would drop the 15 + 4 + 1 = 20 events at 10 minutes or more: 2 %
    assert sum(1 for x in lateness if x >= 10 * MINUTE) == 20


def test_smallest_delay_threshold_is_minimal_on_random_distributions():
    rng = random.Random(20130101)
    for _ in range(200):
        lateness = [int(rng.expovariate(1 / (30 * MINUTE))) for _ in range(rng.randint(1, 3000))]
        for rate in (0.01, 0.001, 0.5):
            threshold = smallest_delay_threshold(lateness, rate)
            dropped = sum(1 for x in lateness if x >= threshold)
            assert dropped < rate * len(lateness)
            assert threshold == 1 or sum(1 for x in lateness if x >= threshold - 1) >= rate * len(lateness)


def test_threshold_edge_cases():
    assert smallest_delay_threshold([], 0.01) == 0
    assert smallest_delay_threshold([0, 0, 0], 0.01) == 1  # on-time events: the smallest threshold keeps all
    with pytest.raises(LatenessError, match=r"max_drop_rate must be in \(0, 1\]"):
        smallest_delay_threshold([1], 0)
    with pytest.raises(LatenessError, match="lateness must be >= 0"):
        smallest_delay_threshold([5, -1], 0.5)
    assert spark_interval(2 * HOUR + 5 * MINUTE) == "2 hours 5 minutes"
    assert spark_interval(0) == "0 seconds"
    assert spark_interval(1500) == "1 seconds 500 milliseconds"


def _record(run_id, batch_id, input_rows, dropped, ts, tag=None, executed=True):
    return {"query_id": "q", "run_id": run_id, "run_tag": tag, "batch_id": batch_id, "input_rows": input_rows,
            "rows_dropped_by_watermark": dropped, "timestamp_ms": ts, "executed": executed}


def test_drops_per_run_groups_batches_by_run():
    records = [
        _record("r2", 2, 400, 8, 2000, "day2"), _record("r2", 3, 0, 0, 2100, "day2"),
        _record("r1", 0, 100, 0, 1000, "day1"), _record("r1", 1, 0, 0, 1100, "day1"),
        _record("r3", 4, 0, 0, 3000, "day3", executed=False),  # Trigger.Once restart with no input
    ]
    runs = drops_per_run(records)
    assert [(r.run_id, r.run_tag, r.batch_ids, r.input_rows, r.rows_dropped_by_watermark) for r in runs] == [
        ("r1", "day1", (0, 1), 100, 0), ("r2", "day2", (2, 3), 400, 8), ("r3", "day3", (), 0, 0)]
    assert [r.drop_rate for r in runs] == [0.0, 0.02, None]
    assert runs[1].started_ms == 2000
    assert json.loads(json.dumps(runs[1].to_dict()))["drop_rate"] == 0.02


def _write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def test_landed_lateness_follows_stream_time_across_files(tmp_path):
    landing = tmp_path / "flights"
    # File names and line order disagree with the arrival order: stream_time decides.
    _write_jsonl(landing / "flights_b.jsonl", [
        {"id": 3, "dep_time": "2013-01-01T10:00:00Z", "stream_time": "2013-01-01T13:00:00Z"},
        {"id": 4, "dep_time": None, "stream_time": "2013-01-01T13:30:00Z"},  # cancelled: skipped
    ])
    _write_jsonl(landing / "flights_a.jsonl", [
        {"id": 1, "dep_time": "2013-01-01T11:00:00Z", "stream_time": "2013-01-01T12:00:00Z"},
        {"id": 2, "dep_time": "2013-01-01T11:30:00Z", "stream_time": "2013-01-01T14:00:00Z"},
        "{not json",
    ])
    (landing / ".flights_c.jsonl.tmp").write_text("ignored: a file being written")
    measured = landed_lateness(str(landing))
    assert measured.event_time_field == "dep_time" and measured.files == 2
    assert measured.lateness_ms == [0, HOUR, 0]  # 11:00, then 10:00 (1 h behind), then 11:30
    assert (measured.no_event_time, measured.malformed) == (1, 1)
    assert len(measured.problems) == 1 and "flights_a.jsonl:3: expected one JSON object per line" in measured.problems[0]
    summary = measured.summary()
    assert (summary["events"], summary["late_events"], summary["max_lateness_ms"]) == (3, 1, HOUR)


def test_landed_lateness_errors(tmp_path):
    with pytest.raises(LatenessError, match="no such landing folder"):
        landed_lateness(str(tmp_path / "missing"))
    _write_jsonl(tmp_path / "x" / "a.jsonl", [{"when": "2013-01-01T00:00:00Z"}])
    with pytest.raises(LatenessError, match=r"a.jsonl:1: no event-time field"):
        landed_lateness(str(tmp_path / "x"))
    assert landed_lateness(str(tmp_path / "x"), event_time_field="when").lateness_ms == [0]


@pytest.fixture
def checkpoint_with_log(tmp_path):
    checkpoint = tmp_path / "checkpoints" / "job"
    log = tmp_path / "checkpoints" / "job.progress.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps(r) + "\n" for r in [
        _record("r1", 0, 1000, 0, 1_356_998_400_000, "day1"), _record("r1", 1, 0, 0, 1_356_998_401_000, "day1"),
        _record("r2", 2, 1000, 12, 1_357_084_800_000, "day2"),
    ]) + "garbage\n")
    landing = tmp_path / "landing"
    _write_jsonl(landing / "w.jsonl", [  # (observed hour, arrival hour): the 04:00 one arrives 2 h behind
        {"time_hour": f"2013-01-01T{h:02d}:00:00Z", "stream_time": f"2013-01-01T{a:02d}:00:00Z"}
        for h, a in ((5, 6), (6, 7), (4, 7), (7, 8))
    ])
    return str(checkpoint), str(landing)


def test_report_json_and_rich_rendering(checkpoint_with_log):
    checkpoint, landing = checkpoint_with_log
    report = lateness_report(checkpoint, [landing])
    assert json.loads(json.dumps(report)) == report  # JSON-ready (the DAG pushes it to XCom)
    assert report["progress_log"] == checkpoint + ".progress.jsonl"
    assert [(r["run_tag"], r["drop_rate"]) for r in report["runs"]] == [("day1", 0.0), ("day2", 0.012)]
    assert report["problems"] and "expected one JSON object per line" in report["problems"][0]
    (weather,) = report["inputs"]
    assert weather["event_time_field"] == "time_hour" and weather["max_lateness_ms"] == 2 * HOUR
    console = Console(record=True, width=160)
    render_report(report, console)
    text = console.export_text()
    assert "day2" in text and "1.2 %" in text and "2 hours 1 milliseconds" in text
    assert "progress log:" in text


def test_subcommand_of_the_watermark_ops_cli(checkpoint_with_log, capsys, tmp_path):
    checkpoint, landing = checkpoint_with_log
    parser = cli.build_parser()
    args = parser.parse_args(["lateness", checkpoint, "--json", "--landing", landing])
    assert args._run is command
    assert cli.main(["lateness", checkpoint, "--json", "--landing", landing]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["runs"][1]["rows_dropped_by_watermark"] == 12
    assert printed["inputs"][0]["max_lateness_ms"] == 2 * HOUR
    assert cli.main(["lateness", checkpoint]) == 0
    assert "Rows dropped by the watermark per run" in capsys.readouterr().out
    assert cli.main(["lateness", checkpoint, "--landing", str(tmp_path / "nowhere")]) == 2
    assert "no such landing folder" in capsys.readouterr().err
    for argv in (["--help"], ["lateness", "--help"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 0
        assert "lateness" in capsys.readouterr().out
