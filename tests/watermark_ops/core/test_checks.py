"""The one evaluation the sensors and the trigger share (``core.checks.check``), on real checkpoints."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.watermark_ops import stall_fixtures as sf
from watermark_ops.core.checks import check
from watermark_ops.core.stall import evaluate
from watermark_ops.core.thresholds import Thresholds

pytestmark = pytest.mark.timeout(300)


def test_check_outcomes_per_goal(spark, tmp_path):
    turns = sf.inputs_take_turns(spark)
    jumped = sf.backlog_then_future_record(spark)
    stalled = sf.one_input_without_data(spark)
    assert check(stalled.checkpoints["min"]).outcome == "wait"  # may heal: the sensor's timeout decides
    assert check(jumped.checkpoints["flights"]).outcome == "fail"  # never heals
    healthy = check(turns.checkpoints["min"], thresholds=Thresholds(max_idle=timedelta(days=3650)))
    assert healthy.outcome == "done" and healthy.classification.state in ("advancing", "idle")

    missing = str(tmp_path / "nothing-here")
    assert check(missing).outcome == "fail"
    assert check(missing, missing_ok=True).outcome == "skip"
    assert check(missing, goal="reached", target_ms=0).outcome == "wait"

    lagging = jumped.checkpoints["lagging"]
    emitted = evaluate(lagging).emitted_through_ms
    assert emitted == sf.log_values(lagging)[3]["watermark_ms"]  # availableNow: the trailing batch ran with it
    assert check(lagging, goal="reached", target_ms=emitted).outcome == "done"
    assert check(lagging, goal="reached", target_ms=emitted + 1).outcome == "wait"
    assert check(jumped.checkpoints["flights"], goal="reached", target_ms=0).outcome == "fail"
    assert check(jumped.checkpoints["flights"], goal="reached", target_ms=0, fail_on_jumped=False).outcome == "done"
    with pytest.raises(ValueError, match="target_ms"):
        check(lagging, goal="reached")
    with pytest.raises(ValueError, match="goal"):
        check(lagging, goal="complete")
