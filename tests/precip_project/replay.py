"""An independent pandas replay of the weekly_precip job: from the landed Parquet files and the
checkpoint's logs alone, every 7-day window (sliding by 1 day) per weather that Spark wrote, with the
batch that wrote it, and the rows and (row, window) pairs Spark dropped as late.

The rules (``shared/spark-checkpoint-facts.md``, "Sliding and session windows"; Spark 3.4+, one data
batch per run): batch N read the files the file source logged (``sources/0``) past batch N-1's offset up to its own (``offsets/N``) and ran with the watermark of
``offsets/N`` (second line, ``batchWatermarkMs``). A row falls in the 7 windows whose start (a whole
day since the epoch) is in ``(date - 7 days, date]``. Each (row, window) pair is judged alone: dropped
iff the window's end is at or before the previous batch's watermark, so one row can be dropped from
some of its windows and kept in the others. A (window, weather) group is written by the first batch
whose watermark is at or past its end.

    python replay.py LANDING CHECKPOINT                # prints the figures as JSON
    python replay.py --check LANDING CHECKPOINT SINK   # and exits 1 unless the sink holds exactly these windows

``--allowed-lateness DAYS`` (default 30): the corrections are the groups that lost a row whose window
ended less than this before the watermark that dropped it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd

DAY_MS = 86_400_000
SIZE_MS, SLIDE_MS = 7 * DAY_MS, DAY_MS
KEYS = ("weather",)


# -- the checkpoint's and the sink's logs (shared with ../spells_project/replay.py) --------------

def local_path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme in ("file", "") else uri


def log_entries(folder: Path) -> dict[str, list[dict]]:
    """``{file name: [JSON lines after the version header]}`` of a metadata log (names that are a
    batch id, or ``N.compact``; temp and checksum files skipped)."""
    out = {}
    if not folder.is_dir():
        return out
    for path in folder.iterdir():
        if not path.name.split(".")[0].isdigit() or path.name.endswith((".tmp", ".crc")):
            continue
        lines = path.read_text().splitlines()[1:]
        out[path.name] = [json.loads(line) for line in lines if line.strip().startswith("{")]
    return out


def watermarks(checkpoint: Path) -> dict[int, int]:
    """``{batch id: batchWatermarkMs}`` from ``offsets/N``'s second line."""
    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            out[int(path.name)] = int(json.loads(path.read_text().splitlines()[1]).get("batchWatermarkMs", 0))
    return dict(sorted(out.items()))


def source_offsets(checkpoint: Path) -> dict[int, int]:
    """``{batch id: the file source's logOffset}`` from ``offsets/N``'s first source line (v1 ``{"logOffset":1}``,
    v2 ``0:{"logOffset":1}``; ``-`` = no offset yet, -1)."""
    out = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            line = path.read_text().splitlines()[2].strip()
            line = line.split(":", 1)[1] if line[:1].isdigit() else line
            out[int(path.name)] = -1 if line == "-" else int(json.loads(line)["logOffset"])
    return dict(sorted(out.items()))


def files_by_batch(checkpoint: Path) -> dict[int, list[str]]:
    """``{batch id: [local paths]}`` each batch read: the file source's log (``sources/0``, compacted
    files included) keeps its own batch ids (its ``logOffset``), so batch N read the entries whose id
    is past batch N-1's logOffset and at most batch N's."""
    by_offset: dict[int, list[str]] = {}
    for entries in log_entries(checkpoint / "sources" / "0").values():
        for entry in entries:
            by_offset.setdefault(int(entry["batchId"]), []).append(local_path(entry["path"]))
    out, before = {}, -1
    for batch, offset in source_offsets(checkpoint).items():
        out[batch] = sorted({p for o in range(before + 1, offset + 1) for p in by_offset.get(o, [])})
        before = max(before, offset)
    return out


def sink_files(sink: Path) -> list[tuple[int | None, str]]:
    """``[(batch id or None for a compacted log, local path)]`` the file sink committed (``_spark_metadata``)."""
    out = []
    for name, entries in log_entries(sink / "_spark_metadata").items():
        batch = None if name.endswith(".compact") else int(name)
        out += [(batch, local_path(e["path"])) for e in entries if e.get("action", "add") == "add"]
    return sorted(out, key=lambda item: (item[0] is None, item[0] or 0, item[1]))


def read_sink(sink: Path) -> pd.DataFrame:
    """Every committed row of the Parquet sink with its ``batch``; a ``window`` struct is split into
    ``window_start_ms`` and ``window_end_ms``; timestamps become epoch ms."""
    import pyarrow.parquet as pq

    frames = []
    for batch, path in sink_files(sink):
        table = pq.read_table(path).flatten()
        frame = table.to_pandas()
        frame.columns = [c.replace("window.start", "window_start").replace("window.end", "window_end")
                         for c in frame.columns]
        for column in ("window_start", "window_end"):
            frame[column + "_ms"] = frame.pop(column).astype("datetime64[ns]").astype("int64") // 10**6
        frame["batch"] = batch
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def previous_watermarks(marks: dict[int, int]) -> dict[int, int]:
    """The watermark a batch filters its late rows with: the previous batch's (0 for the first)."""
    ids = list(marks)
    return {batch: (marks[ids[i - 1]] if i else 0) for i, batch in enumerate(ids)}


# -- this job ---------------------------------------------------------------------------------------

