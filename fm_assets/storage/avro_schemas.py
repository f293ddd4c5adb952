"""Avro schemas of Iceberg manifests converted once per process, not once per file opened.

pyiceberg parses the JSON schema in an Avro file's header and converts it to an Iceberg schema
every time it opens a manifest or a manifest list. A commit opens each of them several times
(plan the delete, write the append, pin checksums), and the conversion, not the reading, was
most of it: ~1 ms a file, a third of a small stage's commit. Manifests of one table share a
handful of schema strings, and an Iceberg `Schema` is immutable, so the conversion is kept per
schema string. Installed by `storage.catalog` on import.
"""

from __future__ import annotations

import json
from functools import lru_cache

from pyiceberg.avro.file import _SCHEMA_KEY, AvroFileHeader
from pyiceberg.schema import Schema
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

# Distinct manifest schemas are one per table partition spec and format version: a few dozen.
_CACHED_SCHEMAS = 256


@lru_cache(maxsize=_CACHED_SCHEMAS)
def _iceberg_schema(avro_schema: str) -> Schema:
    return AvroSchemaConversion().avro_to_iceberg(json.loads(avro_schema))


def _get_schema(header: AvroFileHeader) -> Schema:
    """`AvroFileHeader.get_schema`, from the cache."""
    if _SCHEMA_KEY not in header.meta:
        raise ValueError("No schema found in Avro file headers")
    return _iceberg_schema(header.meta[_SCHEMA_KEY])


def convert_schemas_once() -> None:
    """Make every Avro file this process opens through pyiceberg reuse converted schemas."""
    AvroFileHeader.get_schema = _get_schema  # type: ignore[method-assign,assignment]
