"""Arrow schemas of the image-text tables: a pair carries the provenance columns of every document
row, its caption in `text` (so the caption stages are the text stages), and its image.

`raw_pairs` holds the image bytes as landed; from `decoded_pairs` on, `image` holds the image as
the resize policy re-encoded it (once, before sharding), with its size before and after.
"""

from __future__ import annotations

import pyarrow as pa

from fm_assets.storage.schemas import PROVENANCE_FIELDS
from fm_assets.storage.tables import TableSpec, declare

RAW_PAIRS = pa.schema(
    [
        *PROVENANCE_FIELDS,  # external_id: the sample's key; raw_sha256: the landed image's
        pa.field("text", pa.large_string(), nullable=False),  # the caption, as landed
        # Where the pair is in its landed file: the tar member of the image (and its header's
        # byte offset), or the Parquet row and image column.
        pa.field("image_member", pa.string(), nullable=False),
        pa.field("record_offset", pa.int64(), nullable=True),
        pa.field("record_line", pa.int64(), nullable=True),  # Parquet: the 0-based row
        pa.field("image_extension", pa.string(), nullable=False),  # declared: "jpg", "png", ...
        pa.field("metadata_json", pa.string(), nullable=True),  # the sample's JSON / other columns
        pa.field("raw_size", pa.int64(), nullable=False),
        pa.field("raw_content", pa.large_binary(), nullable=False),  # the image bytes as landed
    ]
)

# Filled stage by stage: the decode stage fills the image columns, the filter stage the caption's
# language, the scoring stage `scores` (name -> score of each model the policy names).
PAIRS = pa.schema(
    [
        *PROVENANCE_FIELDS,
        pa.field("text", pa.large_string(), nullable=False),  # the caption
        pa.field("image", pa.large_binary(), nullable=False),  # as the resize policy encoded it
        pa.field("image_format", pa.string(), nullable=False),  # "jpeg", "webp" or "png"
        pa.field("width", pa.int32(), nullable=False),  # after the resize policy
        pa.field("height", pa.int32(), nullable=False),
        pa.field("original_width", pa.int32(), nullable=False),  # decoded, upright
        pa.field("original_height", pa.int32(), nullable=False),
        pa.field("source_format", pa.string(), nullable=False),  # as landed: "JPEG", "PNG", ...
        pa.field("source_mode", pa.string(), nullable=False),  # as landed: "RGB", "CMYK", "P", ...
        pa.field("frames", pa.int32(), nullable=False),  # >1: an animation, its first frame kept
        pa.field("pixel_hash", pa.string(), nullable=False),  # of the decoded upright RGB
        pa.field("phash", pa.int64(), nullable=False),  # imagehash.phash's 64 bits
        pa.field("language", pa.string(), nullable=True),  # the caption's, lid.176
        pa.field("language_score", pa.float64(), nullable=True),
        pa.field("scores", pa.map_(pa.string(), pa.float64()), nullable=True),
    ]
)

TOKENIZED_PAIRS = pa.schema(
    [
        *PAIRS,
        pa.field("tokenizer_hash", pa.string(), nullable=False),
        pa.field("num_tokens", pa.int64(), nullable=False),
        pa.field("tokens", pa.large_list(pa.int32()), nullable=False),
    ]
)

# The kept images of every batch of one data namespace, by lookup key: an image's pixel hash
# (chunk -1, value: its first 63 bits) and each of the `chunks` pieces of its pHash (chunk i,
# value: the piece's bits). Two hashes within Hamming distance t share a piece when cut into
# t + 1 pieces, so a batch reads only the rows whose (chunk, value) its own images hold.
IMAGE_INDEX = pa.schema(
    [
        pa.field("chunks", pa.int32(), nullable=False),  # pieces the pHash was cut into: t + 1
        pa.field("chunk", pa.int32(), nullable=False),
        pa.field("value", pa.int64(), nullable=False),
        pa.field("phash", pa.int64(), nullable=False),
        pa.field("pixel_hash", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("batch_id", pa.string(), nullable=False),
    ]
)
PIXEL_CHUNK = -1

declare(TableSpec("image_index", IMAGE_INDEX, ("chunk",), per_namespace=True))
