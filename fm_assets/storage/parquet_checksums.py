"""Parquet page checksums on every data file the platform writes through pyiceberg, and no
dictionary encoding for columns of integer lists.

Without page checksums a flipped byte in a data file mostly decodes to wrong rows without an
error (measured on our zstd data files: 70% of single-bit flips); with them a reader that
verifies pages (`fm verify`, `read_verified`) names the file instead. Token ids and shingle
hashes (lists of integers from a large space) overflow a dictionary page and fall back to plain
encoding after the writer has paid for the dictionary: measured on a tokenized table of
29,918 documents, plain from the start wrote 27% less CPU and 40% fewer bytes (65 -> 40 MB),
read at the same speed. Installed by `storage.catalog` on import, so every process that touches
a table writes them.
"""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import OutputFile
from pyiceberg.io.fileformat import FileFormatFactory
from pyiceberg.io.pyarrow import ParquetFormatModel, ParquetFormatWriter
from pyiceberg.manifest import FileFormat
from pyiceberg.schema import Schema
from pyiceberg.typedef import Properties
from pyiceberg.types import IntegerType, ListType, LongType


class _ChecksummedParquetModel(ParquetFormatModel):
    """pyiceberg's Parquet writer with a CRC32 in every page header and no dictionary for
    columns of integer lists."""

    def create_writer(
        self, output_file: OutputFile, file_schema: Schema, properties: Properties
    ) -> ParquetFormatWriter:
        writer = ParquetFormatWriter(output_file, file_schema, properties)
        # pyiceberg builds the ParquetWriter arguments from table properties and has none for
        # page checksums; its writer keeps them in this dict until the first write.
        writer._parquet_writer_kwargs["write_page_checksum"] = True
        writer._parquet_writer_kwargs["use_dictionary"] = dictionary_columns(file_schema)
        return writer


def dictionary_columns(schema: Schema) -> list[str]:
    """The top-level columns to dictionary-encode: all but lists of integers."""
    return [
        field.name
        for field in schema.fields
        if not (
            isinstance(field.field_type, ListType)
            and isinstance(field.field_type.element_type, IntegerType | LongType)
        )
    ]


def write_page_checksums() -> None:
    """Make every Parquet data file this process writes through pyiceberg carry page checksums.

    pyiceberg picks the writer from its format registry, which refuses a second Parquet model:
    the entry is replaced in place, once per process (driver and every Ray worker import this).
    """
    registry = FileFormatFactory._registry
    if not isinstance(registry.get(FileFormat.PARQUET), _ChecksummedParquetModel):
        registry[FileFormat.PARQUET] = _ChecksummedParquetModel()


def decode_verified(data: bytes) -> pa.Table:
    """Decode a whole Parquet file, checking every page's CRC; raises on a corrupt file."""
    return pq.ParquetFile(io.BytesIO(data), page_checksum_verification=True).read()
