"""The catalog update of a purge: snapshots whose manifest lists are swapped in place.

Iceberg snapshots are immutable by design, and its metadata updates have no way to change one:
removing a snapshot and adding it again would cut its children's parent links, and a snapshot
may not be added with a sequence number older than the table's. A purge must change what old
snapshots hold (a dataset version reads its tagged ones), and everything the platform records
names snapshots by id (tags, `dataset_versions`, stage runs, the expired-snapshot history), so
the purge keeps each snapshot's id, parent, sequence number, time and log entry, and swaps its
manifest list (and its summary's counts) for one without the purged rows.

`ReplaceSnapshotsUpdate` does that as one more update type of pyiceberg's metadata update
(`_apply_table_update` dispatches on the update's class). The SQL catalog (SQLite or Postgres,
the platform's only catalog) applies updates itself and swaps the table's metadata location
under the usual optimistic check, so the purge commits like any writer. A REST catalog applies
updates on its server and would refuse one it does not know.

The metadata log is cleared in the same commit: the previous metadata files name the old
manifest lists, which the purge deletes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import _apply_table_update, _TableMetadataUpdateContext
from pyiceberg.typedef import IcebergBaseModel


class ReplaceSnapshotsUpdate(IcebergBaseModel):
    """Swap existing snapshots (same id) for `snapshots`; clear the metadata log."""

    action: Literal["fm-replace-snapshots"] = Field(default="fm-replace-snapshots")
    snapshots: list[Snapshot]


# Not a member of pyiceberg's TableUpdate union: registered all the same.
@_apply_table_update.register(ReplaceSnapshotsUpdate)
def _(  # type: ignore[misc]
    update: ReplaceSnapshotsUpdate,
    base_metadata: TableMetadata,
    context: _TableMetadataUpdateContext,
) -> TableMetadata:
    replacements = {s.snapshot_id: s for s in update.snapshots}
    known = {s.snapshot_id for s in base_metadata.snapshots}
    missing = sorted(set(replacements) - known)
    if missing:
        raise ValueError(f"cannot replace snapshots {missing}: the table does not have them")
    for old in base_metadata.snapshots:
        new = replacements.get(old.snapshot_id)
        if new is not None and (
            new.parent_snapshot_id != old.parent_snapshot_id
            or new.sequence_number != old.sequence_number
            or new.timestamp_ms != old.timestamp_ms
        ):
            raise ValueError(
                f"snapshot {old.snapshot_id} would change its parent, sequence number or time"
            )
    context.add_update(update)  # type: ignore[arg-type]
    return base_metadata.model_copy(
        update={
            "snapshots": [replacements.get(s.snapshot_id, s) for s in base_metadata.snapshots],
            "metadata_log": [],
        }
    )
