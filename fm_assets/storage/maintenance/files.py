"""A table's files in the object store: what they are, which the table still references, and
deleting the rest once they are older than the grace period.

Referenced: the current metadata file and those its metadata log lists; for every snapshot in
the metadata, its manifest list, its manifests, and the data files its manifests hold live
(added or existing: a `deleted` entry says the snapshot no longer reads that file). Everything
else under the table's location is unreferenced: files of expired snapshots, metadata files that
fell off the log, and files a writer wrote for a commit that has not landed (yet, or ever); the
grace period tells the last apart, by the file's age.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow.fs as pafs
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from fm_assets.settings import Settings
from fm_assets.storage.bookkeeping import forget_file_checksums
from fm_loader.storage.remote import filesystem_for
from fm_loader.storage.retry import with_retries

KINDS = ("data", "manifests", "manifest lists", "metadata", "other")


def kind_of(path: str) -> str:
    """Which kind of table file `path` is, by where Iceberg puts it and how it names it."""
    name = path.rsplit("/", 1)[-1]
    if "/data/" in path:
        return "data"
    if name.endswith(".metadata.json"):
        return "metadata"
    if name.startswith("snap-") and name.endswith(".avro"):
        return "manifest lists"
    if name.endswith(".avro"):
        return "manifests"
    return "other"


@dataclass
class Usage:
    """Files and bytes per kind (`KINDS`)."""

    files: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    def add(self, path: str, size: int) -> None:
        kind = kind_of(path)
        self.files[kind] += 1
        self.bytes[kind] += size

    @property
    def total_files(self) -> int:
        return sum(self.files.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())

    def minus(self, other: Usage) -> Usage:
        left = Usage()
        for kind in KINDS:
            left.files[kind] = self.files[kind] - other.files[kind]
            left.bytes[kind] = self.bytes[kind] - other.bytes[kind]
        return left


def usage_of(files: Iterable[tuple[str, int]]) -> Usage:
    """The usage of (path, size) pairs."""
    found = Usage()
    for path, size in files:
        found.add(path, size)
    return found


@dataclass(frozen=True)
class TableFiles:
    """Every file under a table's location: its filesystem, the URI prefix of its paths, and
    (path inside the filesystem, size, modification time) of each."""

    fs: pafs.FileSystem
    prefix: str
    files: tuple[tuple[str, int, dt.datetime], ...]

    def usage(self) -> Usage:
        return usage_of((path, size) for path, size, _ in self.files)


def list_files(settings: Settings, table: Table) -> TableFiles:
    """The files under `table`'s location (data and metadata)."""
    location = table.location().rstrip("/")
    fs, root = filesystem_for(location, settings.s3_endpoint)
    prefix = location[: len(location) - len(root)]
    selector = pafs.FileSelector(f"{root}/", recursive=True, allow_not_found=True)
    infos = with_retries(
        lambda: fs.get_file_info(selector), what=f"listing the files of table {table.name()}"
    )
    files = tuple(
        (info.path, info.size or 0, (info.mtime or dt.datetime.now(dt.UTC)).astimezone(dt.UTC))
        for info in infos
        if info.type == pafs.FileType.File
    )
    return TableFiles(fs, prefix, files)


def referenced_files(
    settings: Settings, table: Table, metadata: TableMetadata | None = None
) -> set[str]:
    """Paths (inside the table's filesystem) of every file the table's metadata (or `metadata`,
    the table's as it would be) references."""
    metadata = metadata or table.metadata
    uris = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    uris |= {s.statistics_path for s in metadata.statistics}
    uris |= {s.statistics_path for s in metadata.partition_statistics}
    manifests_seen: set[str] = set()
    for snapshot in metadata.snapshots:
        uris.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in manifests_seen:
                continue
            manifests_seen.add(manifest.manifest_path)
            uris.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                uris.add(entry.data_file.file_path)
    # Compared as paths inside the filesystem: the catalog may spell a URI differently.
    return {filesystem_for(uri, settings.s3_endpoint)[1] for uri in uris}


def unreferenced(
    files: TableFiles, referenced: set[str], older_than: dt.datetime
) -> list[tuple[str, int]]:
    """(path, size) of the files no reference names that were last written before
    `older_than` (a younger one may belong to a commit still in progress)."""
    return [
        (path, size)
        for path, size, mtime in files.files
        if path not in referenced and mtime < older_than
    ]


def delete_files(settings: Settings, files: TableFiles, doomed: Iterable[tuple[str, int]]) -> Usage:
    """Delete `doomed` files; return what was deleted. Their pinned checksums go first: a run
    killed in between leaves unreferenced files, which the next run deletes."""
    doomed = list(doomed)
    forget_file_checksums(settings, [f"{files.prefix}{path}" for path, _ in doomed])
    deleted = Usage()
    for path, size in doomed:

        def delete(path: str = path) -> None:
            files.fs.delete_file(path)

        try:
            with_retries(delete, what=f"deleting {files.prefix}{path}")
        except FileNotFoundError:
            continue  # a run killed after deleting it and before finishing
        deleted.add(path, size)
    return deleted
