"""MinHash signatures and LSH band hashes of shingle sets, with exact Jaccard and containment.

`sketch` runs the whole path for a batch of texts (shingles, signatures, band hashes); the
permutations are datasketch's own, checked at runtime. Parameters: docs/curation.md (MinHash).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fm_assets.curation.minhash.shingles import (
    LENGTH_MIX,
    U32,
    U64,
    WORD_BASE,
    fmix64,
    shingle_sets,
)

MINHASH_VERSION = "minhash_v1"

_FMIX32 = (0x85EBCA6B, 0xC2B2AE35)
# Shingles per MinHash block: 256 KB of uint32 stays in L2 across the permutations.
_MINHASH_BLOCK = 65_536


@dataclass(frozen=True)
class MinHashConfig:
    """Near-duplicate parameters. `config_hash()` goes into provenance."""

    ngram: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1
    threshold: float = 0.8

    def __post_init__(self) -> None:
        for name in ("ngram", "bands", "rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"MinHashConfig.{name} must be a positive int, got {value!r}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"MinHashConfig.seed must be in [0, 2**32), got {self.seed}")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"MinHashConfig.threshold must be in (0, 1], got {self.threshold}")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows

    @property
    def index_config(self) -> str:
        """What index rows depend on (not the threshold): rows of another config cannot mix."""
        shape = f"ngram={self.ngram}/bands={self.bands}x{self.rows}/seed={self.seed}"
        return f"{MINHASH_VERSION}/{shape}"

    def config_hash(self) -> str:
        fields = {"version": MINHASH_VERSION, **dataclasses.asdict(self)}
        payload = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def candidate_probability(self, jaccard: float) -> float:
        """Probability that a pair with this Jaccard shares at least one band."""
        return 1.0 - (1.0 - jaccard**self.rows) ** self.bands


def _fmix32(h: U32) -> U32:
    """MurmurHash3's 32-bit finalizer (datasketch's affine32 pre-mix), in place."""
    h ^= h >> np.uint32(16)
    h *= np.uint32(_FMIX32[0])
    h ^= h >> np.uint32(13)
    h *= np.uint32(_FMIX32[1])
    h ^= h >> np.uint32(16)
    return h


@functools.cache
@functools.lru_cache(maxsize=8)
def permutations(num_perm: int, seed: int) -> tuple[U32, U32]:
    """(a, b) of h ↦ a·h + b mod 2^32: datasketch's own affine32 permutations.

    They are checked against the draw this module pins (odd a, any b, from RandomState(seed)):
    persisted band hashes depend on them, so a datasketch release that drew differently must
    fail loudly rather than silently split the index in two.
    """
    from datasketch import MinHash

    drawn = np.asarray(
        MinHash(num_perm=num_perm, seed=seed, scheme="affine32").permutations, dtype=np.uint32
    )
    generator = np.random.RandomState(seed)
    a = generator.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = generator.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    if drawn.shape != (2, num_perm) or not (
        np.array_equal(drawn[0], a) and np.array_equal(drawn[1], b)
    ):
        raise RuntimeError(
            "datasketch's affine32 permutations differ from the ones the near-dup index was "
            f"built with ({MINHASH_VERSION}); pin the datasketch version or rebuild the index"
        )
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


def signatures(shingles: Sequence[U64], config: MinHashConfig) -> U32:
    """(documents × num_perm) uint32 MinHash signatures; all 0xFFFFFFFF for an empty set."""
    a, b = permutations(config.num_perm, config.seed)
    out = np.full((len(shingles), config.num_perm), 0xFFFFFFFF, dtype=np.uint32)
    nonempty = np.fromiter((s.size > 0 for s in shingles), dtype=bool, count=len(shingles))
    rows = np.flatnonzero(nonempty)
    if rows.size == 0:
        return out
    parts = [shingles[i] for i in rows.tolist()]
    values = _fmix32(np.concatenate(parts).astype(np.uint32))  # low 32 bits, as datasketch
    starts = np.concatenate(([0], np.cumsum([p.size for p in parts])))
    mins = np.full((config.num_perm, rows.size), 0xFFFFFFFF, dtype=np.uint32)
    scratch = np.empty(min(_MINHASH_BLOCK, values.size), dtype=np.uint32)
    # One permutation at a time over a cache-sized block of contiguous values: the working
    # set stays in cache, where broadcasting a (block × num_perm) matrix would not.
    for begin in range(0, values.size, _MINHASH_BLOCK):
        end = min(begin + _MINHASH_BLOCK, values.size)
        block, permuted = values[begin:end], scratch[: end - begin]
        first = int(np.searchsorted(starts, begin, side="right")) - 1
        last = int(np.searchsorted(starts, end, side="left"))
        local = np.maximum(starts[first:last], begin) - begin
        for k in range(config.num_perm):
            np.multiply(block, a[k], out=permuted)
            permuted += b[k]
            target = mins[k, first:last]
            np.minimum(target, np.minimum.reduceat(permuted, local), out=target)
    out[rows] = mins.T
    return out


def band_hashes(signature: U32, config: MinHashConfig) -> U64:
    """(documents × bands) uint64: each band's `rows` values hashed together with its index."""
    docs = signature.shape[0]
    rows = signature.reshape(docs, config.bands, config.rows).astype(np.uint64)
    h = np.tile(np.arange(1, config.bands + 1, dtype=np.uint64), (docs, 1))
    h = fmix64(h * np.uint64(LENGTH_MIX))
    for r in range(config.rows):
        h = fmix64(h * np.uint64(WORD_BASE) + rows[:, :, r])
    return h


def jaccard(a: U64, b: U64) -> float:
    """Exact Jaccard of two sorted unique arrays (0.0 when both are empty)."""
    inter = _intersection_size(a, b)
    union = a.size + b.size - inter
    return inter / union if union else 0.0


def containment(part: U64, whole: U64) -> float:
    """|part ∩ whole| / |part| of sorted unique arrays (0.0 when `part` is empty)."""
    return _intersection_size(part, whole) / part.size if part.size else 0.0


def _intersection_size(a: U64, b: U64) -> int:
    if a.size > b.size:
        a, b = b, a
    if a.size == 0:
        return 0
    at = np.minimum(np.searchsorted(b, a), b.size - 1)
    return int(np.count_nonzero(b[at] == a))


@dataclass(frozen=True)
class BatchSketch:
    """What the index needs of each text of a batch: its shingle set and its band hashes."""

    shingles: list[U64]  # sorted unique uint64 per text
    bands: U64  # (texts × bands)


def sketch(texts: Sequence[str], config: MinHashConfig) -> BatchSketch:
    """Shingles, MinHash signatures and band hashes of a batch; pure, safe to run in workers."""
    shingles = shingle_sets(texts, config.ngram)
    return BatchSketch(shingles, band_hashes(signatures(shingles, config), config))
