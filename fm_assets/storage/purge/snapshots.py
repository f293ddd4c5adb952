"""A table purged: every snapshot it keeps rewritten without the purged rows, in one commit.

    find      the data files any snapshot references (live, or named by a deleted entry) whose
              statistics may hold purged rows, then those that do (one or two columns read)
    rewrite   each of them without those rows (`rows`), every manifest naming one and every
              manifest list naming such a manifest (`manifests`)
    commit    the snapshots swapped in place, same ids (`commit`); when the current snapshot
              changed, a new `replace` snapshot on top of it becomes the head, so a writer that
              built its commit on the old head fails its check and builds again on the new one
              (keeping the same id there would let it commit manifests the purge deleted)
    delete    the old data files, manifests and manifest lists, at once: nothing references them
              any more, and they hold the purged bytes (a string column's first characters sit
              in a manifest's bounds); old metadata files written before the purge started, now
              off the metadata log; and unreferenced data files that hold purged rows (left by
              killed runs, or by snapshots catalog maintenance expired within the grace period)
              where the purge holds the lock of every writer that could still commit them, or
              that are older than the grace period

A commit that loses to a writer is built again on the writer's commit. Killed before its commit,
a purge leaves unreferenced new files (the next run or `fm maintain` deletes them) and the table
as it was; after it, old files that a purge run again finds unreferenced and holding purged rows.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import pyarrow.fs as pafs
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysFalse, BooleanExpression, In
from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator
from pyiceberg.manifest import DataFile, write_manifest_list
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
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
from fm_assets.storage.bookkeeping import forget_file_checksums
from fm_assets.storage.maintenance.files import (
    delete_files,
    kind_of,
    list_files,
    referenced_files,
)
from fm_assets.storage.maintenance.history import subtract_records
from fm_assets.storage.maintenance.replace import pin_files
from fm_assets.storage.maintenance.tables import TableRef, load
from fm_assets.storage.purge import commit as _commit  # noqa: F401  (registers the update)
from fm_assets.storage.purge.commit import ReplaceSnapshotsUpdate
from fm_assets.storage.purge.manifests import (
    TOTALS,
    TableFiles,
    removed_from_parent,
    rewrite_manifests,
    rewrite_snapshots,
    table_files,
)
from fm_assets.storage.purge.rows import Rewrite, doomed_rows, rewrite_without
from fm_assets.storage.purge.scope import PurgeScope, may_hold
from fm_loader.storage.remote import filesystem_for
from fm_loader.storage.retry import with_retries

ATTEMPTS = 8  # commits lost to writers before the purge of a table gives up (and says so)
Progress = Callable[[str], None]
# Says whether every writer that could commit a data file at this path is locked out.
Locked = Callable[[str], bool]


@dataclass
class TablePurge:
    """What a purge did to one table."""

    identifier: str
    rows_removed: int = 0
    files_rewritten: int = 0  # data files written again without purged rows
    files_emptied: int = 0  # ... of which no row was left (they left every snapshot)
    bytes_removed: int = 0  # the old data files' bytes less their replacements'
    snapshots_rewritten: int = 0
    files_deleted: int = 0  # data files, manifests, manifest lists and metadata files
    bytes_deleted: int = 0
    orphans_deleted: int = 0  # unreferenced data files holding purged rows
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in vars(self).items() if k != "notes" or v}


def _expression(names: list[str], scope: PurgeScope) -> BooleanExpression:
    """What a data file's statistics must allow for it to hold purged rows."""
    if "batch_id" in names:
        batches = sorted(scope.touched_batches())
        return In("batch_id", batches) if batches else AlwaysFalse()  # type: ignore[call-arg, arg-type]
    documents = sorted(scope.documents)
    return In("doc_id", documents) if documents else AlwaysFalse()  # type: ignore[call-arg, arg-type]


def _hits(
    settings: Settings, table: Table, files: TableFiles, scope: PurgeScope
) -> dict[str, DataFile]:
    """Data files (by path) of the table's snapshots that hold purged rows."""
    names = [f.name for f in table.metadata.schema().fields]
    evaluator = _InclusiveMetricsEvaluator(table.metadata.schema(), _expression(names, scope))
    live = files.live_paths
    found: dict[str, DataFile] = {}
    seen: set[str] = set()
    for entries in files.entries.values():
        for entry in entries:
            data = entry.data_file
            if data.file_path in seen:
                continue
            seen.add(data.file_path)
            if not evaluator.eval(data):
                continue
            fs, path = filesystem_for(data.file_path, settings.s3_endpoint)
            if data.file_path not in live and not _exists(fs, path):
                continue  # a file only a deleted entry names, swept already
            if doomed_rows(fs, path, scope):
                found[data.file_path] = data
    return found


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return bool(fs.get_file_info(path).type == pafs.FileType.File)


