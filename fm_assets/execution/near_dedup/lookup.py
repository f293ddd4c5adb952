"""Other batches' near-dup index rows, as a task of the near-dup stage needs them: only the rows
that can matter to the batch.

Of the namespace's index, a task deciding some bands needs the rows that share a band hash with
one of the batch's documents (a candidate pair) and the rows of a document id the batch holds (a
document already indexed: kept as it is). The files holding the bands are read a million rows
at a time (a bigger compacted file on its own) and every other row is dropped as it is read: a
task holds its matches, not the index's rows of its bands, which for a namespace of a million
documents are 14 million rows (~1.5 GB of Arrow) per batch, each of which went through the
candidate loop in Python. `bench/results/neardup_lookup.md` measures both on a 500,000-document
index (7 million rows) and a batch of 20.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import FileScanTask

from fm_assets.execution.planning import files_by_rows
from fm_assets.storage import catalog
from fm_assets.storage.data_files import TableHandle, read_files

INDEX_LOOKUP = pa.schema(
    [
        pa.field("doc_id", pa.string()),
        pa.field("band", pa.int32()),
        pa.field("band_hash", pa.int64()),
        pa.field("batch_id", pa.string()),
    ]
)
# Index rows read together (then filtered): the bound on what a task holds of the index beyond
# its matches (~110 bytes of Arrow a row). A small namespace's files are one read.
READ_ROWS_AT_ONCE = 1_000_000


def other_batches_rows(
    others: TableHandle,
    other_files: Sequence[FileScanTask],
    bands: Sequence[int],
    batch_id: str,
    band_tables: Sequence[pa.Table],
) -> pa.Table:
    """Other batches' index rows of `bands` in `other_files` (doc_id, band, band_hash,
    batch_id) that share a band hash or a document id with `band_tables` (the batch's rows of
    those bands: band_hash, pos, doc_id)."""
    if not other_files or not bands:
        return INDEX_LOOKUP.empty_table()
    hashes = _distinct(band_tables, "band_hash", pa.int64())
    doc_ids = _distinct(band_tables, "doc_id", pa.string())
    if len(hashes) == 0:
        return INDEX_LOOKUP.empty_table()  # no document of the batch has shingles
    # Files hold several bands (and older ones every band); the batch's own rows (a rerun's)
    # are never "another batch's", whatever files the scan could not prune.
    row_filter = catalog.where_all(
        catalog.where_in("band", list(bands)),
        catalog.where_not_equal("batch_id", batch_id),
    )
    found = []
    for files in files_by_rows(other_files, READ_ROWS_AT_ONCE):
        rows = read_files(others, files, INDEX_LOOKUP.names, row_filter)
        matters = pc.or_(
            pc.is_in(rows.column("band_hash"), value_set=hashes),
            pc.is_in(rows.column("doc_id"), value_set=doc_ids),
        )
        found.append(rows.filter(matters))
    return pa.concat_tables(found)


def _distinct(tables: Sequence[pa.Table], column: str, kind: pa.DataType) -> pa.Array:
    values = [t.column(column) for t in tables if t.num_rows]
    if not values:
        return pa.array([], kind)
    return pc.unique(pa.chunked_array(values, kind))
