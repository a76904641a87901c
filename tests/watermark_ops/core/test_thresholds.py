"""Stall thresholds: validation, normalisation and the JSON round trip a trigger relies on."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from watermark_ops.core.stall import STATES
from watermark_ops.core.thresholds import Thresholds


def test_thresholds_validate_and_round_trip():
    t = Thresholds(max_lag="PT2H", max_idle=None, stall_batches="4")
    assert t.max_lag == timedelta(hours=2) and t.max_idle is None and t.stall_batches == 4
    assert Thresholds.from_dict(t.to_dict()) == t
    assert Thresholds.from_dict(json.loads(json.dumps(t.to_dict()))) == t
    with pytest.raises(ValueError, match="stall_batches"):
        Thresholds(stall_batches=0)
    with pytest.raises(ValueError, match="idle_after"):
        Thresholds(idle_after=None)
    with pytest.raises(ValueError, match="unknown threshold keys"):
        Thresholds.from_dict({"max_lag": 5})
    assert STATES == ("jumped", "stalled", "lagging", "idle", "advancing", "no_watermark", "watermark_unknown")
