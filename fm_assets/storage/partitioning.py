"""A table's identity partitions brought to what the platform declares for it.

A table created by an older platform keeps its files in the spec they were written under; new
files use the current spec. Adding a partition column makes partition-aligned replacements
metadata-only from then on; removing one lets files of different values of that column be merged
(the near-dup index drops `batch_id` so small batches' files can be compacted together).
"""

from __future__ import annotations

import threading

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.transforms import VoidTransform


def partition_columns(table: Table) -> tuple[str, ...]:
    """The columns `table`'s current spec partitions by (identity partitions), in spec order."""
    schema = table.schema()
    return tuple(
        schema.find_field(f.source_id).name
        for f in table.spec().fields
        if not isinstance(f.transform, VoidTransform)  # a field removed from a v1 table
    )


def align_partitions(
    catalog: Catalog, identifier: str, table: Table, columns: tuple[str, ...], lock: threading.Lock
) -> None:
    """Give `table` an identity partition on each of `columns` and none on any other column,
    unless another process (creating or upgrading it too) did so first."""
    if set(partition_columns(table)) == set(columns):
        return
    with lock:
        try:
            _evolve(table, columns)
        except CommitFailedException:
            table = catalog.load_table(identifier)
            if set(partition_columns(table)) != set(columns):
                raise


def _evolve(table: Table, columns: tuple[str, ...]) -> None:
    present = partition_columns(table)
    with table.update_spec() as update:
        for field in table.spec().fields:
            removed = isinstance(field.transform, VoidTransform)
            if not removed and table.schema().find_field(field.source_id).name not in columns:
                update.remove_field(field.name)
        for column in columns:
            if column not in present:
                update.add_identity(column)
