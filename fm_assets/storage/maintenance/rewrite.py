"""Compaction and manifest merging, in one `replace` snapshot that keeps every row as it was.

Each commit of a stage adds a manifest (and a few small data files) to its tables: after a year
a table's current snapshot would list thousands of manifests, which every scan reads and every
commit lists again. A rewrite merges:

- small data files of one partition (`MaintenancePolicy.small_file_bytes`; at least
  `min_files` of them, all written more than the grace period ago) into files of up to
  `target_file_bytes`, read and written with the table's full schema (columns the platform no
  longer declares keep their values), in the order they were committed; a table whose readers
  skip row groups by statistics (`SORTED_BY`) gets its merged rows sorted that way, and a
  table that compacts itself (`COMPACTS_ITSELF`) is left alone;
  a table whose current snapshot id is a content key (`KEYED_BY_SNAPSHOT`) is not rewritten;
- the manifests, when a snapshot has `merge_manifests_at` or more and fewer would do
  (`replace`).

Nothing is deleted: the snapshots before the rewrite (versions pin some) still reference the
old files and manifests, until expiry and the file sweep remove what no live snapshot
references. A partition of a batch is merged only while no run of its stage for that batch
holds its lock (`LockFor`): a rerun that replaces the partition would otherwise find its files
replaced under it and fail its commit.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, write_file
from pyiceberg.manifest import DataFile, ManifestEntry
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.table import FileScanTask, Table, WriteTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.transforms import IdentityTransform

from fm_assets.settings import Settings
from fm_assets.storage.locks import try_exclusive
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.replace import (
    Live,
    commit_replace,
    discard_files,
    live_entries,
    partition_order,
    partition_values,
    pin_files,
)
from fm_assets.storage.maintenance.tables import TableRef, load
from fm_loader.storage.retry import with_retries

# Readers of these tables skip row groups by column statistics: merged rows keep that order.
SORTED_BY = {"image_index": ("chunk", "value"), "document_index": ("doc_id",)}
# Near dedup compacts its index itself, sorted its own way, under its namespace lock.
COMPACTS_ITSELF = frozenset({"neardup_index"})
# Tables whose current snapshot ids are part of a content key (`contamination.store
# .registry_ref`, in the decontamination stage's config): a rewrite would leave their rows as
# they were but make every batch's decontamination out of date. They change only when a
# benchmark is registered, so they stay small.
KEYED_BY_SNAPSHOT = frozenset(
    {"contamination_benchmarks", "contamination_items", "contamination_ngrams"}
)
ALWAYS_TRUE = AlwaysTrue()

# (partition column -> value) of a partition to merge -> the lock its writers hold, if any.
LockFor = Callable[[dict[str, object]], str | None]


@dataclass
class RewriteResult:
    """What one rewrite did (or, in a dry run, would do)."""

    files_merged: int = 0  # data files replaced
    files_written: int = 0  # merged data files written
    partitions: int = 0
    manifests_before: int = 0
    manifests_after: int = 0
    committed: bool = False
    notes: list[str] = field(default_factory=list)


def plan_merges(
    metadata: TableMetadata, live: Live, policy: MaintenancePolicy, now: dt.datetime
) -> list[list[ManifestEntry]]:
    """Groups of small, settled data files of one partition, each merged into one file."""
    spec = metadata.spec()
    if not all(isinstance(f.transform, IdentityTransform) for f in spec.fields):
        return []  # merged rows are written back to the partition value they were read from
    settled_before = int((now - policy.grace).timestamp() * 1000)
    by_partition: dict[tuple[object, ...], list[ManifestEntry]] = {}
    for entry in live.entries:
        data = entry.data_file
        if data.spec_id != spec.spec_id or data.file_size_in_bytes >= policy.small_file_bytes:
            continue
        added = metadata.snapshot_by_id(entry.snapshot_id) if entry.snapshot_id else None
        if added is not None and added.timestamp_ms >= settled_before:
            continue  # a batch still being written, or just written: left for a later run
        by_partition.setdefault(partition_values(data.partition), []).append(entry)
    groups = []
    for key in sorted(by_partition, key=partition_order):
        small = by_partition[key]
        if len(small) < policy.min_files:
            continue
        small.sort(key=lambda e: (e.sequence_number or 0, e.data_file.file_path))
        group: list[ManifestEntry] = []
        size = 0
        for entry in small:
            if group and size + entry.data_file.file_size_in_bytes > policy.target_file_bytes:
                groups.append(group)
                group, size = [], 0
            group.append(entry)
            size += entry.data_file.file_size_in_bytes
        groups.append(group)
    return [g for g in groups if len(g) > 1]


def _merge(
    table: Table, name: str, group: list[ManifestEntry], write_id: uuid.UUID, task: int
) -> list[DataFile]:
    """The rows of `group`'s files (one partition), in commit order, as new data files."""
    metadata = table.metadata
    schema, spec = metadata.schema(), metadata.spec()
    tasks = [FileScanTask(e.data_file) for e in group]
    rows = with_retries(
        lambda: ArrowScan(metadata, table.io, schema, ALWAYS_TRUE).to_table(tasks),
        what=f"reading {len(tasks)} data files of {name} to merge",
        must_exist=True,
    )
    if name in SORTED_BY:
        rows = rows.sort_by([(column, "ascending") for column in SORTED_BY[name]])
    values = partition_values(group[0].data_file.partition)
    key = (
        PartitionKey(
            field_values=[
                PartitionFieldValue(f, v) for f, v in zip(spec.fields, values, strict=True)
            ],
            partition_spec=spec,
            schema=schema,
        )
        if spec.fields
        else None
    )
    write = WriteTask(
        write_uuid=write_id,
        task_id=task,
        schema=schema,
        record_batches=rows.to_batches(),
        partition_key=key,
    )
    written = with_retries(
        lambda: list(write_file(table.io, metadata, iter([write]))),
        what=f"writing merged data files of {name}",
    )
    for data_file in written:
        data_file.spec_id = spec.spec_id  # not stored in the file: manifests are per spec
    return written


