"""The `replace` snapshot of a rewrite: its manifests and manifest list, and its commit.

The live entries of the current snapshot are written again, less the files a merge replaces and
with the merged files added, into manifests of up to `manifest_entries` entries each, ordered by
partition: each manifest then covers a narrow range of partition values, and a scan for one
batch opens one manifest (manifests of many batches' commits, merged in commit order, would each
cover every batch). The files replaced are listed as deleted in a manifest of their own, which
no later commit carries forward. The summary keeps the table's totals (a replace adds and
deletes the same records) and says what was merged (`fm.operation = maintenance`).

The checksums of the new manifests and manifest list are pinned before the commit (`fm
verify`); the commit asserts that the branch head is the snapshot the rewrite was built on, and
when a writer committed meanwhile it is built again on the new head.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.manifest import (
    DataFile,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    write_manifest,
    write_manifest_list,
)
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import (
    Operation,
    Snapshot,
    SnapshotSummaryCollector,
    Summary,
    update_snapshot_summaries,
)
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
    TableRequirement,
    TableUpdate,
)

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import forget_file_checksums, record_file_checksums
from fm_assets.storage.data_files import file_sha256
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.tables import TableRef, load
from fm_loader.storage.remote import filesystem_for
from fm_loader.storage.retry import with_retries

ATTEMPTS = 8  # builds on a new head before the rewrite is left for the next run


def partition_values(record: object) -> tuple[object, ...]:
    """A data file's partition values (a pyiceberg `Record`) as a tuple."""
    return tuple(record[i] for i in range(len(record)))  # type: ignore[index, arg-type]


def partition_order(values: tuple[object, ...]) -> tuple[tuple[bool, object], ...]:
    """A sort key for partition values of one spec (nulls last, no cross-type comparison)."""
    return tuple((v is None, "" if v is None else v) for v in values)


@dataclass(frozen=True)
class Live:
    """The live data files of a table's current snapshot and the manifests listing them."""

    entries: list[ManifestEntry]
    manifests: list[ManifestFile]


def live_entries(table: Table) -> Live | None:
    """The current snapshot's live entries and data manifests; None if it holds delete files."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return Live([], [])
    manifests = snapshot.manifests(table.io)
    if any(m.content == ManifestContent.DELETES for m in manifests):
        return None
    # A manifest of deleted entries only (a replace's own) is not carried by later commits.
    manifests = [m for m in manifests if m.has_added_files() or m.has_existing_files()]
    entries = [e for m in manifests for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]
    return Live(entries, manifests)


def _place(entry: ManifestEntry) -> tuple[object, ...]:
    """Where an entry goes among a spec's manifests: by partition, then path."""
    return (partition_order(partition_values(entry.data_file.partition)), entry.data_file.file_path)


def pin_files(settings: Settings, uris: Sequence[str]) -> None:
    """Pin the sha256 and size of files written for a commit (`fm verify` compares)."""
    pins = {}
    for uri in uris:
        fs, path = filesystem_for(uri, settings.s3_endpoint)
        pins[uri] = file_sha256(fs, path)
    record_file_checksums(settings, pins)


def discard_files(settings: Settings, table: Table, uris: Sequence[str]) -> None:
    """Delete files written for a commit that did not land (and their pins)."""
    forget_file_checksums(settings, list(uris))
    for uri in uris:
        with suppress(FileNotFoundError):
            table.io.delete(uri)


def commit_replace(
    settings: Settings,
    ref: TableRef,
    new_files: list[DataFile],
    replaced: list[ManifestEntry],
    policy: MaintenancePolicy,
) -> int | None:
    """Commit the rewrite on the current head, built again if a writer committed meanwhile;
    the number of manifests the new snapshot has, or None if it could not land."""
    iceberg = catalog.open_catalog(settings)
    gone = {e.data_file.file_path for e in replaced}
    for _ in range(ATTEMPTS):
        table = load(settings, ref)
        live = live_entries(table)
        head = table.current_snapshot()
        if live is None or head is None:
            return None
        current = {e.data_file.file_path for e in live.entries}
        if gone - current:
            return None  # a writer replaced some of those files itself: the merge is stale
        snapshot, written = _build(table, live, new_files, replaced, policy)
        requirements = (
            AssertTableUUID(uuid=table.metadata.table_uuid),
            AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=head.snapshot_id),  # type: ignore[call-arg]
        )
        updates = (
            AddSnapshotUpdate(snapshot=snapshot),
            SetSnapshotRefUpdate(  # type: ignore[call-arg]
                ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=snapshot.snapshot_id
            ),
        )
        pin_files(settings, [snapshot.manifest_list, *written])
        try:
            _land(
                iceberg, table, requirements, updates, f"committing the rewrite of {ref.identifier}"
            )
        except CommitFailedException:
            if load(settings, ref).metadata.current_snapshot_id == snapshot.snapshot_id:
                return len(written)  # an earlier attempt landed, its answer was lost
            discard_files(settings, table, [snapshot.manifest_list, *written])
            continue
        return len(written)
    return None


