"""Approval of quarantined landing batches: they stop after validation until a person decides.

A batch landed into the `quarantine` namespace (`fm land --namespace quarantine`: unverified data)
runs its validation stage (`raw_documents`: parsing, content addressing, exact dedup) and then
waits. `fm approve BATCH --reason TEXT` lets it continue through curation; `--reject` stops it for
good, so its documents never reach the curated tables. Every decision is a row of
`batch_approvals` (who, when, why); the latest decision counts.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.revocations import current_user
from fm_assets.storage.tables import TableSpec, declare

AWAITING_NAMESPACES = frozenset({"quarantine"})  # batches landed here wait for a decision

BATCH_APPROVALS = pa.schema(
    [
        pa.field("batch_id", pa.string(), nullable=False),
        pa.field("decision", pa.string(), nullable=False),  # approved | rejected
        pa.field("reason", pa.string(), nullable=False),
        pa.field("decided_by", pa.string(), nullable=False),
        pa.field("decided_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
declare(TableSpec("batch_approvals", BATCH_APPROVALS, ("batch_id",)))


class AwaitingApproval(ValueError):
    """The batch was validated and now waits for `fm approve`."""


def needs_approval(settings: Settings, batch_id: str) -> bool:
    """True when the batch was landed into a namespace whose batches wait for a decision."""
    return read_manifest(open_object_store(settings), batch_id).namespace in AWAITING_NAMESPACES


def record_decision(
    settings: Settings, batch_id: str, *, approved: bool, reason: str, decided_by: str | None = None
) -> dict[str, Any]:
    """Record an approval or a rejection of a waiting batch; returns the row."""
    if not needs_approval(settings, batch_id):
        raise ValueError(
            f"batch {batch_id} was not landed into {sorted(AWAITING_NAMESPACES)}: it needs no "
            "approval and runs with `fm run`"
        )
    if not reason.strip():
        raise ValueError("a decision needs a reason (--reason TEXT): audits read it")
    row = {
        "batch_id": batch_id,
        "decision": "approved" if approved else "rejected",
        "reason": reason,
        "decided_by": decided_by or current_user(),
        "decided_at": dt.datetime.now(dt.UTC),
    }
    catalog.append_rows(settings, "batch_approvals", pa.Table.from_pylist([row]))
    return row


def decisions(settings: Settings, batch_id: str) -> list[dict[str, Any]]:
    """Every decision on a batch, oldest first."""
    rows = catalog.read_table(
        settings, "batch_approvals", catalog.where_equal("batch_id", batch_id)
    ).to_pylist()
    return sorted(rows, key=lambda r: r["decided_at"])


def approval_gate(settings: Settings, batch_id: str) -> str | None:
    """None when the batch may run past validation; otherwise why not and what to do."""
    if not needs_approval(settings, batch_id):
        return None
    made = decisions(settings, batch_id)
    if not made:
        return (
            f"batch {batch_id} was landed into quarantine: it was validated and waits for a "
            f"decision; run `fm approve {batch_id} --reason TEXT` (or add --reject)"
        )
    last = made[-1]
    if last["decision"] == "rejected":
        return (
            f"batch {batch_id} was rejected by {last['decided_by']} at "
            f"{last['decided_at']:%Y-%m-%d %H:%M} UTC ({last['reason']}): it never reaches the "
            "curated tables; land corrected data as a new batch"
        )
    return None
