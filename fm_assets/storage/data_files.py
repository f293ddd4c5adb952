"""Iceberg data files written and read by Ray workers, committed by the driver.

The driver plans (which data files a batch partition holds) and commits (one transaction per table:
drop the partition's old files, add the new ones); workers read their own data files and write
their own Parquet data files straight to the warehouse. Nothing but file lists crosses to the
driver, so its memory does not grow with the batch.

A data file written for a run that never commits is unreferenced: readers go through snapshots,
so they never see it.
"""

from __future__ import annotations

import hashlib
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import AlwaysFalse, BooleanExpression
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, write_file
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
from pyiceberg.table import DataScan, FileScanTask, Table, Transaction, WriteTask
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.types import PrimitiveType

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import record_file_checksums
from fm_assets.storage.transactions import transaction
from fm_loader.storage.remote import filesystem_for
from fm_loader.storage.retry import with_retries

# Snapshot property naming the commit that wrote it, so a retried commit is never applied twice.
COMMIT_ID = "fm.commit-id"
# Bytes read at a time when hashing a data file. Small on purpose: each read allocates its whole
# size up front and the file fills what it can; at 8 MB, the driver's peak RSS grew by about the
# size of its data files below 8 MB (6 MB files: +6 MB, 24 MB files: +0 MB, measured), which made
# `fm run`'s peak step up from one batch to two and fall back at four (bench/driver_memory.py).
_CHECKSUM_CHUNK = 1 << 20
# A table written in many chunks is made one first up to this size (a copy; larger tables come
# in large chunks, whose per-batch cost is small beside their rows).
COMBINE_BELOW_BYTES = 64 << 20


@dataclass(frozen=True)
class TableHandle:
    """What a worker needs to read or write one table's data files; picklable, built by the
    driver once per stage run (`table_handle`)."""

    name: str
    io: FileIO
    metadata: TableMetadata
    schema: pa.Schema  # the platform's Arrow schema of the table
    namespace: str | None = None  # the data namespace of a per-namespace table


def table_handle(settings: Settings, name: str, namespace: str | None = None) -> TableHandle:
    table = catalog.load_table(settings, name, namespace=namespace)
    metadata = without_history(table.metadata)
    return TableHandle(name, table.io, metadata, catalog.table_schema(name), namespace)


def without_history(metadata: TableMetadata) -> TableMetadata:
    """`metadata` with its current snapshot only: what a worker plans, reads and writes at.

    A handle goes with every task of a stage; a table's history grows a snapshot per commit
    (the quarantine and output tables one per stage and batch), and shipping it is pickling
    and unpickling pydantic models on every call: measured on near dedup's one task after 8
    batches, ~8 ms of its hand-off for 43 KB of arguments.
    """
    current = metadata.current_snapshot()
    return metadata.model_copy(
        update={
            "snapshots": [] if current is None else [current],
            "snapshot_log": [],
            "metadata_log": [],
            "refs": {
                ref: target
                for ref, target in metadata.refs.items()
                if current is not None and target.snapshot_id == current.snapshot_id
            },
            "statistics": [],
            "partition_statistics": [],
        }
    )


def plan_files(
    settings: Settings,
    name: str,
    row_filter: BooleanExpression,
    snapshot_id: int | None,
    namespace: str | None = None,
) -> list[FileScanTask]:
    """The data files holding rows of `name` (of data namespace `namespace`) that match
    `row_filter` at `snapshot_id`."""

    def plan() -> list[FileScanTask]:
        table = catalog.load_table(settings, name, namespace=namespace)
        return list(table.scan(row_filter=row_filter, snapshot_id=snapshot_id).plan_files())

    return with_retries(plan, what=f"planning a scan of {name}", must_exist=True)


def plan_handle(
    handle: TableHandle, row_filter: BooleanExpression = catalog.ALWAYS_TRUE
) -> list[FileScanTask]:
    """`plan_files` at the snapshot `handle` was made at, from its metadata (no catalog call:
    a worker plans this way)."""
    scan = DataScan(table_metadata=handle.metadata, io=handle.io, row_filter=row_filter)
    return with_retries(
        lambda: list(scan.plan_files()), what=f"planning a scan of {handle.name}", must_exist=True
    )


def partition_value(handle: TableHandle, task: FileScanTask, column: str) -> object:
    """The value of identity partition `column` for a data file (None if not partitioned by it)."""
    schema = handle.metadata.schema()
    for spec in handle.metadata.partition_specs:
        if spec.spec_id != task.file.spec_id:
            continue
        for position, field in enumerate(spec.fields):
            if schema.find_field(field.source_id).name == column:
                return task.file.partition[position]
    return None


