"""`fm export`: any platform table (one batch, one version, or all of it) as JSON lines."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

from fm_assets.settings import Settings
from fm_assets.storage import catalog
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
) -> int:
    """Write the selected rows of `table` to `out`; returns the row count. Bytes are base64."""
    catalog.table_schema(table)  # unknown table names fail here, listing the known ones
    if batch_id and version_key:
        raise ValueError("choose --batch or --version, not both")
    schema = catalog.table_schema(table)
    snapshot_id = None
    row_filter = None
    if batch_id:
        if "batch_id" not in schema.names:
            raise ValueError(f"{table} has no batch_id column; export it whole or by --version")
        row_filter = catalog.where_equal("batch_id", batch_id)
    elif version_key:
        version = require_version(settings, version_key)
        if table in version.snapshot_ids:
            snapshot_id = version.snapshot_ids[table]
            row_filter = catalog.where_in("batch_id", list(version.batches))
        elif "version_key" in schema.names:
            row_filter = catalog.where_equal("version_key", version_key)
        elif "batch_id" in schema.names:
            row_filter = catalog.where_in("batch_id", list(version.batches))
        else:
            raise ValueError(f"{table} cannot be selected by version")
    data = catalog.read_table(settings, table, row_filter=row_filter, snapshot_id=snapshot_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for batch in data.to_batches(max_chunksize=1024):
            for row in batch.to_pylist():
                f.write(json.dumps({k: _jsonable(v) for k, v in row.items()}, ensure_ascii=False))
                f.write("\n")
    return int(data.num_rows)
