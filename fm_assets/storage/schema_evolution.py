"""A table's columns brought to what the platform declares for it.

A table created by an older platform gains the columns this one declares (rows written before
read them as null), and the required columns this one no longer writes become optional (new rows
leave them out; rows written before keep their values). A column is never deleted: a dataset
version pinned to an older snapshot still reads what it recorded.
"""

from __future__ import annotations

import threading

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table


def declared_columns_missing(table: Table, schema: pa.Schema) -> list[str]:
    """Columns the platform declares (`schema`) that `table` lacks."""
    present = set(table.schema().column_names)
    return [name for name in schema.names if name not in present]


def dropped_required_columns(table: Table, schema: pa.Schema) -> list[str]:
    """Required columns of `table` the platform no longer declares: a new row, which does not
    write them, could not be added."""
    declared = set(schema.names)
    return [f.name for f in table.schema().fields if f.required and f.name not in declared]


def align_columns(
    catalog: Catalog, identifier: str, table: Table, schema: pa.Schema, lock: threading.Lock
) -> None:
    """Add the declared columns `table` lacks and make the required columns it should no longer
    hold optional, in one schema update. Only nullable columns can be added."""
    missing = declared_columns_missing(table, schema)
    required = [f.name for f in schema if f.name in missing and not f.nullable]
    if required:
        raise RuntimeError(
            f"table {identifier} lacks the required columns {required} this platform declares; "
            "declare new columns nullable so existing tables can gain them"
        )
    with lock:
        try:
            with table.update_schema() as update:
                if missing:
                    update.union_by_name(schema)
                for name in dropped_required_columns(table, schema):
                    update.make_column_optional(name)
        except CommitFailedException:
            table = catalog.load_table(identifier)  # another process aligned it first
            if declared_columns_missing(table, schema) or dropped_required_columns(table, schema):
                raise
