"""Who serves which position of the global stream: pure functions of (rank, world, worker).

Placement of the global stream (see `fm_loader.order.mixture` for which source each position is):
resuming at global position G0 with world size W, rank r serves positions G0 + r + k*W for
k = 0, 1, ...; a DataLoader worker w of n serves the rank's k-th sample when
(k // chunk) % n == w, chunk being the batch size, so a DataLoader that takes whole batches from
workers in turn hands the trainer the rank's samples in stream order.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def rank_positions(start: int, stop: int, rank: int, world_size: int) -> range:
    """Global positions in [start, stop) that rank `rank` serves after a (re)start at `start`."""
    return range(start + rank, stop, world_size)


def worker_serves(k: IntArray, chunk: int, worker: int, num_workers: int) -> npt.NDArray[np.bool_]:
    """Which of a rank's sample numbers `k` (0-based since the restart) worker `worker` serves."""
    return np.asarray((k // chunk) % num_workers == worker)


def placement_batch_size(batch_size: int | None) -> tuple[int, str | None]:
    """The chunk a dataset places samples on workers by, and who chose it: `make_dataset`, or
    nobody yet (None: samples are placed one by one until `make_loader` sets its batch size)."""
    if batch_size is None:
        return 1, None
    return batch_size, f"make_dataset(batch_size={batch_size})"
