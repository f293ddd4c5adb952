"""Our `phash` vs `imagehash.phash` on the same decoded images (upright RGB, as the decode stage
hands them to `phash`), interleaved, with the bits compared."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import imagehash
from PIL import Image

from bench.harness import interleave
from bench.image_neardup.corpus import Item
from fm_assets.curation.images.decode import DecodedImage, decode_image
from fm_assets.curation.images.hashing import phash, phash_hex


@dataclass(frozen=True)
class PhashSpeed:
    images: int
    megapixels: float
    cpu_s: dict[str, list[float]]  # path -> CPU seconds per round
    mismatches: int  # over every round


def stage_images(items: Sequence[Item]) -> list[Image.Image]:
    """Each image as the decode stage hashes it: `decode_image`'s upright 8-bit RGB."""
    images = []
    for item in items:
        decoded = decode_image(item.data, item.extension)
        if not isinstance(decoded, DecodedImage):
            raise RuntimeError(f"{item.name} did not decode: {decoded.reason}")
        images.append(decoded.image)
    return images


def measure(images: list[Image.Image], repeats: int) -> PhashSpeed:
    """Both hashes of every image, `repeats` interleaved rounds, CPU seconds per round."""
    hashes: dict[str, list[list[str]]] = {"ours": [], "imagehash": []}

    def ours() -> float:
        started = time.process_time()
        values = [phash_hex(phash(image)) for image in images]
        seconds = time.process_time() - started
        hashes["ours"].append(values)
        return seconds

    def theirs() -> float:
        started = time.process_time()
        values = [str(imagehash.phash(image)) for image in images]
        seconds = time.process_time() - started
        hashes["imagehash"].append(values)
        return seconds

    cpu = interleave({"ours": ours, "imagehash": theirs}, repeats)
    mismatches = sum(
        a != b
        for ours_round, their_round in zip(hashes["ours"], hashes["imagehash"], strict=True)
        for a, b in zip(ours_round, their_round, strict=True)
    )
    megapixels = sum(image.width * image.height for image in images) / 1e6
    return PhashSpeed(len(images), megapixels, cpu, mismatches)
