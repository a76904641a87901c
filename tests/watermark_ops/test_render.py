"""The rendering layer: the core's results as text tables and JSON, the same for every face."""

from __future__ import annotations

import io
import json

from rich.console import Console

from tests.watermark_ops import checkpoint_fixtures as cf
from watermark_ops import render
from watermark_ops.core.audit import run_audit
from watermark_ops.core.checkpoint import read_checkpoint
from watermark_ops.core.lateness import lateness_report
from watermark_ops.core.stall import classify
from watermark_ops.core.status import CheckpointStatus
from watermark_ops.core.thresholds import Thresholds

BASE_MS = 1_700_000_000_000  # the hand-made batches' first batchTimestampMs (one minute apart)


def test_signed_duration():
    assert render.signed_duration(None) == "" and render.signed_duration(0) == "0"
    assert render.signed_duration(6_840_000) == "+1 h 54 min"
    assert render.signed_duration(-5000) == "-5 s"
    assert render.signed_duration(90_061_001) == "+1 d 1 h"
    assert render.signed_duration(7) == "+7 ms"


def test_watermark_text_says_not_set_yet_for_spark_s_zero():
    assert render.watermark_text(0) == "not set yet"
    assert render.watermark_text(None) == "?" and render.watermark_text(None, "unknown") == "unknown"
    assert render.watermark_text(1_357_092_120_000) == "2013-01-02T02:02:00Z"


def test_audit_table_has_no_1970_and_no_change_from_the_unset_watermark(tmp_path):
    # Batch 0 runs with Spark's unset watermark (0); batch 1 is the first with one (2013-01-02T02:02Z).
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 1_357_092_120_000), (1_357_092_120_000, 1_357_092_120_000)])
    text = render.audit_report_text(run_audit(str(root)), width=400)
    batch_rows = [line for line in text.splitlines() if line.startswith("│ ") and "committed" in line]
    assert len(batch_rows) == 2
    assert "not set yet" in batch_rows[0] and "1970-01-01" not in text
    assert "2013-01-02T02:02:00Z" in batch_rows[1]
    assert "+" not in batch_rows[1]  # no "+15707 d 2 h" from the unset watermark


def test_the_batch_table_s_own_column_widths_are_what_rich_measures(tmp_path):
    """The audit's batch table gives rich the widths of its columns when it fits (rich then does not
    measure the cells again): the table must be the very one rich measures itself, in colour too,
    with an in-flight batch, a missing commit, an unreadable offsets file and a negative change."""
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 1_357_092_120_000), (1_357_092_120_000, 1_357_095_720_000),
                                       (1_357_095_720_000, 1_357_000_000_000), (1_357_000_000_000, None)])
    (root / "commits" / "1").unlink()
    (root / "offsets" / "2").write_text("v1\n{not json\n")
    report = run_audit(str(root))
    for limit in (0, 2):
        for color in (False, True):
            tables = []
            for width in (10_000, 0):  # own widths (it fits), rich's measuring (it never fits)
                console = Console(width=200, record=True, force_terminal=color, no_color=not color,
                                  file=io.StringIO(), highlight=False, emoji=False)
                table, _ = render._audit_batches_table(report, limit, width)
                console.print(table)
                tables.append(console.export_text(styles=color))
            assert tables[0] == tables[1] and "in flight" in tables[0]
            assert ("no commit" in tables[0]) == (limit == 0)  # batch 1 is not among the newest 2
    assert [c.width for c in render._audit_batches_table(report, 0, 200)[0].columns] == [5, 20, 13, 8, 20, 9]


def test_audit_text_is_the_table_without_colour(tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000), (2000, 2000)])
    text = render.audit_report_text(run_audit(str(root)), limit=2, width=400)  # wide: no folded paths
    assert "\x1b[" not in text  # plain text for task logs
    assert "Batches (3 in the logs)" in text and "(1 earlier batches not shown; --limit 0 shows all)" in text
    assert "-3 s" in text  # batch 2's watermark went back from 5000 to 2000 ms
    assert "watermark_regressed" in text and f"{root}/offsets/2" in text
    assert "status violation (exit 1)" in text


def test_an_emoji_code_in_a_path_is_printed_as_it_is(tmp_path, capsys):
    # rich turns ":x:" into an emoji unless told not to: a checkpoint path (or a message quoting a
    # conf value) holding one must reach the terminal and the task log unchanged.
    root = tmp_path / "team:x:checkpoint"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000)])
    report = run_audit(str(root))
    assert f"Checkpoint {root}" in render.audit_report_text(report, width=400)
    render.print_audit_report(report, render.terminal_console())
    assert f"Checkpoint {root}" in capsys.readouterr().out


def test_status_document_and_tables(tmp_path):
    root = tmp_path / "cp"
    cf.handmade_checkpoint(str(root), [(0, 5000), (5000, 9000), (9000, None)])
    checkpoint = read_checkpoint(str(root))
    status = CheckpointStatus.of(checkpoint)
    classification = classify(checkpoint, (), Thresholds(max_lag=None, max_skew=None), at_ms=BASE_MS + 3 * 60_000)
    document = render.status_document(status, classification)
    assert json.loads(json.dumps(document)) == document
    assert (document["head_batch_id"], document["in_flight_batch"], document["watermark_ms"]) == (2, 2, 9000)
    assert document["state"] == classification.state == "advancing"
    assert document["classification"]["watermark"] == "1970-01-01T00:00:09Z"
    assert render.status_document(status, None)["state"] is None

    console = Console(record=True, width=160)
    render.print_status(status, console)
    render.print_classification(classification, console)
    text = console.export_text()
    assert "next batch watermark" in text and "1970-01-01T00:00:09Z (9000 ms)" in text
    assert "in-flight batch" in text and "watermark state advancing" in text
    assert "latest batch" in text and "2 at " in text and "(in flight)" in text
    assert "max lag off" in text  # the thresholds line


def test_lateness_tables(checkpoint_with_log):
    checkpoint, landing = checkpoint_with_log
    console = Console(record=True, width=160)
    render.print_lateness_report(lateness_report(checkpoint, [landing]), console)
    text = console.export_text()
    assert "Late rows per run" in text and "late partial aggregates (Spark)" in text
    assert "day2" in text and "p99 2 h, max 2 h;" in " ".join(text.split())
    assert "Observed lateness of observed_at" in text and "delay threshold (withWatermark)" in text
    assert "expected one JSON object per line" in text  # the progress log's bad line