def _head_on_top(table: Table, head: Snapshot, revocation_id: str) -> Snapshot:
    """A `replace` snapshot over the rewritten head: the same manifests, so the same rows."""
    metadata = table.metadata
    totals = {}
    if head.summary is not None:
        totals = {k: v for k, v in head.summary.additional_properties.items() if k in TOTALS}
    summary = Summary(
        Operation.REPLACE,
        **totals,
        **{"fm.operation": "purge", "fm.revocation-id": revocation_id},
    )
    snapshot_id = metadata.new_snapshot_id()
    sequence_number = metadata.next_sequence_number()
    return Snapshot(  # type: ignore[call-arg]
        snapshot_id=snapshot_id,
        parent_snapshot_id=head.snapshot_id,
        sequence_number=sequence_number,
        manifest_list=_head_list(table, head, snapshot_id, sequence_number),
        summary=summary,
        schema_id=metadata.current_schema_id,
    )


def _head_list(table: Table, head: Snapshot, snapshot_id: int, sequence_number: int) -> str:
    """A manifest list for the new head naming the rewritten head's manifests (each snapshot
    owns its list file, whose header names it)."""
    compression = table.metadata.properties.get(
        TableProperties.WRITE_AVRO_COMPRESSION, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT
    )
    target = table.location_provider().new_metadata_location(
        f"snap-{snapshot_id}-purge-{uuid.uuid4().hex}.avro"
    )
    with write_manifest_list(
        format_version=2,
        output_file=table.io.new_output(target),
        snapshot_id=snapshot_id,
        parent_snapshot_id=head.snapshot_id,
        sequence_number=sequence_number,
        avro_compression=compression,  # type: ignore[arg-type]
    ) as writer:
        writer.add_manifests(head.manifests(table.io))
    return target


def _discard(settings: Settings, table: Table, uris: Collection[str]) -> None:
    forget_file_checksums(settings, list(uris))
    for uri in uris:
        with contextlib.suppress(FileNotFoundError):
            table.io.delete(uri)


def purge_table(
    settings: Settings,
    ref: TableRef,
    scope: PurgeScope,
    revocation_id: str,
    *,
    started: dt.datetime,
    grace: dt.timedelta,
    locked: Locked,
    progress: Progress = lambda message: None,
) -> TablePurge:
    """Remove the rows `scope` names from every snapshot of table `ref` (see the module)."""
    report = TablePurge(ref.identifier)
    table = load(settings, ref)
    names = [f.name for f in table.metadata.schema().fields]
    if not may_hold(names, scope):
        return report
    rewrites: dict[str, Rewrite] = {}
    for _ in range(ATTEMPTS):
        table = load(settings, ref)
        head = table.current_snapshot()
        if head is None:
            break
        files = table_files(table)
        hits = _hits(settings, table, files, scope)
        if not hits:
            break
        progress(f"{ref.identifier}: rewriting {len(hits)} data files")
        for path, data in hits.items():
            if path not in rewrites:
                fs, inner = filesystem_for(path, settings.s3_endpoint)
                rewrites[path] = rewrite_without(fs, inner, data, scope, table.io, table.metadata)
        current = {p: rewrites[p] for p in hits}
        manifests = rewrite_manifests(table, files, current)
        snapshots, lists = rewrite_snapshots(table, files, current, manifests)
        written = [m.manifest_path for m in manifests.values() if m is not None] + lists
        updates: list[TableUpdate] = [ReplaceSnapshotsUpdate(snapshots=snapshots)]  # type: ignore[list-item]
        rewritten_head = next((s for s in snapshots if s.snapshot_id == head.snapshot_id), None)
        if rewritten_head is not None:
            top = _head_on_top(table, rewritten_head, revocation_id)
            written.append(top.manifest_list)
            updates += [
                AddSnapshotUpdate(snapshot=top),
                SetSnapshotRefUpdate(  # type: ignore[call-arg]
                    ref_name=MAIN_BRANCH, type=SnapshotRefType.BRANCH, snapshot_id=top.snapshot_id
                ),
            ]
        new_data = [r.new.file_path for r in current.values() if r.new is not None]
        pin_files(settings, [*new_data, *written])
        requirements: tuple[TableRequirement, ...] = (
            AssertTableUUID(uuid=table.metadata.table_uuid),
            AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=head.snapshot_id),  # type: ignore[call-arg]
        )
        try:
            _land(settings, table, requirements, tuple(updates), ref.identifier)
        except CommitFailedException:
            _discard(settings, table, written)
            continue  # a writer committed first: its snapshot names the old files too
        report.snapshots_rewritten = len(snapshots)
        _account(report, current.values())
        _adjust_history(settings, table, files, current)
        gone = _old_files(table, files, current, manifests, lists_of=snapshots)
        _delete_now(settings, table, gone, report)
        break
    else:
        report.notes.append(f"writers kept committing: not purged after {ATTEMPTS} attempts")
        raise RuntimeError(
            f"{ref.identifier}: writers committed before each of {ATTEMPTS} purge commits; run "
            "`fm purge` again once the stages writing it are done"
        )
    _sweep(settings, ref, scope, started, grace, locked, report)
    return report


