"""Writing one key-sorted Parquet data file of a table: rows sorted by a key column, in row
groups of a given size, each with the key's min/max statistics and a split-block Bloom filter
of its keys (`bloom`), and the `DataFile` that commits it (statistics as pyiceberg's own
writer makes them, for the columns that carry Parquet statistics).

A row group is what a looked-up key costs to read when present, and each costs a few hundred
bytes of footer: callers size them for their rows (`reads` finds them by key).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
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

from fm_assets.storage.data_files import TableHandle
from fm_loader.storage.retry import with_retries

# pyarrow sizes each filter to a power of two bytes: ~16 bits a key at this rate, which
# answers "maybe" for about 0.2% of absent keys.
BLOOM_FPP = 0.01
COMPRESSION = "zstd"


def sort_by_key(rows: pa.Table, key: str) -> pa.Table:
    """`rows` in the order a keyed file keeps them."""
    return rows.sort_by([(key, "ascending")])


def write_keyed_file(
    handle: TableHandle,
    rows: pa.Table,
    key: str,
    name: str,
    group_rows: int,
    *,
    statistics: Sequence[str] = (),
    partition: Record | None = None,
) -> DataFile:
    """One Parquet data file `name` of `rows` (already sorted by `key`) in row groups of
    `group_rows`, with `key`'s statistics and Bloom filter (and statistics of the columns
    `statistics` names); its `DataFile`, of partition `partition` (none: an unpartitioned
    table)."""
    metadata = handle.metadata
    file_schema = metadata.schema().select(*rows.column_names)
    arrow = rows.cast(schema_to_pyarrow(file_schema, include_field_ids=True))
    location = load_location_provider(metadata.location, metadata.properties)
    path = location.new_data_location(data_file_name=name)
    with_statistics = list(dict.fromkeys([key, *statistics]))
    # Columns without Parquet statistics get no bounds in the manifest either (pyiceberg
    # would look for them row group by row group, and log each one missing).
    leaves = parquet_path_to_id_mapping(file_schema)
    plan_properties = {
        **metadata.properties,
        **{
            f"write.metadata.metrics.column.{file_schema.find_column_name(i)}": "none"
            for leaf, i in leaves.items()
            if leaf not in with_statistics
        },
    }

    def write() -> DataFile:
        output = handle.io.new_output(path)
        with output.create(overwrite=True) as stream:
            writer = pq.ParquetWriter(
                stream,
                arrow.schema,
                compression=COMPRESSION,
                write_statistics=with_statistics,
                bloom_filter_options={key: {"ndv": group_rows, "fpp": BLOOM_FPP}},
            )
            with writer:
                for start in range(0, arrow.num_rows, group_rows):
                    writer.write_table(arrow.slice(start, group_rows), row_group_size=group_rows)
            parquet_metadata = writer.writer.metadata
        found = data_file_statistics_from_parquet_metadata(
            parquet_metadata=parquet_metadata,
            stats_columns=compute_statistics_plan(file_schema, plan_properties),
            parquet_column_mapping=leaves,
        )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=partition if partition is not None else Record(),
            file_size_in_bytes=len(output),
            sort_order_id=None,
            spec_id=metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **found.to_serialized_dict(),
        )

    # A retry rewrites the same name: nothing references it before the commit.
    return with_retries(write, what=f"writing {name} of {handle.name}")