def landed(landing: Path) -> pd.DataFrame:
    """Every landed row with its file and row number; ``good`` and ``ts_ms`` as the job parses them."""
    frames = []
    for path in sorted(landing.glob("*.parquet")):
        frame = pd.read_parquet(path)
        frame["file"], frame["line"] = str(path.resolve()), range(1, len(frame) + 1)
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True)
    at = pd.to_datetime(rows["date"], format="%Y-%m-%d", errors="coerce")
    rows["good"] = at.notna() & rows["precipitation"].notna() & (rows["precipitation"] >= 0)
    rows["ts_ms"] = (at.astype("int64") // 10**6).where(at.notna(), -1)
    return rows


def values(rows: pd.DataFrame) -> dict:
    return {"days": int(len(rows)), "precipitation_mm": math.fsum(rows["precipitation"]),
            "mean_temp_max": float(rows["temp_max"].mean())}


def replay(landing: Path, checkpoint: Path, allowed_ms: int) -> dict:
    rows, marks = landed(landing), watermarks(checkpoint)
    previous, files = previous_watermarks(marks), files_by_batch(checkpoint)
    state: dict[tuple, list[int]] = {}
    written, drops = [], []
    for batch, mark in marks.items():
        for i in rows.index[rows["file"].isin(files.get(batch, [])) & rows["good"]]:
            ts = int(rows.at[i, "ts_ms"])
            for start in range(ts // SLIDE_MS * SLIDE_MS - SIZE_MS + SLIDE_MS, ts + 1, SLIDE_MS):
                key = (start, start + SIZE_MS, rows.at[i, "weather"])
                if key[1] <= previous[batch]:
                    drops.append({"row": i, "batch": batch, "window_start_ms": key[0], "window_end_ms": key[1],
                                  "watermark_ms": previous[batch], "late_by_ms": previous[batch] - key[1]})
                else:
                    state.setdefault(key, []).append(i)
        for key in sorted(k for k in state if k[1] <= mark):
            written.append({"window_start_ms": key[0], "window_end_ms": key[1], "keys": {"weather": key[2]},
                            "batch": batch, "values": values(rows.loc[state.pop(key)])})
    good = rows[rows["good"]]

    def row_of(i: int) -> dict:
        r = rows.loc[i]
        return {"file": r["file"], "line": int(r["line"]), "date": r["date"], "weather": r["weather"],
                "precipitation": float(r["precipitation"])}

    late = []
    for i in dict.fromkeys(d["row"] for d in drops):
        mine = [d for d in drops if d["row"] == i]
        late.append({**row_of(i), "batch": mine[0]["batch"], "watermark_ms": mine[0]["watermark_ms"],
                     "windows_dropped": [{"window_start_ms": d["window_start_ms"], "window_end_ms": d["window_end_ms"]}
                                         for d in mine], "windows_kept": 7 - len(mine)})
    emitted = {(w["window_start_ms"], w["keys"]["weather"]): w for w in written}
    corrections = []
    for start, end, weather in sorted({(d["window_start_ms"], d["window_end_ms"], rows.at[d["row"], "weather"])
                                       for d in drops if d["late_by_ms"] < allowed_ms}):
        inside = good[(good["weather"] == weather) & (good["ts_ms"] >= start) & (good["ts_ms"] < end)]
        before = emitted.get((start, weather))
        corrections.append({"window_start_ms": start, "window_end_ms": end, "keys": {"weather": weather},
                            "emitted": before and before["values"], "corrected": values(inside),
                            "late_rows": sorted(d["row"] for d in drops if (d["window_start_ms"], rows.at[d["row"], "weather"]) == (start, weather)),
                            "retracts": []})
    for c in corrections:
        c["late_rows"] = [row_of(i) for i in c["late_rows"]]
    return {"watermarks": marks, "windows": written, "late_rows": late,
            "window_drops": [{**row_of(d["row"]), **{k: v for k, v in d.items() if k != "row"}} for d in drops],
            "rows_late_partly": [r for r in late if r["windows_kept"]], "corrections": corrections,
            "rows_in": int(len(rows)), "rows_bad": int((~rows["good"]).sum())}


def differences(windows: list[dict], sink: pd.DataFrame) -> list[str]:
    """What differs between the replay's windows and the sink's rows (batch, counts and sums exact,
    means within 1e-9); empty when they are equal."""
    mine = {(w["window_start_ms"], w["window_end_ms"], w["keys"]["weather"]): w for w in windows}
    theirs = {(int(r.window_start_ms), int(r.window_end_ms), r.weather): r for r in sink.itertuples()}
    out = [f"only in the replay: {key} {mine[key]}" for key in sorted(set(mine) - set(theirs))]
    out += [f"only in the sink: {key} {theirs[key]}" for key in sorted(set(theirs) - set(mine))]
    if len(theirs) != len(sink):
        out.append(f"the sink holds {len(sink)} rows for {len(theirs)} windows (a window written twice)")
    for key in sorted(set(mine) & set(theirs)):
        w, r = mine[key], theirs[key]
        v = w["values"]
        if (w["batch"], v["days"], v["precipitation_mm"]) != (r.batch, r.days, r.precipitation_mm) or abs(
                v["mean_temp_max"] - r.mean_temp_max) > 1e-9:
            out.append(f"differs: {key} replay batch {w['batch']} {v}, sink batch {r.batch} days {r.days} "
                       f"precipitation_mm {r.precipitation_mm!r} mean_temp_max {r.mean_temp_max!r}")
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
    print(json.dumps({k: v for k, v in result.items() if k != "windows"} | {"windows_written": len(result["windows"])},
                     default=str))
    if args.check:
        found = differences(result["windows"], read_sink(args.sink))
        for line in found:
            print(line, file=sys.stderr)
        print(f"{len(result['windows'])} windows replayed; {len(found)} differences", file=sys.stderr)
        return 1 if found else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
