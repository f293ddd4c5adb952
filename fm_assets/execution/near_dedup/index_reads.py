"""What a near-dup task reads of other batches' index rows: the band rows sharing a band hash
with its batch, whether its documents are indexed already, and the shingle sets of the
candidates it confirms. Each is a key lookup (`lookup.key_rows`): the rows of those keys, never
the rows of a band or a bucket.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import FileScanTask

from fm_assets.execution.near_dedup.layout import BANDS, SETS, distinct
from fm_assets.execution.near_dedup.lookup import ReadCounts, key_rows
from fm_assets.storage.data_files import TableHandle

INDEX_LOOKUP = pa.schema(
    [
        pa.field("doc_id", pa.string()),
        pa.field("band", pa.int32()),
        pa.field("band_hash", pa.int64()),
        pa.field("batch_id", pa.string()),
    ]
)


def other_batches_rows(
    index: TableHandle,
    files: Sequence[FileScanTask],
    bands: Sequence[int],
    batch_id: str,
    band_tables: Sequence[pa.Table],
    counts: ReadCounts | None = None,
) -> pa.Table:
    """Other batches' index rows of `bands` in `files` (doc_id, band, band_hash, batch_id)
    sharing a band hash with `band_tables` (the batch's rows of those bands: band_hash, pos,
    doc_id)."""
    hashes = distinct(list(band_tables), "band_hash", pa.int64())
    if not files or not bands or len(hashes) == 0:
        return INDEX_LOOKUP.empty_table()
    rows = key_rows(index, files, BANDS, hashes, INDEX_LOOKUP.names, counts)
    # A band hash mixes in its band, so a hash of another band is one in 2^64; the band is
    # checked all the same, and the batch's own rows (a rerun's) are never another batch's.
    keep = pc.and_(
        pc.is_in(rows.column("band"), value_set=pa.array(list(bands), pa.int32())),
        pc.not_equal(rows.column("batch_id"), batch_id),
    )
    return rows.filter(keep).cast(INDEX_LOOKUP)


def indexed_elsewhere(
    index: TableHandle,
    files: Sequence[FileScanTask],
    doc_ids: Sequence[str] | pa.Array,
    batch_id: str,
    counts: ReadCounts | None = None,
) -> set[str]:
    """The `doc_ids` another batch already indexed (by their shingle-set rows, one per kept
    document; in an older platform's file, any row of the document)."""
    ids = doc_ids if isinstance(doc_ids, pa.Array) else pa.array(list(doc_ids), pa.string())
    if not files or len(ids) == 0:
        return set()
    rows = key_rows(index, files, SETS, ids, ("doc_id", "batch_id"), counts)
    others = rows.filter(pc.not_equal(rows.column("batch_id"), batch_id))
    return set(others.column("doc_id").to_pylist())


def stored_shingles(
    index: TableHandle,
    files: Sequence[FileScanTask],
    doc_ids: Sequence[str],
    counts: ReadCounts | None = None,
) -> dict[str, np.ndarray[Any, Any]]:
    """Shingle sets of documents of other batches, from their shingle-set rows in `files` (or,
    for documents an older platform indexed, their band-0 rows)."""
    if not doc_ids or not files:
        return {}
    ids = pa.array(sorted(set(doc_ids)), pa.string())
    rows = key_rows(index, files, SETS, ids, ("doc_id", "shingle_hashes"), counts)
    rows = rows.filter(pc.is_valid(rows.column("shingle_hashes")))
    return {
        doc: np.asarray(values, dtype=np.int64).view(np.uint64)
        for doc, values in zip(
            rows.column("doc_id").to_pylist(),
            rows.column("shingle_hashes").to_numpy(zero_copy_only=False),
            strict=True,
        )
    }