def value_range(handle: TableHandle, task: FileScanTask, column: str) -> tuple[int, int] | None:
    """The [lowest, highest] value of integer `column` in a data file: its identity partition
    value, else the file's column statistics; None when the file says nothing of it."""
    value = partition_value(handle, task, column)
    if value is not None:
        return int(value), int(value)  # type: ignore[call-overload]
    field = handle.metadata.schema().find_field(column)
    if not isinstance(field.field_type, PrimitiveType):
        return None
    lower = (task.file.lower_bounds or {}).get(field.field_id)
    upper = (task.file.upper_bounds or {}).get(field.field_id)
    if lower is None or upper is None:
        return None
    return int(from_bytes(field.field_type, lower)), int(from_bytes(field.field_type, upper))  # type: ignore[call-overload]


def read_files(
    handle: TableHandle,
    tasks: Sequence[FileScanTask],
    columns: Sequence[str] | None = None,
    row_filter: BooleanExpression = catalog.ALWAYS_TRUE,
) -> pa.Table:
    """The rows of `tasks` matching `row_filter` (on a worker), typed as the platform's schema."""
    # A table an older platform wrote may hold columns this one no longer declares: not read.
    projected = handle.metadata.schema().select(*(columns or handle.schema.names))
    scan = ArrowScan(handle.metadata, handle.io, projected, row_filter=row_filter)
    # The snapshot lists these files: one that cannot be found yet is retried, not skipped.
    data = with_retries(
        lambda: scan.to_table(list(tasks)),
        what=f"reading {len(tasks)} data files of {handle.name}",
        must_exist=True,
    )
    wanted = pa.schema([handle.schema.field(c) for c in columns]) if columns else handle.schema
    return catalog.conform(data, wanted)


def write_files(
    handle: TableHandle, data: pa.Table, write_id: uuid.UUID, task_id: int
) -> list[DataFile]:
    """Write `data` as Parquet data files of the table (one per partition); return them.

    `write_id` names the stage run and `task_id` the task: together they make each file's name
    unique, so a retried task writes new files instead of overwriting a committed one.
    """
    if data.num_rows == 0:
        return []
    if data.column(0).num_chunks > 1 and data.nbytes <= COMBINE_BELOW_BYTES:
        # pyiceberg converts each record batch to the table schema on its own (~0.3 ms of
        # Python each): a task's table concatenated from many small parts (a part per band, per
        # bucket, per chunk of documents) costs more in that than in writing its rows.
        data = data.combine_chunks()
    data = catalog.conform(data, handle.schema)
    schema, spec = handle.metadata.schema(), handle.metadata.spec()
    written = schema.select(*data.column_names)
    fields = [(f, schema.find_field(f.source_id).name) for f in spec.fields]
    tasks = []
    partitions = _partition_values(data, [name for _, name in fields])
    for part, values in enumerate(partitions):
        # One partition (a stage writes one batch) is all of `data`: a filter would copy it.
        rows = data
        if len(partitions) > 1:
            for (_, name), value in zip(fields, values, strict=True):
                rows = rows.filter(
                    pc.equal(rows.column(name), pa.scalar(value, rows.schema.field(name).type))
                )
        key = (
            PartitionKey(
                field_values=[
                    PartitionFieldValue(field, value)
                    for (field, _), value in zip(fields, values, strict=True)
                ],
                partition_spec=spec,
                schema=schema,
            )
            if fields
            else None
        )
        tasks.append(
            WriteTask(
                write_uuid=write_id,
                task_id=task_id * 10_000 + part,
                # The table's schema less the columns the platform no longer writes (an older
                # platform's, now optional): pyiceberg writes those as nulls.
                schema=written,
                record_batches=rows.to_batches(),
                partition_key=key,
            )
        )
    # A retry rewrites the same file names: nothing references them before the commit.
    return with_retries(
        lambda: list(write_file(handle.io, handle.metadata, iter(tasks))),
        what=f"writing data files of {handle.name}",
    )


def _partition_values(data: pa.Table, columns: list[str]) -> list[tuple[object, ...]]:
    if not columns:
        return [()]
    unique = data.select(columns).group_by(columns).aggregate([])
    return sorted(zip(*(unique.column(c).to_pylist() for c in columns), strict=True), key=repr)


def commit_files(
    settings: Settings,
    name: str,
    replace: BooleanExpression,
    data_files: Sequence[DataFile],
    properties: dict[str, str],
    namespace: str | None = None,
    table_properties: dict[str, str] | None = None,
) -> int:
    """One transaction: remove the rows matching `replace` and add `data_files` (and set
    `table_properties` on the table, if given); return the new snapshot id. Readers see the old
    rows or the new ones, never a mix; a crash before the commit leaves the old snapshot in
    place. `catalog.NOTHING` removes nothing (and reads nothing)."""

    def apply(tx: Transaction, table: Table, properties: dict[str, str]) -> None:
        if table_properties:
            tx.set_properties(table_properties)
        if not isinstance(replace, AlwaysFalse):
            with warnings.catch_warnings():
                # A first run of a batch has nothing to delete; pyiceberg warns, harmlessly.
                warnings.filterwarnings("ignore", message="Delete operation did not match")
                tx.delete(replace, snapshot_properties=properties)
        with tx.update_snapshot(snapshot_properties=properties).fast_append() as append:
            for data_file in data_files:
                append.append_data_file(data_file)

    return _commit_once(settings, name, namespace, apply, data_files, properties)


