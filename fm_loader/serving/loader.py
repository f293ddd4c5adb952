"""`make_loader`: batches of a dataset, built by worker processes, counted and timed.

    loader = make_loader(dataset, batch_size=8, num_workers=2)
    for batch in loader: ...
    checkpoint["data"] = loader.state_dict()     # exact, whatever num_workers is
    loader.load_state_dict(checkpoint["data"])   # any world size, any worker count

Each worker process builds whole batches (the dataset's placement gives worker w every n-th
batch of the rank) and hands them over through shared memory (`fm_loader.serving.workers`,
`fm_loader.serving.transport`: one reused buffer per batch slot, never a pickled array or a file
descriptor per tensor); the trainer takes them round-robin, so it sees the rank's stream in
order. Without workers the trainer's own thread builds a batch when it asks, and a background
thread builds ahead while the trainer idles between batches (`fm_loader.serving.prefetch`). Up
to `prefetch_batches` batches are built ahead; the time the trainer waits for the next one is
the data stall `metrics` reports. The loader counts the samples it handed over: that count is
what `state_dict` reports.
"""

from __future__ import annotations

import multiprocessing.context
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from fm_loader.format.mapped import VerifiedTable
from fm_loader.samples.token_blocks import as_tensors
from fm_loader.serving.metrics import LoaderMetrics
from fm_loader.serving.prefetch import Prefetcher
from fm_loader.serving.stream import StreamDataset
from fm_loader.serving.transport import BatchSlots, pinned_memory_available, start_method_context
from fm_loader.serving.workers import WorkerPool

Batch = dict[str, Any]
Served = StreamDataset[Any]  # shard sets, or text tokenized in the loader
Built = tuple[Batch, int, int, list[float], int]  # batch, samples, tokens, fetches, refetched


