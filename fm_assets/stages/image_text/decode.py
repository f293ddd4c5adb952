"""decoded_pairs: every image decoded and validated once, fingerprinted, and re-encoded under the
dataset's resize policy.

One decode per image does all the pixel work of the pipeline: validation (a file Pillow cannot
decode, a truncated one, a bomb, a wrong extension is quarantined, each for its own reason),
normalization to upright 8-bit RGB, the pixel hash and pHash the dedup stage compares, and the
resize policy (applied here, once, before sharding). Later stages carry the re-encoded image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from fm_assets.curation.images.decode import DEFAULT_MAX_PIXELS, DecodedImage, decode_image
from fm_assets.curation.images.hashing import phash, pixel_sha256
from fm_assets.curation.images.resize import ResizePolicy, resize_and_encode
from fm_assets.stages.base import Stage, StageResult, quarantine_rows
from fm_assets.storage.image_text_schemas import PAIRS
from fm_assets.storage.schemas import PROVENANCE_FIELDS

IMAGE_COLUMNS = (
    "image",
    "image_format",
    "width",
    "height",
    "original_width",
    "original_height",
    "source_format",
    "source_mode",
    "frames",
    "pixel_sha256",
    "phash",
)


@dataclass(frozen=True)
class DecodeStage(Stage):
    """Decoded, validated images: upright 8-bit RGB, hashed, resized once and re-encoded.

    Quarantine images that are empty, truncated, not images, of a format other than their
    extension, or over the policy's pixel limit.
    """

    name: ClassVar[str] = "decoded_pairs"
    version: ClassVar[str] = "1"
    output_schema: ClassVar[pa.Schema] = PAIRS

    max_pixels: int = DEFAULT_MAX_PIXELS
    resize: ResizePolicy = field(default_factory=ResizePolicy)

    def process(self, batch: pa.Table) -> StageResult:
        columns: dict[str, list[object]] = {name: [] for name in IMAGE_COLUMNS}
        keep: list[int] = []
        rejects: list[dict[str, object]] = []
        images = batch.column("raw_content")
        extensions = batch.column("image_extension").to_pylist()
        for row in range(batch.num_rows):
            data = images[row].as_py()
            decoded = decode_image(data, extensions[row], self.max_pixels)
            if not isinstance(decoded, DecodedImage):
                rejects.append(_reject(batch, row, decoded.rule, decoded.reason))
                continue
            encoded, width, height = resize_and_encode(decoded.image, self.resize)
            values = (
                encoded,
                self.resize.format,
                width,
                height,
                decoded.image.width,
                decoded.image.height,
                decoded.format,
                decoded.source_mode,
                decoded.frames,
                pixel_sha256(decoded.image),
                phash(decoded.image),
            )
            for name, value in zip(IMAGE_COLUMNS, values, strict=True):
                columns[name].append(value)
            keep.append(row)
        kept_rows = batch.take(pa.array(keep, pa.int64()))
        kept = {f.name: kept_rows.column(f.name) for f in PROVENANCE_FIELDS}
        kept["text"] = kept_rows.column("text")
        for name in IMAGE_COLUMNS:
            kept[name] = pa.array(columns[name], PAIRS.field(name).type)
        for name in ("language", "language_score", "scores"):
            kept[name] = pa.nulls(len(keep), PAIRS.field(name).type)
        return StageResult(pa.table(kept, schema=PAIRS), quarantine_rows(rejects))


def _reject(batch: pa.Table, row: int, rule: str, reason: str) -> dict[str, object]:
    return {
        "record_id": batch.column("record_id")[row].as_py(),
        "doc_id": batch.column("doc_id")[row].as_py(),
        "raw_sha256": batch.column("raw_sha256")[row].as_py(),
        "source_file": batch.column("source_file")[row].as_py(),
        "rule": rule,
        "reason": reason,
    }
