"""Aspect-ratio buckets: the shapes a trainer batches images by (every image of a batch in one
bucket, so it can be resized to one shape without distortion or much padding).

Nine buckets, the common photo and screen shapes from 21:9 wide to 9:21 tall; an image goes to
the bucket whose ratio is nearest to its own on a log scale (2:1 and 1:2 are as far from 1:1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class AspectBucket:
    index: int
    name: str  # "width:height", e.g. "16:9"
    ratio: float  # width / height


def _bucket(index: int, width: int, height: int) -> AspectBucket:
    return AspectBucket(index, f"{width}:{height}", width / height)


ASPECT_BUCKETS: Final = (
    _bucket(0, 9, 21),
    _bucket(1, 9, 16),
    _bucket(2, 2, 3),
    _bucket(3, 3, 4),
    _bucket(4, 1, 1),
    _bucket(5, 4, 3),
    _bucket(6, 3, 2),
    _bucket(7, 16, 9),
    _bucket(8, 21, 9),
)
_LOG_RATIOS: Final = tuple(math.log(b.ratio) for b in ASPECT_BUCKETS)


def aspect_bucket(width: int, height: int) -> AspectBucket:
    """The bucket of a width x height image (nearest ratio on a log scale)."""
    if width <= 0 or height <= 0:
        raise ValueError(f"an image of {width}x{height} pixels has no aspect ratio")
    target = math.log(width / height)
    index = min(range(len(ASPECT_BUCKETS)), key=lambda i: abs(_LOG_RATIOS[i] - target))
    return ASPECT_BUCKETS[index]
