"""Small rows tests write straight to platform tables."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from fm_assets.storage import catalog


def quarantine_rows(batch_id: str, count: int) -> pa.Table:
    """`count` quarantine rows of `batch_id` (raw stage, empty records)."""
    return pa.Table.from_pylist(
        [
            {
                "batch_id": batch_id,
                "stage": "raw_documents",
                "code_version": "1",
                "record_id": f"r{i}",
                "rule": "empty_record",
                "reason": "empty",
                "quarantined_at": dt.datetime.now(dt.UTC),
            }
            for i in range(count)
        ],
        schema=catalog.table_schema("quarantine"),
    )
