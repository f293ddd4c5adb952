"""The audit table of approval decisions on landing batches that wait after validation.

Which batches wait, and the gate the stages ask, are policy: `curation/approval.py`. Every
decision is a row here (who, when, why); the latest decision on a batch counts.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.tables import TableSpec, declare

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


def append_decision(settings: Settings, row: dict[str, Any]) -> None:
    """Record one decision (a BATCH_APPROVALS row)."""
    catalog.append_rows(settings, "batch_approvals", pa.Table.from_pylist([row]))


def decisions(settings: Settings, batch_id: str) -> list[dict[str, Any]]:
    """Every decision on a batch, oldest first."""
    rows = catalog.read_table(
        settings, "batch_approvals", catalog.where_equal("batch_id", batch_id)
    ).to_pylist()
    return sorted(rows, key=lambda r: r["decided_at"])
