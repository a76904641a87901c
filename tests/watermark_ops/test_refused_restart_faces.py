"""A restart the driver refused (its diagnosis beside the checkpoint, ``<checkpoint>.diagnosis.json``)
shows on every face until a run succeeds, not only on the checkpoint page: ``status`` (text and
JSON), the overview's row (read whole, and the shared overview that reads only what changed) and
the monitor's alarms (issue 36 item 4). The launcher removes the file when a run succeeds: then
every face is quiet again."""

from __future__ import annotations

import json
from pathlib import Path

from tests.watermark_ops import checkpoint_fixtures as cf
from watermark_ops.terminal import cli
from watermark_ops.core.state.diagnosis import Diagnosis, diagnosis_path
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS

DIAGNOSIS = Diagnosis("window_duration_changed", "watermark-ops", "the query's window is 2 hours, the state's 1 hour",
                      "state/0/0/_metadata/schema", "restore the window the checkpoint was written with",
                      "CHECKPOINT", run_tag="scheduled__2", timestamp_ms=1_700_000_100_000)


def _refused(tmp_path) -> tuple[str, str]:
    """A healthy checkpoint with a refused restart standing beside it: ``(checkpoint, the line)``."""
    checkpoint = str(tmp_path / "cp")
    cf.handmade_checkpoint(checkpoint, [(0, 5000), (5000, 9000)])
    diagnosis = Diagnosis(**{**DIAGNOSIS.__dict__, "checkpoint": checkpoint})
    Path(diagnosis_path(checkpoint)).write_text(json.dumps(diagnosis.to_dict()))
    return checkpoint, diagnosis.line


def test_status_shows_the_refused_restart_until_a_run_succeeds(tmp_path, capsys):
    checkpoint, line = _refused(tmp_path)
    cli.main(["status", checkpoint, "--json"])
    refused = json.loads(capsys.readouterr().out)["refused_restart"]
    assert refused["line"] == line and refused["code"] == "window_duration_changed"
    assert refused["run_tag"] == "scheduled__2"
    cli.main(["status", checkpoint])
    text = " ".join(capsys.readouterr().out.split())
    assert "restart refused" in text and "window_duration_changed" in text
    Path(diagnosis_path(checkpoint)).unlink()  # a run succeeded: the launcher removed it
    cli.main(["status", checkpoint, "--json"])
    assert json.loads(capsys.readouterr().out)["refused_restart"] is None


def test_the_overview_row_shows_it_and_ranks_it_with_the_problems(tmp_path):
    from watermark_ops.core.overview import overview_row, page_of
    from watermark_ops.core.overview_cache import Job, SharedOverview

    checkpoint, line = _refused(tmp_path)
    row = overview_row(checkpoint, DEFAULT_THRESHOLDS)
    assert row["refused_restart"]["line"] == line and row["rank"] <= 1
    assert page_of([row])[1]["problems"] == 1
    shared = SharedOverview()
    (cached,) = shared.evaluate([Job("cp", checkpoint, DEFAULT_THRESHOLDS)]).rows.values()
    assert cached["refused_restart"]["line"] == line and cached["rank"] == row["rank"]
    Path(diagnosis_path(checkpoint)).unlink()
    (cleared,) = shared.evaluate([Job("cp", checkpoint, DEFAULT_THRESHOLDS)]).rows.values()
    assert cleared["refused_restart"] is None and overview_row(checkpoint, DEFAULT_THRESHOLDS)["refused_restart"] is None


def test_the_overview_page_says_it(tmp_path):
    from watermark_ops.core.overview import overview_row
    from watermark_ops.render.html import overview_page

    checkpoint, line = _refused(tmp_path)
    row = dict(overview_row(checkpoint, DEFAULT_THRESHOLDS), url=None)
    html = overview_page([row], base="/watermark-ops", roots={}, evaluated_at="2023-11-14T22:13:20Z")
    assert "restart refused" in html and "window_duration_changed" in html


def test_the_monitor_alarms_on_it_until_a_run_succeeds(tmp_path):
    from watermark_ops.airflow.monitor import evaluate_entry, summarize

    checkpoint, line = _refused(tmp_path)
    entry = {"checkpoint": checkpoint, "missing_ok": False, "name": "team / hourly"}
    result = evaluate_entry(entry)
    (alarm,) = result["restart_alarms"]
    assert alarm["kind"] == "restart_refused" and alarm["message"] == f"team / hourly: {line}"
    assert alarm in summarize([result])["alarms"]
    Path(diagnosis_path(checkpoint)).unlink()
    assert evaluate_entry(entry)["restart_alarms"] == []