class FilesGone(RuntimeError):
    """A file `replace_files` was to remove is no longer in the table."""


def replace_files(
    settings: Settings,
    name: str,
    old: Sequence[DataFile],
    new: Sequence[DataFile],
    properties: dict[str, str],
    namespace: str | None = None,
) -> int:
    """One snapshot that removes the data files `old` and adds `new` (a compaction: the same
    rows in other files); return its id. Raises `FilesGone` if another commit removed one of
    `old` first (the rows would then be added twice)."""
    wanted = {f.file_path for f in old}

    def apply(tx: Transaction, table: Table, properties: dict[str, str]) -> None:
        current = {t.file.file_path for t in table.scan().plan_files()}
        if wanted - current:
            raise FilesGone(f"{len(wanted - current)} files of {name} were replaced meanwhile")
        with tx.update_snapshot(snapshot_properties=properties).overwrite() as overwrite:
            for data_file in old:
                overwrite.delete_data_file(data_file)
            for data_file in new:
                overwrite.append_data_file(data_file)

    return _commit_once(settings, name, namespace, apply, new, properties)


def _commit_once(
    settings: Settings,
    name: str,
    namespace: str | None,
    apply: Callable[[Transaction, Table, dict[str, str]], None],
    data_files: Sequence[DataFile],
    properties: dict[str, str],
) -> int:
    """Commit `apply`'s changes in one transaction, retried without ever landing twice; pin the
    checksums of the metadata and data files it added."""
    commit_id = uuid.uuid4().hex
    properties = {**properties, COMMIT_ID: commit_id}

    def commit() -> int:
        table = catalog.load_table(settings, name, namespace=namespace)
        done = _snapshot_of_commit(table, commit_id)
        if done is not None:
            return done  # an earlier attempt landed but its answer was lost: do not commit twice
        with transaction(table) as tx:
            apply(tx, table, properties)
        # The transaction left `table` at the metadata the catalog now points to.
        snapshot = _snapshot_of_commit(table, commit_id)
        if snapshot is None:
            raise RuntimeError(f"table {name} does not show commit {commit_id} after committing")
        pins = {**_metadata_checksums(table, commit_id), **_data_checksums(settings, data_files)}
        record_file_checksums(settings, pins)
        return snapshot

    return with_retries(commit, what=f"committing {len(data_files)} data files to {name}")


def _metadata_checksums(table: Table, commit_id: str) -> dict[str, tuple[str, int]]:
    """sha256 and size of the manifest lists and new manifests of commit `commit_id`."""
    pinned: dict[str, tuple[str, int]] = {}
    current = table.current_snapshot()
    for _ in range(16):  # the commit's snapshots (delete, append) are the newest ones
        if current is None:
            break
        summary = current.summary
        if summary is not None and summary.get(COMMIT_ID) == commit_id:
            paths = [current.manifest_list] + [
                m.manifest_path
                for m in current.manifests(table.io)
                if m.added_snapshot_id == current.snapshot_id
            ]
            for path in paths:
                with table.io.new_input(path).open() as f:
                    data = f.read()
                pinned[path] = (hashlib.sha256(data).hexdigest(), len(data))
        parent = current.parent_snapshot_id
        current = table.snapshot_by_id(parent) if parent is not None else None
    return pinned


def _data_checksums(
    settings: Settings, data_files: Sequence[DataFile]
) -> dict[str, tuple[str, int]]:
    """sha256 and size of the data files a commit added, read back in chunks.

    Parquet's page CRCs cover page data only: a flipped bit in a page header or the footer
    (statistics, the Arrow schema) can still decode, sometimes to other values. A checksum
    pinned at commit lets `fm verify` find any changed byte.
    """
    pinned: dict[str, tuple[str, int]] = {}
    for data_file in data_files:
        fs, path = filesystem_for(data_file.file_path, settings.s3_endpoint)
        pinned[data_file.file_path] = file_sha256(fs, path)
    return pinned


def file_sha256(fs: pafs.FileSystem, path: str) -> tuple[str, int]:
    """sha256 and size of one file, read in chunks (bounded memory)."""
    digest, size = hashlib.sha256(), 0
    with fs.open_input_stream(path, compression=None) as f:
        while chunk := f.read(_CHECKSUM_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _snapshot_of_commit(table: Table, commit_id: str) -> int | None:
    """The id of the table's newest snapshot written by commit `commit_id`, if any.

    A transaction writes up to two snapshots (delete, append), both tagged; the append is last.
    Only the newest snapshots are looked at: a commit is checked right after it was tried.
    """
    current = table.current_snapshot()
    checked = 0
    while current is not None and checked < 16:
        summary = current.summary
        if summary is not None and summary.get(COMMIT_ID) == commit_id:
            return current.snapshot_id
        parent = current.parent_snapshot_id
        current = table.snapshot_by_id(parent) if parent is not None else None
        checked += 1
    return None
