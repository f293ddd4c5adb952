"""What a table's snapshots say about a batch: whether a stage's commit must remove its rows.

The stage runner tags every commit with `fm.batch_id` and `fm.stage` in the snapshot summary,
so a table's snapshots, with those catalog maintenance expired (kept in its history table,
`storage.maintenance.history`), say which batches (and stages) ever committed rows to it. A
batch's first run then commits without a delete or a scan.
"""

from __future__ import annotations

from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.maintenance import history


def may_hold_rows(
    settings: Settings,
    name: str,
    namespace: str,
    batch_id: str,
    *,
    stage: str | None = None,
    untagged_only_move_rows: bool = False,
) -> bool:
    """Whether table `name` may hold rows `batch_id` (and `stage`, if given) committed: some
    snapshot, live or expired by catalog maintenance, says it committed for them. Every row
    came with its snapshot, and the stage runner tags each with its batch and stage. A snapshot
    that names no batch (an older platform's) may hold any batch's rows, unless the table's
    untagged snapshots only move rows (compactions; a `replace` never adds rows); so may a
    table whose history was cut another way (snapshots expired by another tool: the tags of the
    commits that added live rows are gone)."""
    table = catalog.load_table(settings, name, namespace=namespace)
    metadata = table.metadata
    maintained = history.EXPIRED_PROPERTY in metadata.properties
    complete = (
        history.history_complete(settings, metadata) if maintained else _history_complete(metadata)
    )
    if not complete:
        return True
    for snapshot in metadata.snapshots:
        summary = snapshot.summary
        tags = summary.additional_properties if summary is not None else {}
        if summary is not None and history.moves_rows_only(summary.operation.value):
            continue  # a compaction: the same rows, in other files
        if "fm.batch_id" not in tags:
            if not untagged_only_move_rows:
                return True
        elif tags["fm.batch_id"] == batch_id and (
            stage is None or tags.get("fm.stage", stage) == stage
        ):
            return True
    return maintained and history.batch_committed(
        settings,
        metadata,
        batch_id,
        stage=stage,
        untagged_only_move_rows=untagged_only_move_rows,
    )


def _history_complete(metadata: TableMetadata) -> bool:
    """Whether the current snapshot's lineage reaches back to the table's first commit: the
    records its commits added less those they deleted make the current total."""
    current = metadata.current_snapshot()
    if current is None:
        return True
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    counted = 0
    snapshot: Snapshot | None = current
    while snapshot is not None:
        summary = snapshot.summary
        if summary is None:
            return False
        counted += int(summary["added-records"] or 0) - int(summary["deleted-records"] or 0)
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None
    total = current.summary["total-records"] if current.summary is not None else None
    return total is not None and int(total) == counted
