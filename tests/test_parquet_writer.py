"""The Parquet files the platform writes: page checksums everywhere, token ids stored plain
(a dictionary of them only overflows and costs bytes), repeated strings dictionary-encoded."""

import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
from fm_assets.settings import Settings
from fm_assets.storage import schemas
from fm_assets.storage.data_files import table_handle, write_files


def _tokenized_rows(count: int) -> pa.Table:
    rng = np.random.default_rng(7)
    tokens = [rng.integers(0, 50_000, size=400, dtype=np.int32) for _ in range(count)]
    rows = {
        "doc_id": [f"{i:064x}" for i in range(count)],
        "raw_sha256": [f"{i:064x}" for i in range(count)],
        "batch_id": ["b-1"] * count,
        "record_id": [f"f:{i}" for i in range(count)],
        "source_file": ["docs.jsonl"] * count,
        "source": ["web"] * count,
        "license": ["CC-BY-4.0"] * count,
        "namespace": ["cloud"] * count,
        "url": [None] * count,
        "lang_hint": [None] * count,
        "external_id": [None] * count,
        "generator_model": [None] * count,
        "generator": [None] * count,
        "text": [f"document {i}" for i in range(count)],
        "tokenizer_hash": ["h"] * count,
        "num_tokens": [400] * count,
        "tokens": pa.array(tokens, type=pa.large_list(pa.int32())),
    }
    return pa.table(rows, schema=schemas.TOKENIZED_DOCUMENTS)


def test_token_ids_are_written_plain_and_repeated_strings_with_a_dictionary(
    fm_settings: Settings,
) -> None:
    handle = table_handle(fm_settings, "tokenized_documents", "cloud")
    data = _tokenized_rows(2_000)
    (written,) = write_files(handle, data, uuid.uuid4(), 0)

    path = Path(written.file_path.removeprefix("file://"))
    metadata = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {
        metadata.column(i).path_in_schema: metadata.column(i).encodings
        for i in range(metadata.num_columns)
    }
    assert "RLE_DICTIONARY" not in encodings["tokens.list.element"]
    assert "RLE_DICTIONARY" in encodings["batch_id"]
    # The pages still carry checksums: a verifying reader decodes the same rows.
    read = pq.ParquetFile(path, page_checksum_verification=True).read()
    assert read.column("tokens").to_pylist()[:3] == data.column("tokens").to_pylist()[:3]
