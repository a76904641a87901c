"""Many teams, one UI: each team sees only the checkpoints of its own DAGs, through Airflow's real
api-server app, the real SimpleAuthManager in multi-team mode and the real metadata DB.

Two teams (``alpha``, ``beta``), each with its own DAG bundle (a folder with one real DAG file, the
bundle tied to the team in ``[dag_processor] dag_bundle_config_list``, as the DAG processor syncs it).
Alpha's DAG audits its checkpoint through ``dag.test()`` and so registers it; beta's checkpoint is
claimed by beta's DAG through the monitor config's ``dag_ids``; a third is claimed by both DAGs (the
config), a fourth by none.
Every checkpoint is a copy of the shared real Spark-written restart history.

Users (``name:role:team``): alice (viewer, alpha), bob (user, beta), admin (admin, no team), and
guest (no role: with SimpleAuthManager the only user who may not read assets).
"""

from __future__ import annotations

import json

import pytest

from tests.watermark_ops import checkpoint_fixtures as cf
from tests.watermark_ops.airflow.registry_fixtures import clear_registry
from tests.watermark_ops.airflow.team_fixtures import sync_teams, team_bundles

pytestmark = pytest.mark.timeout(300)

PREFIX = "/watermark-ops"


@pytest.fixture(scope="module")
def teams(spark, airflow_db, tmp_path_factory):
    """The deployment above; yields ``{user: logged-in TestClient}`` and the checkpoints' places."""
    from fastapi.testclient import TestClient

    folder = tmp_path_factory.mktemp("teams")
    history = cf.restart_history(spark)
    root = folder / "root"
    root.mkdir()
    for name in ("alpha-orders", "beta-orders", "shared", "unclaimed"):
        cf.copy_checkpoint(history.checkpoint, root / name)
    bundles = team_bundles(folder, {team: root / f"{team}-orders" for team in ("alpha", "beta")})
    config = folder / "watermark_monitor.json"
    config.write_text(json.dumps({"checkpoints": [
        {"checkpoint": str(root / "beta-orders"), "dag_ids": ["beta_orders_audit"]},
        {"checkpoint": str(root / "shared"), "dag_ids": ["alpha_orders_audit", "beta_orders_audit"]},
        {"checkpoint": str(root / "unclaimed")},
    ]}))
    passwords = folder / "passwords.json"
    passwords.write_text(json.dumps({"admin": "admin", "alice": "alice", "bob": "bob", "guest": "guest"}))

    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "AIRFLOW__CORE__MULTI_TEAM": "True",
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,alice:viewer:alpha,bob:user:beta,guest:",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS": json.dumps({"teams": str(root)}),
            "AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG": str(config),
        }.items():
            patch.setenv(name, value)
        patch.delenv("AIRFLOW__WATERMARK_OPS__CHECKPOINTS", raising=False)
        # What `airflow teams create` and the DAG processor do: the teams, the bundles tied to them,
        # each bundle's DAGs parsed into the DB.
        dags = sync_teams()
        clear_registry()
        run = dags["alpha_orders_audit"].test()  # registers alpha's checkpoint under its DAG id
        assert str(run.state) == "success"

        from airflow.api_fastapi.app import create_app

        with TestClient(create_app("core"), base_url="http://127.0.0.1") as app_client:
            clients = {}
            for user in ("admin", "alice", "bob", "guest"):
                client = TestClient(app_client.app, base_url="http://127.0.0.1")
                reply = client.post("/auth/token", json={"username": user, "password": user})
                assert reply.status_code in (200, 201), reply.text
                client.headers["Authorization"] = f"Bearer {reply.json()['access_token']}"
                clients[user] = client
            yield clients, root


def _rows(client) -> dict[str, dict]:
    reply = client.get(f"{PREFIX}/api/checkpoints")
    assert reply.status_code == 200, reply.text
    return {row["location"]: row for row in reply.json()["checkpoints"]}


