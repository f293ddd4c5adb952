"""The Ray tasks that write a near-dedup decision into the namespace's index: the kept
documents' band hashes (`neardup_index`) and shingle sets (`neardup_shingles`), one data file
per task, sorted by band or bucket. `execution.near_dedup` orchestrates them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.curation.minhash.signatures import MinHashConfig
from fm_assets.execution.near_dedup_tasks import BAND_ROWS, SHINGLES
from fm_assets.execution.planning import tables_by_part
from fm_assets.storage.data_files import TableHandle, write_files


def _kept(
    tables: Sequence[pa.Table],
    schema: pa.Schema,
    duplicates: pa.Table,
    preexisting: Sequence[pa.Array],
) -> pa.Table:
    """The rows of one part's slice tables that become index entries: of documents neither
    duplicates nor already indexed by another batch."""
    rows = pa.concat_tables(tables) if tables else schema.empty_table()
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
    parts: list[pa.Table] = []
    for band, tables in tables_by_part(bands, band_tables):
        rows = _kept(tables, BAND_ROWS, duplicates, preexisting)
        n = rows.num_rows
        parts.append(
            pa.table(
                {
                    "batch_id": pa.array([batch_id] * n, pa.string()),
                    "doc_id": rows.column("doc_id"),
                    "band": pa.array([band] * n, pa.int32()),
                    "band_hash": rows.column("band_hash"),
                    "shingle_hashes": pa.nulls(n, pa.list_(pa.int64())),
                    "index_config": pa.array([config.index_config] * n, pa.string()),
                }
            ).sort_by("band_hash")
        )
    if not parts:
        return []
    return write_files(index, pa.concat_tables(parts), write_id, 2_000_000 + bands[0])


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
    parts: list[pa.Table] = []
    for bucket, tables in tables_by_part(buckets, bucket_tables):
        rows = _kept(tables, SHINGLES, duplicates, preexisting)
        n = rows.num_rows
        parts.append(
            pa.table(
                {
                    "batch_id": pa.array([batch_id] * n, pa.string()),
                    "bucket": pa.array([bucket] * n, pa.int32()),
                    "doc_id": rows.column("doc_id"),
                    "shingle_hashes": rows.column("shingle_hashes"),
                }
            ).sort_by("doc_id")
        )
    if not parts:
        return []
    return write_files(stored, pa.concat_tables(parts), write_id, 3_000_000 + buckets[0])
