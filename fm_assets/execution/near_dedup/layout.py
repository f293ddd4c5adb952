"""How the near-dup index's data files are laid out, so that a batch reads only the rows
whose keys it holds.

Each file holds one kind of row, sorted by that kind's key:

    bands  a kept document's band hashes (band >= 0), sorted by `band_hash`
    sets   a kept document's shingle set (band < 0), sorted by `doc_id`

and is written in row groups small enough to be the unit a lookup reads (`BAND_GROUP_ROWS`
rows; `SET_GROUP_BYTES` of shingle sets), each with its key's min/max statistics and a
split-block Bloom filter of its keys (keyed files: `storage/keyed/`). A lookup goes file (the
manifest's key bounds) -> row group (the footer's statistics) -> Bloom filter (one 32-byte
block a key) -> the row groups that hold one of its keys; nothing else of the file is read.

A file this module writes is named `nd1-<kind>-...`: a file without that prefix (written by an
older platform, or rewritten by a row delete outside near dedup) is read correctly all the
same, rows filtered by key, but without the filters' help; `compaction` rewrites it.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import DataFile

from fm_assets.storage import catalog
from fm_assets.storage.data_files import TableHandle
from fm_assets.storage.keyed.files import sort_by_key, write_keyed_file

BANDS, SETS = "bands", "sets"
KINDS = (BANDS, SETS)
KEY = {BANDS: "band_hash", SETS: "doc_id"}
# The columns each kind's files carry (a band row's shingle set is always null: left out).
COLUMNS = {
    BANDS: ("batch_id", "doc_id", "band", "band_hash", "index_config"),
    SETS: ("batch_id", "doc_id", "band", "band_hash", "shingle_hashes", "index_config"),
}
PREFIX = "nd1"  # the layout's version, in every file name it writes
# A row group is what one looked-up key costs to read when present (~40 bytes a band row),
# and each costs ~450 bytes of footer (bench/results/near_dedup_lookup.md: footers read).
BAND_GROUP_ROWS = 2048
SET_GROUP_BYTES = 256 << 10
# Files are cut by key range at about this size: a lookup opens only the files whose key
# range holds one of its keys, and a merge writes one file per range.
FILE_BYTES = 32 << 20


def kind_of_name(path: str) -> str | None:
    """The kind of a file this layout wrote (from its name), else None."""
    name = path.rsplit("/", 1)[-1]
    for kind in KINDS:
        if name.startswith(f"{PREFIX}-{kind}-"):
            return kind
    return None


def sort_rows(rows: pa.Table, kind: str) -> pa.Table:
    """`rows` in the order a file of `kind` keeps them."""
    return sort_by_key(rows, KEY[kind])


def write_index_files(
    handle: TableHandle,
    rows: pa.Table,
    kind: str,
    write_id: uuid.UUID,
    task_id: int,
    *,
    one_file: bool = False,
) -> list[DataFile]:
    """Write index rows of one `kind` as data files of the layout (sorted by key, cut into
    files of about `FILE_BYTES` of Arrow data by key range, or all in `one_file`); return
    them. The files of one `write_id` are one run (`compaction`)."""
    if rows.num_rows == 0:
        return []
    if handle.metadata.spec().fields:
        raise ValueError(
            f"{handle.name} is partitioned ({handle.metadata.spec()}); load it through the "
            "catalog first, which brings it to its unpartitioned declaration"
        )
    ordered = sort_rows(catalog.conform(rows.select(list(COLUMNS[kind])), _schema(kind)), kind)
    per_row = max(1, ordered.nbytes // ordered.num_rows)
    group_rows = _group_rows(kind, per_row)
    # Whole row groups to a file; a file of about FILE_BYTES in Arrow bytes.
    file_rows = (
        ordered.num_rows
        if one_file
        else max(group_rows, FILE_BYTES // per_row // group_rows * group_rows)
    )
    written = []
    for part, start in enumerate(range(0, ordered.num_rows, file_rows)):
        chunk = ordered.slice(start, file_rows)
        name = f"{PREFIX}-{kind}-{task_id:07d}-{part:04d}-{write_id}.parquet"
        # The band's statistics say the kind to older readers.
        written.append(
            write_keyed_file(handle, chunk, KEY[kind], name, group_rows, statistics=("band",))
        )
    return written


def _schema(kind: str) -> pa.Schema:
    declared = catalog.table_schema("neardup_index")
    return pa.schema([declared.field(c) for c in COLUMNS[kind]])


def _group_rows(kind: str, per_row: int) -> int:
    if kind == BANDS:
        return BAND_GROUP_ROWS
    return max(8, min(4096, SET_GROUP_BYTES // per_row))


def distinct(tables: list[pa.Table], column: str, kind: pa.DataType) -> pa.Array:
    """The distinct values of `column` over `tables`, sorted."""
    values = [t.column(column) for t in tables if t.num_rows]
    if not values:
        return pa.array([], kind)
    found = pc.unique(pa.chunked_array(values, kind).combine_chunks())
    return found.take(pc.sort_indices(found))
