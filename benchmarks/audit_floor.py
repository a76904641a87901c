"""The least a Python process does to audit a checkpoint: the floor ``audit_benchmark.py`` compares
``watermark-ops audit`` with, beside ``cat``.

Usage: ``python benchmarks/audit_floor.py CHECKPOINT`` (a checkpoint ``audit_benchmark.py`` wrote).

It does only what no audit can skip, with the libraries the package uses and none of the package:
lists ``offsets/`` and ``commits/``, reads ``metadata`` and every batch file
(``os.open``/``os.read``), takes the watermarks out of Spark's exact text with one regular
expression per file (no object per batch, only a tuple of ints), walks the watermark chain once
(one check), decodes four fields of every progress-log record with msgspec, and prints the newest
50 batches in a ``rich`` table. It builds no value a face could use, applies one of the audit's
rules (the watermark never goes back) and handles no other form of file: a floor, not an alternative. Exits 1 when a file
is not in the exact form (the benchmark's checkpoint always is).
"""

from __future__ import annotations

import gc
import os
import re
import sys
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

OFFSETS = re.compile(rb'v1\n\{"batchWatermarkMs":(0|[1-9][0-9]{0,18}),"batchTimestampMs":(0|[1-9][0-9]{0,18}),'
                     rb'"conf":(\{[^\n]*\})\}\n([^\n].*)', re.S)
COMMIT = re.compile(rb'v([1-9][0-9]{0,8})\n\{"nextBatchWatermarkMs":(0|[1-9][0-9]{0,18})\}\n?')
Record = msgspec.defstruct("Record", [("batch_id", int), ("query_id", Any, None), ("run_id", Any, None),
                                      ("requested_conf", Any, None)])


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def main(root: str) -> int:
    gc.disable()  # as the audit: no reference cycle among what it builds
    offsets_ids = sorted(int(n) for n in os.listdir(f"{root}/offsets") if n.isdigit())
    commit_ids = {int(n) for n in os.listdir(f"{root}/commits") if n.isdigit()}
    _read(f"{root}/metadata")
    rows = []
    for i in offsets_ids:
        match = OFFSETS.fullmatch(_read(f"{root}/offsets/{i}"))
        commit = COMMIT.fullmatch(_read(f"{root}/commits/{i}")) if i in commit_ids else None
        if match is None or (i in commit_ids and commit is None):
            return 1
        rows.append((i, int(match.group(1)), int(match.group(2)), int(commit.group(2)) if commit else None))
    highest, regressed = -1, 0
    for _, watermark, _, next_watermark in rows:
        for value in (watermark, next_watermark):
            if value is not None:
                regressed += value < highest
                highest = max(highest, value)
    with open(f"{root}.progress.jsonl", "rb") as log:
        records = msgspec.json.Decoder(Record).decode_lines(log.read())
    table = Table(title=f"Batches ({len(rows)} in the logs)", title_justify="left")
    for column in ("batch", "watermark ms", "batch time ms", "next watermark ms"):
        table.add_column(column, justify="right")
    for row in rows[-50:]:
        table.add_row(*(str(value) for value in row))
    console = Console(highlight=False, emoji=False, width=160)
    console.print(table)
    console.print(f"{regressed} regressions, {len(records)} progress records")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
