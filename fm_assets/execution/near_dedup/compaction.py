"""Compaction of a namespace's near-dup index: many batches' small files merged into one.

Every near-dedup run adds a few files to `neardup_index` (one per band group and bucket group
task, one on a small batch), and the next run reads the files holding its bands: without
compaction a namespace of a thousand small batches would make each new batch open thousands of
files. Once `COMPACT_AT` files under `COMPACT_BELOW` bytes have gathered, one Ray task merges
them (sorted like the writers sort: by band, then hash, then id: a shingle-set row's hash is 0)
and one snapshot swaps them for the merged file: the same rows, so no reader sees a change.
Files written by older platform versions (partitioned by batch and band) are small and are
merged the same way.

It runs inside the near-dedup stage, which holds the namespace's near-dedup lock: no other
writer touches these tables meanwhile. A swap that finds its files already gone gives up
(nothing is lost: the next run compacts again).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask
from pyiceberg.table.snapshots import TOTAL_DATA_FILES

from fm_assets.execution.compute import Progress, get, remote
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.data_files import (
    FilesGone,
    TableHandle,
    plan_files,
    read_files,
    replace_files,
    table_handle,
    write_files,
)

COMPACT_BELOW = 32 << 20  # a file this small is merged with others
COMPACT_AT = 8  # small files of a table that start a compaction
MERGE_BYTES = 256 << 20  # at most this many bytes of small files go into one merge task
SORT_KEYS = {"neardup_index": ("band", "band_hash", "doc_id")}


def compacted(
    settings: Settings, name: str, namespace: str | None, progress: Progress
) -> TableHandle:
    """A handle of table `name` once `compact` has run on it, if it may be due: a table of
    fewer than `COMPACT_AT` data files (its snapshot summary says) has nothing to merge, and
    nothing is planned for it."""
    handle = table_handle(settings, name, namespace)
    snapshot = handle.metadata.current_snapshot()
    if snapshot is None:
        return handle  # no commit yet: no files
    total = snapshot.summary[TOTAL_DATA_FILES] if snapshot.summary is not None else None
    if total is not None and int(total) < COMPACT_AT:
        return handle
    compact(settings, name, namespace, progress)
    return table_handle(settings, name, namespace)


def compact(
    settings: Settings, name: str, namespace: str | None, progress: Progress
) -> list[FileScanTask]:
    """Merge `name`'s small files if `COMPACT_AT` have gathered; return the table's files."""
    files = plan_files(settings, name, catalog.ALWAYS_TRUE, None, namespace)
    chosen = mergeable(files)
    if len(chosen) < COMPACT_AT:
        return files
    handle = table_handle(settings, name, namespace)
    merged = get(remote(merge_files).remote(handle, chosen, SORT_KEYS[name], uuid.uuid4()))
    properties = {"fm.operation": "compaction", "fm.merged_files": str(len(chosen))}
    try:
        replace_files(settings, name, [t.file for t in chosen], merged, properties, namespace)
    except FilesGone as exc:
        progress(f"{name}: compaction given up ({exc}); the next run compacts again")
    else:
        progress(f"{name}: {len(chosen)} small files compacted into {len(merged)}")
    return plan_files(settings, name, catalog.ALWAYS_TRUE, None, namespace)


def mergeable(files: Sequence[FileScanTask]) -> list[FileScanTask]:
    """The small files one merge takes: smallest first, up to `MERGE_BYTES`. A file with
    delete files attached is left alone (its rows are not the file's rows)."""
    small = sorted(
        (t for t in files if t.file.file_size_in_bytes < COMPACT_BELOW and not t.delete_files),
        key=lambda t: (t.file.file_size_in_bytes, t.file.file_path),
    )
    chosen: list[FileScanTask] = []
    total = 0
    for task in small:
        if chosen and total + task.file.file_size_in_bytes > MERGE_BYTES:
            break
        chosen.append(task)
        total += task.file.file_size_in_bytes
    return chosen


def merge_files(
    handle: TableHandle, tasks: list[FileScanTask], sort_keys: Sequence[str], write_id: uuid.UUID
) -> list[DataFile]:
    """The rows of `tasks` as one sorted data file (a Ray task)."""
    rows = read_files(handle, tasks)
    ordered: pa.Table = rows.sort_by([(key, "ascending") for key in sort_keys])
    return write_files(handle, ordered, write_id, 4_000_000)
