"""Perceptual near-duplicates by pHash: which earlier kept image, if any, an image repeats.

An image is an exact duplicate of a kept image with the same decoded pixels, and a near
duplicate of a kept image whose pHash is within `max_distance` bits. Candidates are found by
multi-index hashing: cut the 64 bits into `max_distance + 1` pieces; two hashes within that
distance agree on at least one piece (pigeonhole), so only images sharing a piece are compared.
The same pieces key the persisted index (`image_index`), so a batch reads only the index rows
sharing a piece with one of its own images.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

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


def pixel_key(pixel_hash: str) -> int:
    """The index value of an exact pixel hash: its first 63 bits (a non-negative int64)."""
    return int(pixel_hash[:16], 16) >> 1


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
    """Kept images by pixel hash and by pHash piece; decides one image at a time, in order.

    Two parts: the images other batches kept (`load`, once: numpy arrays, each piece's values
    sorted, so a query finds the images sharing a piece by binary search and compares their full
    hashes in one vectorized step), and the images this batch keeps as it goes (`add`: compared
    all at once, a batch being small beside an index).
    """

    def __init__(self, max_distance: int) -> None:
        self.max_distance = max_distance
        self.chunks = max_distance + 1
        self._bounds = piece_bounds(self.chunks)
        self._pixels: dict[str, Kept] = {}
        self._base: list[Kept] = []
        self._base_hashes = np.empty(0, np.uint64)
        self._base_pieces: list[tuple[npt.NDArray[np.uint64], npt.NDArray[np.intp]]] = []
        self._new: list[Kept] = []
        self._new_hashes = np.empty(64, np.uint64)

    def load(self, pixel_hashes: list[str], kept: list[Kept]) -> None:
        """The images other batches kept (each once), before any `find`."""
        for pixels, image in zip(pixel_hashes, kept, strict=True):
            self._pixels.setdefault(pixels, image)
        self._base = list(kept)
        self._base_hashes = np.array([k.phash for k in kept], np.int64).view(np.uint64)
        self._base_pieces = []
        for shift, width in self._bounds:
            values = (self._base_hashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)
            order = np.argsort(values, kind="stable")
            self._base_pieces.append((values[order], order))

    def add(self, pixel_hash: str, kept: Kept) -> None:
        self._pixels.setdefault(pixel_hash, kept)
        if len(self._new) == len(self._new_hashes):
            self._new_hashes = np.concatenate([self._new_hashes, np.empty_like(self._new_hashes)])
        self._new_hashes[len(self._new)] = np.int64(kept.phash).view(np.uint64)
        self._new.append(kept)

    def find(self, pixel_hash: str, phash: int) -> Verdict | None:
        """The kept image this one repeats (exact first, then the nearest; on a tie, the one
        kept first), or None."""
        exact = self._pixels.get(pixel_hash)
        if exact is not None:
            return Verdict(EXACT_DUPLICATE_IMAGE, exact, hamming(phash, exact.phash))
        query = np.int64(phash).view(np.uint64)
        best: Verdict | None = None
        candidates = self._base_candidates(query)
        if candidates.size:
            distances = np.bitwise_count(self._base_hashes[candidates] ^ query)
            pick = int(np.argmin(distances))
            if distances[pick] <= self.max_distance:
                best = Verdict(
                    NEAR_DUPLICATE_IMAGE, self._base[candidates[pick]], int(distances[pick])
                )
        if self._new:
            distances = np.bitwise_count(self._new_hashes[: len(self._new)] ^ query)
            pick = int(np.argmin(distances))
            if distances[pick] <= self.max_distance and (
                best is None or distances[pick] < best.distance
            ):
                best = Verdict(NEAR_DUPLICATE_IMAGE, self._new[pick], int(distances[pick]))
        return best

    def _base_candidates(self, query: np.uint64) -> npt.NDArray[np.intp]:
        """Positions of the loaded images sharing a piece with `query`, in loading order."""
        if not self._base:
            return np.empty(0, np.intp)
        found = []
        for (shift, width), (values, order) in zip(self._bounds, self._base_pieces, strict=True):
            piece = (query >> np.uint64(shift)) & np.uint64((1 << width) - 1)
            low, high = (
                np.searchsorted(values, piece, "left"),
                np.searchsorted(values, piece, "right"),
            )
            if high > low:
                found.append(order[low:high])
        return np.unique(np.concatenate(found)) if found else np.empty(0, np.intp)

    def decide(self, doc_id: str, batch_id: str, pixel_hash: str, phash: int) -> Verdict | None:
        """Find, and keep the image when it repeats none."""
        verdict = self.find(pixel_hash, phash)
        if verdict is None:
            self.add(pixel_hash, Kept(doc_id, batch_id, phash))
        return verdict