class FmLoader:
    """Iterable over collated batches of one rank; checkpointable with any number of workers.

    `batch_size` defaults to the dataset's. Given, it becomes the dataset's (which decides the
    placement of samples on workers) when the dataset's was not chosen (`make_dataset`'s
    `batch_size=None`); a different size than one chosen raises ValueError naming both.
    `pin_memory=True` hands batches over in page-locked memory (for `.to(device,
    non_blocking=True)`). `multiprocessing_context` ("fork", "spawn", "forkserver" or a context)
    starts the workers; a spawned worker imports only the loader (torch, numpy, fm_loader).
    """

    def __init__(
        self,
        dataset: Served,
        *,
        batch_size: int | None = None,
        num_workers: int = 0,
        prefetch_batches: int = 4,
        pin_memory: bool = False,
        log_every_s: float = 60.0,
        multiprocessing_context: str | multiprocessing.context.BaseContext | None = None,
        worker_init_fn: Callable[[int], None] | None = None,
    ) -> None:
        if (batch_size is not None and batch_size < 1) or num_workers < 0 or prefetch_batches < 1:
            raise ValueError(
                "batch_size and prefetch_batches must be positive and num_workers non-negative, "
                f"got {batch_size}, {prefetch_batches}, {num_workers}"
            )
        batch_size = _placement_batch_size(dataset, batch_size)
        self.dataset, self.batch_size = dataset, batch_size
        self.prefetch_batches = prefetch_batches
        self.metrics = LoaderMetrics(log_every_s=log_every_s)
        for use in dataset.cache_uses:  # what opening the cached sets cost
            self.metrics.record_cache(use.warm_bytes, use.fetched_bytes, use.warmup_s)
        self._tracker = dataset.tracker()
        self.num_workers = num_workers
        self.pin_memory = pinned_memory_available(pin_memory)
        self.worker_init_fn = worker_init_fn
        self._context = start_method_context(multiprocessing_context) if num_workers else None
        # Per worker: its share of `prefetch_batches` built ahead, and the batches the trainer
        # may hold without a copy (the one it works on and the one before it).
        self._ahead = max(1, prefetch_batches // max(1, num_workers))
        self._lend = 2
        self._verified: VerifiedTable | None = None  # shards hashed by any of its workers

    def __len__(self) -> int:
        """Batches left in the epoch for this rank."""
        return self.dataset.batches_left(self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        if self.num_workers:
            return self._from_workers()
        return self._in_process()

    def _from_workers(self) -> Iterator[Batch]:
        if self._context is None:
            raise RuntimeError("worker context missing")
        # Fresh slots each epoch: workers of an abandoned epoch may still hold old ones.
        slots = BatchSlots(
            self.dataset.slot_fields(self.batch_size),
            self.num_workers,
            self._ahead,
            self._context,
            lend=self._lend,
            tail_bytes=max(64 << 10, self.batch_size * (2 << 10)),
        )
        if self._verified is None:  # kept across epochs: a shard is hashed once per loader
            self._verified = self.dataset.verification_table()
            self.dataset.share_verification(self._verified)
        pool = WorkerPool(self.dataset, slots, self.num_workers, self._context, self.worker_init_fn)
        try:
            for batch in pool.batches(self.pin_memory, self.metrics.record_wait):
                yield self._hand_over(batch)
        finally:
            pool.close()

    def _in_process(self) -> Iterator[Batch]:
        """Without workers the trainer's thread builds each batch when it asks, unless a
        background thread built it ahead while the trainer was idle (`fm_loader.serving.
        prefetch`)."""
        prefetcher = Prefetcher(_built(self.dataset, self.pin_memory), self.prefetch_batches)
        metrics, clock = self.metrics, time.perf_counter
        try:
            while True:
                depth = len(prefetcher)
                started = clock()
                built = prefetcher.next(started)
                if built is None:
                    metrics.record_wait(clock() - started, depth)
                    return
                batch, samples, tokens, fetches, refetched = built
                if refetched:
                    metrics.record_refetch(refetched)
                metrics.record_batch(samples, tokens, fetches)
                self._tracker.add(batch)
                # Building the batch (or waiting for the thread building it) and handing it
                # over are the loader's work on the trainer's thread: the trainer waits.
                handed = clock()
                metrics.record_wait(handed - started, depth)
                prefetcher.handed_over(handed)
                yield batch
        finally:
            prefetcher.close()

    def _hand_over(self, batch: Batch) -> Batch:
        """Count a batch as consumed as it is handed to the trainer (what state_dict reports)."""
        fetches = batch.pop("shard_fetch_s")
        refetched = batch.pop("shard_refetch_bytes")
        if refetched:
            self.metrics.record_refetch(refetched)
        tokens = batch.pop("real_tokens", None)
        if tokens is None:
            tokens = int(batch["num_tokens"].sum())
        self.metrics.record_batch(batch["sample_index"].shape[0], tokens, fetches)
        self._tracker.add(batch)
        return self.dataset.finish_batch(batch)

    def state_dict(self) -> dict[str, Any]:
        """The dataset's state at exactly the samples this loader handed to the trainer."""
        return self._tracker.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset.load_state_dict(state)
        self._tracker = self.dataset.tracker()

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
        self._tracker = self.dataset.tracker()


def _built(dataset: Served, pin_memory: bool) -> Iterator[Built]:
    """The rank's batches as tensors, each with its samples and real tokens, and the shard
    fetches (seconds) and refetched bytes building it cost."""
    for arrays in dataset.batch_stream(0, 1, arrays=True):
        samples, tokens = len(arrays["sample_index"]), int(arrays["num_tokens"].sum())
        batch = dataset.finish_batch(as_tensors(arrays))
        if pin_memory:
            batch = {k: v.pin_memory() if torch.is_tensor(v) else v for k, v in batch.items()}
        yield batch, samples, tokens, dataset.take_fetch_latencies(), dataset.take_refetched_bytes()


def _placement_batch_size(dataset: Served, batch_size: int | None) -> int:
    """The batch size that places samples on workers, chosen once: the dataset's when it has
    one (make_dataset(batch_size=N), or an earlier loader's), else the loader's, which the
    dataset then adopts. A loader asking for another size than the one chosen is refused: it
    would change which worker serves which sample without anyone asking."""
    chosen_by = dataset.batch_size_chosen_by
    if batch_size is None or batch_size == dataset.batch_size:
        return dataset.batch_size
    if chosen_by is not None:
        raise ValueError(
            f"make_loader(batch_size={batch_size}) but the dataset's batch size is "
            f"{dataset.batch_size}, chosen by {chosen_by}; the batch size decides which worker "
            "serves which sample, so it is chosen once: pass the same size, or give it only "
            "to make_loader (make_dataset(..., batch_size=None), the default) or only to "
            "make_dataset (make_loader without batch_size)"
        )
    dataset.batch_size = batch_size
    dataset.batch_size_chosen_by = f"an earlier make_loader(batch_size={batch_size})"
    return batch_size


# Batches of a dataset for one trainer process: the loader's constructor, under the name that
# pairs it with `make_dataset`.
make_loader = FmLoader
