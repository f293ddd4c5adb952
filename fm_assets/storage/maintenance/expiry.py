"""Expiring snapshots: which may go, and the commit that removes them from a table's metadata.

A snapshot may go when no ref names it (the branch head, a version's tag), no dataset version
reads it (`tables.version_pins`), and it stopped being current longer than the retention ago
(the time its child was committed; not its own age: a table untouched for a month and then
written has a month-old snapshot that was current a second ago, and a reader may have started
on it). The stage-run bookkeeping's snapshot ids are not kept: each names a batch's rows, which
a later live snapshot still holds (`history.readable_snapshot`).

Pyiceberg's expiry removes snapshots from the metadata and deletes no file; the files only
expired snapshots referenced are deleted afterwards, by age (`files`). What the platform reads
from the removed history is kept first (`history.record_expired`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Collection

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.update import (
    AssertRefSnapshotId,
    AssertTableUUID,
    RemoveSnapshotsUpdate,
    SetPropertiesUpdate,
)

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.maintenance.history import EXPIRED_PROPERTY, EXPIRED_TABLE, record_expired
from fm_assets.storage.maintenance.tables import TableRef, load
from fm_loader.storage.retry import is_transient

ATTEMPTS = 8  # commits lost to writers before the expiry is left for the next run


def superseded_at(metadata: TableMetadata) -> dict[int, int]:
    """snapshot id -> when (ms) a snapshot committed on top of it made it stop being current."""
    found: dict[int, int] = {}
    for snapshot in metadata.snapshots:
        parent = snapshot.parent_snapshot_id
        if parent is not None:
            found[parent] = min(found.get(parent, snapshot.timestamp_ms), snapshot.timestamp_ms)
    return found


def expirable(
    metadata: TableMetadata, pinned: Collection[int], retention: dt.timedelta, now: dt.datetime
) -> list[int]:
    """The snapshots of `metadata` that may be expired, oldest first."""
    kept = {ref.snapshot_id for ref in metadata.refs.values()} | set(pinned)
    if metadata.current_snapshot_id is not None:
        kept.add(metadata.current_snapshot_id)
    cutoff = int((now - retention).timestamp() * 1000)
    superseded = superseded_at(metadata)
    return [
        s.snapshot_id
        for s in sorted(metadata.snapshots, key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
        if s.snapshot_id not in kept and superseded.get(s.snapshot_id, s.timestamp_ms) <= cutoff
    ]


def expire(
    settings: Settings, ref: TableRef, snapshot_ids: Collection[int], metadata_versions: int
) -> int:
    """Remove `snapshot_ids` from the table (those a ref names meanwhile are kept), and keep
    `metadata_versions` previous metadata files in its log from the next commit on; return how
    many were removed (0 when writers kept winning the commit: the next run tries again)."""
    wanted = set(snapshot_ids)
    if not wanted:
        return 0
    table = load(settings, ref)
    record_expired(settings, ref.identifier, table.metadata, wanted)
    iceberg = catalog.open_catalog(settings)
    for _ in range(ATTEMPTS):
        table = load(settings, ref)
        metadata = table.metadata
        named = {r.snapshot_id for r in metadata.refs.values()}
        todo = sorted(s.snapshot_id for s in metadata.snapshots if s.snapshot_id in wanted - named)
        if not todo:
            return 0
        requirements = (
            AssertTableUUID(uuid=metadata.table_uuid),
            AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=metadata.current_snapshot_id),  # type: ignore[call-arg]
        )
        updates = (
            SetPropertiesUpdate(
                updates={
                    EXPIRED_PROPERTY: EXPIRED_TABLE,
                    TableProperties.METADATA_PREVIOUS_VERSIONS_MAX: str(metadata_versions),
                }
            ),
            RemoveSnapshotsUpdate(snapshot_ids=todo),  # type: ignore[call-arg]
        )
        try:
            iceberg.commit_table(table, requirements, updates)
        except CommitFailedException:
            continue  # a writer committed first: look again at its metadata
        except Exception as exc:
            # An answer lost on the way may hide a commit that landed: look again.
            if not is_transient(exc):
                raise
            time.sleep(1.0)
            continue
        return len(todo)
    return 0
