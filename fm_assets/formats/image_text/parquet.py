"""A Parquet file of image bytes and captions (img2dataset's `parquet` output) -> pairs.

img2dataset writes one row per sample: `key`, `caption`, `url`, `status` ("success" or why the
download failed, with `error_message`), sizes, and the image bytes in a column named by the
encode format (`jpg`, `png` or `webp`). Any Parquet file with a binary image column and a
caption column reads the same way. Columns other than the image are kept as the pair's metadata.

Bad input never raises: an unreadable file is one unreadable item; a row whose download failed
or that lacks its image or caption is an unreadable item naming the row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from fm_assets.formats.image_text.records import (
    IMAGE_EXTENSIONS,
    PairItem,
    PairNumbering,
    PairRule,
)
from fm_assets.formats.records import Rule

CAPTION_COLUMNS: Final = ("caption", "txt", "text")
IMAGE_COLUMNS: Final = (*IMAGE_EXTENSIONS, "image")
_ROWS_PER_READ: Final = 256  # rows decoded at a time: a few MB of images


def image_column(schema: pa.Schema) -> str | None:
    """The column holding image bytes: one named by an image format, else the only binary one."""
    binary = [
        f.name for f in schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
    ]
    named = [c for c in IMAGE_COLUMNS if c in binary]
    if named:
        return named[0]
    return binary[0] if len(binary) == 1 else None


def read_image_parquet(source: Any, max_sample_bytes: int) -> Iterator[PairItem]:
    """Yield the pairs of a Parquet file (a path or a seekable file), row by row."""
    numbering = PairNumbering()
    try:
        parquet = pq.ParquetFile(source)
        schema = parquet.schema_arrow
    except (pa.ArrowException, OSError, ValueError) as exc:
        rule = Rule.EMPTY_FILE if "size is 0" in str(exc) else PairRule.CORRUPT_PARQUET
        yield numbering.unreadable(rule, f"not a readable Parquet file: {exc}")
        return
    image = image_column(schema)
    caption = next((c for c in CAPTION_COLUMNS if c in schema.names), None)
    if image is None or caption is None:
        missing = "image bytes (a binary column)" if image is None else "caption column"
        yield numbering.unreadable(
            PairRule.NO_IMAGE_COLUMN,
            f"the Parquet file has no {missing}; columns: {', '.join(schema.names)}",
        )
        return
    row = 0
    try:
        for batch in parquet.iter_batches(batch_size=_ROWS_PER_READ):
            for values in batch.to_pylist():
                yield _pair(values, row, image, caption, numbering, max_sample_bytes)
                row += 1
    except (pa.ArrowException, OSError) as exc:
        yield numbering.unreadable(
            PairRule.CORRUPT_PARQUET,
            f"the file is unreadable from row {row} on ({exc}); the rows before are kept",
        )
    if numbering.count == 0:
        yield numbering.unreadable(Rule.NO_DOCUMENTS, "the Parquet file holds no rows")


def _pair(
    values: dict[str, Any],
    row: int,
    image_name: str,
    caption_name: str,
    numbering: PairNumbering,
    max_sample_bytes: int,
) -> PairItem:
    key = str(values.get("key") if values.get("key") is not None else row)
    status = values.get("status")
    if status is not None and status != "success":
        reason = values.get("error_message") or status
        return numbering.unreadable(
            PairRule.FAILED_DOWNLOAD, f"row {row} (key {key}): the download failed: {reason}"
        )
    data = values.get(image_name)
    if data is None:
        return numbering.unreadable(PairRule.MISSING_IMAGE, f"row {row} (key {key}) has no image")
    if len(data) > max_sample_bytes:
        return numbering.unreadable(
            PairRule.SAMPLE_TOO_LARGE,
            f"row {row} (key {key}): the image is {len(data):,} bytes, over the per-sample "
            "bound (FM_MAX_DOCUMENT_BYTES)",
            hashlib.sha256(data).hexdigest(),
        )
    text = values.get(caption_name)
    if not isinstance(text, str):
        return numbering.unreadable(
            PairRule.MISSING_CAPTION,
            f"row {row} (key {key}) has no caption in column {caption_name!r}",
            hashlib.sha256(data).hexdigest(),
        )
    metadata = {
        k: v
        for k, v in values.items()
        if k not in (image_name, caption_name) and not isinstance(v, bytes)
    }
    url = values.get("url")
    extension = image_name if image_name in IMAGE_EXTENSIONS else ""
    return numbering.pair(
        key=key,
        image=bytes(data),
        image_name=image_name,
        image_extension=extension,
        caption=text,
        metadata_json=json.dumps(metadata, sort_keys=True, default=str),
        url=url if isinstance(url, str) else None,
        row=row,
    )
