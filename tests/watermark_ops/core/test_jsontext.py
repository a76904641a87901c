"""JSON from files this package does not control: deep nesting is bad JSON, not a crash."""

from __future__ import annotations

import json

import pytest

from watermark_ops.core.jsontext import loads


def test_loads_is_json_loads():
    assert loads('{"batchWatermarkMs": 5000}') == {"batchWatermarkMs": 5000}
    assert loads(b"[1, 2]") == [1, 2]
    with pytest.raises(json.JSONDecodeError):
        loads("{cut")


def test_deep_nesting_is_a_decode_error():
    for text in ("[" * 100_000 + "]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000):
        with pytest.raises(json.JSONDecodeError, match="nested too deeply"):
            loads(text)
