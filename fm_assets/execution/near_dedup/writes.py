"""The Ray tasks that write a near-dedup decision: the kept documents' band hashes and shingle
sets into the namespace's index (`neardup_index`), in the files of its layout (`layout`: one
file of each kind per task, sorted by key); and each slice's documents into the stage's
tables. `execution.near_dedup.run` orchestrates them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import FileScanTask

from fm_assets.curation.minhash.signatures import MinHashConfig
from fm_assets.execution.near_dedup.layout import BANDS, SETS, sort_rows, write_index_files
from fm_assets.execution.near_dedup.tasks import BAND_ROWS, SHINGLES
from fm_assets.execution.planning import tables_by_part
from fm_assets.execution.slice_tasks import Outputs, SliceOutcome, write_result
from fm_assets.stages.near_dedup import NearDupStage
from fm_assets.storage.data_files import TableHandle, read_files


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


def band_rows(
    bands: Sequence[int],
    batch_id: str,
    config: MinHashConfig,
    duplicates: pa.Table,
    preexisting: list[pa.Array],
    *band_tables: pa.Table,
) -> pa.Table:
    """This batch's band rows of `neardup_index` for a group of bands (`band_tables`: each
    band's slice tables in turn): its kept documents' band hashes, sorted by hash, as a file
    of band rows keeps them (`layout`)."""
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
    return sort_rows(table, BANDS)


def shingle_set_rows(
    buckets: Sequence[int],
    batch_id: str,
    config: MinHashConfig,
    duplicates: pa.Table,
    preexisting: list[pa.Array],
    *bucket_tables: pa.Table,
) -> pa.Table:
    """This batch's shingle-set rows of `neardup_index` for a group of buckets (`bucket_tables`:
    each bucket's slice tables in turn): its kept documents' shingle sets, one row each under
    band `shingle_set_band(bucket)`, sorted by document id."""
    rows = _kept_rows(buckets, bucket_tables, SHINGLES, "bucket", duplicates, preexisting)
    batch_ids = pa.array([batch_id] * rows.num_rows, pa.string())
    return as_shingle_set_rows(batch_ids, rows, config)


def as_shingle_set_rows(batch_ids: Any, rows: pa.Table, config: MinHashConfig) -> pa.Table:
    """Index rows of shingle sets (`rows`: doc_id, bucket, shingle_hashes; `batch_ids` beside
    them), each under band `shingle_set_band(bucket)`, sorted by document id."""
    n = rows.num_rows
    table = pa.table(
        {
            "batch_id": batch_ids,
            "doc_id": rows.column("doc_id"),
            # shingle_set_band(bucket), for the whole column
            "band": pc.subtract(pa.scalar(-1, pa.int32()), rows.column("bucket")),
            "band_hash": pa.array(np.zeros(n, dtype=np.int64)),
            "shingle_hashes": rows.column("shingle_hashes"),
            "index_config": pa.array([config.index_config] * n, pa.string()),
        }
    )
    return sort_rows(table, SETS)


# What `write_index_rows` writes: band-hash rows of a group of bands (`layout.BANDS`), or
# shingle-set rows of a group of buckets (`layout.SETS`).
_ROWS_OF = {BANDS: band_rows, SETS: shingle_set_rows}


def write_index_rows(
    index: TableHandle,
    kind: str,
    parts: Sequence[int],
    batch_id: str,
    config: MinHashConfig,
    duplicates: pa.Table,
    preexisting: list[pa.Array],
    write_id: Any,
    *tables: pa.Table,
) -> list[Any]:
    """This batch's index rows of one `kind` for a group of bands or buckets (`parts`; `tables`:
    each part's slice tables in turn), written as data files of the index (a Ray task)."""
    if not parts:
        return []
    rows = _ROWS_OF[kind](parts, batch_id, config, duplicates, preexisting, *tables)
    return write_index_files(index, rows, kind, write_id, parts[0])


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
