"""Who may see which checkpoint on the watermark pages: Airflow's auth manager decides.

A checkpoint is *claimed* by the DAGs that run or audit it: the DAG ids of the tasks that registered
it (:mod:`watermark_ops.airflow.registry`) and the ``dag_ids`` of its ``[watermark_ops]`` entry
(:mod:`watermark_ops.airflow.config`); the claims of every known entry at the same place add up.

* A claimed checkpoint is shown (row, page, JSON, the DAG tab's link) to a user whom the configured
  auth manager (``airflow.api_fastapi.app.get_auth_manager()``) lets read (``GET``) at least one
  claiming DAG: ``filter_authorized_dag_ids`` / ``is_authorized_dag`` with each DAG's team, read
  from the metadata DB exactly as the api-server's own routes do (``DagModel.get_team_name``: in
  multi-team mode, ``[core] multi_team``, the team of the DAG's bundle, table ``dag_bundle_team``;
  None otherwise). A DAG id the metadata DB does not know (a configured entry naming a DAG not
  parsed yet, a deleted DAG still in the registry) is decided with no team, as Airflow decides a
  request for an unknown DAG id.
* A checkpoint no DAG claims (a configured entry without ``dag_ids``, a folder under a root that no
  entry names, a configuration error row) is shown to users allowed to read assets
  (``is_authorized_asset(method="GET")``), which admins are in every auth manager. While the
  configuration cannot be read, a page no registered DAG claims is refused to everyone (its
  configured ``dag_ids`` are unknown).

Nothing here reads a checkpoint; the decisions read only the metadata DB (one query per call) and
ask the auth manager.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Hashable, Iterable

__all__ = ["may_read_assets", "may_read_dag", "may_see_location", "readable_dag_ids", "visible_entries"]

#: A known checkpoint entry (:func:`watermark_ops.airflow.registry.known_checkpoints`): here only
#: ``"checkpoint"`` (its location) and ``"dag_ids"`` (the DAGs claiming it) are read.
Entry = dict[str, Any]


def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


def _teams(dag_ids: Iterable[str]) -> dict[str, str | None]:
    """{DAG id: its team name or None}: the DAG's bundle's team, one query (``DagModel``)."""
    from airflow.models.dag import DagModel

    ids = sorted(set(dag_ids))
    found = DagModel.get_dag_id_to_team_name_mapping(ids) if ids else {}
    return {dag_id: found.get(dag_id) for dag_id in ids}


def readable_dag_ids(user: Any, dag_ids: Iterable[str]) -> set[str]:
    """The DAG ids among ``dag_ids`` that ``user`` may read (``GET``), by the auth manager's
    ``filter_authorized_dag_ids`` per team (what ``get_authorized_dag_ids`` does for every DAG of the
    deployment, restricted to these).

    :param user: the authenticated user (:func:`watermark_ops.airflow.ui.require_user`).
    """
    manager = _auth_manager()
    by_team: dict[str | None, set[str]] = defaultdict(set)
    for dag_id, team in _teams(dag_ids).items():
        by_team[team].add(dag_id)
    readable: set[str] = set()
    for team, ids in by_team.items():
        readable |= manager.filter_authorized_dag_ids(dag_ids=ids, user=user, method="GET", team_name=team)
    return readable


def may_read_dag(user: Any, dag_id: str) -> bool:
    """Whether ``user`` may read DAG ``dag_id`` (``is_authorized_dag``, ``GET``, with its team)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    team = _teams([dag_id])[dag_id]
    return bool(_auth_manager().is_authorized_dag(method="GET", details=DagDetails(id=dag_id, team_name=team),
                                                  user=user))


def may_read_assets(user: Any) -> bool:
    """Whether ``user`` may read assets (``is_authorized_asset``, ``GET``): the rule for a checkpoint
    no DAG claims."""
    return bool(_auth_manager().is_authorized_asset(method="GET", user=user))


