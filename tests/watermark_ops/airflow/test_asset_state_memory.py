"""The audit memory in Airflow's asset state store: its keys (the store itself is exercised by the operator tests)."""

from __future__ import annotations

from watermark_ops.airflow.memory import AssetStateStoreMemory


def test_asset_state_store_keys():
    memory = AssetStateStoreMemory(store=None)
    assert memory.key("/data/cp/") == "watermark_audit:/data/cp"
    long_location = "s3://bucket/" + "x" * 600
    key = memory.key(long_location)
    assert len(key) <= AssetStateStoreMemory.MAX_KEY_LENGTH and key.startswith("watermark_audit:sha256:")
    assert key == memory.key(long_location + "/") != memory.key(long_location + "y")
