"""Batches as the unit of a stream: which samples each unit of a source holds, a pure function
of (seed, epoch, source, batch size).

A stream of image-text pairs is placed a batch at a time so that every batch's images share one
aspect bucket: each source is cut into units of `batch_size` samples, and the mixture, the
source's order and the placement (`fm_loader.order.mixture`, `plan`, `placement`) then place
units exactly as they place samples in a stream of samples. Every sample is in exactly one unit,
so serving every unit once serves every sample once, whatever world size or worker count reads
the units, and a checkpoint is a unit position (`fm_loader.order.batch_state`).

- A pair set's units: each bucket's samples in the bucket's own order (windowed permutation by
  (seed, epoch, source, bucket), `SourceOrder`), cut into runs of `batch_size`; the last run of
  a bucket may be shorter. Units are numbered bucket by bucket.
- A token set's units: its samples in the source's order, cut into runs of `batch_size`.
The order of a source's units in the stream is one more `SourceOrder`, over its units.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from fm_loader.order.plan import SourceOrder

IntArray = npt.NDArray[np.int64]
_BUCKET_KEY = 1 << 20  # bucket orders' source keys: far from any source's own


class SourceUnits:
    """The units of one source: `count` units of at most `batch_size` samples each."""

    def __init__(
        self,
        groups: Sequence[tuple[int, int]],
        shard_sizes: Sequence[int] | None,
        *,
        batch_size: int,
        seed: int,
        epoch: int,
        source: int,
        window: int,
    ) -> None:
        """`groups`: (first sample, samples) of each group whose samples share a unit (a pair
        set's buckets); `shard_sizes`: a token set's shards, which its sample order permutes
        (the set is then one group, `[(0, samples)]`)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if shard_sizes is not None and len(groups) != 1:
            raise ValueError("a source ordered by its shards is one group")
        self.by_shards = shard_sizes is not None
        self.batch_size = batch_size
        self.groups = [(int(first), int(size)) for first, size in groups]
        per_group = [-(-size // batch_size) for _, size in self.groups]
        self.unit_starts = np.concatenate([[0], np.cumsum(per_group)]).astype(np.int64)
        self.count = int(self.unit_starts[-1])
        self._orders = [
            SourceOrder(
                shard_sizes if shard_sizes is not None else [size],
                seed=seed,
                epoch=epoch,
                source=source if self.by_shards else _BUCKET_KEY * (source + 1) + g,
                window=window,
            )
            for g, (_, size) in enumerate(self.groups)
            if size
        ]
        self._order_of = [g for g, (_, size) in enumerate(self.groups) if size]
        self.unit_order = (
            SourceOrder([self.count], seed=seed, epoch=epoch, source=source, window=window)
            if self.count
            else None
        )

    def group_of(self, unit: int) -> int:
        """The group (bucket) unit `unit` belongs to."""
        return int(np.searchsorted(self.unit_starts, unit, side="right")) - 1

    def samples(self, unit: int) -> IntArray:
        """The sample ids unit `unit` holds, in their group's order."""
        if not 0 <= unit < self.count:
            raise IndexError(f"unit {unit} out of range [0, {self.count})")
        group = self.group_of(unit)
        first, size = self.groups[group]
        k = unit - int(self.unit_starts[group])
        running = np.arange(k * self.batch_size, min((k + 1) * self.batch_size, size))
        order = self._orders[self._order_of.index(group)]
        return order.sample_ids(running) + (0 if self.by_shards else first)

    def unit_ids(self, running: IntArray) -> IntArray:
        """The unit served at each of the source's running unit indices (across passes)."""
        if self.unit_order is None:
            raise ValueError("a source with no samples serves no unit")
        return self.unit_order.sample_ids(running)
