"""The core on object storage: a real Spark-written checkpoint, its progress log and landed files
on the S3 API (the session's moto server), read over HTTP with s3fs exactly as against AWS.

Each reader gives on S3 what it gives on the local copy (audit, stall evaluation, late-row
ledger, lateness report); listings are fresh in a long-lived filesystem; a throttled, missing or
half-written object is read again within a bound and then reported by name, never fixed.
"""

from __future__ import annotations

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops import object_storage_fixtures as osf
from watermark_ops.core.audit import run_audit
from watermark_ops.core.checkpoint import RETRY_DELAYS_S, read_checkpoint
from watermark_ops.core.lateness import lateness_report
from watermark_ops.core.ledger import late_ledger
from watermark_ops.core.stall import evaluate
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS
from watermark_ops.examples.s3server import error_xml


@pytest.fixture(scope="module")
def history(spark):
    return cf.restart_history(spark)


@pytest.fixture(scope="module")
def on_s3(history, s3_server):
    """``(url, landing_url)``: the checkpoint at ``s3://<bucket>/cp`` with its progress log, the
    landed files at ``s3://<bucket>/landing`` (the source log naming them there)."""
    fs = s3_server.filesystem()
    bucket = osf.new_bucket(fs)
    url, landing = f"s3://{bucket}/cp", f"s3://{bucket}/landing"
    osf.upload(fs, osf.s3_files(history.checkpoint, url, history.dirs.landing, landing))
    return url, landing


def _without_locations(value, local: str, url: str):
    """A JSON-ready value with the S3 location spelled as the local one (to compare the two)."""
    import json

    return json.loads(json.dumps(value).replace(url, local))


def test_audit_on_s3_equals_the_local_audit(history, on_s3, s3_server):
    url, _ = on_s3
    remote = run_audit(url, filesystem=s3_server.filesystem(), now_ms=1)
    local = run_audit(str(history.checkpoint), now_ms=1)
    assert remote.status == "ok" and remote.head_batch_id == local.head_batch_id
    assert _without_locations(remote.to_dict(), str(history.checkpoint), url) == local.to_dict()
    # the same through storage options (what fsspec builds from a URL), no filesystem given
    assert run_audit(url, storage_options=s3_server.storage_options(), now_ms=1).to_dict() == remote.to_dict()


def test_stall_evaluation_on_s3_reads_the_progress_log_there(history, on_s3, s3_server):
    url, _ = on_s3
    at = read_checkpoint(str(history.checkpoint)).batches[-1].timestamp_ms + 60_000
    remote = evaluate(url, DEFAULT_THRESHOLDS, at=at, filesystem=s3_server.filesystem())
    local = evaluate(str(history.checkpoint), DEFAULT_THRESHOLDS, at=at)
    assert _without_locations(remote.to_dict(), str(history.checkpoint), url) == local.to_dict()
    assert remote.history == local.history and remote.inputs == local.inputs  # progress records were read


def test_ledger_and_lateness_on_s3_equal_the_local_ones(history, on_s3, s3_server):
    url, landing = on_s3
    fs = s3_server.filesystem()
    remote = late_ledger(url, filesystem=fs)
    local = late_ledger(str(history.checkpoint))
    assert remote.complete and local.complete and remote.totals() == local.totals()
    assert [b.files for b in remote.batches] == [
        tuple(f.replace(f"file://{history.dirs.landing}", landing.replace("s3://", "s3a://")) for f in b.files)
        for b in local.batches]
    report = lateness_report(url, [landing], filesystem=fs)
    expected = lateness_report(str(history.checkpoint), [str(history.dirs.landing)])
    assert [r.to_dict() for r in report.runs] == [r.to_dict() for r in expected.runs]
    assert report.inputs[0].lateness_ms == expected.inputs[0].lateness_ms and report.inputs[0].files > 0


def test_a_long_lived_filesystem_sees_a_new_batch(history, s3_server):
    """s3fs caches listings forever by default: every listing the core makes is fresh."""
    fs = s3_server.filesystem()
    bucket = osf.new_bucket(fs)
    url = f"s3://{bucket}/cp"
    files = osf.s3_files(history.checkpoint, url)
    head = osf.offsets_ids(history.checkpoint)[-1]
    newest = {k: v for k, v in files.items() if k.endswith((f"/offsets/{head}", f"/commits/{head}"))}
    osf.upload(fs, {k: v for k, v in files.items() if k not in newest})
    watcher = s3_server.filesystem()  # kept, as the triggerer and the api-server keep theirs
    assert read_checkpoint(url, filesystem=watcher).head_batch_id == head - 1
    assert watcher.ls(f"{url}/offsets")  # its listing cache now holds offsets/
    fs.pipe(newest)  # another process (the Spark driver) writes the next batch
    assert read_checkpoint(url, filesystem=watcher).head_batch_id == head
    assert read_checkpoint(url, filesystem=watcher, newest=3).head_batch_id == head


def test_throttled_missing_and_half_written_objects_are_retried_then_reported_by_name(history, s3_server):
    fs = s3_server.filesystem()
    url = osf.uploaded_checkpoint(fs, history.checkpoint)
    ids = osf.offsets_ids(history.checkpoint)
    healthy = read_checkpoint(url, filesystem=fs)
    proxy = osf.counting(s3_server)
    try:
        throttled, gone, half = (osf.key_path(f"{url}/offsets/{ids[1]}"), osf.key_path(f"{url}/commits/{ids[2]}"),
                                 osf.key_path(f"{url}/offsets/{ids[3]}"))
        answered: dict[str, int] = {}

        def transient(method, path):  # each fails twice, then the object is there whole
            key = path.split("?", 1)[0]
            if method != "GET" or key not in (throttled, gone, half):
                return None
            answered[key] = answered.get(key, 0) + 1
            if answered[key] > 2:
                return None
            if key == throttled:
                return 503
            return (404, error_xml("NoSuchKey")) if key == gone else (200, b"v1\n{\"batchWatermarkMs\":")

        proxy.fail = transient
        # botocore and s3fs retry a 503 themselves: no retries of theirs, to see the core's
        reader = osf.proxied_filesystem(proxy, config_kwargs={"retries": {"max_attempts": 1}})
        reader.retries = 1
        assert read_checkpoint(url, filesystem=reader) == healthy
        assert answered == {throttled: 3, gone: 3, half: 3}

        proxy.fail = lambda method, path: 503 if path.split("?", 1)[0] == throttled else None
        broken = read_checkpoint(url, filesystem=reader)
        problem, = broken.problems
        assert problem.kind == "unreadable" and problem.file == f"{url}/offsets/{ids[1]}"
        assert f"the same in {1 + len(RETRY_DELAYS_S)} reads" in problem.message
        assert broken.batch(ids[1]).offsets is None and broken.batch(ids[2]).offsets is not None  # the rest is read

        proxy.fail = lambda method, path: (200, b"") if path.split("?", 1)[0] == half else None
        problem, = read_checkpoint(url, filesystem=reader).problems
        assert problem.kind == "empty" and problem.file == f"{url}/offsets/{ids[3]}"
        assert fs.cat_file(f"{url}/offsets/{ids[3]}") == (history.checkpoint / "offsets" / str(ids[3])).read_bytes()
    finally:
        proxy.close()
