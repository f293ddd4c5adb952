"""Which team a landing batch belongs to: who pays for its storage, cache and compute.

The team is chargeback bookkeeping, not provenance, so it is kept beside the batch's manifest
rather than in it (a text batch's manifest stays byte for byte what earlier releases wrote):

    landing/batches/<batch_id>/team.json    {"format_version": 1, "team": "..."}

`fm land` writes it before the manifest publishes the batch, so every batch landed since has
one; a batch landed before teams were recorded belongs to `UNASSIGNED`. Like the manifest it
is written once: landing the same files for another team is refused.
"""

from __future__ import annotations

import json
import re

from fm_assets.storage.objectstore import ObjectStore

TEAM_FORMAT_VERSION = 1
UNASSIGNED = "unassigned"
TEAM_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def _key(batch_id: str) -> str:
    return f"landing/batches/{batch_id}/team.json"


def check_team_name(team: str) -> str:
    """`team` if it is a valid team name; raises naming the rule otherwise."""
    if not TEAM_NAME.fullmatch(team):
        raise ValueError(
            f"--team must be lower-case letters, digits, '-' and '_' (e.g. pretraining, "
            f"code-models), got {team!r}; the default comes from FM_TEAM"
        )
    return team


def record_team(store: ObjectStore, batch_id: str, team: str) -> None:
    """Record that `batch_id` belongs to `team`; refuses another team for a batch that has one."""
    check_team_name(team)
    existing = batch_team(store, batch_id, default=None)
    if existing is not None:
        if existing != team:
            raise ValueError(
                f"batch {batch_id} belongs to team {existing!r}, not {team!r}; a batch's team is "
                "recorded once (land the files as another batch to charge another team)"
            )
        return
    body = json.dumps({"format_version": TEAM_FORMAT_VERSION, "team": team}, sort_keys=True)
    store.write_bytes_atomic(_key(batch_id), body.encode())


def batch_team(store: ObjectStore, batch_id: str, default: str | None = UNASSIGNED) -> str | None:
    """The team `batch_id` belongs to; `default` for a batch landed before teams were kept."""
    key = _key(batch_id)
    if not store.exists(key):
        return default
    try:
        raw = json.loads(store.read_bytes(key))
    except ValueError as exc:
        raise ValueError(f"{store.uri(key)} is damaged: {exc}; restore it or rewrite it") from exc
    if not isinstance(raw, dict) or raw.get("format_version") != TEAM_FORMAT_VERSION:
        raise ValueError(f"{store.uri(key)} is not a team record of format {TEAM_FORMAT_VERSION}")
    team = raw.get("team")
    if not isinstance(team, str) or not TEAM_NAME.fullmatch(team):
        raise ValueError(f"{store.uri(key)} names no valid team: {team!r}")
    return team
