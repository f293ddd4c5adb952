"""Words and shingles of a text as 64-bit hashes: the scalar definitions and the vectorised
`shingle_sets` that computes them for a whole batch in a fixed number of numpy passes.

Changing a definition here changes persisted band hashes: bump `MINHASH_VERSION`
(signatures.py). docs/curation.md (MinHash) states the definitions.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
U32 = npt.NDArray[np.uint32]

_MASK64 = (1 << 64) - 1
_CHAR_BASE = 0x9E3779B97F4A7C15  # P: odd, so invertible mod 2^64 (prefix sums need P^-1)
WORD_BASE = 0xC2B2AE3D27D4EB4F  # Q
LENGTH_MIX = 0x165667B19E3779F9  # K
_CHAR_INVERSE = pow(_CHAR_BASE, -1, 1 << 64)
_FMIX64 = (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)
# Code points per vectorised group: bounds peak memory (~30 bytes a code point) for big batches.
_GROUP_CODE_POINTS = 4_000_000
_CHAR_POWERS: U64 = np.empty(0, dtype=np.uint64)
_CHAR_POWERS_MAX = 1 << 23


# --- normalisation and hashing, scalar definitions ------------------------------------------


def normalize_words(text: str) -> list[str]:
    """The words of `text` by definition (slow, one character at a time)."""
    return "".join(map(_normalise_char, text)).split()


def _normalise_char(char: str) -> str:
    return "".join(
        low if low.isalnum() or low == "_" else " "
        for low in char.lower()
        if low.isalnum() or low == "_" or low.isspace()
    )


def word_hash(word: str) -> int:
    """64-bit hash of one normalised word (scalar definition of the vectorised path)."""
    total = 0
    power = 1
    for char in word:
        total = (total + ord(char) * power) & _MASK64
        power = (power * _CHAR_BASE) & _MASK64
    return _fmix64_int((total + len(word) * LENGTH_MIX) & _MASK64)


def shingle_hash(word_hashes: Sequence[int]) -> int:
    """64-bit hash of one shingle given its words' `word_hash` values, in order."""
    total = 0
    power = 1
    for value in word_hashes:
        total = (total + value * power) & _MASK64
        power = (power * WORD_BASE) & _MASK64
    return _fmix64_int((total + len(word_hashes) * LENGTH_MIX) & _MASK64)


def _fmix64_int(h: int) -> int:
    h ^= h >> 33
    h = (h * _FMIX64[0]) & _MASK64
    h ^= h >> 33
    h = (h * _FMIX64[1]) & _MASK64
    return h ^ (h >> 33)


def fmix64(h: U64) -> U64:
    """MurmurHash3's 64-bit finalizer, in place."""
    h ^= h >> np.uint64(33)
    h *= np.uint64(_FMIX64[0])
    h ^= h >> np.uint64(33)
    h *= np.uint64(_FMIX64[1])
    h ^= h >> np.uint64(33)
    return h


# --- vectorised shingling -------------------------------------------------------------------

_WORD_RUN = re.compile(r"\w+")
_SPACE_RUN = re.compile(r"\s+")


@functools.cache
def _code_point_map() -> U32:
    """code point -> normalised code point; 0 drops it, 0x20 separates words (~0.3 s, once)."""
    points = np.arange(1, 0x110000, dtype=np.uint32)
    points = points[(points < 0xD800) | (points > 0xDFFF)]  # lone surrogates map to 0: dropped
    # A NUL after each code point keeps str.lower()'s context rules (final sigma) out of it.
    spaced = np.zeros(2 * points.size, dtype=np.uint32)
    spaced[0::2] = points
    lowered = spaced.tobytes().decode("utf-32-le").lower()
    out = np.frombuffer(lowered.encode("utf-32-le"), dtype=np.uint32)
    ends = np.flatnonzero(out == 0)
    starts = np.concatenate(([0], ends[:-1] + 1))
    single = ends - starts == 1
    lower = out[starts[single]]
    # Classify the lowered characters by runs: letters sit in long blocks, so runs are few.
    text = lower.tobytes().decode("utf-32-le")
    is_word = np.zeros(lower.size, dtype=bool)
    is_space = np.zeros(lower.size, dtype=bool)
    for flags, pattern in ((is_word, _WORD_RUN), (is_space, _SPACE_RUN)):
        for run in pattern.finditer(text):
            flags[run.start() : run.end()] = True
    table = np.zeros(0x110000, dtype=np.uint32)
    table[points[single]] = np.where(is_word, lower, np.where(is_space, np.uint32(32), 0))
    for point in points[~single].tolist():  # lowercases to several characters (U+0130)
        normal = _normalise_char(chr(point))
        if len(normal) > 1:
            raise RuntimeError(f"U+{point:04X} normalises to {normal!r}; extend the map")
        table[point] = ord(normal) if normal else 0
    return table


