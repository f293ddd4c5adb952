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
from fm_assets.curation.images.hashing import phash, pixel_hash
from fm_assets.curation.images.resize import ResizePolicy, resize_and_encode
from fm_assets.stages.base import Stage, StageResult, split_kept
from fm_assets.storage.image_text_schemas import PAIRS

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
    "pixel_hash",
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
        keep: list[bool] = []
        rejects: list[tuple[int, str, str]] = []
        images = batch.column("raw_content")
        extensions = batch.column("image_extension").to_pylist()
        for row in range(batch.num_rows):
            decoded = decode_image(images[row].as_py(), extensions[row], self.max_pixels)
            keep.append(isinstance(decoded, DecodedImage))
            if not isinstance(decoded, DecodedImage):
                rejects.append((row, decoded.rule, decoded.reason))
                values: tuple[object, ...] = (None,) * len(IMAGE_COLUMNS)
            else:
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
                    pixel_hash(decoded.image),
                    phash(decoded.image),
                )
            for name, value in zip(IMAGE_COLUMNS, values, strict=True):
                columns[name].append(value)
        # Filled by later stages: the caption's language, the model scores.
        later = {name: [None] * batch.num_rows for name in ("language", "language_score", "scores")}
        return split_kept(batch, keep, {**columns, **later}, self.output_schema, rejects)
