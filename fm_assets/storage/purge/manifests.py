"""The metadata side of a table purge: manifests, manifest lists and snapshot summaries written
again over the rewritten data files.

Every manifest naming a rewritten file (as added, existing or deleted: a deleted entry keeps the
file's statistics) is written again with the replacement's entry, or without the entry when no
row of the file was left; each entry keeps its status, snapshot and sequence numbers. Every
snapshot listing such a manifest gets a manifest list naming the new one in its place, and a
summary whose counts drop by what it no longer holds: its total by the rows of the files live in
it, what it added and deleted by the rows of the files it added and deleted. So a snapshot's
lineage still adds up to its total (`storage.batch_history` relies on that).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from pyiceberg.manifest import (
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.snapshots import Snapshot, Summary

from fm_assets.storage.purge.rows import Rewrite

LIVE = (ManifestEntryStatus.ADDED, ManifestEntryStatus.EXISTING)
# Summary counts a purge changes: (records, bytes, files) of what a snapshot holds, added, deleted.
TOTALS = ("total-records", "total-files-size", "total-data-files")
ADDED = ("added-records", "added-files-size", "added-data-files")
DELETED = ("deleted-records", "removed-files-size", "deleted-data-files")


@dataclass(frozen=True)
class TableFiles:
    """Every manifest of every snapshot of a table, and each manifest's entries (all statuses)."""

    lists: dict[int, list[ManifestFile]]  # snapshot id -> its manifests, in list order
    entries: dict[str, list[ManifestEntry]]  # manifest path -> its entries

    @property
    def live_paths(self) -> set[str]:
        """Data files some snapshot reads."""
        return {
            e.data_file.file_path
            for entries in self.entries.values()
            for e in entries
            if e.status in LIVE
        }


def table_files(table: Table) -> TableFiles:
    """Read every manifest list and manifest of `table` once."""
    lists: dict[int, list[ManifestFile]] = {}
    entries: dict[str, list[ManifestEntry]] = {}
    for snapshot in table.metadata.snapshots:
        manifests = snapshot.manifests(table.io)
        if any(m.content == ManifestContent.DELETES for m in manifests):
            raise ValueError(
                f"table {table.name()} holds delete files, which the platform never writes; "
                "a purge cannot rewrite it"
            )
        lists[snapshot.snapshot_id] = manifests
        for manifest in manifests:
            if manifest.manifest_path not in entries:
                entries[manifest.manifest_path] = manifest.fetch_manifest_entry(
                    table.io, discard_deleted=False
                )
    return TableFiles(lists, entries)


def _entry(entry: ManifestEntry, rewrites: Mapping[str, Rewrite]) -> ManifestEntry | None:
    done = rewrites.get(entry.data_file.file_path)
    if done is None:
        return entry
    if done.new is None:
        return None
    return ManifestEntry.from_args(
        status=entry.status,
        snapshot_id=entry.snapshot_id,
        sequence_number=entry.sequence_number,
        file_sequence_number=entry.file_sequence_number,
        data_file=done.new,
    )


def rewrite_manifests(
    table: Table, files: TableFiles, rewrites: Mapping[str, Rewrite]
) -> dict[str, ManifestFile | None]:
    """Old manifest path -> its replacement (None: no entry was left) for every manifest naming
    a rewritten file."""
    metadata = table.metadata
    compression = metadata.properties.get(
        TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
    )
    locations = table.location_provider()
    by_path = {m.manifest_path: m for manifests in files.lists.values() for m in manifests}
    batch = uuid.uuid4().hex
    replaced: dict[str, ManifestFile | None] = {}
    for path, entries in files.entries.items():
        if not any(e.data_file.file_path in rewrites for e in entries):
            continue
        kept = [e for e in (_entry(e, rewrites) for e in entries) if e is not None]
        if not kept:
            replaced[path] = None
            continue
        old = by_path[path]
        output = locations.new_metadata_location(f"purged-{batch}-m{len(replaced)}.avro")
        with write_manifest(
            format_version=2,
            spec=metadata.specs()[old.partition_spec_id],
            schema=metadata.schema(),
            output_file=table.io.new_output(output),
            snapshot_id=old.added_snapshot_id,  # type: ignore[arg-type]
            avro_compression=compression,  # type: ignore[arg-type]
        ) as writer:
            for entry in kept:
                writer.add_entry(entry)
        new = writer.to_manifest_file()
        # The manifest keeps the sequence numbers of the commit that wrote it.
        new.sequence_number = old.sequence_number
        if new.min_sequence_number < 0:
            new.min_sequence_number = old.min_sequence_number
        replaced[path] = new
    return replaced