def _land(
    settings: Settings,
    table: Table,
    requirements: tuple[TableRequirement, ...],
    updates: tuple[TableUpdate, ...],
    what: str,
) -> None:
    iceberg = catalog.open_catalog(settings)
    with_retries(
        lambda: iceberg.commit_table(table, requirements, updates),
        what=f"committing the purge of {what}",
    )


def _account(report: TablePurge, rewrites: Collection[Rewrite]) -> None:
    report.rows_removed += sum(r.removed_rows for r in rewrites)
    report.files_rewritten += sum(r.new is not None for r in rewrites)
    report.files_emptied += sum(r.new is None for r in rewrites)
    report.bytes_removed += sum(r.bytes_removed for r in rewrites)


def _adjust_history(
    settings: Settings, table: Table, files: TableFiles, rewrites: dict[str, Rewrite]
) -> None:
    """The expired snapshot the oldest live one descends from held rows the purge removed:
    its recorded total drops by them (`storage.maintenance.history`)."""
    metadata = table.metadata
    snapshot = metadata.current_snapshot()
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    while snapshot is not None and snapshot.parent_snapshot_id in by_id:
        snapshot = by_id[snapshot.parent_snapshot_id]  # type: ignore[index]
    if snapshot is None:
        return
    removed = removed_from_parent(snapshot, files, rewrites)
    if removed:
        subtract_records(settings, metadata, snapshot, removed)


def _old_files(
    table: Table,
    files: TableFiles,
    rewrites: dict[str, Rewrite],
    manifests: Mapping[str, object],
    lists_of: list[Snapshot],
) -> list[str]:
    """The files the purge's commit stopped referencing: old data files, and the replacements
    of files only deleted entries name; old manifests; old manifest lists."""
    live = files.live_paths
    old = list(rewrites)
    old += [r.new.file_path for p, r in rewrites.items() if r.new is not None and p not in live]
    old += list(manifests)
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    old += [by_id[s.snapshot_id].manifest_list for s in lists_of if s.snapshot_id in by_id]
    return old


def _delete_now(settings: Settings, table: Table, uris: list[str], report: TablePurge) -> None:
    forget_file_checksums(settings, uris)
    for uri in uris:
        fs, path = filesystem_for(uri, settings.s3_endpoint)

        def delete(fs: pafs.FileSystem = fs, path: str = path) -> None:
            fs.delete_file(path)

        try:
            size = fs.get_file_info(path).size or 0
            with_retries(delete, what=f"deleting {uri}")
        except FileNotFoundError:
            continue
        report.files_deleted += 1
        report.bytes_deleted += size


def _sweep(
    settings: Settings,
    ref: TableRef,
    scope: PurgeScope,
    started: dt.datetime,
    grace: dt.timedelta,
    locked: Locked,
    report: TablePurge,
) -> None:
    """Delete what the table no longer references that may hold purged bytes (see module)."""
    table = load(settings, ref)
    listing = list_files(settings, table)
    referenced = referenced_files(settings, table)
    settled = started - grace
    doomed: list[tuple[str, int]] = []
    for path, size, mtime in listing.files:
        if path in referenced:
            continue
        kind = kind_of(path)
        uri = f"{listing.prefix}{path}"
        if kind == "data":
            if (mtime < settled or locked(uri)) and doomed_rows(listing.fs, path, scope):
                doomed.append((path, size))
                report.orphans_deleted += 1
            continue
        # Manifests and lists (bounds) no commit in progress can be about to name; metadata
        # files of the table before the purge rewrote it (they name the deleted lists).
        rewritten = report.snapshots_rewritten > 0
        if (kind == "metadata" and rewritten and mtime < started) or (
            kind in ("manifests", "manifest lists") and mtime < settled
        ):
            doomed.append((path, size))
    deleted = delete_files(settings, listing, doomed)
    report.files_deleted += deleted.total_files
    report.bytes_deleted += deleted.total_bytes
