"""The Ray tasks that write a near-dedup decision: the kept documents' band hashes
(`neardup_index`) and shingle sets (`neardup_shingles`) into the namespace's index, one data
file per task, sorted by band or bucket; and each slice's documents into the stage's tables.
`execution.near_dedup` orchestrates them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import FileScanTask

from fm_assets.curation.minhash.signatures import MinHashConfig
from fm_assets.execution.near_dedup_tasks import BAND_ROWS, SHINGLES
from fm_assets.execution.planning import tables_by_part
from fm_assets.execution.slice_tasks import Outputs, SliceOutcome, write_result
from fm_assets.stages.neardup import NearDupStage
from fm_assets.storage.data_files import TableHandle, read_files, write_files


def _kept_rows(
    parts: Sequence[int],
    tables: Sequence[pa.Table],
    schema: pa.Schema,
    column: str,
    duplicates: pa.Table,
    preexisting: Sequence[pa.Array],
) -> pa.Table:
    """The rows of a group's slice tables (`tables`: each part's in turn) that become index
    entries, the part's number in `column`: of documents neither duplicates nor already
    indexed by another batch. One concatenation and one filter for the whole group: per part,
    the fixed cost of each Arrow call outweighs a small batch's rows."""
    chunks: list[pa.Table] = []
    numbers: list[np.ndarray[Any, Any]] = []
    for part, own in tables_by_part(parts, tables):
        for table in own:
            chunks.append(table)
            numbers.append(np.full(table.num_rows, part, dtype=np.int32))
    rows = pa.concat_tables(chunks) if chunks else schema.empty_table()
    part_of_row = np.concatenate(numbers) if numbers else np.zeros(0, dtype=np.int32)
    rows = rows.append_column(column, pa.array(part_of_row, pa.int32()))
    dropped = pa.concat_arrays([duplicates.column("pos").combine_chunks(), *preexisting])
    return rows.filter(pc.invert(pc.is_in(rows.column("pos"), value_set=dropped)))


def write_band(
    index: TableHandle,
    bands: Sequence[int],
    batch_id: str,
    config: MinHashConfig,
    duplicates: pa.Table,
    preexisting: list[pa.Array],
    write_id: Any,
    *band_tables: pa.Table,
) -> list[Any]:
    """This batch's `neardup_index` rows of a group of bands (`band_tables`: each band's slice
    tables in turn): its kept documents' band hashes, as one data file sorted by band (then
    hash), so a reader of one band reads only the row groups holding it."""
    if not bands:
        return []
    rows = _kept_rows(bands, band_tables, BAND_ROWS, "band", duplicates, preexisting)
    n = rows.num_rows
    table = pa.table(
        {
            "batch_id": pa.array([batch_id] * n, pa.string()),
            "doc_id": rows.column("doc_id"),
            "band": rows.column("band"),
            "band_hash": rows.column("band_hash"),
            "shingle_hashes": pa.nulls(n, pa.list_(pa.int64())),
            "index_config": pa.array([config.index_config] * n, pa.string()),
        }
    )
    # A stable sort: rows of equal hash keep their slice order, as before.
    ordered = table.sort_by([("band", "ascending"), ("band_hash", "ascending")])
    return write_files(index, ordered, write_id, 2_000_000 + bands[0])


def write_shingles(
    stored: TableHandle,
    buckets: Sequence[int],
    batch_id: str,
    duplicates: pa.Table,
    preexisting: list[pa.Array],
    write_id: Any,
    *bucket_tables: pa.Table,
) -> list[Any]:
    """This batch's `neardup_shingles` rows of a group of buckets (`bucket_tables`: each
    bucket's slice tables in turn): its kept documents' shingle sets, as one data file sorted
    by bucket, then document id."""
    if not buckets:
        return []
    rows = _kept_rows(buckets, bucket_tables, SHINGLES, "bucket", duplicates, preexisting)
    n = rows.num_rows
    table = pa.table(
        {
            "batch_id": pa.array([batch_id] * n, pa.string()),
            "bucket": rows.column("bucket"),
            "doc_id": rows.column("doc_id"),
            "shingle_hashes": rows.column("shingle_hashes"),
        }
    )
    ordered = table.sort_by([("bucket", "ascending"), ("doc_id", "ascending")])
    return write_files(stored, ordered, write_id, 3_000_000 + buckets[0])


def write_slice(
    stage: NearDupStage,
    source: TableHandle,
    tasks: list[FileScanTask],
    slice_no: int,
    duplicates: pa.Table,
    outputs: Outputs,
) -> SliceOutcome:
    """Read the slice again, quarantine its near-duplicates, write its data files."""
    return write_rows(stage, read_files(source, tasks), tasks, slice_no, duplicates, outputs)


def write_rows(
    stage: NearDupStage,
    batch: pa.Table,
    tasks: list[FileScanTask],
    slice_no: int,
    duplicates: pa.Table,
    outputs: Outputs,
) -> SliceOutcome:
    """Quarantine the near-duplicates among a slice's rows (`batch`, read from `tasks`); write
    its data files."""
    mine = {
        pos & 0xFFFFFFFF: (doc, home, j)
        for pos, doc, home, j in zip(
            *(
                duplicates.column(c).to_pylist()
                for c in ("pos", "duplicate_of", "batch", "jaccard")
            ),
            strict=True,
        )
        if pos >> 32 == slice_no
    }
    result = stage.apply(batch, mine)
    bytes_in = sum(t.file.file_size_in_bytes for t in tasks)
    return write_result(result, outputs, slice_no, records_in=batch.num_rows, bytes_in=bytes_in)