def _partition_columns(
    metadata: TableMetadata, spec: PartitionSpec, record: object
) -> dict[str, object]:
    schema = metadata.schema()
    return {
        schema.find_field(f.source_id).name: v
        for f, v in zip(spec.fields, partition_values(record), strict=True)
    }


def rewrite(
    settings: Settings,
    ref: TableRef,
    policy: MaintenancePolicy,
    now: dt.datetime,
    lock_for: LockFor,
    *,
    dry_run: bool = False,
) -> RewriteResult:
    """Merge the table's small files and its manifests in one `replace` snapshot (see the
    module docstring); a dry run plans and says what it would do."""
    result = RewriteResult()
    if ref.name in KEYED_BY_SNAPSHOT:
        result.notes.append("its snapshot ids key the decontamination stage: not rewritten")
        return result
    table = load(settings, ref)
    if table.metadata.format_version != 2:
        result.notes.append(f"format version {table.metadata.format_version}: not rewritten")
        return result
    live = live_entries(table)
    if live is None:
        result.notes.append("holds delete files: not rewritten")
        return result
    result.manifests_before = result.manifests_after = len(live.manifests)
    groups = [] if ref.name in COMPACTS_ITSELF else plan_merges(table.metadata, live, policy, now)
    ideal = max(1, math.ceil(len(live.entries) / policy.manifest_entries))
    merge = len(live.manifests) >= policy.merge_manifests_at and len(live.manifests) > ideal
    with ExitStack() as locks:
        kept = []
        for group in groups[: policy.max_partitions]:
            values = _partition_columns(
                table.metadata, table.metadata.spec(), group[0].data_file.partition
            )
            name = lock_for(values)
            if name is not None and not locks.enter_context(try_exclusive(settings, name)):
                result.notes.append(f"{name}: busy, partition left for the next run")
                continue
            kept.append(group)
        groups = kept
        if not groups and not merge:
            return result
        result.files_merged = sum(len(g) for g in groups)
        result.partitions = len({partition_values(g[0].data_file.partition) for g in groups})
        if dry_run:
            result.files_written = len(groups)
            result.manifests_after = ideal if merge or groups else len(live.manifests)
            return result
        write_id = uuid.uuid4()
        merged = [(g, _merge(table, ref.name, g, write_id, i)) for i, g in enumerate(groups)]
        new_files = [f for _, files in merged for f in files]
        replaced = [e for g, _ in merged for e in g]
        pin_files(settings, [f.file_path for f in new_files])
        result.files_written = len(new_files)
        outcome = commit_replace(settings, ref, new_files, replaced, policy)
        if outcome is None:
            discard_files(settings, table, [f.file_path for f in new_files])
            result.notes.append(
                "writers kept committing (or replaced those files): left for the next run"
            )
            return result
        result.committed = True
        result.manifests_after = outcome
    return result
