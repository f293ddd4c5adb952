"""Image fingerprints: the exact hash of decoded pixels and the perceptual hash (pHash).

The exact hash is xxh3-128 of the pixels with their size and mode: a dedup key, not a security
one (128 bits: a chance collision is out of reach at any corpus size), and far cheaper than
sha256 over a megapixel image's 3 MB, which had been a tenth of the decode stage's time
(`bench/results/image_decode.md` shows each part's share).

`phash` is the DCT hash of imagehash (8x8 low frequencies of the DCT of a 32x32 LANCZOS-reduced
grayscale image, each bit "above the median"), computed the same way so its bits equal
`imagehash.phash`'s for the same image (tests/test_image_curation.py checks every photo and
edge case); it is stored as a signed 64-bit integer with the first bit highest, the order of
imagehash's hex string.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import scipy.fftpack
import xxhash
from PIL import Image

PHASH_BITS: Final = 64
_HASH_SIDE: Final = 8
_REDUCED_SIDE: Final = 32  # hash side x 4: the frequencies above the first 8 are dropped
_WEIGHTS: Final = np.array([1 << (63 - i) for i in range(PHASH_BITS)], dtype=np.uint64)


def pixel_hash(image: Image.Image) -> str:
    """xxh3-128 (32 hex digits) of the decoded pixels with their size and mode: equal only for
    identical images, whatever file format or compression carried them."""
    digest = xxhash.xxh3_128(f"{image.mode}:{image.width}x{image.height}:".encode())
    digest.update(image.tobytes())
    return digest.hexdigest()


def phash(image: Image.Image) -> int:
    """The 64-bit perceptual hash of `image`, as a signed int64 value."""
    reduced = image.convert("L").resize((_REDUCED_SIDE, _REDUCED_SIDE), Image.Resampling.LANCZOS)
    pixels = np.asarray(reduced)
    coefficients = scipy.fftpack.dct(scipy.fftpack.dct(pixels, axis=0), axis=1)
    low = coefficients[:_HASH_SIDE, :_HASH_SIDE]
    bits = (low > np.median(low)).flatten()
    value = int(np.sum(_WEIGHTS[bits], dtype=np.uint64))
    return value - (1 << 64) if value >= 1 << 63 else value


def phash_hex(value: int) -> str:
    """The hash as imagehash prints it: 16 hex digits."""
    return f"{value & ((1 << 64) - 1):016x}"


def hamming(a: int, b: int) -> int:
    """Bits that differ between two hashes."""
    return ((a ^ b) & ((1 << 64) - 1)).bit_count()
