"""An independent computation of what flight_windows must write: Spark's watermark rules replayed in pandas.

Used by the job's own tests (restarts on one session) and by the crash-restart test (restarts
through the DAG after SIGKILL): whatever happened in between, the sinks must equal this.

Per run: rows whose 1-hour window ended at or before the watermark the run's data batch ran with
are dropped as late; after that batch the watermark is max(previous, max event time − delay
threshold); a window is emitted once the watermark passes its end.
"""

from __future__ import annotations

import json

import pandas as pd

DELAY_MS = 2 * 3600 * 1000  # the job's default delay threshold, "2 hours"
HOUR_MS = 3600 * 1000


def landed_rows(landed) -> pd.DataFrame:
    """Every event the runs landed (``land_interval`` summaries, one per run, in run order)."""
    return pd.concat(pd.DataFrame([json.loads(line) for line in open(s["path"])]) for s in landed)


def expected_windows(landed, delay_ms: int = DELAY_MS):
    """Pandas replay of Spark's watermark rules over the landed files, run by run.

    :return: ``(emitted windows frame [origin, window_start_ms, departures, mean_dep_delay,
        max_dep_delay], rows dropped as late, the watermark of each run's data batch, the final
        watermark)``; watermarks in epoch ms UTC.
    """
    watermark, kept, dropped, watermarks = 0, [], 0, []
    for summary in landed:
        frame = pd.DataFrame([json.loads(line) for line in open(summary["path"])])
        good = frame[frame.dep_time.notna() & frame.arr_time.notna()].copy()
        good["event_ms"] = pd.to_datetime(good.dep_time).astype("int64") // 10**6
        good["window_start_ms"] = good.event_ms // HOUR_MS * HOUR_MS
        late = good.window_start_ms + HOUR_MS <= watermark  # window already closed: dropped
        dropped += int(late.sum())
        kept.append(good[~late])
        watermarks.append(watermark)
        watermark = max(watermark, int(good.event_ms.max()) - delay_ms)
    rows = pd.concat(kept)
    windows = rows.groupby(["origin", "window_start_ms"]).agg(
        departures=("id", "size"), mean_dep_delay=("dep_delay", "mean"), max_dep_delay=("dep_delay", "max")
    ).reset_index()
    emitted = windows[windows.window_start_ms + HOUR_MS <= watermark]
    return emitted, dropped, watermarks, watermark


def assert_sink_equals(sink: pd.DataFrame, emitted: pd.DataFrame) -> None:
    """The Parquet sink holds exactly the predicted windows: none missing, none extra, none twice."""
    sink = sink.copy()
    sink["window_start_ms"] = pd.to_datetime(sink.window_start, utc=True).astype("int64") // 10**6
    assert not sink.duplicated(["origin", "window_start_ms"]).any(), "a window was written twice"
    merged = emitted.merge(sink, on=["origin", "window_start_ms"], how="outer", indicator=True,
                           suffixes=("_pandas", "_spark"))
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"]
    assert (merged.departures_pandas == merged.departures_spark).all()
    assert (merged.max_dep_delay_pandas == merged.max_dep_delay_spark).all()
    assert ((merged.mean_dep_delay_pandas - merged.mean_dep_delay_spark).abs() < 1e-9).all()


def assert_quarantine_equals(quarantine: pd.DataFrame, landed) -> None:
    """The quarantine sink holds every cancelled and diverted flight landed, each exactly once."""
    rows = landed_rows(landed)
    assert not quarantine.id.duplicated().any(), "a quarantined row was written twice"
    assert (quarantine.reason == "null_event_time").sum() == (rows.status == "cancelled").sum() > 0
    assert (quarantine.reason == "no_arrival").sum() == (rows.status == "diverted").sum()
    assert set(quarantine.id) == set(rows[rows.status.isin(["cancelled", "diverted"])].id)