def test_the_teams_are_airflows_own(teams):
    """Airflow itself scopes the DAGs by team: what the pages follow."""
    from airflow.models.dag import DagModel

    clients, _ = teams
    assert DagModel.get_team_name("alpha_orders_audit") == "alpha"
    assert DagModel.get_team_name("beta_orders_audit") == "beta"
    alice, bob = clients["alice"], clients["bob"]
    assert alice.get("/api/v2/dags/alpha_orders_audit").status_code == 200
    assert alice.get("/api/v2/dags/beta_orders_audit").status_code == 403
    assert bob.get("/api/v2/dags/beta_orders_audit").status_code == 200
    assert bob.get("/api/v2/dags/alpha_orders_audit").status_code == 403


def test_each_team_sees_only_its_own_rows(teams):
    clients, root = teams
    alpha, beta, shared, unclaimed = (str(root / name) for name in ("alpha-orders", "beta-orders", "shared",
                                                                    "unclaimed"))
    alice, bob, admin = _rows(clients["alice"]), _rows(clients["bob"]), _rows(clients["admin"])
    assert set(alice) == {alpha, shared, unclaimed}  # a viewer may read assets: the unclaimed one too
    assert set(bob) == {beta, shared, unclaimed}
    assert set(admin) == {alpha, beta, shared, unclaimed}
    # The checkpoint both teams' DAGs claim: each team is told only its own DAG.
    assert alice[shared]["dag_ids"] == ["alpha_orders_audit"] and bob[shared]["dag_ids"] == ["beta_orders_audit"]
    assert admin[shared]["dag_ids"] == ["alpha_orders_audit", "beta_orders_audit"]
    assert alice[alpha]["dag_ids"] == ["alpha_orders_audit"] and alice[alpha]["audit_status"] == "ok"
    assert bob[beta]["dag_ids"] == ["beta_orders_audit"] and bob[beta]["audit_status"] == "ok"
    assert _rows(clients["guest"]) == {}  # no role: no DAG, no asset

    page = clients["alice"].get(f"{PREFIX}/")
    assert page.status_code == 200
    assert f'href="{PREFIX}/checkpoints/teams/alpha-orders"' in page.text
    assert "beta-orders" not in page.text and "beta_orders_audit" not in page.text
    page = clients["bob"].get(f"{PREFIX}/").text
    assert f'href="{PREFIX}/checkpoints/teams/beta-orders"' in page and "alpha-orders" not in page
    page = clients["admin"].get(f"{PREFIX}/").text
    assert all(f'href="{PREFIX}/checkpoints/teams/{name}"' in page
               for name in ("alpha-orders", "beta-orders", "shared", "unclaimed"))


@pytest.mark.parametrize("user, allowed, refused", [
    ("alice", ["alpha-orders", "shared", "unclaimed"], ["beta-orders"]),
    ("bob", ["beta-orders", "shared", "unclaimed"], ["alpha-orders"]),
    ("admin", ["alpha-orders", "beta-orders", "shared", "unclaimed"], []),
    ("guest", [], ["alpha-orders", "beta-orders", "shared", "unclaimed"]),
])
def test_a_checkpoint_page_of_another_team_is_403_before_it_is_read(teams, user, allowed, refused, monkeypatch):
    import watermark_ops.core.snapshot as snapshot  # where the pages read a checkpoint (one read, then judged)

    client = teams[0][user]
    for name in allowed:
        assert client.get(f"{PREFIX}/api/checkpoints/teams/{name}").json()["audit"]["status"] == "ok"
        assert client.get(f"{PREFIX}/checkpoints/teams/{name}").status_code == 200
    read = []
    monkeypatch.setattr(snapshot, "read_checkpoint", lambda *a, **k: read.append(a) or pytest.fail("read"))
    for name in refused:
        reply = client.get(f"{PREFIX}/api/checkpoints/teams/{name}")
        assert reply.status_code == 403 and "not shown to this user" in reply.json()["detail"]
        page = client.get(f"{PREFIX}/checkpoints/teams/{name}")
        assert page.status_code == 403 and "Checkpoint not shown" in page.text
        assert client.get(f"{PREFIX}/api/checkpoints/teams/{name}/").status_code in (400, 403, 404)
    assert read == []