def _land(
    iceberg: Catalog,
    table: Table,
    requirements: tuple[TableRequirement, ...],
    updates: tuple[TableUpdate, ...],
    what: str,
) -> None:
    """One commit, retried while the catalog fails transiently (a retry whose first attempt
    landed fails its requirement, which the caller checks)."""
    with_retries(lambda: iceberg.commit_table(table, requirements, updates), what=what)


def _build(
    table: Table,
    live: Live,
    new_files: list[DataFile],
    replaced: list[ManifestEntry],
    policy: MaintenancePolicy,
) -> tuple[Snapshot, list[str]]:
    """Write the manifests and manifest list of the rewrite on the current head; return the
    snapshot and the manifests written."""
    metadata = table.metadata
    head = metadata.current_snapshot()
    if head is None:
        raise RuntimeError(f"table {table.name()} has no snapshot to rewrite")
    snapshot_id = metadata.new_snapshot_id()
    sequence = metadata.next_sequence_number()
    commit = uuid.uuid4()
    compression = metadata.properties.get(
        TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
    )
    locations = table.location_provider()
    schema, specs = metadata.schema(), metadata.specs()
    gone = {e.data_file.file_path for e in replaced}
    written: list[ManifestFile] = []

    def write(spec_id: int, entries: list[tuple[str, ManifestEntry]]) -> None:
        path = locations.new_metadata_location(f"{commit}-m{len(written)}.avro")
        with write_manifest(
            format_version=2,
            spec=specs[spec_id],
            schema=schema,
            output_file=table.io.new_output(path),
            snapshot_id=snapshot_id,
            avro_compression=compression,  # type: ignore[arg-type]
        ) as writer:
            for status, entry in entries:
                getattr(writer, status)(entry)
        written.append(writer.to_manifest_file())

    kept = [("existing", e) for e in live.entries if e.data_file.file_path not in gone]
    added = [
        (
            "add",
            ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=f
            ),
        )
        for f in new_files
    ]
    by_spec: dict[int, list[tuple[str, ManifestEntry]]] = {}
    for status, entry in kept + added:
        by_spec.setdefault(entry.data_file.spec_id, []).append((status, entry))
    for spec_id in sorted(by_spec):
        entries = sorted(
            by_spec[spec_id],
            key=lambda s: (
                partition_order(partition_values(s[1].data_file.partition)),
                s[1].data_file.file_path,
            ),
        )
        for start in range(0, len(entries), policy.manifest_entries):
            write(spec_id, entries[start : start + policy.manifest_entries])
    for spec_id in sorted({e.data_file.spec_id for e in replaced}):
        write(spec_id, [("delete", e) for e in replaced if e.data_file.spec_id == spec_id])

    collector = SnapshotSummaryCollector()
    for data_file in new_files:
        collector.add_file(data_file, schema, specs[data_file.spec_id])
    for entry in replaced:
        collector.remove_file(entry.data_file, schema, specs[entry.data_file.spec_id])
    totals = update_snapshot_summaries(
        Summary(Operation.OVERWRITE, **collector.build()), previous_summary=head.summary
    )
    properties = {
        "fm.operation": "maintenance",
        "fm.merged-files": str(len(replaced)),
        "fm.manifests-before": str(len(live.manifests)),
    }
    summary = Summary(Operation.REPLACE, **totals.additional_properties, **properties)
    manifest_list = locations.new_metadata_location(f"snap-{snapshot_id}-0-{commit}.avro")
    with write_manifest_list(
        format_version=2,
        output_file=table.io.new_output(manifest_list),
        snapshot_id=snapshot_id,
        parent_snapshot_id=head.snapshot_id,
        sequence_number=sequence,
        avro_compression=compression,  # type: ignore[arg-type]
    ) as list_writer:
        list_writer.add_manifests(written)
    snapshot = Snapshot(  # type: ignore[call-arg]
        snapshot_id=snapshot_id,
        parent_snapshot_id=head.snapshot_id,
        sequence_number=sequence,
        manifest_list=manifest_list,
        summary=summary,
        schema_id=metadata.current_schema_id,
    )
    return snapshot, [m.manifest_path for m in written]