def _char_powers(count: int) -> U64:
    """P^0 .. P^(count-1), sliced from a table grown on demand up to 2^23 entries (64 MB)."""
    global _CHAR_POWERS
    if count > _CHAR_POWERS.size:
        if count > _CHAR_POWERS_MAX:
            return _powers(_CHAR_BASE, count)
        _CHAR_POWERS = _powers(_CHAR_BASE, min(1 << (count - 1).bit_length(), _CHAR_POWERS_MAX))
    return _CHAR_POWERS[:count]


def _powers(base: int, count: int) -> U64:
    """base^0 .. base^(count-1) mod 2^64."""
    powers = np.full(count, base, dtype=np.uint64)
    powers[0] = 1
    return np.cumprod(powers, dtype=np.uint64)


def shingle_sets(texts: Sequence[str], ngram: int = 5) -> list[U64]:
    """Sorted unique uint64 shingle hashes of each text; empty for a text without words."""
    out: list[U64] = []
    group: list[str] = []
    size = 0
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be str, got {type(text).__name__}")
        if group and size + len(text) > _GROUP_CODE_POINTS:
            out.extend(_shingle_group(group, ngram))
            group, size = [], 0
        group.append(text)
        size += len(text) + 1
    if group:
        out.extend(_shingle_group(group, ngram))
    return out


def _shingle_group(texts: list[str], ngram: int) -> list[U64]:
    """`shingle_sets` of one group of texts, in a fixed number of numpy passes over it."""
    out: list[U64] = [np.empty(0, dtype=np.uint64) for _ in texts]
    # A space before and after every text: no word starts at 0, every text has an end mark.
    joined = " ".join(["", *texts, ""])
    points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    mapped = _code_point_map()[points]
    lengths = np.fromiter((len(t) + 1 for t in texts), dtype=np.int64, count=len(texts))
    mapped[np.cumsum(lengths)] = 1  # the map never yields 1: it marks each text's end
    chars = mapped[mapped != 0]
    text_ends = np.flatnonzero(chars == 1)

    # Word edges alternate start, end, start, ...: the first and last characters are no words.
    edges = np.flatnonzero(np.diff((chars > 32).view(np.int8))) + 1
    if edges.size == 0:
        return out
    word_starts, word_ends = edges[0::2], edges[1::2]
    word_lengths = word_ends - word_starts

    # Word hash Σ c_j·P^(j-start) from prefix sums of c_j·P^j, shifted back by P^-start.
    prefix = np.multiply(chars, _char_powers(chars.size), dtype=np.uint64)
    np.cumsum(prefix, out=prefix)
    words = prefix[word_ends - 1] - prefix[word_starts - 1]
    gaps = np.diff(word_starts, prepend=0)
    words *= np.cumprod(_powers(_CHAR_INVERSE, int(gaps.max()) + 1)[gaps], dtype=np.uint64)
    words += word_lengths.astype(np.uint64) * np.uint64(LENGTH_MIX)
    words = fmix64(words)

    word_text = np.searchsorted(text_ends, word_starts)
    counts = np.bincount(word_text, minlength=len(texts))
    first_word = np.concatenate(([0], np.cumsum(counts)[:-1]))
    word_powers = _powers(WORD_BASE, ngram)

    # Full n-grams over the whole group; keep those whose first and last word share a text.
    windows = words.size - ngram + 1
    full: U64 = np.empty(0, dtype=np.uint64)
    if windows > 0:
        full = words[:windows].copy()
        for k in range(1, ngram):
            full += words[k : k + windows] * word_powers[k]
        full += np.uint64(ngram * LENGTH_MIX & _MASK64)
        full = fmix64(full)
        full = full[word_text[:windows] == word_text[ngram - 1 :]]

    # A text shorter than n words is one shingle of all its words.
    short = np.flatnonzero((counts > 0) & (counts < ngram))
    short_hash = np.zeros(short.size, dtype=np.uint64)
    for k in range(ngram - 1):
        has = counts[short] > k
        short_hash[has] += words[first_word[short[has]] + k] * word_powers[k]
    short_hash += counts[short].astype(np.uint64) * np.uint64(LENGTH_MIX)
    short_hash = fmix64(short_hash)

    full_counts = np.maximum(counts - ngram + 1, 0)
    full_starts = np.concatenate(([0], np.cumsum(full_counts)))
    for i, text in enumerate(short.tolist()):
        out[text] = short_hash[i : i + 1].copy()
    for text in np.flatnonzero(full_counts).tolist():
        out[text] = np.unique(full[full_starts[text] : full_starts[text + 1]])
    return out
