"""Long reads show progress (issue 36 item 8): the core's readers call an optional
``on_progress(done, total)`` every few hundred files, counts only growing and ending at the total
(local and fsspec alike); the CLI draws rich's bar only on a terminal and never when piped or with
``--json``; a task log gets a line every few seconds of a slow read."""

from __future__ import annotations

import json
import logging
import uuid

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from watermark_ops.terminal import cli
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.storage import PROGRESS_EVERY

BATCHES = 700  # 1,401 files: metadata, 700 offsets, 700 commits


def _chain(n: int = BATCHES) -> list[tuple[int, int]]:
    return [(1000 * i, 1000 * (i + 1)) for i in range(n)]


@pytest.fixture(params=["local", "memory"])
def long_history(request, tmp_path):
    root = str(tmp_path / "cp") if request.param == "local" else f"memory://progress-{uuid.uuid4().hex}/cp"
    cf.handmade_checkpoint(root, _chain())
    return root


def test_the_callback_counts_up_to_every_file_to_read(long_history):
    calls = []
    checkpoint = read_checkpoint(long_history, on_progress=lambda done, total: calls.append((done, total)))
    assert len(checkpoint.batches) == BATCHES and not checkpoint.problems
    total = 2 * BATCHES + 1
    assert calls[-1] == (total, total)
    assert len(calls) >= total // PROGRESS_EVERY  # a sign of life every PROGRESS_EVERY files
    dones = [done for done, _ in calls]
    assert dones == sorted(set(dones)) and all(0 < done <= t for done, t in calls)  # strictly growing
    # Without a callback nothing is counted: the same read.
    assert read_checkpoint(long_history).batches == checkpoint.batches


def test_the_cli_prints_no_progress_when_piped_or_with_json(tmp_path, capsys):
    root = str(tmp_path / "cp")
    cf.handmade_checkpoint(root, _chain())
    assert cli.main(["audit", root]) == 0
    piped = capsys.readouterr()
    assert "reading files" not in piped.out + piped.err and "status ok" in piped.out
    assert cli.main(["audit", root, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["status"] == "ok" and err == ""


def test_the_bar_is_drawn_only_for_a_terminal_without_json():
    import argparse

    from watermark_ops.terminal.progress import wants_progress

    class Terminal:
        def isatty(self):
            return True

    class Pipe:
        def isatty(self):
            return False

    assert wants_progress(argparse.Namespace(json=False), Terminal(), Terminal())
    assert not wants_progress(argparse.Namespace(json=True), Terminal(), Terminal())
    assert not wants_progress(argparse.Namespace(json=False), Pipe(), Terminal())
    assert not wants_progress(argparse.Namespace(json=False), Terminal(), Pipe())


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_a_slow_read_logs_a_line_every_few_seconds():
    """On an fsspec memory filesystem, a read whose every piece takes 3 s (a clock the read moves):
    a line every 5 s or so, naming the checkpoint and the files read of the files to read."""
    from watermark_ops.airflow.read_progress import logged_progress

    root = f"memory://progress-{uuid.uuid4().hex}/cp"
    cf.handmade_checkpoint(root, _chain(2000))  # 4,001 files: 16 pieces of 256
    now = [0.0]

    def clock():
        now[0] += 3.0  # each call: one more piece read, 3 s later
        return now[0]

    logger = logging.getLogger(f"watermark_ops.test.read_progress.{uuid.uuid4().hex}")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler := _Lines())
    with logged_progress(root, logger=logger, clock=clock):
        read_checkpoint(root)
    assert 5 <= len(handler.lines) <= 10, handler.lines  # 16 pieces over 48 s: a line per 5 s, not per piece
    assert all(line.startswith(f"reading {root}: ") and " of 4,001 files (" in line for line in handler.lines)
    assert handler.lines[-1].endswith("4,001 of 4,001 files (100 %)")
    # A quick read (under 5 s) logs nothing.
    handler.lines.clear()
    with logged_progress(root, logger=logger):
        read_checkpoint(root)
    assert handler.lines == []
