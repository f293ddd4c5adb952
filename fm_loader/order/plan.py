"""Sample order inside each source: a pure function of (seed, epoch, source, pass).

Order inside one source, per pass over it (one pass = every sample once):
  1. the source's shards are permuted by (seed, epoch, source, pass);
  2. their samples, concatenated in that order, are cut into windows of `shuffle_window`
     samples and each window is permuted by (seed, epoch, source, pass, window).
A reader therefore only ever needs the few shards under one window, and finding the sample at
any running index costs O(shards + window), never O(samples).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
_BLOCK_CACHE = 4  # window permutations kept per source: a chunk of positions spans one or two
_ZERO = np.zeros(1, dtype=np.int64)


def permutation(n: int, *key: int) -> IntArray:
    """A permutation of range(n) fixed by `key`, identical on every platform and numpy version.

    NumPy promises a stable stream only for raw bit generators, not for `permutation` (NEP 19),
    so we argsort raw PCG64 draws.
    """
    if any(k < 0 for k in key):
        raise ValueError(f"permutation keys must be non-negative, got {key}")
    draws = np.random.PCG64(np.random.SeedSequence(list(key))).random_raw(n)
    return np.argsort(draws, kind="stable").astype(np.int64)


class SourceOrder:
    """Maps a source's running sample index (0, 1, ... across passes) to its sample id."""

    def __init__(
        self, shard_sizes: Sequence[int], *, seed: int, epoch: int, source: int, window: int
    ) -> None:
        if window < 1:
            raise ValueError(f"shuffle_window must be at least 1, got {window}")
        self.shard_sizes = np.asarray(shard_sizes, dtype=np.int64)
        self.shard_starts = np.concatenate([[0], np.cumsum(self.shard_sizes)[:-1]])
        self.num_samples = int(self.shard_sizes.sum())
        self.key = (seed, epoch, source)
        self.window = window
        self._passes: OrderedDict[int, tuple[IntArray, IntArray]] = OrderedDict()
        self._windows: OrderedDict[tuple[int, int], IntArray] = OrderedDict()

    def sample_ids(self, running: IntArray) -> IntArray:
        """Sample ids (global within the source) of running indices `running`."""
        passes, offsets = np.divmod(np.asarray(running, dtype=np.int64), self.num_samples)
        windows, inside = np.divmod(offsets, self.window)
        keys = passes * (self.num_samples // self.window + 1) + windows
        # One pass over the positions grouped by (pass, window), not one scan per window.
        unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(unique) + 1))
        concatenated = np.empty_like(offsets)
        for group, start in enumerate(first.tolist()):
            rows = order[bounds[group] : bounds[group + 1]]
            p, w = int(passes[start]), int(windows[start])
            concatenated[rows] = w * self.window + self._window_perm(p, w)[inside[rows]]
        out = np.empty_like(offsets)
        for p in np.unique(passes).tolist():
            rows = passes == p
            out[rows] = self._unconcatenate(p, concatenated[rows])
        return out

    def _window_perm(self, pass_: int, window: int) -> IntArray:
        cached = self._windows.get((pass_, window))
        if cached is None:
            size = min(self.window, self.num_samples - window * self.window)
            # A one-sample window has one order: no generator to seed.
            cached = _ZERO if size == 1 else permutation(size, *self.key, pass_, window)
            self._windows[(pass_, window)] = cached
            if len(self._windows) > _BLOCK_CACHE:
                self._windows.popitem(last=False)
        return cached

    def _unconcatenate(self, pass_: int, concatenated: IntArray) -> IntArray:
        """Positions in the pass's shard-permuted concatenation -> sample ids."""
        order = self._passes.get(pass_)
        if order is None:
            shard_order = permutation(len(self.shard_sizes), *self.key, pass_, 1 << 62)
            ends = np.cumsum(self.shard_sizes[shard_order])
            order = (shard_order, ends)
            self._passes[pass_] = order
            if len(self._passes) > _BLOCK_CACHE:
                self._passes.popitem(last=False)
        shard_order, ends = order
        slot = np.searchsorted(ends, concatenated, side="right")
        shard = shard_order[slot]
        within = concatenated - (ends[slot] - self.shard_sizes[shard])
        return np.asarray(self.shard_starts[shard] + within, dtype=np.int64)
