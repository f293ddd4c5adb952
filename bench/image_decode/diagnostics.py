"""Where our time goes, beyond the per-call parts: the pieces inside `decode_image`,
`resize_and_encode`, `phash` and `pixel_hash`, and what other Pillow resize filters cost on
the same decoded images. CPU seconds over all images, the median of a few passes; diagnostics,
not the platform's path."""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from PIL import Image, ImageOps

from bench.harness import median
from fm_assets.curation.images.decode import DecodedImage, decode_image
from fm_assets.curation.images.resize import ResizePolicy, target_size

T = TypeVar("T")

# The policy's filter first, then Pillow's cheaper ones; BOX is an area average, what OpenCV's
# INTER_AREA (img2dataset's default downscale) computes.
FILTERS = (
    ("LANCZOS, reducing_gap=3.0 (the policy's)", Image.Resampling.LANCZOS, 3.0),
    ("LANCZOS, no reducing_gap", Image.Resampling.LANCZOS, None),
    ("LANCZOS, reducing_gap=2.0", Image.Resampling.LANCZOS, 2.0),
    ("BICUBIC", Image.Resampling.BICUBIC, None),
    ("BILINEAR", Image.Resampling.BILINEAR, None),
    ("BOX (an area average, as OpenCV's INTER_AREA)", Image.Resampling.BOX, None),
)


def each(fn: Callable[[T], object], items: Sequence[T]) -> Callable[[], None]:
    """fn on every item, keeping no result: as in the stage's loop, where each image's pixels
    are freed before the next (keeping them would add the first touch of fresh memory)."""

    def run() -> None:
        for item in items:
            fn(item)

    return run


def cpu_seconds(fn: Callable[[], object], passes: int) -> float:
    """Median CPU seconds of `passes` calls of fn."""
    seconds = []
    for _ in range(passes):
        started = time.process_time()
        fn()
        seconds.append(time.process_time() - started)
    return median(seconds)


def measure(images: list[bytes], policy: ResizePolicy, passes: int) -> dict[str, float]:
    """name -> CPU seconds over all `images` of each piece and alternative."""
    opened = []
    decoded = []
    for data in images:
        image = Image.open(io.BytesIO(data))
        image.load()
        opened.append(image)
        result = decode_image(data, "jpg")
        if not isinstance(result, DecodedImage):
            raise RuntimeError(f"a benchmark image did not decode: {result.reason}")
        decoded.append(result.image)
    small = [im.resize(target_size(*im.size, policy.max_side)) for im in decoded]
    grey = [im.convert("L") for im in decoded]
    pixels = [im.tobytes() for im in decoded]
    max_side = policy.max_side

    def encode(image: Image.Image) -> None:
        image.save(io.BytesIO(), format="JPEG", quality=policy.quality)

    def resize(kind: Image.Resampling, gap: float | None) -> Callable[[], None]:
        return each(
            lambda im: im.resize(target_size(*im.size, max_side), kind, reducing_gap=gap), decoded
        )

    pieces: dict[str, Callable[[], None]] = {
        "decode_image: `Image.open` + `load` (the JPEG decode)": each(
            lambda d: Image.open(io.BytesIO(d)).load(), images
        ),
        "decode_image: `ImageOps.exif_transpose` of an image without an orientation": each(
            ImageOps.exif_transpose, opened
        ),
        "decode_image: `to_rgb` (grey photos converted; averaged over all images)": each(
            lambda im: im.convert("RGB") if im.mode != "RGB" else im, opened
        ),
        **{f"resize to <= {max_side}: {name}": resize(kind, gap) for name, kind, gap in FILTERS},
        f"resize_and_encode: JPEG encode at quality {policy.quality}": each(encode, small),
        "phash: `convert('L')`": each(lambda im: im.convert("L"), decoded),
        "phash: LANCZOS to 32x32": each(
            lambda g: g.resize((32, 32), Image.Resampling.LANCZOS), grey
        ),
        "pixel_hash: `tobytes`": each(lambda im: im.tobytes(), decoded),
        "pixel_hash: sha256 of the bytes": each(lambda p: hashlib.sha256(p).digest(), pixels),
    }
    return {name: cpu_seconds(fn, passes) for name, fn in pieces.items()}
