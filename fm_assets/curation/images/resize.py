"""The resize policy, applied once per image: downscale to a maximum side keeping the aspect
ratio, and re-encode in the policy's format and quality."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Final

from PIL import Image

RESIZE_FORMATS: Final = {"jpeg": "JPEG", "webp": "WEBP", "png": "PNG"}
# "area" averages each output pixel's source pixels (Pillow's BOX filter), what img2dataset and
# OpenCV's INTER_AREA downscale with: cheaper than LANCZOS, whose kernel spans three times the
# pixels, and without its ringing; "lanczos" keeps more fine detail.
RESAMPLING: Final = {
    "area": Image.Resampling.BOX,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
FORMAT_EXTENSION: Final = {"jpeg": "jpg", "webp": "webp", "png": "png"}


@dataclass(frozen=True)
class ResizePolicy:
    """`max_side` 0 keeps the size; `quality` is JPEG/WebP quality (ignored for PNG);
    `resample` the downscaling filter (one of RESAMPLING)."""

    max_side: int = 512
    format: str = "jpeg"
    quality: int = 90
    resample: str = "area"

    def __post_init__(self) -> None:
        if self.format not in RESIZE_FORMATS:
            raise ValueError(
                f"resize format {self.format!r} is not one of {', '.join(RESIZE_FORMATS)}"
            )
        if self.resample not in RESAMPLING:
            raise ValueError(
                f"resize resample {self.resample!r} is not one of {', '.join(RESAMPLING)}"
            )
        if self.max_side < 0 or not 1 <= self.quality <= 100:
            raise ValueError(f"resize max_side must be >= 0 and quality 1..100, got {self}")

    @property
    def extension(self) -> str:
        return FORMAT_EXTENSION[self.format]


def target_size(width: int, height: int, max_side: int) -> tuple[int, int]:
    """The size after the policy: never enlarged, the aspect ratio kept to the nearest pixel."""
    longest = max(width, height)
    if max_side == 0 or longest <= max_side:
        return width, height
    scale = max_side / longest
    return max(1, round(width * scale)), max(1, round(height * scale))


def resize_and_encode(image: Image.Image, policy: ResizePolicy) -> tuple[bytes, int, int]:
    """(encoded bytes, width, height) of `image` (RGB) under `policy`."""
    size = target_size(image.width, image.height, policy.max_side)
    if size != image.size:
        filter_ = RESAMPLING[policy.resample]
        # For "area", reduce() first by the whole factor (it averages k x k blocks: itself an
        # area filter), then BOX the rest: the same as one BOX at whole factors, within ~2
        # levels on average at fractional ones, and a fraction of one BOX's cost (its cost
        # shows in `bench/results/image_decode.md`). The other filters resample in one step.
        gap = 1.0 if filter_ is Image.Resampling.BOX else None
        image = image.resize(size, filter_, reducing_gap=gap)
    out = io.BytesIO()
    options: dict[str, object] = {}
    if policy.format in ("jpeg", "webp"):
        options["quality"] = policy.quality
    if policy.format == "png":
        options["optimize"] = False
    image.save(out, format=RESIZE_FORMATS[policy.format], **options)
    return out.getvalue(), image.width, image.height