def _summary(
    snapshot: Snapshot, entries: list[ManifestEntry], rewrites: Mapping[str, Rewrite]
) -> Summary | None:
    """The snapshot's summary with its counts less what the purge removed from it."""
    if snapshot.summary is None:
        return None
    change = {key: 0 for key in (*TOTALS, *ADDED, *DELETED)}

    def less(keys: tuple[str, str, str], done: Rewrite) -> None:
        change[keys[0]] += done.removed_rows
        change[keys[1]] += done.bytes_removed
        change[keys[2]] += done.new is None

    for entry in entries:
        done = rewrites.get(entry.data_file.file_path)
        if done is None:
            continue
        if entry.status in LIVE:
            less(TOTALS, done)
        # An entry of this commit's own: the file it added, or deleted (an existing entry
        # always names an older commit).
        if entry.snapshot_id == snapshot.snapshot_id:
            if entry.status == ManifestEntryStatus.ADDED:
                less(ADDED, done)
            elif entry.status == ManifestEntryStatus.DELETED:
                less(DELETED, done)
    properties = dict(snapshot.summary.additional_properties)
    for key, delta in change.items():
        if delta and properties.get(key) not in (None, ""):
            properties[key] = str(int(properties[key]) - delta)
    return Summary(snapshot.summary.operation, **properties)


def rewrite_snapshots(
    table: Table,
    files: TableFiles,
    rewrites: Mapping[str, Rewrite],
    manifests: Mapping[str, ManifestFile | None],
) -> tuple[list[Snapshot], list[str]]:
    """Every snapshot listing a rewritten manifest, with a new manifest list (same id, parent,
    sequence number and time) and summary; and the manifest lists written."""
    metadata = table.metadata
    compression = metadata.properties.get(
        TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
    )
    locations = table.location_provider()
    batch = uuid.uuid4().hex
    snapshots, written = [], []
    for snapshot in metadata.snapshots:
        listed = files.lists[snapshot.snapshot_id]
        if not any(m.manifest_path in manifests for m in listed):
            continue
        new_list = [manifests.get(m.manifest_path, m) for m in listed]
        path = locations.new_metadata_location(f"snap-{snapshot.snapshot_id}-purged-{batch}.avro")
        with write_manifest_list(
            format_version=2,
            output_file=table.io.new_output(path),
            snapshot_id=snapshot.snapshot_id,
            parent_snapshot_id=snapshot.parent_snapshot_id,
            sequence_number=snapshot.sequence_number,
            avro_compression=compression,  # type: ignore[arg-type]
        ) as list_writer:
            list_writer.add_manifests([m for m in new_list if m is not None])
        written.append(path)
        entries = [e for m in listed for e in files.entries[m.manifest_path]]
        snapshots.append(
            snapshot.model_copy(
                update={"manifest_list": path, "summary": _summary(snapshot, entries, rewrites)}
            )
        )
    return snapshots, written


def removed_from_parent(
    snapshot: Snapshot, files: TableFiles, rewrites: Mapping[str, Rewrite]
) -> int:
    """Rows the purge removed from what `snapshot`'s parent held: its files that were not
    added by `snapshot` itself (carried over, or deleted by it)."""
    removed = 0
    seen: set[str] = set()
    for manifest in files.lists[snapshot.snapshot_id]:
        for entry in files.entries[manifest.manifest_path]:
            path = entry.data_file.file_path
            done = rewrites.get(path)
            if done is None or path in seen:
                continue
            added_here = (
                entry.status == ManifestEntryStatus.ADDED
                and entry.snapshot_id == snapshot.snapshot_id
            )
            deleted_here = entry.status == ManifestEntryStatus.DELETED
            if deleted_here and entry.snapshot_id != snapshot.snapshot_id:
                continue
            if not added_here:
                removed += done.removed_rows
                seen.add(path)
    return removed
