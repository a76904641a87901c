"""The demo's table of runs (``make run``): readable at 80 columns, the full table when wider."""

from __future__ import annotations

import io

import pendulum
from rich.console import Console

from watermark_ops.examples.flights import demo

NY = "America/New_York"


def _rows():
    rows = []
    for day, watermark_ms, batch_ids, balance, failed in (
        ("2013-01-01", 1_357_092_120_000, [0, 1], "761 = 757 + 0 + 4", False),
        ("2013-01-02", 1_357_178_160_000, [2, 3], "948 = 890 + 48 + 10", False),
        ("2013-03-10", 0, [], "-", True),  # a failed run that never set the watermark
    ):
        start = pendulum.parse(day, tz=NY)
        rows.append({"start": start, "end": start.add(days=1), "failed": failed, "batch_ids": batch_ids,
                     "input_rows": 948, "quarantined": 10, "watermark_ms": watermark_ms, "windows": 53,
                     "late_groups": 8, "late_flights": "48", "balance": balance, "seconds": 31.4})
    return rows


def _render(width: int) -> str:
    console = Console(width=width, file=io.StringIO(), no_color=True, force_terminal=False)
    console.print(demo.runs_table(_rows(), console.width))
    return console.file.getvalue()


def test_runs_table_at_80_columns_keeps_every_watermark_whole():
    text = _render(80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "…" not in text
    # The watermark, shortened to MM-DD HH:mmZ, on one line; the unset one is "not set yet", not 1970.
    assert "01-02 02:02Z" in text and "01-03 01:56Z" in text and "not set yet" in text
    assert "1970" not in text
    assert "948 = 890 + 48 + 10" in text and "2013-01-02" in text and "failed" in text


def test_runs_table_when_wider_is_the_full_table():
    text = _render(160)
    assert "2013-01-02T02:02:00Z" in text and "2013-01-03T01:56:00Z" in text and "not set yet" in text
    assert "2013-01-01 → 2013-01-02" in text and "2013-03-10 → 2013-03-11" in text
    assert "…" not in text and "seconds" in text and "quarantined" in text


def test_timing_table_fits_80_columns():
    seconds = {"DAG run": 102.2, "land": 21.8, "spark start": 30.4, "micro-batches": 25.5, "spark stop": 0.7,
               "collect_progress": 0.6, "audit_checkpoint": 0.1, "windows_complete": 0.1, "Airflow": 23.0}
    rows = [{"start": row["start"], **seconds} for row in _rows()]
    console = Console(width=80, file=io.StringIO(), no_color=True, force_terminal=False)
    console.print(demo.timing_table(rows, console.width))
    text = console.file.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()) and "…" not in text
    assert "Airflow†" in text and "01-01   102.2   21.8" in text
    wide = Console(width=160, file=io.StringIO(), no_color=True, force_terminal=False)
    wide.print(demo.timing_table(rows, wide.width))
    assert "│ 2013-03-10 │ 102.2 │" in wide.file.getvalue()
