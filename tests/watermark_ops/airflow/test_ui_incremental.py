"""The overview at scale, through Airflow's real api-server app: a repeat view reads no batch file,
a new batch is read alone, one evaluation serves concurrent viewers, problems come first and the
rows are paged with their totals."""

from __future__ import annotations

import threading

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops.airflow import ui_fixtures as uf

pytestmark = pytest.mark.timeout(300)
PREFIX = "/watermark-ops"


@pytest.fixture(scope="module")
def ui(spark, tmp_path_factory):
    return uf.build(spark, tmp_path_factory.mktemp("ui-incremental"), big_batches=300)


@pytest.fixture(scope="module")
def client(ui, airflow_db, tmp_path_factory):
    env = dict(ui.env(), AIRFLOW__WATERMARK_OPS__OVERVIEW_MAX_AGE="0")  # every view looks for changes
    with uf.admin_client(env, tmp_path_factory.mktemp("auth")) as test_client:
        yield test_client


@pytest.fixture
def batch_reads(monkeypatch):
    """The batch files (``offsets/N``, ``commits/N``) the checkpoint reader read (that existed),
    recorded around the real readers (local and fsspec)."""
    from watermark_ops.core import checkpoint

    seen: list[str] = []
    for storage in (checkpoint._LocalStorage, checkpoint._FsspecStorage):
        real = storage.read

        def read(self, paths, *args, _real=real, consume=None, **kwargs):
            taken: set[int] = set()  # files the reader parsed as they were read (not kept in the content)

            def spy(index, raw):
                if consume(index, raw):
                    taken.add(index)
                    return True
                return False

            content = _real(self, paths, *args, consume=spy if consume else None, **kwargs)
            seen.extend(p for i, p in enumerate(paths) if ("/offsets/" in p or "/commits/" in p)
                        and (i in taken or not isinstance(content(p), Exception)))
            return content

        monkeypatch.setattr(storage, "read", read)
    return seen


def _shared(client):
    mount = next(r for r in client.app.routes if getattr(r, "path", "") == PREFIX)
    return mount.app.state.overview


def _rows(client, **params):
    return client.get(f"{PREFIX}/api/checkpoints", params=params).json()


def test_a_repeat_view_reads_no_batch_file_and_a_new_batch_is_read_alone(client, ui, batch_reads):
    first = _rows(client, page_size=1000)
    by_location = {row["location"]: row for row in first["checkpoints"]}
    big = str(ui.root / "big")
    assert by_location[big]["head_batch_id"] == 299
    full = len(batch_reads)
    assert full >= 600  # the first view of this app read every checkpoint whole

    batch_reads.clear()
    again = _rows(client, page_size=1000)
    assert batch_reads == []  # metadata and one probe per checkpoint: no batch file
    assert again["checkpoints"] == first["checkpoints"] or \
           [{k: v for k, v in r.items() if k != "reason"} for r in again["checkpoints"]] == \
           [{k: v for k, v in r.items() if k != "reason"} for r in first["checkpoints"]]  # idle for a second longer
    assert again["evaluated_at"] >= first["evaluated_at"]

    cf.put(big, "offsets/300", cf.offsets_text(uf.BASE_MS + 300 * 60_000, 1_700_000_000_000 + 300 * 60_000,
                                                sources=[{"logOffset": 300}]))
    cf.put(big, "commits/300", cf.commit_text(uf.BASE_MS + 301 * 60_000))
    batch_reads.clear()
    grown = {row["location"]: row for row in _rows(client, page_size=1000)["checkpoints"]}
    assert sorted(p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1] for p in batch_reads
                  if p.startswith(big)) == ["commits/300", "offsets/300"]
    assert grown[big]["head_batch_id"] == 300 and grown[big]["findings"] == 0


def test_concurrent_viewers_share_one_evaluation(client, monkeypatch):
    shared = _shared(client)
    monkeypatch.setattr(shared, "max_age", 60.0)
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__OVERVIEW_MAX_AGE", "60")
    before = shared.refreshes
    barrier = threading.Barrier(8)
    replies = []

    def view():
        barrier.wait()
        replies.append(client.get(f"{PREFIX}/api/checkpoints"))

    threads = [threading.Thread(target=view) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status_code for r in replies] == [200] * 8
    assert shared.refreshes - before <= 1  # one refresh at most (none when the last one is still fresh)
    assert len({r.json()["evaluated_at"] for r in replies}) == 1


def test_problems_first_then_pages_with_totals(client, ui):
    whole = _rows(client, page_size=1000)
    rows = whole["checkpoints"]
    assert whole["total"] == len(rows) and whole["pages"] == 1
    ranks = [row["rank"] for row in rows]
    assert ranks == sorted(ranks) and ranks[0] == 0
    assert whole["problems"] == sum(1 for r in ranks if r <= 1)
    pages = [_rows(client, page=n, page_size=2) for n in range(1, whole["total"] // 2 + 2)]
    assert all(p["total"] == whole["total"] and p["page_size"] == 2 for p in pages)
    assert [row["location"] for p in pages for row in p["checkpoints"]][:whole["total"]] == \
           [row["location"] for row in rows]
    assert _rows(client, page=999, page_size=2)["page"] == pages[-1]["pages"]  # past the end: the last page
    assert client.get(f"{PREFIX}/api/checkpoints?page_size=0").status_code == 422
    assert client.get(f"{PREFIX}/api/checkpoints?page=0").status_code == 422
    html = client.get(f"{PREFIX}/?page=2&page_size=2").text
    assert f"Page 2 of {pages[0]['pages']}" in html
    assert f'href="{PREFIX}/?page=1&amp;page_size=2" rel="prev"' in html
    assert f'href="{PREFIX}/?page=3&amp;page_size=2" rel="next"' in html
