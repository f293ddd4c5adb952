"""`fm export`: any platform table (one batch, one version, one data namespace's copy, or all of
it) as JSON lines."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.tables import table_spec
from fm_assets.versions.dataset_version import require_version
from fm_assets.versions.reader import version_rows


def _jsonable(value: object) -> object:
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return value


def export_table(
    settings: Settings,
    table: str,
    out: Path,
    *,
    batch_id: str | None = None,
    version_key: str | None = None,
    namespace: str | None = None,
) -> int:
    """Write the selected rows of `table` to `out`; returns the row count. Bytes are base64.

    A table each data namespace keeps is read in `namespace`, else in the batch's namespace, the
    version's namespaces, or every namespace."""
    schema = catalog.table_schema(table)  # unknown table names fail here, listing the known ones
    per_namespace = table_spec(table).per_namespace
    if namespace is not None and not per_namespace:
        raise ValueError(f"{table} is platform-wide: export it without --namespace")
    if batch_id and version_key:
        raise ValueError("choose --batch or --version, not both")
    namespaces: list[str | None] = [None]
    if per_namespace:
        namespaces = [namespace] if namespace else list(catalog.data_namespaces(settings))
    row_filter = None
    if batch_id:
        if "batch_id" not in schema.names:
            raise ValueError(f"{table} has no batch_id column; export it whole or by --version")
        row_filter = catalog.where_equal("batch_id", batch_id)
        if per_namespace:
            namespaces = [
                n for n in [catalog.batch_namespace(settings, batch_id)] if n in namespaces
            ]
    elif version_key:
        # Through the one reader of a version: it drops the documents the version leaves out.
        version = require_version(settings, version_key)
        only = [namespace] if namespace else None
        return _write_lines(version_rows(settings, version, table, namespaces=only), out)
    parts = [catalog.read_table(settings, table, row_filter, namespace=n) for n in namespaces]
    data = pa.concat_tables(parts) if parts else schema.empty_table()
    return _write_lines(data, out)


def _write_lines(data: pa.Table, out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for batch in data.to_batches(max_chunksize=1024):
            for row in batch.to_pylist():
                f.write(json.dumps({k: _jsonable(v) for k, v in row.items()}, ensure_ascii=False))
                f.write("\n")
    return int(data.num_rows)