def _claims(entries: Iterable[Entry], same: Callable[[str], Hashable | None]) -> dict[Hashable, set[str]]:
    """{place: the DAG ids claiming it}, over every entry with a location (entries at the same
    place, by ``same``, add up)."""
    out: dict[Hashable, set[str]] = defaultdict(set)
    for entry in entries:
        if isinstance(entry.get("checkpoint"), str):
            place = same(entry["checkpoint"])
            if place is not None:
                out[place].update(str(d) for d in entry.get("dag_ids") or ())
    return out


def visible_entries(user: Any, entries: Iterable[Entry], *,
                    same: Callable[[str], Hashable | None] | None = None) -> list[Entry]:
    """The entries ``user`` may see, in their order (see the module docstring).

    :param user: the authenticated user.
    :param entries: known checkpoint entries; an entry without ``"checkpoint"`` (a configuration
        error row) counts as unclaimed.
    :param same: location -> the place it designates (the pages pass the page address, so two
        spellings of one folder share their claims); None: the normalised location
        (:func:`watermark_ops.core.memory.memory_key`). A place of None: the entry's own claims only.
    :return: the visible entries, in order; each a shallow copy whose ``"dag_ids"`` keeps only the
        DAGs the user may read (a checkpoint two teams' DAGs claim names to each team its own DAGs).
    """
    from watermark_ops.core.memory import memory_key

    entries = list(entries)
    designate = same or memory_key
    places: dict[str, Hashable | None] = {}

    def place_of(location: str) -> Hashable | None:  # once per location (a page address resolves the path)
        if location not in places:
            places[location] = designate(location)
        return places[location]

    claims = _claims(entries, place_of)

    def claimed_by(entry: Entry) -> set[str]:
        place = place_of(entry["checkpoint"]) if isinstance(entry.get("checkpoint"), str) else None
        own = {str(d) for d in entry.get("dag_ids") or ()}
        return claims[place] | own if place is not None else own

    wanted = [claimed_by(entry) for entry in entries]
    readable = readable_dag_ids(user, set().union(*wanted)) if any(wanted) else set()
    assets: bool | None = None
    out = []
    for entry, dag_ids in zip(entries, wanted):
        if dag_ids:
            if dag_ids & readable:
                out.append(dict(entry, dag_ids=[d for d in entry.get("dag_ids") or () if str(d) in readable]))
            continue
        if assets is None:
            assets = may_read_assets(user)
        if assets:
            out.append(dict(entry))
    return out


def may_see_location(user: Any, location: str, entries: Iterable[Entry], *,
                     same: Callable[[str], Hashable | None]) -> bool:
    """Whether ``user`` may see the checkpoint at ``location`` (a page or its JSON).

    :param location: the located checkpoint (already confined to its root).
    :param entries: the known entries; those at the same place as ``location`` (by ``same``) give
        its claims. None of them, or none with ``dag_ids``: unclaimed (asset read permission).
    :param same: location -> the place it designates (the page address); must not be None for
        ``location``.
    :return: True when one claiming DAG may be read (``is_authorized_dag`` one by one, stopping at
        the first), or when unclaimed and assets may be read. False for an unclaimed location while
        an entry is a configuration error (``"config_error"``: the configuration could not be read,
        so the ``dag_ids`` it gives are unknown), whoever asks: the overview names the error.
    """
    from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails

    entries = list(entries)
    place = same(location)
    claimed = _claims(entries, same).get(place, set()) if place is not None else set()
    if not claimed:
        if any(entry.get("config_error") for entry in entries):
            return False  # the configuration cannot be read: its claims are unknown, refuse (fail closed)
        return may_read_assets(user)
    manager = _auth_manager()
    return any(manager.is_authorized_dag(method="GET", details=DagDetails(id=dag_id, team_name=team), user=user)
               for dag_id, team in _teams(claimed).items())
