"""Perceptual near-duplicates by pHash: which earlier kept image, if any, an image repeats.

An image is an exact duplicate of a kept image with the same decoded pixels, and a near
duplicate of a kept image whose pHash is within `max_distance` bits. Candidates are found by
multi-index hashing: cut the 64 bits into `max_distance + 1` pieces; two hashes within that
distance agree on at least one piece (pigeonhole), so only images sharing a piece are compared.
The same pieces key the persisted index (`image_index`), so a batch reads only the index rows
sharing a piece with one of its own images.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Final

from fm_assets.curation.images.hashing import hamming

EXACT_DUPLICATE_IMAGE: Final = "exact_duplicate_image"
NEAR_DUPLICATE_IMAGE: Final = "near_duplicate_image"
_MASK64: Final = (1 << 64) - 1


def piece_bounds(chunks: int) -> list[tuple[int, int]]:
    """(shift, width) of each piece, highest bits first; widths differ by at most one."""
    base, extra = divmod(64, chunks)
    bounds = []
    top = 64
    for i in range(chunks):
        width = base + (1 if i < extra else 0)
        top -= width
        bounds.append((top, width))
    return bounds


def pieces(phash: int, chunks: int) -> list[int]:
    """The value of each of the `chunks` pieces of a (signed int64) pHash."""
    unsigned = phash & _MASK64
    return [(unsigned >> shift) & ((1 << width) - 1) for shift, width in piece_bounds(chunks)]


def pixel_key(pixel_sha256: str) -> int:
    """The index value of an exact pixel hash: its first 63 bits (a non-negative int64)."""
    return int(pixel_sha256[:16], 16) >> 1


@dataclass(frozen=True)
class Kept:
    doc_id: str
    batch_id: str
    phash: int


@dataclass(frozen=True)
class Verdict:
    """Why an image is not kept: the rule, the kept image it repeats, and their distance."""

    rule: str
    original: Kept
    distance: int

    def reason(self, max_distance: int) -> str:
        where = f"kept image {self.original.doc_id} (batch {self.original.batch_id})"
        if self.rule == EXACT_DUPLICATE_IMAGE:
            return f"the same decoded pixels as {where}"
        return f"pHash within {self.distance} bits (<= {max_distance}) of {where}"


class ImageIndex:
    """Kept images by pixel hash and by pHash piece; decides one image at a time, in order."""

    def __init__(self, max_distance: int) -> None:
        self.max_distance = max_distance
        self.chunks = max_distance + 1
        self._pixels: dict[str, Kept] = {}
        self._by_piece: list[dict[int, list[Kept]]] = [
            defaultdict(list) for _ in range(self.chunks)
        ]

    def add(self, pixel_sha256: str, kept: Kept) -> None:
        self._pixels.setdefault(pixel_sha256, kept)
        for table, value in zip(self._by_piece, pieces(kept.phash, self.chunks), strict=True):
            table[value].append(kept)

    def find(self, pixel_sha256: str, phash: int) -> Verdict | None:
        """The kept image this one repeats (exact first, then the nearest), or None."""
        exact = self._pixels.get(pixel_sha256)
        if exact is not None:
            return Verdict(EXACT_DUPLICATE_IMAGE, exact, hamming(phash, exact.phash))
        best: Verdict | None = None
        for table, value in zip(self._by_piece, pieces(phash, self.chunks), strict=True):
            for candidate in table.get(value, ()):
                distance = hamming(phash, candidate.phash)
                if distance <= self.max_distance and (best is None or distance < best.distance):
                    best = Verdict(NEAR_DUPLICATE_IMAGE, candidate, distance)
        return best

    def decide(self, doc_id: str, batch_id: str, pixel_sha256: str, phash: int) -> Verdict | None:
        """Find, and keep the image when it repeats none."""
        verdict = self.find(pixel_sha256, phash)
        if verdict is None:
            self.add(pixel_sha256, Kept(doc_id, batch_id, phash))
        return verdict
