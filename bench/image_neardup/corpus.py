"""The near-dup corpus: distinct images, and planted near-duplicates of every one of them.

Distinct: scikit-image's 16 distinct photos and the left view of its motorcycle stereo pair
(the photos), and the four quadrants of each photo (the quadrants: distinct images too, many of
them alike in texture and tone, which makes them harder negatives than unrelated web photos).
Planted: every transform of `tests.image_data.near_duplicates` (resized to 3/4, JPEG quality
40, 1/80 cropped from each side, 10% brighter) of every distinct image, and the motorcycle's
right view as a copy of its left (a stereo pair: the same scene a few centimetres apart).

Distinct images are landed as JPEG quality 90; planted copies as lossless PNG, so each carries
exactly its transform's pixels (zlib level 1: lossless either way, and quick to write).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from PIL import Image

from tests.image_data import PHOTOS, encode, near_duplicates, photo

STEREO = "stereo_pair"
LEFT, RIGHT = "motorcycle_left", "motorcycle_right"
DISTINCT_PHOTOS = (*PHOTOS, LEFT)


@dataclass(frozen=True)
class Item:
    """One image of the corpus: its name, the distinct image it belongs to, what it is."""

    name: str
    family: str  # the distinct image's name (its own, for a distinct image)
    kind: str  # "photo", "quadrant", or the transform that made the copy
    data: bytes
    extension: str

    @property
    def planted(self) -> bool:
        return self.kind not in ("photo", "quadrant")


@dataclass(frozen=True)
class Corpus:
    distinct: list[Item]  # in the order they are decided (shuffled, fixed seed)
    planted: list[Item]  # likewise
    transforms: tuple[str, ...]  # near_duplicates' transforms, then the stereo pair

    def of_kind(self, kind: str) -> list[Item]:
        return [item for item in self.planted if item.kind == kind]


def quadrants(image: Image.Image) -> list[Image.Image]:
    w, h = image.size
    return [
        image.crop((x * w // 2, y * h // 2, (x + 1) * w // 2, (y + 1) * h // 2))
        for y, x in itertools.product((0, 1), (0, 1))
    ]


def build(seed: int = 0) -> Corpus:
    distinct: list[tuple[str, str, Image.Image]] = []
    for name in DISTINCT_PHOTOS:
        image = photo(name)
        distinct.append((name, "photo", image))
        distinct += [(f"{name}/q{i}", "quadrant", q) for i, q in enumerate(quadrants(image))]
    planted: list[Item] = []
    transforms: list[str] = []
    for name, _, image in distinct:
        for transform, copy in near_duplicates(image).items():
            if transform not in transforms:
                transforms.append(transform)
            planted.append(
                Item(
                    f"{name}~{transform}",
                    name,
                    transform,
                    encode(copy, "PNG", compress_level=1),
                    "png",
                )
            )
    planted.append(Item(RIGHT, LEFT, STEREO, encode(photo(RIGHT), "PNG", compress_level=1), "png"))
    items = [
        Item(name, name, kind, encode(image, quality=90), "jpg") for name, kind, image in distinct
    ]
    rng = random.Random(seed)
    rng.shuffle(items)
    rng.shuffle(planted)
    return Corpus(items, planted, (*transforms, STEREO))
