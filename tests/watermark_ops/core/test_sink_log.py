"""The file sink's log (``_spark_metadata``): the files a streaming file sink committed.

One test reads a sink Spark itself wrote (a real availableNow query over CSV rows with a field
named ``event_time``, 12 micro-batches, so that Spark compacts its log at batch 9) and compares
with the files Spark's own batch read of the sink uses; the others give the reader log files
Spark's format allows but a short run does not produce (a ``delete`` entry) or that are corrupt.
"""

from __future__ import annotations

import json

from watermark_ops.core.sink_log import read_sink_log
from watermark_ops.core.storage import open_storage


def _status(path: str, action: str = "add") -> str:
    return json.dumps({"path": path, "size": 10, "isDir": False, "modificationTime": 1, "blockReplication": 1,
                       "blockSize": 33554432, "action": action})


def test_the_files_are_those_sparks_own_read_of_the_sink_uses(spark, tmp_path):
    landing, sink = tmp_path / "landing", tmp_path / "sink"
    landing.mkdir()
    for n in range(12):
        (landing / f"part-{n:02d}.csv").write_text(f"2024-05-01 10:{n:02d}:00,{n}\n")
    query = (spark.readStream.schema("event_time STRING, value INT").option("maxFilesPerTrigger", 1).csv(str(landing))
             .writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start(str(sink)))
    query.awaitTermination()
    assert (sink / "_spark_metadata" / "9.compact").exists()  # compacted: the reader must start from it
    storage, folder = open_storage(str(sink))
    listed = read_sink_log(storage, folder)
    assert listed.problems == ()
    assert sorted(listed.files) == sorted(spark.read.parquet(str(sink)).inputFiles())
    assert len(listed.files) == 12


def test_a_delete_entry_removes_the_file_and_a_compact_file_starts_the_log(tmp_path):
    log = tmp_path / "sink" / "_spark_metadata"
    log.mkdir(parents=True)
    (log / "0").write_text("v1\n" + _status("file:///sink/old.parquet"))  # before the compaction: not read
    a, b, c = "file:///sink/a.parquet", "file:///sink/b.parquet", "file:///sink/c.parquet"
    (log / "1.compact").write_text("\n".join(["v1", _status(a), _status(b)]))
    (log / "2").write_text("\n".join(["v1", _status(a, "delete"), _status(c)]))
    storage, folder = open_storage(str(tmp_path / "sink"))
    listed = read_sink_log(storage, folder)
    assert listed.problems == () and listed.files == (b, c)


def test_a_corrupt_log_file_is_reported_by_name_and_a_missing_log_is_said(tmp_path):
    log = tmp_path / "sink" / "_spark_metadata"
    log.mkdir(parents=True)
    (log / "0").write_text("v1\n" + _status("file:///sink/a.parquet"))
    (log / "1").write_text("v1\n{\"size\": 3}")
    storage, folder = open_storage(str(tmp_path / "sink"))
    listed = read_sink_log(storage, folder)
    ((problem),) = listed.problems
    assert problem.file.endswith("_spark_metadata/1") and "SinkFileStatus" in problem.message
    assert (log / "1").read_text() == "v1\n{\"size\": 3}"  # reported, never changed
    storage, folder = open_storage(str(tmp_path / "nowhere"))
    (missing,) = read_sink_log(storage, folder).problems
    assert missing.kind == "missing" and "_spark_metadata" in missing.file
