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


class _Accessor:
    """What ``context["asset_state_store"][asset]`` offers a task: get, set, delete of JSON values."""

    def __init__(self, values=None):
        self.values = dict(values or {})

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value

    def delete(self, key):
        self.values.pop(key, None)


def test_a_tail_an_earlier_version_remembered_is_read_as_a_view_and_moved_to_its_key(tmp_path):
    """The sensors' tail (``watermark_tail:<checkpoint>``, format 1) is not ignored: it is the view's
    window until the view is saved under ``watermark_view:<checkpoint>``, then it is deleted."""
    from tests.watermark_ops import checkpoint_fixtures as cf
    from watermark_ops.core.tail import follow
    from watermark_ops.core.view import load_view, save_view

    root = str(tmp_path / "cp")
    cf.handmade_checkpoint(root, [(0, 5000), (5000, 9000)])
    old = follow(root, None, newest=100).to_dict()
    old["format"] = 1
    for key in ("head_size", "audit", "progress", "state"):
        old.pop(key)
    registry = _Accessor({f"watermark_tail:{root}": old})
    memory = AssetStateStoreMemory(None, views=registry)
    view = load_view(memory, root)
    assert view.window.head_batch_id == 1 and view.remembered is None
    moved = follow(root, view, newest=100)
    assert not moved.requests["listed"]  # moved on from the old tail, by name
    assert save_view(memory, root, moved, previous=view)
    assert set(registry.values) == {f"watermark_view:{root}"}
    assert load_view(AssetStateStoreMemory(None, views=registry), root) == moved


def test_the_audit_head_and_the_view_live_on_their_assets(tmp_path):
    from tests.watermark_ops import checkpoint_fixtures as cf
    from watermark_ops.core.audit import run_audit

    root = str(tmp_path / "cp")
    cf.handmade_checkpoint(root, [(0, 5000), (5000, 9000)])
    heads, views = _Accessor(), _Accessor()
    memory = AssetStateStoreMemory(heads, views=views)
    assert run_audit(root, memory).reads["mode"] == "full"
    assert set(heads.values) == {f"watermark_audit:{root}"} and set(views.values) == {f"watermark_view:{root}"}
    assert heads.values[f"watermark_audit:{root}"]["head_batch_id"] == 1 and "view" not in heads.values[f"watermark_audit:{root}"]
    written = dict(views.values)
    again = run_audit(root, AssetStateStoreMemory(heads, views=views))
    assert again.reads["mode"] == "incremental" and views.values == written  # nothing changed: the view not rewritten
