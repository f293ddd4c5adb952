"""A table written by an older platform gains the nullable columns its declaration has since
gained, in place: its old rows read as nulls there, new rows fill them. The required columns
the platform no longer writes become optional: new rows leave them out, old rows keep theirs."""

from __future__ import annotations

import uuid

import pyarrow as pa

from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files
from fm_assets.storage.schemas import RAW_DOCUMENTS, TOKENIZED_DOCUMENTS

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


def _tokenized_row(doc_id: str, **extra: object) -> dict[str, object]:
    row = {k: v for k, v in _row(doc_id).items() if k in TOKENIZED_DOCUMENTS.names}
    return {**row, "tokenizer_hash": "f" * 64, "num_tokens": 2, "tokens": [5, 0], **extra}


def test_a_column_the_platform_stopped_writing_becomes_optional(fm_settings: Settings) -> None:
    # An older platform's tokenized_documents carried the text, required.
    old_schema = pa.schema([*TOKENIZED_DOCUMENTS, pa.field("text", pa.large_string(), False)])
    identifier = catalog.table_identifier(fm_settings, "tokenized_documents", NS)
    iceberg = catalog.open_catalog(fm_settings)
    iceberg.create_namespace_if_not_exists(catalog.catalog_namespace(fm_settings, NS))
    created = iceberg.create_table(identifier, schema=old_schema)
    created.append(pa.Table.from_pylist([_tokenized_row("a" * 64, text="old")], old_schema))

    table = catalog.load_table(fm_settings, "tokenized_documents", namespace=NS)
    assert not table.schema().find_field("text").required
    # New rows, without the text, by both write paths: a worker's data files and the driver's.
    handle = data_files.table_handle(fm_settings, "tokenized_documents", NS)
    worker_rows = pa.Table.from_pylist([_tokenized_row("b" * 64)], TOKENIZED_DOCUMENTS)
    written = data_files.write_files(handle, worker_rows, uuid.uuid4(), 0)
    data_files.commit_files(
        fm_settings, "tokenized_documents", catalog.NOTHING, written, {}, namespace=NS
    )
    catalog.append_rows(
        fm_settings,
        "tokenized_documents",
        pa.Table.from_pylist([_tokenized_row("c" * 64)], TOKENIZED_DOCUMENTS),
        namespace=NS,
    )

    rows = catalog.read_table(fm_settings, "tokenized_documents", namespace=NS)
    assert rows.schema == TOKENIZED_DOCUMENTS  # the platform reads what it declares
    assert sorted(rows.column("doc_id").to_pylist()) == ["a" * 64, "b" * 64, "c" * 64]
    stored = catalog.load_table(fm_settings, "tokenized_documents", namespace=NS)
    texts = stored.scan(selected_fields=("doc_id", "text")).to_arrow().to_pylist()
    assert sorted(texts, key=lambda r: r["doc_id"]) == [
        {"doc_id": "a" * 64, "text": "old"},  # rows written before keep their values
        {"doc_id": "b" * 64, "text": None},
        {"doc_id": "c" * 64, "text": None},
    ]
    worker_read = data_files.read_files(handle, data_files.plan_handle(handle))
    assert worker_read.schema == TOKENIZED_DOCUMENTS
