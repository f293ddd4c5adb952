"""The benchmark's images: JPEGs of scikit-image's photos at web-photo sizes, written once.

Web images are mostly larger than the 512-pixel policy side, so each photo is taken at its own
size and upscaled 2x and 3x (LANCZOS; the longer side capped at 2,048), then saved at several
JPEG qualities: distinct bytes for every image, 0.1-4 MP each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from tests.image_data import PHOTOS, encode, photo

SCALES = (1, 2, 3)
MAX_SIDE = 2048
QUALITIES = (70, 80, 90, 95)
QUICK_QUALITIES = (90,)
NAMES = (*PHOTOS, "motorcycle_left", "motorcycle_right")


@dataclass(frozen=True)
class Inputs:
    paths: list[Path]  # sorted by name: the order both sides read them in
    data: list[bytes]
    pixels: list[int]  # width x height of each

    @property
    def megapixels(self) -> float:
        return sum(self.pixels) / 1e6

    @property
    def megabytes(self) -> float:
        return sum(len(d) for d in self.data) / 1e6


def write_images(directory: Path, qualities: tuple[int, ...]) -> Inputs:
    """Every photo x scale x quality as `NAME-Sx-qQ.jpg` in `directory` (a scale the cap
    makes equal to a smaller one is left out)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        original = photo(name)
        sizes = set()
        for scale in SCALES:
            factor = min(scale, MAX_SIDE / max(original.size)) if scale > 1 else 1
            size = (round(original.width * factor), round(original.height * factor))
            if size in sizes:
                continue  # already at the cap: the same image again would not be distinct
            sizes.add(size)
            image = original.resize(size, Image.Resampling.LANCZOS) if factor != 1 else original
            for quality in qualities:
                path = directory / f"{name}-{scale}x-q{quality}.jpg"
                path.write_bytes(encode(image, quality=quality))
    paths = sorted(directory.glob("*.jpg"))
    pixels = []
    for path in paths:
        with Image.open(path) as image:
            pixels.append(image.width * image.height)
    return Inputs(paths, [p.read_bytes() for p in paths], pixels)
