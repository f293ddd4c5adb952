"""One maintenance run over the catalog: for each table, rewrite, expire, delete.

    rewrite   small files of a partition merged, manifests merged: one `replace` snapshot
    expire    snapshots no ref or version pins, superseded longer than the retention ago, removed
              from the metadata (their history kept in `fm_expired_snapshots` first)
    delete    files no live snapshot (or the metadata log) references, older than the grace
              period: data files, manifests, manifest lists, old metadata files

One run at a time (a lock). Every step is one atomic commit or deletions of unreferenced files,
so a run killed anywhere leaves a catalog every reader reads as before, and the next run carries
on. Tables that the dedup stages write under a namespace lock are rewritten only while that
lock is free; a partition of a batch only while no run of its stage for that batch holds its
lock. Each step reports progress (`fm maintain`, the job's log).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable

from pyiceberg.table import Table
from pyiceberg.table.snapshots import TOTAL_DATA_FILES

from fm_assets.settings import Settings
from fm_assets.storage.locks import exclusive, index_lock, stage_lock, try_exclusive
from fm_assets.storage.maintenance.expiry import expirable, expire
from fm_assets.storage.maintenance.files import (
    delete_files,
    list_files,
    referenced_files,
    unreferenced,
    usage_of,
)
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.report import MaintenanceReport, TableReport
from fm_assets.storage.maintenance.rewrite import LockFor, rewrite
from fm_assets.storage.maintenance.tables import TableRef, existing_tables, load, version_pins

Progress = Callable[[str], None]
MAINTENANCE_LOCK = "catalog maintenance"
# Tables a stage writes while holding its data namespace's index lock (`execution.runner`).
INDEX_WRITERS = {
    "document_index": "exact dedup",
    "neardup_index": "near dedup",
    "image_index": "image dedup",
}


def maintain(
    settings: Settings,
    policy: MaintenancePolicy,
    *,
    namespace: str | None = None,
    dry_run: bool = False,
    progress: Progress = lambda message: None,
) -> MaintenanceReport:
    """Maintain every table of the catalog (or of data namespace `namespace`); a dry run
    changes nothing and reports what a run would do."""
    report = MaintenanceReport(
        dry_run=dry_run,
        retention_hours=policy.retention.total_seconds() / 3600,
        grace_hours=policy.grace.total_seconds() / 3600,
    )
    with exclusive(settings, MAINTENANCE_LOCK, progress):
        # Times are taken once, at the start: a file or snapshot younger than the run is kept.
        now = dt.datetime.now(dt.UTC)
        tables = existing_tables(settings, namespace)
        pins = version_pins(settings, tables)
        progress(f"{len(tables)} tables; versions pin {sum(map(len, pins.values()))} snapshots")
        for ref in tables:
            report.tables.append(
                maintain_table(settings, ref, pins[ref.identifier], policy, now, dry_run, progress)
            )
    return report


def _partition_lock(ref: TableRef) -> LockFor:
    """The lock the writers of a partition hold: a stage's run for one batch."""

    def lock_for(values: dict[str, object]) -> str | None:
        batch = values.get("batch_id")
        if batch is None:
            return None
        return stage_lock(str(values.get("stage", ref.name)), str(batch))

    return lock_for


def _current(table: Table) -> tuple[int, int]:
    """(data files, manifests) of the current snapshot."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0, 0
    total = (snapshot.summary or {}).get(TOTAL_DATA_FILES)  # type: ignore[call-overload]
    live = [
        m for m in snapshot.manifests(table.io) if m.has_added_files() or m.has_existing_files()
    ]
    return int(total or 0), len(live)


def maintain_table(
    settings: Settings,
    ref: TableRef,
    pinned: set[int],
    policy: MaintenancePolicy,
    now: dt.datetime,
    dry_run: bool,
    progress: Progress,
) -> TableReport:
    """Rewrite, expire and sweep one table (see the module docstring)."""
    table = load(settings, ref)
    report = TableReport(ref.identifier, snapshots_before=len(table.metadata.snapshots))
    report.live_files_before, report.manifests_before = _current(table)
    report.disk_before = list_files(settings, table).usage()

    progress(f"{ref.identifier}: rewriting")
    what = INDEX_WRITERS.get(ref.name)
    lock = index_lock(what, ref.namespace) if what and ref.namespace else None
    planned_manifests = report.manifests_before
    held = try_exclusive(settings, lock) if lock else contextlib.nullcontext(True)
    with held as free:
        if not free:
            report.notes.append(f"{lock} is held: not rewritten this run")
        else:
            done = rewrite(settings, ref, policy, now, _partition_lock(ref), dry_run=dry_run)
            report.merged_files, report.merged_into = done.files_merged, done.files_written
            planned_manifests = done.manifests_after
            report.notes += done.notes

    progress(f"{ref.identifier}: expiring snapshots")
    table = load(settings, ref)
    doomed = expirable(table.metadata, pinned, policy.retention, now)
    metadata = table.metadata
    if dry_run:
        metadata = metadata.model_copy(
            update={"snapshots": [s for s in metadata.snapshots if s.snapshot_id not in doomed]}
        )
    elif doomed:
        expire(settings, ref, doomed, policy.metadata_versions)
        table = load(settings, ref)
        metadata = table.metadata

    progress(f"{ref.identifier}: deleting unreferenced files")
    files = list_files(settings, table)
    gone = unreferenced(files, referenced_files(settings, table, metadata), now - policy.grace)
    if dry_run:
        report.deleted = usage_of(gone)
        report.disk_after = report.disk_before.minus(report.deleted)
        report.snapshots_after = len(metadata.snapshots)
        report.live_files_after = (
            report.live_files_before - report.merged_files + report.merged_into
        )
        report.manifests_after = planned_manifests
        return report
    report.deleted = delete_files(settings, files, gone)
    table = load(settings, ref)
    report.snapshots_after = len(table.metadata.snapshots)
    report.live_files_after, report.manifests_after = _current(table)
    report.disk_after = list_files(settings, table).usage()
    progress(
        f"{ref.identifier}: {report.snapshots_before} -> {report.snapshots_after} snapshots, "
        f"{report.deleted.total_files} files deleted"
    )
    return report
