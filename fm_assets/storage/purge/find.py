"""Rows of a table as any of its snapshots holds them: what a purge looks for.

A purge removes rows from every snapshot a table keeps, not only the current one (a version may
pin an old one, and a rerun may have replaced a batch's rows since), so it looks in every data
file some snapshot reads, each read once, pruned by its statistics.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.visitors import _InclusiveMetricsEvaluator
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask

from fm_assets.settings import Settings
from fm_assets.storage.maintenance.tables import TableRef, load
from fm_assets.storage.purge.manifests import LIVE, table_files
from fm_loader.storage.retry import with_retries


def table_columns(settings: Settings, ref: TableRef) -> list[str]:
    """The top-level columns of the table's current schema."""
    return [f.name for f in load(settings, ref).metadata.schema().fields]


def rows_matching(
    settings: Settings, ref: TableRef, where: BooleanExpression, columns: list[str]
) -> pa.Table:
    """`columns` of the rows matching `where` in every data file any snapshot of the table
    reads (a row kept by several snapshots in one file is read once; one rewritten into
    another file by a rerun appears once per file)."""
    table = load(settings, ref)
    schema = table.metadata.schema()
    present = [c for c in columns if c in {f.name for f in schema.fields}]
    projected = schema.select(*present)
    if table.current_snapshot() is None:
        return projected.as_arrow().empty_table()
    evaluator = _InclusiveMetricsEvaluator(schema, where)
    seen: set[str] = set()
    tasks = []
    for entries in table_files(table).entries.values():
        for entry in entries:
            data = entry.data_file
            if entry.status not in LIVE or data.file_path in seen or not evaluator.eval(data):
                continue
            seen.add(data.file_path)
            tasks.append(FileScanTask(data))
    if not tasks:
        return projected.as_arrow().empty_table()
    scan = ArrowScan(table.metadata, table.io, projected, where)
    return with_retries(
        lambda: scan.to_table(tasks),
        what=f"reading {ref.identifier} for a purge",
        must_exist=True,
    )
