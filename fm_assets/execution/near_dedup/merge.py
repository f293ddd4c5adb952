"""The Ray tasks of index compaction (`compaction` plans them): runs merged by key range, and
files not of the layout rewritten into it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask

from fm_assets.curation.minhash.index import shingle_set_band
from fm_assets.execution.near_dedup.layout import (
    BANDS,
    COLUMNS,
    FILE_BYTES,
    KEY,
    SETS,
    write_index_files,
)
from fm_assets.execution.near_dedup.tasks import shingle_bucket
from fm_assets.storage import catalog
from fm_assets.storage.data_files import TableHandle, read_files


def merge_runs(
    handle: TableHandle, tasks: Sequence[FileScanTask], kind: str, write_id: uuid.UUID
) -> list[DataFile]:
    """The rows of `tasks` (files of runs of one `kind`, each sorted by key) as one run: files
    of about `FILE_BYTES` each, cut by key range, each range read from the inputs' row groups
    that hold it (a Ray task)."""
    key = KEY[kind]
    inputs = [_Input.open(handle, t) for t in tasks]
    try:
        keys = pa.concat_arrays([i.keys(key) for i in inputs])
        total = sum(t.file.file_size_in_bytes for t in tasks)
        bounds = _boundaries(keys, max(1, -(-total // FILE_BYTES)))
        written: list[DataFile] = []
        for number, (low, high) in enumerate(zip([None, *bounds], [*bounds, None], strict=True)):
            parts = [i.rows_between(key, low, high, COLUMNS[kind]) for i in inputs]
            rows = pa.concat_tables([p for p in parts if p.num_rows])
            written += write_index_files(handle, rows, kind, write_id, number, one_file=True)
        return written
    finally:
        for i in inputs:
            i.close()


def _boundaries(keys: pa.Array, files: int) -> list[Any]:
    """Keys that cut the sorted `keys` into `files` ranges of about equal rows (distinct, in
    order; a range holds the keys from its lower boundary up to the next, excluded)."""
    if files <= 1 or len(keys) == 0:
        return []
    ordered = keys.take(pc.sort_indices(keys))
    cuts = [ordered[len(ordered) * i // files].as_py() for i in range(1, files)]
    first = ordered[0].as_py()
    return sorted({c for c in cuts if c != first})


class _Input:
    """One input file of a merge, open, with its footer."""

    def __init__(self, file: Any, metadata: pq.FileMetaData) -> None:
        self.file = file
        self.metadata = metadata
        self.reader = pq.ParquetFile(file, metadata=metadata)

    @classmethod
    def open(cls, handle: TableHandle, task: FileScanTask) -> _Input:
        file = handle.io.new_input(task.file.file_path).open(seekable=True)
        return cls(file, pq.ParquetFile(file).metadata)

    def close(self) -> None:
        self.file.close()

    def keys(self, key: str) -> pa.Array:
        return self.reader.read(columns=[key]).column(key).combine_chunks().cast(_type(key))

    def rows_between(self, key: str, low: Any, high: Any, columns: Sequence[str]) -> pa.Table:
        """Rows with `low` <= key < `high` (None: unbounded), from the row groups whose
        statistics may hold such keys."""
        position = [self.metadata.schema.column(i).path for i in range(self.metadata.num_columns)]
        column = position.index(key)
        groups = []
        for group in range(self.metadata.num_row_groups):
            stats = self.metadata.row_group(group).column(column).statistics
            outside = (
                stats is not None
                and stats.has_min_max
                and (
                    (high is not None and stats.min >= high)
                    or (low is not None and stats.max < low)
                )
            )
            if outside:
                continue
            groups.append(group)
        if not groups:
            return pa.table({c: pa.array([], _type(c)) for c in columns})
        rows = self.reader.read_row_groups(groups, columns=list(columns))
        values = rows.column(key)
        keep = pa.array([True] * rows.num_rows)
        if low is not None:
            keep = pc.and_(keep, pc.greater_equal(values, pa.scalar(low, values.type)))
        if high is not None:
            keep = pc.and_(keep, pc.less(values, pa.scalar(high, values.type)))
        return rows.filter(keep)


def _type(column: str) -> pa.DataType:
    return catalog.table_schema("neardup_index").field(column).type


def convert_files(
    handle: TableHandle, tasks: Sequence[FileScanTask], write_id: uuid.UUID
) -> list[DataFile]:
    """The rows of `tasks` (files not of the layout: read through Iceberg, whatever their
    partitioning or deletes) rewritten as a run of each kind (a Ray task). A shingle set on a
    band-0 row (older platforms kept it there) becomes the document's shingle-set row, unless
    the document has one already."""
    rows = read_files(handle, tasks)
    band = rows.column("band")
    bands = rows.filter(pc.greater_equal(band, 0))
    sets = rows.filter(pc.less(band, 0))
    legacy = bands.filter(pc.is_valid(bands.column("shingle_hashes")))
    if legacy.num_rows:
        have = pc.unique(sets.column("doc_id"))
        legacy = legacy.filter(pc.invert(pc.is_in(legacy.column("doc_id"), value_set=have)))
        ids = legacy.column("doc_id").to_pylist()
        moved = legacy.set_column(
            legacy.schema.get_field_index("band"),
            "band",
            pa.array([shingle_set_band(shingle_bucket(d)) for d in ids], pa.int32()),
        ).set_column(
            legacy.schema.get_field_index("band_hash"),
            "band_hash",
            pa.array([0] * len(ids), pa.int64()),
        )
        sets = pa.concat_tables([sets, moved.cast(sets.schema)])
    return [
        *write_index_files(handle, bands.select(list(COLUMNS[BANDS])), BANDS, write_id, 0),
        *write_index_files(handle, sets.select(list(COLUMNS[SETS])), SETS, write_id, 0),
    ]
