"""`ImageIndex` lookup time per query as the index grows to 10^4, 10^5, 10^6 stored hashes
(uniformly random 64-bit values), at each max distance, next to a numpy scan of every stored
hash (`np.bitwise_count` of the XOR), the simplest exact reference.

Queries at each size: half random values (almost never within the distance of a stored hash),
half a stored hash with up to `max_distance` random bits flipped (always found). Both paths take
the same queries in alternating chunks; each must find the same nearest distance, or the run
fails. Times are CPU microseconds per query.
"""

from __future__ import annotations

import functools
import gc
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fm_assets.curation.images.near_dup import ImageIndex, Kept

SIZES = (10_000, 100_000, 1_000_000)
QUERIES = 100  # per size: half random, half near a stored hash
CHUNK = 20
_MASK = (1 << 64) - 1
_NO_PIXELS = "none"  # a pixel hash no stored image has: the lookup goes to the pHash pieces


@dataclass(frozen=True)
class Lookup:
    max_distance: int
    size: int
    build_s: float  # CPU seconds to load the stored hashes into the index
    index_us: list[float]  # per query
    scan_us: list[float]
    found: int  # queries with a stored hash within the distance (by both paths)
    index_mb: float  # the process's resident memory less before the index held anything


def resident_mb() -> float:
    """This process's resident memory now (Linux /proc)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _near(stored: int, flips: int, rng: random.Random) -> int:
    value = stored & _MASK
    for bit in rng.sample(range(64), flips):
        value ^= 1 << bit
    return _signed(value)


def _timed_each(
    fn: Callable[[int], int | None], queries: Sequence[int]
) -> tuple[list[float], list[int | None]]:
    times, results = [], []
    for query in queries:
        started = time.process_time()
        results.append(fn(query))
        times.append((time.process_time() - started) * 1e6)
    return times, results


def measure(
    max_distance: int, sizes: Sequence[int] = SIZES, queries: int = QUERIES, seed: int = 0
) -> list[Lookup]:
    rng = random.Random(seed)
    stored = [rng.getrandbits(64) for _ in range(max(sizes))]
    unsigned = np.array(stored, dtype=np.uint64)
    gc.collect()
    empty = resident_mb()
    results = []
    build = 0.0
    for size in sizes:
        # The stored hashes are other batches' kept images: loaded once, as the dedup stage's
        # deciding task loads the rows it read from the namespace's index.
        started = time.process_time()
        index = ImageIndex(max_distance)
        index.load(
            [f"{i:064x}" for i in range(size)],
            [Kept(f"d{i}", "b", _signed(stored[i])) for i in range(size)],
        )
        build = time.process_time() - started
        view = unsigned[:size]
        probes = [_signed(rng.getrandbits(64)) for _ in range(queries // 2)] + [
            _near(stored[rng.randrange(size)], rng.randint(0, max_distance), rng)
            for _ in range(queries - queries // 2)
        ]

        by_index = functools.partial(_by_index, index)
        by_scan = functools.partial(_by_scan, view, max_distance)
        index_us: list[float] = []
        scan_us: list[float] = []
        found = 0
        for at in range(0, len(probes), CHUNK):
            chunk = probes[at : at + CHUNK]
            order = [(by_index, index_us), (by_scan, scan_us)]
            if (at // CHUNK) % 2:
                order.reverse()
            answers = []
            for fn, times in order:
                spent, got = _timed_each(fn, chunk)
                times += spent
                answers.append(got)
            if answers[0] != answers[1]:
                raise RuntimeError(f"the index and the scan disagree at size {size}")
            found += sum(a is not None for a in answers[0])
        held = resident_mb() - empty
        results.append(Lookup(max_distance, size, build, index_us, scan_us, found, held))
    del index
    gc.collect()
    return results


def _by_index(index: ImageIndex, query: int) -> int | None:
    verdict = index.find(_NO_PIXELS, query)
    return None if verdict is None else verdict.distance


def _by_scan(stored: np.ndarray, max_distance: int, query: int) -> int | None:
    best = int(np.bitwise_count(stored ^ np.uint64(query & _MASK)).min())
    return best if best <= max_distance else None
