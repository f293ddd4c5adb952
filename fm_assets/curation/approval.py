"""The approval gate: unverified batches stop after validation until a person decides.

A batch waits when the approval policy says so (`curation/namespaces.py`: landed into the
`quarantine` namespace by default, or from a source the policy marks untrusted). It runs its
validation stage (`raw_documents`: parsing, content addressing, exact dedup) and then waits;
`fm approve BATCH --reason TEXT` (or the `decide_quarantined_batch` job in the UI) lets it
continue through curation, a rejection stops it for good, so its documents never reach the
curated tables. Decisions are audited in `batch_approvals` (`storage/approvals.py`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from fm_assets.curation.namespaces import load_approval_policy
from fm_assets.settings import Settings
from fm_assets.storage.approvals import append_decision, decisions
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.revocations import current_user


def waiting_reason(settings: Settings, batch_id: str) -> str | None:
    """Why the batch waits for a decision under the policy, or None when it needs none."""
    manifest = read_manifest(open_object_store(settings), batch_id)
    policy = load_approval_policy(settings)
    if not policy.waits(manifest.namespace, manifest.source):
        return None
    return policy.why(manifest.namespace, manifest.source)


def record_decision(
    settings: Settings, batch_id: str, *, approved: bool, reason: str, decided_by: str | None = None
) -> dict[str, Any]:
    """Record an approval or a rejection of a waiting batch; returns the row."""
    if waiting_reason(settings, batch_id) is None:
        raise ValueError(
            f"batch {batch_id} needs no approval under the approval policy (it was not landed "
            "into a namespace that waits, nor from an untrusted source): run it with `fm run`"
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
    append_decision(settings, row)
    return row


def approval_gate(settings: Settings, batch_id: str) -> str | None:
    """None when the batch may run past validation; otherwise why not and what to do."""
    why = waiting_reason(settings, batch_id)
    if why is None:
        return None
    made = decisions(settings, batch_id)
    if not made:
        return (
            f"batch {batch_id} {why}: it was validated and waits for a decision; run "
            f"`fm approve {batch_id} --reason TEXT` (or add --reject), or launch the "
            "decide_quarantined_batch job in the UI"
        )
    last = made[-1]
    if last["decision"] == "rejected":
        return (
            f"batch {batch_id} was rejected by {last['decided_by']} at "
            f"{last['decided_at']:%Y-%m-%d %H:%M} UTC ({last['reason']}): it never reaches the "
            "curated tables; land corrected data as a new batch"
        )
    return None
