"""One Parquet data file rewritten without the rows a purge removes.

The rows that stay keep their order and their row groups (each old row group, filtered, is one
new row group): readers that skip row groups by their statistics (the near-dup index, sorted by
band; `image_index`, by chunk and value) skip the same ones afterwards. The file is written with
the Arrow schema it was written with (columns a later schema added stay absent, as before) and
pyiceberg's Parquet writer model (the platform's, with page checksums), next to the old file, so
it stays below its partition's prefix. Its Iceberg statistics are computed from what was
written: the old file's bounds (a string column keeps its first 16 characters there) go with it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.fileformat import FileFormatFactory
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.metadata import TableMetadata

from fm_assets.storage.purge.scope import PurgeScope, columns_needed, doomed_mask
from fm_loader.storage.retry import with_retries


@dataclass(frozen=True)
class Rewrite:
    """What became of one data file: the rows removed and its replacement (None: no row was
    left, the file leaves every snapshot)."""

    old: DataFile
    removed_rows: int
    new: DataFile | None

    @property
    def bytes_removed(self) -> int:
        """The old file's bytes less its replacement's."""
        kept = self.new.file_size_in_bytes if self.new is not None else 0
        return self.old.file_size_in_bytes - kept


def doomed_rows(fs: pafs.FileSystem, path: str, scope: PurgeScope) -> int:
    """How many rows of the Parquet file at `path` the purge removes (reads only the columns
    the scope names)."""

    def count() -> int:
        with fs.open_input_file(path) as source:
            parquet = pq.ParquetFile(source)
            wanted = columns_needed(parquet.schema_arrow.names)
            if not wanted:
                return 0
            total = 0
            for group in range(parquet.num_row_groups):
                rows = parquet.read_row_group(group, columns=wanted)
                total += int(pc.sum(doomed_mask(rows, scope)).as_py() or 0)
            return total

    return with_retries(count, what=f"reading {path} for a purge", must_exist=True)


def rewrite_without(
    fs: pafs.FileSystem,
    path: str,
    data_file: DataFile,
    scope: PurgeScope,
    io: FileIO,
    metadata: TableMetadata,
) -> Rewrite:
    """Write `data_file` (at `path` inside `fs`) again without the purged rows; the new file
    sits beside the old one. Nothing is deleted here: the old file goes once no snapshot
    references it."""
    uri = data_file.file_path
    new_uri = f"{uri.rsplit('/', 1)[0]}/purged-{uuid.uuid4().hex}.parquet"
    model = FileFormatFactory.get(FileFormat.PARQUET)
    removed = 0

    def write() -> DataFile | None:
        nonlocal removed
        removed = 0
        writer = model.create_writer(io.new_output(new_uri), metadata.schema(), metadata.properties)
        wrote = False
        with fs.open_input_file(path) as source:
            parquet = pq.ParquetFile(source)
            for group in range(parquet.num_row_groups):
                rows = parquet.read_row_group(group)
                doomed = doomed_mask(rows.select(columns_needed(rows.column_names)), scope)
                removed += int(pc.sum(doomed).as_py() or 0)
                kept = rows.filter(pc.invert(doomed))
                if kept.num_rows:
                    writer.write(kept)
                    wrote = True
        if not wrote:
            return None
        statistics = writer.close()
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=new_uri,
            file_format=FileFormat.PARQUET,
            partition=data_file.partition,
            file_size_in_bytes=len(io.new_input(new_uri)),
            sort_order_id=data_file.sort_order_id,
            spec_id=data_file.spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )

    new = with_retries(write, what=f"rewriting {uri} without purged rows", must_exist=True)
    if new is not None:
        new.spec_id = data_file.spec_id  # not stored in the file: manifests are per spec
    return Rewrite(data_file, removed, new)
