"""How the near-dup index's data files are laid out, so that a batch reads only the rows
whose keys it holds.

Each file holds one kind of row, sorted by that kind's key:

    bands  a kept document's band hashes (band >= 0), sorted by `band_hash`
    sets   a kept document's shingle set (band < 0), sorted by `doc_id`

and is written in row groups small enough to be the unit a lookup reads (`BAND_GROUP_ROWS`
rows; `SET_GROUP_BYTES` of shingle sets), each with its key's min/max statistics and a
split-block Bloom filter of its keys (`bloom`). A lookup goes file (the manifest's key
bounds) -> row group (the footer's statistics) -> Bloom filter (one 32-byte block a key) ->
the row groups that hold one of its keys; nothing else of the file is read.

A file this module writes is named `nd1-<kind>-...`: a file without that prefix (written by an
older platform, or rewritten by a row delete outside near dedup) is read correctly all the
same, rows filtered by key, but without the filters' help; `compaction` rewrites it.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.locations import load_location_provider
from pyiceberg.typedef import Record

from fm_assets.storage import catalog
from fm_assets.storage.data_files import TableHandle
from fm_loader.storage.retry import with_retries

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
# pyarrow sizes each filter to a power of two bytes: ~16 bits a key at this rate, which
# answers "maybe" for about 0.2% of absent keys.
BLOOM_FPP = 0.01
COMPRESSION = "zstd"


def kind_of_name(path: str) -> str | None:
    """The kind of a file this layout wrote (from its name), else None."""
    name = path.rsplit("/", 1)[-1]
    for kind in KINDS:
        if name.startswith(f"{PREFIX}-{kind}-"):
            return kind
    return None


def sort_rows(rows: pa.Table, kind: str) -> pa.Table:
    """`rows` in the order a file of `kind` keeps them."""
    return rows.sort_by([(KEY[kind], "ascending")])


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
        written.append(_write_file(handle, chunk, kind, name, group_rows))
    return written


def _schema(kind: str) -> pa.Schema:
    declared = catalog.table_schema("neardup_index")
    return pa.schema([declared.field(c) for c in COLUMNS[kind]])


def _group_rows(kind: str, per_row: int) -> int:
    if kind == BANDS:
        return BAND_GROUP_ROWS
    return max(8, min(4096, SET_GROUP_BYTES // per_row))


def _write_file(
    handle: TableHandle, rows: pa.Table, kind: str, name: str, group_rows: int
) -> DataFile:
    """One Parquet data file of `rows` (sorted) in row groups of `group_rows`, with the key's
    statistics and Bloom filter; its `DataFile` (statistics as pyiceberg's writer makes them)."""
    metadata = handle.metadata
    file_schema = metadata.schema().select(*rows.column_names)
    arrow = rows.cast(schema_to_pyarrow(file_schema, include_field_ids=True))
    location = load_location_provider(metadata.location, metadata.properties)
    path = location.new_data_location(data_file_name=name)
    key = KEY[kind]
    with_statistics = [key, "band"]
    # Columns without Parquet statistics get no bounds in the manifest either (pyiceberg
    # would look for them row group by row group, and log each one missing).
    leaves = parquet_path_to_id_mapping(file_schema)
    plan_properties = {
        **metadata.properties,
        **{
            f"write.metadata.metrics.column.{file_schema.find_column_name(i)}": "none"
            for path, i in leaves.items()
            if path not in with_statistics
        },
    }

    def write() -> DataFile:
        output = handle.io.new_output(path)
        with output.create(overwrite=True) as stream:
            writer = pq.ParquetWriter(
                stream,
                arrow.schema,
                compression=COMPRESSION,
                # The key's statistics route lookups; the band's say the kind to older readers.
                write_statistics=with_statistics,
                bloom_filter_options={key: {"ndv": group_rows, "fpp": BLOOM_FPP}},
            )
            with writer:
                for start in range(0, arrow.num_rows, group_rows):
                    writer.write_table(arrow.slice(start, group_rows), row_group_size=group_rows)
            parquet_metadata = writer.writer.metadata
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=parquet_metadata,
            stats_columns=compute_statistics_plan(file_schema, plan_properties),
            parquet_column_mapping=leaves,
        )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=Record(),
            file_size_in_bytes=len(output),
            sort_order_id=None,
            spec_id=metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )

    # A retry rewrites the same name: nothing references it before the commit.
    return with_retries(write, what=f"writing {name} of {handle.name}")


def distinct(tables: list[pa.Table], column: str, kind: pa.DataType) -> pa.Array:
    """The distinct values of `column` over `tables`, sorted."""
    values = [t.column(column) for t in tables if t.num_rows]
    if not values:
        return pa.array([], kind)
    found = pc.unique(pa.chunked_array(values, kind).combine_chunks())
    return found.take(pc.sort_indices(found))
