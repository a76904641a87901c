"""The driver side every job shares, where it can be checked without running a job."""

from __future__ import annotations

import pytest

from streaming_driver import POLICY_CONF, checkpoint_watermark_policy


def test_checkpoint_watermark_policy_reads_the_latest_offsets_file(tmp_path):
    offsets = tmp_path / "cp" / "offsets"
    assert checkpoint_watermark_policy(str(tmp_path / "cp")) is None  # new checkpoint
    offsets.mkdir(parents=True)
    (offsets / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"%s":"max"}}\n-\n' % POLICY_CONF)
    (offsets / ".1.crc").write_text("ignored")
    assert checkpoint_watermark_policy(str(tmp_path / "cp")) == "max"
    # Spark before 2.4 wrote no policy: those checkpoints run with the default, min.
    (offsets / "1").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n-\n')
    assert checkpoint_watermark_policy(str(tmp_path / "cp")) == "min"
    (offsets / "2").write_text("v1\nnot json\n")
    with pytest.raises(ValueError, match=r"offsets/2: expected an offset log file"):
        checkpoint_watermark_policy(str(tmp_path / "cp"))
