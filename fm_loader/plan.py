"""Sample order and placement: pure functions of (seed, epoch, rank, world size, worker).

Order: one permutation of all sample indices per (seed, epoch).
Placement: rank r takes a contiguous block of that permutation; a DataLoader worker w of W takes
every W-th position of its rank's block, starting at w.
Remainder rule: no sample is dropped. The first `num_samples % world_size` ranks get one extra
sample, so per-epoch sample counts across ranks differ by at most one.
"""

from __future__ import annotations

import os

import numpy as np
import numpy.typing as npt


def epoch_order(num_samples: int, seed: int, epoch: int) -> npt.NDArray[np.intp]:
    """A permutation of range(num_samples) fixed by (seed, epoch), identical on every platform.

    NumPy promises a stable stream only for raw bit generators, not for `permutation` (NEP 19),
    so we argsort raw PCG64 draws: the order survives numpy upgrades across a long training run.
    """
    if seed < 0 or epoch < 0:
        raise ValueError(f"seed and epoch must be non-negative, got seed={seed}, epoch={epoch}")
    keys = np.random.PCG64(np.random.SeedSequence([seed, epoch])).random_raw(num_samples)
    return np.argsort(keys, kind="stable")


def rank_span(num_samples: int, rank: int, world_size: int) -> tuple[int, int]:
    """[start, stop) of rank `rank`'s contiguous block of the epoch order (remainder rule above)."""
    base, extra = divmod(num_samples, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def worker_positions(start: int, stop: int, worker_id: int, num_workers: int) -> range:
    """The positions of a rank's block that DataLoader worker `worker_id` serves (strided)."""
    return range(start + worker_id, stop, num_workers)


def resolve_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size): explicit, else torch.distributed, else RANK/WORLD_SIZE, else 0/1."""
    if rank is None or world_size is None:
        env_rank, env_world = _world_from_environment()
        rank = env_rank if rank is None else rank
        world_size = env_world if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(
            f"invalid placement rank={rank}, world_size={world_size}: need 0 <= rank < world_size; "
            "pass rank= and world_size= explicitly or set RANK and WORLD_SIZE"
        )
    return rank, world_size


def _world_from_environment() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as exc:
        raise ValueError(f"RANK/WORLD_SIZE must be integers: {exc}") from exc
