"""What differs over Spark Connect, without a server: URLs, the progress JSON's shapes, the version check."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyspark
import pytest

from watermark_ops.spark.connect import ConnectVersionMismatch, check_versions, with_session_id
from watermark_ops.spark import progress_record

# One progress of the flights job as a Spark Connect 4.2 server returned it for query.recentProgress
# (trimmed): observed metrics as values + schema, offsets as JSON text, no top-level numInputRows.
CONNECT_PROGRESS = {
    "id": "e5a93c19-da99-4e07-ba14-d70840c578d9", "runId": "0e0c8a4e-4a53-4d8e-a1a6-0d3c4bd0b9a1",
    "name": "flight_windows", "timestamp": "2026-11-25T09:49:35.000Z", "batchId": 2,
    "durationMs": {"addBatch": 900, "triggerExecution": 1500},
    "eventTime": {"watermark": "2013-01-02T02:02:00.000Z", "max": "2013-01-03T03:56:00.000Z"},
    "stateOperators": [{"numRowsTotal": 62, "numRowsRemoved": 53, "numRowsDroppedByWatermark": 8}],
    "sources": [{"description": "FileStreamSource[file:/l]", "startOffset": '{"logOffset":0}',
                 "endOffset": '{"logOffset":1}', "numInputRows": 948}],
    "sink": {"numOutputRows": -1},
    "observedMetrics": {"event_time_max_ms_by_origin": {
        "values": [1357185360000, 1357184460000, 1357183080000, None],
        "schema": {"type": "struct", "fields": [{"name": n, "type": "long", "nullable": True, "metadata": {}}
                                                 for n in ("EWR", "JFK", "LGA", "(other)")]}}},
}


def test_a_connect_progress_is_recorded_like_a_classic_one():
    record = progress_record(CONNECT_PROGRESS, "day2", "availableNow")
    assert record["input_rows"] == 948  # the sources' sum: Connect's JSON has no numInputRows
    assert record["sources"][0]["start_offset"] == {"logOffset": 0} and record["sources"][0]["end_offset"] == {"logOffset": 1}
    assert record["partition_column"] == "origin"
    assert record["event_time_max_ms_by_partition"] == {"EWR": 1357185360000, "JFK": 1357184460000,
                                                        "LGA": 1357183080000}
    assert record["observed_metrics"]["event_time_max_ms_by_origin"]["(other)"] is None
    assert record["rows_dropped_by_watermark"] == 8 and record["executed"] is True
    classic = json.loads(json.dumps(CONNECT_PROGRESS))
    classic["numInputRows"] = 948
    classic["sources"][0].update(startOffset={"logOffset": 0}, endOffset={"logOffset": 1})
    classic["observedMetrics"] = {"event_time_max_ms_by_origin": record["observed_metrics"]["event_time_max_ms_by_origin"]}
    assert progress_record(classic, "day2", "availableNow") == record


def test_session_id_goes_into_the_connection_url():
    sid = "6f1c2a59-2a8f-4a4e-9c1e-1f1b7d6a9e10"
    assert with_session_id("sc://127.0.0.1:15002", sid) == f"sc://127.0.0.1:15002/;session_id={sid}"
    assert with_session_id("sc://h:1/;user_id=a;session_id=old", sid) == f"sc://h:1/;user_id=a;session_id={sid}"


def test_a_server_of_another_release_is_refused_before_the_run():
    assert check_versions(SimpleNamespace(version=pyspark.__version__)) == pyspark.__version__
    with pytest.raises(ConnectVersionMismatch, match=rf"pyspark {pyspark.__version__} but the server runs Spark 4\.1\.1"):
        check_versions(SimpleNamespace(version="4.1.1"))