def test_the_dag_tab_leads_only_to_ones_own_checkpoint(teams):
    clients, _ = teams
    alice, bob = clients["alice"], clients["bob"]
    reply = alice.get(f"{PREFIX}/dags/alpha_orders_audit?task_id=audit_orders", follow_redirects=False)
    assert reply.status_code == 307 and reply.headers["location"] == f"{PREFIX}/checkpoints/teams/alpha-orders"
    reply = bob.get(f"{PREFIX}/dags/beta_orders_audit", follow_redirects=False)  # two checkpoints: the overview
    assert reply.status_code == 307 and reply.headers["location"] == f"{PREFIX}/"
    assert alice.get(f"{PREFIX}/dags/beta_orders_audit", follow_redirects=False).status_code == 403
    assert bob.get(f"{PREFIX}/dags/alpha_orders_audit?task_id=audit_orders", follow_redirects=False).status_code == 403


def test_an_unreadable_config_hides_what_only_it_claims(teams, tmp_path, monkeypatch):
    """Beta's checkpoint is claimed through the config only: with the config broken its claim is
    unknown, so its page is refused to everyone (not shown as unclaimed); alpha's registered claim holds."""
    clients, _ = teams
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    monkeypatch.setenv("AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG", str(bad))
    for user in ("alice", "admin"):
        assert clients[user].get(f"{PREFIX}/api/checkpoints/teams/beta-orders").status_code == 403
        assert clients[user].get(f"{PREFIX}/api/checkpoints/teams/unclaimed").status_code == 403
        assert clients[user].get(f"{PREFIX}/api/checkpoints/teams/alpha-orders").status_code == 200
    assert clients["bob"].get(f"{PREFIX}/api/checkpoints/teams/alpha-orders").status_code == 403
    rows = clients["alice"].get(f"{PREFIX}/api/checkpoints").json()["checkpoints"]
    assert "cannot read the monitor config" in rows[0]["error"]


def test_each_team_pages_through_its_own_rows_only(teams):
    """The user's filter comes before paging: the totals and pages count only what the user may see."""
    clients, root = teams
    alice = clients["alice"].get(f"{PREFIX}/api/checkpoints?page_size=2").json()
    assert (alice["total"], alice["pages"], len(alice["checkpoints"])) == (3, 2, 2)
    second = clients["alice"].get(f"{PREFIX}/api/checkpoints?page_size=2&page=2").json()
    assert len(second["checkpoints"]) == 1
    seen = {row["location"] for row in alice["checkpoints"] + second["checkpoints"]}
    assert seen == {str(root / name) for name in ("alpha-orders", "shared", "unclaimed")}
    guest = clients["guest"].get(f"{PREFIX}/api/checkpoints?page_size=2").json()
    assert (guest["total"], guest["pages"], guest["checkpoints"]) == (0, 1, [])
    page = clients["bob"].get(f"{PREFIX}/?page_size=2").text
    assert "3 checkpoints" in page and "Page 1 of 2" in page and "alpha-orders" not in page


def test_the_dag_views_json_is_per_team(teams):
    """The DAG tab's and the DAG run tab's JSON: exactly that DAG's checkpoints, for its own team only."""
    clients, root = teams
    alpha = clients["alice"].get(f"{PREFIX}/api/checkpoints", params={"dag_id": "alpha_orders_audit"}).json()
    assert {row["location"] for row in alpha["checkpoints"]} == {str(root / "alpha-orders"), str(root / "shared")}
    assert sum(alpha["states"].values()) == alpha["total"] == 2
    beta = clients["bob"].get(f"{PREFIX}/api/checkpoints", params={"dag_id": "beta_orders_audit"}).json()
    assert {row["location"] for row in beta["checkpoints"]} == {str(root / "beta-orders"), str(root / "shared")}
    assert clients["alice"].get(f"{PREFIX}/api/checkpoints", params={"dag_id": "beta_orders_audit"}).status_code == 403
    assert clients["bob"].get(f"{PREFIX}/api/dags/alpha_orders_audit/runs/any").status_code == 403
    run = clients["alice"].get(f"{PREFIX}/api/dags/alpha_orders_audit/runs/no-such-run").json()
    assert sorted(c["address"] for c in run["checkpoints"]) == ["teams/alpha-orders", "teams/shared"]
    for checkpoint in run["checkpoints"]:  # a run that tagged no batch: nothing of it, but the preflight
        assert (checkpoint["runs"], checkpoint["points"], checkpoint["corrections"]) == ([], [], [])
        assert checkpoint["preflight"]["verdict"] == "go" and checkpoint["error"] is None
