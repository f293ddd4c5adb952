"""How the contestants open a shard set and read samples from it, and the timing of one read:
ours per sample and in batches, upstream's StreamingDataset."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.loader.upstream import close_upstream
from fm_loader import make_dataset, make_loader

BATCH = 8
SEED = 0
UPSTREAM_SEED = 9176  # StreamingDataset's default shuffle_seed


@dataclass(frozen=True)
class Read:
    """One path opening the set and reading its first samples."""

    open_s: float  # make_dataset / StreamingDataset constructor
    read_s: float  # wall seconds for the samples
    verify_s: float  # of which ours mapped and sha256-checked shards on first use (else 0)
    cpu_s: float  # process CPU seconds, all threads, while reading

    @property
    def steady_s(self) -> float:
        return self.read_s - self.verify_s


def take(items: Iterator[Any], n: int, count: Callable[[Any], int]) -> None:
    """Consume `items` until `count` of them add up to n samples."""
    seen = 0
    for item in items:
        seen += count(item)
        if seen >= n:
            return
    raise RuntimeError(f"the set ran out after {seen} of {n} samples")


def one(_: Any) -> int:
    return 1


def batch_len(batch: Any) -> int:
    return len(batch["sample_index"])


def read_timed(open_: Callable[[], Any], read: Callable[[Any], float]) -> Read:
    """open_() -> handle; read(handle) reads the samples and returns the first-use verify s."""
    t0 = time.perf_counter()
    handle = open_()
    t1, c1 = time.perf_counter(), time.process_time()
    verify = read(handle)
    t2, c2 = time.perf_counter(), time.process_time()
    return Read(t1 - t0, t2 - t1, verify, c2 - c1)


def ours_samples(directory: Path, window: int, n: int) -> Read:
    def read(ds: Any) -> float:
        take(iter(ds), n, one)
        return sum(ds.take_fetch_latencies())

    return read_timed(
        lambda: make_dataset(
            str(directory), rank=0, world_size=1, seed=SEED, shuffle_window=window
        ),
        read,
    )


def ours_batches(directory: Path, n: int) -> Read:
    def read(loader: Any) -> float:
        batches = iter(loader)
        take(batches, n, batch_len)
        del batches  # closes the generator: stops the loader's prefetch thread, if it started
        return float(loader.metrics.fetch_s_total)

    return read_timed(
        lambda: make_loader(
            make_dataset(str(directory), rank=0, world_size=1, seed=SEED),
            batch_size=BATCH,
            num_workers=0,
        ),
        read,
    )


def upstream_samples(directory: Path, shuffle: bool, n: int) -> Read:
    from streaming import StreamingDataset

    def read(ds: Any) -> float:
        take(iter(ds), n, one)
        return 0.0

    handle: list[Any] = []

    def open_() -> Any:
        handle.append(
            StreamingDataset(
                local=str(directory), shuffle=shuffle, batch_size=BATCH, shuffle_seed=UPSTREAM_SEED
            )
        )
        return handle[0]

    result = read_timed(open_, read)
    close_upstream(handle.pop())
    return result
