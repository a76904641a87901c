"""An independent pandas replay of the weather_spells job: from the landed JSON-lines files and the
checkpoint's logs alone, every session window (spell) per weather that Spark wrote, with the batch
that wrote it, the rows Spark dropped as late, and the corrections an allowed lateness implies.

The rules (``shared/spark-checkpoint-facts.md``, "Sliding and session windows"; Spark 3.4+): batch
N read the files the file source logged past batch N-1's offset up to its own and ran with the
watermark of ``offsets/N``. Each input row is judged alone as its one-row session [date, date + 1
day): dropped iff that end is at or before the previous batch's watermark. Kept rows merge with the
weather's sessions in state (next start <= end: days one gap apart are one spell); a session is
written, and leaves the state for good, by the first batch whose watermark is at or past its end. A
written session is final: Spark never retracts it, so a late day between two written spells of its
weather is dropped, and only a correction can join them.

The corrections: per weather, every spell over every landed row that is closed (its end at or before
the last watermark) and is not one Spark wrote, when it holds a dropped row or overlaps a written
spell; each with the written spells it retracts (those it overlaps).

    python replay.py LANDING CHECKPOINT                # prints the figures as JSON
    python replay.py --check LANDING CHECKPOINT SINK   # and exits 1 unless the sink holds exactly these spells
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path

import pandas as pd

LOGS = runpy.run_path(str(Path(__file__).resolve().parents[1] / "precip_project" / "replay.py"))
DAY_MS = 86_400_000
GAP_MS = DAY_MS


def landed(landing: Path) -> pd.DataFrame:
    """Every landed row with its file and line; ``good`` and ``ts_ms`` as the job parses them."""
    frames = []
    for path in sorted(landing.glob("*.json")):
        frame = pd.read_json(path, lines=True, dtype={"date": str}, convert_dates=False, keep_default_dates=False)
        frame["file"], frame["line"] = str(path.resolve()), range(1, len(frame) + 1)
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True)
    at = pd.to_datetime(rows["date"], format="%Y-%m-%d", errors="coerce")
    rows["good"] = at.notna()
    rows["ts_ms"] = (at.astype("int64") // 10**6).where(at.notna(), -1)
    return rows


def merge(sessions: list[list]) -> list[list]:
    """``[start, end, [row ids]]`` merged where the next start is at or before the end."""
    out: list[list] = []
    for start, end, ids in sorted(sessions, key=lambda s: (s[0], s[1])):
        if out and start <= out[-1][1]:
            out[-1][1], out[-1][2] = max(out[-1][1], end), out[-1][2] + ids
        else:
            out.append([start, end, list(ids)])
    return out


def values(rows: pd.DataFrame) -> dict:
    """Days and total precipitation, summed one day after the other in date order as Spark's sum
    does over a session's sorted rows (so the double is Spark's to the last bit)."""
    total = 0.0
    for mm in rows.sort_values("ts_ms")["precipitation"]:
        total += float(mm)
    return {"days": int(len(rows)), "precipitation_mm": total}


def replay(landing: Path, checkpoint: Path, allowed_ms: int) -> dict:
    rows, marks = landed(landing), LOGS["watermarks"](checkpoint)
    previous, files = LOGS["previous_watermarks"](marks), LOGS["files_by_batch"](checkpoint)
    state: dict[str, list[list]] = {}
    written, dropped = [], []
    for batch, mark in marks.items():
        for i in rows.index[rows["file"].isin(files.get(batch, [])) & rows["good"]]:
            ts, weather = int(rows.at[i, "ts_ms"]), rows.at[i, "weather"]
            if ts + GAP_MS <= previous[batch]:
                dropped.append({"row": i, "batch": batch, "watermark_ms": previous[batch],
                                "late_by_ms": previous[batch] - ts - GAP_MS})
            else:
                state.setdefault(weather, []).append([ts, ts + GAP_MS, [i]])
        for weather in sorted(state):
            merged = merge(state[weather])
            for start, end, ids in merged:
                if end <= mark:
                    written.append({"window_start_ms": start, "window_end_ms": end, "keys": {"weather": weather},
                                    "batch": batch, "values": values(rows.loc[ids]), "rows": ids})
            state[weather] = [s for s in merged if s[1] > mark]

    def row_of(i: int) -> dict:
        r = rows.loc[i]
        return {"file": r["file"], "line": int(r["line"]), "date": r["date"], "weather": r["weather"],
                "precipitation": float(r["precipitation"])}

    late = [{**row_of(d["row"]), "batch": d["batch"], "watermark_ms": d["watermark_ms"], "late_by_ms": d["late_by_ms"],
             "windows_dropped": [{"window_start_ms": int(rows.at[d["row"], "ts_ms"]),
                                  "window_end_ms": int(rows.at[d["row"], "ts_ms"]) + GAP_MS}]} for d in dropped]
    last = list(marks.values())[-1] if marks else 0
    recoverable = {d["row"] for d in dropped if d["late_by_ms"] < allowed_ms}
    good = rows[rows["good"]]
    corrections = []
    for weather, part in good.groupby("weather"):
        truth = merge([[int(ts), int(ts) + GAP_MS, [i]] for i, ts in part["ts_ms"].items()])
        mine = [w for w in written if w["keys"]["weather"] == weather]
        for start, end, ids in truth:
            same = [w for w in mine if (w["window_start_ms"], w["window_end_ms"]) == (start, end)
                    and w["values"] == values(rows.loc[ids])]
            overlapping = [w for w in mine if w["window_start_ms"] < end and start < w["window_end_ms"]]
            holds_late = sorted(set(ids) & recoverable)
            if end > last or same or not (holds_late or overlapping):
                continue
            corrections.append({"window_start_ms": start, "window_end_ms": end, "keys": {"weather": weather},
                                "corrected": values(rows.loc[ids]), "late_rows": [row_of(i) for i in holds_late],
                                "retracts": [{"window_start_ms": w["window_start_ms"],
                                              "window_end_ms": w["window_end_ms"], "values": w["values"],
                                              "batch": w["batch"]} for w in overlapping]})
    truth_closed = []
    for weather, part in good.groupby("weather"):
        truth_closed += [{"window_start_ms": s, "window_end_ms": e, "keys": {"weather": weather},
                          "values": values(rows.loc[ids])}
                         for s, e, ids in merge([[int(ts), int(ts) + GAP_MS, [i]] for i, ts in part["ts_ms"].items()])
                         if e <= last]
    return {"watermarks": marks, "windows": [{k: v for k, v in w.items() if k != "rows"} for w in written],
            "late_rows": late, "window_drops": [{**r, **r["windows_dropped"][0]} for r in late],
            "rows_late_partly": [], "corrections": corrections,
            "merging_late_rows": [r for c in corrections if len(c["retracts"]) >= 2 for r in c["late_rows"]],
            "sessions_over_every_row": truth_closed, "rows_in": int(len(rows)), "rows_bad": int((~rows["good"]).sum())}


def differences(windows: list[dict], sink: pd.DataFrame) -> list[str]:
    """What differs between the replay's spells and the sink's rows (batch, days and sums exact)."""
    mine = {(w["window_start_ms"], w["window_end_ms"], w["keys"]["weather"]): w for w in windows}
    theirs = {(int(r.window_start_ms), int(r.window_end_ms), r.weather): r for r in sink.itertuples()}
    out = [f"only in the replay: {key} {mine[key]}" for key in sorted(set(mine) - set(theirs))]
    out += [f"only in the sink: {key} {theirs[key]}" for key in sorted(set(theirs) - set(mine))]
    if len(theirs) != len(sink) or len(mine) != len(windows):
        out.append(f"a spell written twice: sink {len(sink)} rows for {len(theirs)} spells, replay {len(windows)}")
    for key in sorted(set(mine) & set(theirs)):
        w, r = mine[key], theirs[key]
        if (w["batch"], w["values"]["days"], w["values"]["precipitation_mm"]) != (r.batch, r.days, r.precipitation_mm):
            out.append(f"differs: {key} replay batch {w['batch']} {w['values']}, sink batch {r.batch} days {r.days} "
                       f"precipitation_mm {r.precipitation_mm!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--allowed-lateness", type=float, default=30, help="days")
    parser.add_argument("landing", type=Path)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("sink", type=Path, nargs="?")
    args = parser.parse_args(argv)
    result = replay(args.landing, args.checkpoint, int(args.allowed_lateness * DAY_MS))
    print(json.dumps(result, default=str))
    if args.check:
        found = differences(result["windows"], LOGS["read_sink"](args.sink))
        for line in found:
            print(line, file=sys.stderr)
        print(f"{len(result['windows'])} spells replayed; {len(found)} differences", file=sys.stderr)
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
