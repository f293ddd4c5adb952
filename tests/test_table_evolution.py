"""A table written by an older platform gains the nullable columns its declaration has since
gained, in place: its old rows read as nulls there, new rows fill them."""

from __future__ import annotations

import pyarrow as pa

from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.schemas import RAW_DOCUMENTS

NEW_COLUMNS = ("record_offset", "record_line", "warc_record_id")
NS = "cloud"  # the data namespace whose raw_documents the test evolves


def _row(doc_id: str, **extra: object) -> dict[str, object]:
    return {
        "doc_id": doc_id,
        "raw_sha256": doc_id,
        "batch_id": "b1",
        "record_id": f"{doc_id[:16]}:0",
        "source_file": "a.warc.gz",
        "source": "s",
        "license": "CC0-1.0",
        "namespace": "cloud",
        "content_type": "html",
        "raw_size": 1,
        "raw_content": b"x",
        **extra,
    }


def test_an_old_table_gains_the_new_nullable_columns(fm_settings: Settings) -> None:
    old_schema = pa.schema([f for f in RAW_DOCUMENTS if f.name not in NEW_COLUMNS])
    identifier = catalog.table_identifier(fm_settings, "raw_documents", NS)
    iceberg = catalog.open_catalog(fm_settings)
    iceberg.create_namespace_if_not_exists(catalog.catalog_namespace(fm_settings, NS))
    created = iceberg.create_table(identifier, schema=old_schema)
    created.append(pa.Table.from_pylist([_row("a" * 64)], schema=old_schema))

    table = catalog.load_table(fm_settings, "raw_documents", namespace=NS)

    assert set(NEW_COLUMNS) <= set(table.schema().column_names)
    catalog.append_rows(
        fm_settings,
        "raw_documents",
        pa.Table.from_pylist([_row("b" * 64, record_offset=42)], schema=RAW_DOCUMENTS),
        namespace=NS,
    )
    rows = catalog.read_table(
        fm_settings, "raw_documents", columns=("doc_id", "record_offset"), namespace=NS
    )
    assert sorted(rows.to_pylist(), key=lambda r: r["doc_id"]) == [
        {"doc_id": "a" * 64, "record_offset": None},
        {"doc_id": "b" * 64, "record_offset": 42},
    ]
