"""Moving a namespace's shingle sets into its near-dup index: a one-time step for a namespace
indexed by platform versions that kept them in a table of their own.

Those versions wrote each kept document's shingle set to `neardup_shingles` (batch_id, bucket,
doc_id, shingle_hashes): a second table each near-dedup run wrote, planned and committed. The
sets are now rows of `neardup_index` (band `shingle_set_band(bucket)`), so a run writes and
commits one table. An index table this version creates says so in a table property
(`SHINGLE_SETS_PROPERTY`); one without it was made by an older version, and its namespace's
first near-dedup run under this one copies the old table's rows into the index (one Ray task,
`MOVE_ROWS_AT_ONCE` rows at a time), commits them together with the property, then drops the
old table and its files.

It runs inside the near-dedup stage, which holds the namespace's near-dedup lock: no other run
writes the index meanwhile. A crash before the commit changes nothing (the next run moves the
rows again); one after it leaves the old table in the catalog, never read again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask

from fm_assets.curation.minhash.index import SHINGLE_SETS_IN_INDEX, SHINGLE_SETS_PROPERTY
from fm_assets.curation.minhash.signatures import MinHashConfig
from fm_assets.execution.compute import Progress, get, remote
from fm_assets.execution.near_dedup.layout import SETS, write_index_files
from fm_assets.execution.near_dedup.writes import as_shingle_set_rows
from fm_assets.execution.planning import files_by_rows
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.data_files import (
    TableHandle,
    commit_files,
    read_files,
    table_handle,
)
from fm_assets.storage.transactions import transaction
from fm_loader.storage.retry import with_retries

LEGACY_TABLE = "neardup_shingles"
LEGACY_SCHEMA = pa.schema(
    [
        pa.field("batch_id", pa.string(), nullable=False),
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("shingle_hashes", pa.list_(pa.int64()), nullable=False),
    ]
)
# Shingle-set rows read, converted and written together (~4 KB each for a 3 KB page).
MOVE_ROWS_AT_ONCE = 50_000


def with_shingle_sets_in_index(
    settings: Settings, index: TableHandle, config: MinHashConfig, progress: Progress
) -> TableHandle:
    """`index` (the namespace's `neardup_index`) once it holds the namespace's shingle sets:
    itself if its property says so (every table this version created), else after moving the
    old `neardup_shingles` table's rows into it (their index rows say `config`)."""
    if index.metadata.properties.get(SHINGLE_SETS_PROPERTY) == SHINGLE_SETS_IN_INDEX:
        return index
    namespace = index.namespace
    identifier = f"{catalog.catalog_namespace(settings, namespace)}.{LEGACY_TABLE}"
    iceberg = catalog.open_catalog(settings)
    exists = with_retries(
        lambda: iceberg.table_exists(identifier), what=f"looking for table {identifier}"
    )
    marked = {SHINGLE_SETS_PROPERTY: SHINGLE_SETS_IN_INDEX}
    if not exists:
        _set_properties(settings, namespace, marked)  # an index from before either table
        return table_handle(settings, "neardup_index", namespace)
    legacy = with_retries(lambda: iceberg.load_table(identifier), what=f"loading {identifier}")
    files = list(legacy.scan().plan_files()) if legacy.current_snapshot() is not None else []
    old = TableHandle(LEGACY_TABLE, legacy.io, legacy.metadata, LEGACY_SCHEMA, namespace)
    moved: list[DataFile] = (
        get(remote(move_shingle_sets).remote(old, files, index, config, uuid.uuid4()))
        if files
        else []
    )
    properties = {"fm.operation": "shingle-sets-moved", "fm.moved_rows": str(_rows(files))}
    if moved:
        commit_files(
            settings, "neardup_index", catalog.NOTHING, moved, properties, namespace, marked
        )
    else:
        _set_properties(settings, namespace, marked)
    with_retries(lambda: iceberg.purge_table(identifier), what=f"dropping {identifier}")
    progress(f"neardup_index: {_rows(files)} shingle sets moved in from {LEGACY_TABLE}")
    return table_handle(settings, "neardup_index", namespace)


def move_shingle_sets(
    old: TableHandle,
    files: Sequence[FileScanTask],
    index: TableHandle,
    config: MinHashConfig,
    write_id: uuid.UUID,
) -> list[DataFile]:
    """The rows of `files` (of the old `neardup_shingles`) written as shingle-set rows of
    `index`, `MOVE_ROWS_AT_ONCE` rows at a time (a bigger file on its own; a Ray task)."""
    written: list[DataFile] = []
    for number, group in enumerate(files_by_rows(files, MOVE_ROWS_AT_ONCE)):
        rows = read_files(old, group)
        converted = as_shingle_set_rows(rows.column("batch_id"), rows, config)
        written += write_index_files(index, converted, SETS, write_id, 5_000_000 + number)
    return written


def _rows(files: Sequence[FileScanTask]) -> int:
    return sum(t.file.record_count for t in files)


def _set_properties(settings: Settings, namespace: str | None, properties: dict[str, str]) -> None:
    def update() -> None:
        table = catalog.load_table(settings, "neardup_index", namespace=namespace)
        with transaction(table) as tx:
            tx.set_properties(properties)

    with_retries(update, what="setting properties of neardup_index")
