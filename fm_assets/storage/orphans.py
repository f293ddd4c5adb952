"""The orphan-file sweep: data files no snapshot references, left by runs that never committed.

Workers write their data files before the driver commits them; a run killed in between leaves
files that no reader can see (readers go through snapshots), but that take space. A file is an
orphan when no snapshot of its table references it (catalog maintenance expires only snapshots
no version pins, and deletes what they alone referenced itself) and it is older than the grace
period, so the files of a run still in progress are never touched.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pyarrow.fs as pafs
from pyiceberg.table import Table

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.tables import declared_tables, table_spec
from fm_loader.storage.remote import filesystem_for

DEFAULT_GRACE = dt.timedelta(hours=24)


@dataclass
class SweepReport:
    """Orphans found (and removed unless dry run) per table (`fm.shard_sets`,
    `fm_cloud.raw_documents`): (files, bytes)."""

    dry_run: bool
    tables: dict[str, tuple[int, int]] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)

    @property
    def files(self) -> int:
        return sum(n for n, _ in self.tables.values())

    @property
    def bytes(self) -> int:
        return sum(b for _, b in self.tables.values())


def sweep_orphans(
    settings: Settings, *, grace: dt.timedelta = DEFAULT_GRACE, dry_run: bool = False
) -> SweepReport:
    """Find (and unless `dry_run`, delete) every table's unreferenced data files older than
    `grace`: the platform's tables and each data namespace's."""
    report = SweepReport(dry_run=dry_run)
    cutoff = dt.datetime.now(dt.UTC) - grace
    namespaces = catalog.data_namespaces(settings)
    tables = [
        (name, namespace)
        for name in declared_tables()
        for namespace in (namespaces if table_spec(name).per_namespace else [None])
    ]
    for name, namespace in tables:
        table = catalog.load_table(settings, name, namespace=namespace)
        # Compared as paths inside the filesystem: the catalog may spell a URI differently.
        referenced = {filesystem_for(uri, settings.s3_endpoint)[1] for uri in _referenced(table)}
        data_uri = f"{table.location().rstrip('/')}/data"
        fs, root = filesystem_for(data_uri, settings.s3_endpoint)
        found = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
        prefix = data_uri[: len(data_uri) - len(root)]
        orphans = [
            info
            for info in found
            if info.type == pafs.FileType.File
            and info.path not in referenced
            and info.mtime is not None
            and info.mtime.astimezone(dt.UTC) < cutoff
        ]
        if not orphans:
            continue
        identifier = catalog.table_identifier(settings, name, namespace)
        report.tables[identifier] = (len(orphans), sum(info.size or 0 for info in orphans))
        for info in orphans:
            if not dry_run:
                fs.delete_file(info.path)
            report.removed.append(f"{prefix}{info.path}")
    return report


def _referenced(table: Table) -> set[str]:
    """Every data file any snapshot of `table` references (added or deleted entries alike).

    Not `inspect.all_files()`: it fails on a table whose snapshots hold no manifest (a
    partition replaced by nothing), which every run that quarantines nothing commits.
    """
    seen: set[str] = set()
    files: set[str] = set()
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                files.add(entry.data_file.file_path)
    return files
