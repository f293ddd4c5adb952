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
    snapshots: dict[str | None, int | None] = {}
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
        version = require_version(settings, version_key)
        if per_namespace:
            namespaces = [n for n in version.namespaces if n in namespaces]
        pinned: dict[str | None, int | None] = {
            n: version.snapshot_ids.get(n, {}).get(table) for n in namespaces if n
        }
        if any(pinned.values()):  # a document table: read at the version's tags
            snapshots = pinned
            row_filter = catalog.where_in("batch_id", list(version.batches))
        elif "version_key" in schema.names:
            row_filter = catalog.where_equal("version_key", version_key)
        elif "batch_id" in schema.names:
            row_filter = catalog.where_in("batch_id", list(version.batches))
        else:
            raise ValueError(f"{table} cannot be selected by version")
    parts = [
        catalog.read_table(settings, table, row_filter, snapshots.get(n), namespace=n)
        for n in namespaces
    ]
    data = pa.concat_tables(parts) if parts else schema.empty_table()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for batch in data.to_batches(max_chunksize=1024):
            for row in batch.to_pylist():
                f.write(json.dumps({k: _jsonable(v) for k, v in row.items()}, ensure_ascii=False))
                f.write("\n")
    return int(data.num_rows)
