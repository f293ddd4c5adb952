"""`make_loader`: batches from an `FmDataset` through torch DataLoader workers, counted and timed.

    loader = make_loader(dataset, batch_size=8, num_workers=2)
    for batch in loader: ...
    checkpoint["data"] = loader.state_dict()     # exact, whatever num_workers is
    loader.load_state_dict(checkpoint["data"])   # any world size, any worker count

Each DataLoader worker builds whole batches (the dataset's placement gives worker w every
n-th batch of the rank), and torch hands batches to the trainer round-robin, so the trainer sees
the rank's stream in order. The loader counts the samples it handed over: that count is what
`state_dict` reports. A background thread keeps up to `prefetch_batches` batches ready; the
time the trainer waits on it is the data stall that `metrics` reports.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch.utils.data

from fm_loader.blocks import as_tensors
from fm_loader.dataset import FmDataset
from fm_loader.metrics import LoaderMetrics

Batch = dict[str, Any]
_DONE = object()


class _Batches(torch.utils.data.IterableDataset[Batch]):
    """The dataset's batches as numpy arrays, built whole in the worker, with its fetch times.

    numpy crosses the worker pipe pickled, in one message; torch tensors would each become a
    shared-memory block passed by file descriptor, which measured 3x slower here.
    """

    def __init__(self, dataset: FmDataset) -> None:
        super().__init__()
        self.dataset = dataset

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        for batch in self.dataset.batch_stream(worker, num_workers, arrays=True):
            batch["shard_fetch_s"] = self.dataset.take_fetch_latencies()
            yield batch


def _keep_as_is(batch: Any) -> Any:
    """collate_fn for whole batches: leave numpy alone (torch would convert in the worker)."""
    return batch


class FmLoader:
    """Iterable over collated batches of one rank; checkpointable with any number of workers."""

    def __init__(
        self,
        dataset: FmDataset,
        *,
        batch_size: int | None = None,
        num_workers: int = 0,
        prefetch_batches: int = 4,
        pin_memory: bool = False,
        log_every_s: float = 60.0,
    ) -> None:
        batch_size = _placement_batch_size(dataset, batch_size)
        if batch_size < 1 or num_workers < 0 or prefetch_batches < 1:
            raise ValueError(
                "batch_size and prefetch_batches must be positive and num_workers non-negative, "
                f"got {batch_size}, {prefetch_batches}, {num_workers}"
            )
        dataset.batch_size = batch_size
        self.dataset, self.batch_size = dataset, batch_size
        self.prefetch_batches = prefetch_batches
        self.metrics = LoaderMetrics(log_every_s=log_every_s)
        self._consumed = 0
        per_worker = max(1, prefetch_batches // max(1, num_workers))
        self.num_workers, self.pin_memory = num_workers, pin_memory
        self._torch = torch.utils.data.DataLoader(
            _Batches(dataset),
            batch_size=None,
            collate_fn=_keep_as_is,
            num_workers=num_workers,
            prefetch_factor=per_worker if num_workers else None,
        )

    def __len__(self) -> int:
        """Batches left in the epoch for this rank."""
        return -(-len(self.dataset) // self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        ready: queue.Queue[Any] = queue.Queue(maxsize=self.prefetch_batches)
        stop = threading.Event()
        # Without workers, the prefetch thread builds batches itself: no DataLoader in between.
        source = iter(self._torch) if self.num_workers else iter(_Batches(self.dataset))
        producer = threading.Thread(target=_produce, args=(source, ready, stop), daemon=True)
        producer.start()
        try:
            while True:
                depth = ready.qsize()
                started = time.perf_counter()
                item = ready.get()
                self.metrics.record_wait(time.perf_counter() - started, depth)
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                fetches = item.pop("shard_fetch_s")
                item = as_tensors(item)
                if self.pin_memory:
                    item = {k: v.pin_memory() if torch.is_tensor(v) else v for k, v in item.items()}
                self.metrics.record_batch(
                    len(item["sample_index"]), int(item["num_tokens"].sum()), fetches
                )
                self._consumed += len(item["sample_index"])
                yield item
        finally:
            stop.set()
            producer.join(timeout=30)

    def state_dict(self) -> dict[str, Any]:
        """The dataset's state at exactly the samples this loader handed to the trainer."""
        return self.dataset.state_dict(consumed_samples=self._consumed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dataset.load_state_dict(state)
        self._consumed = 0

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)
        self._consumed = 0


def _produce(batches: Iterator[Batch], ready: queue.Queue[Any], stop: threading.Event) -> None:
    """Move batches from the DataLoader into `ready` until it ends, fails, or we are stopped."""
    try:
        for batch in batches:
            while not stop.is_set():
                try:
                    ready.put(batch, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
        item: Any = _DONE
    except BaseException as exc:  # handed to the consumer, which raises it in its own thread
        item = exc
    while not stop.is_set():
        try:
            ready.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def _placement_batch_size(dataset: FmDataset, batch_size: int | None) -> int:
    """The batch size that places samples on workers: the dataset's, or the loader's when the
    dataset was left at 1. Two different explicit sizes would change which worker serves which
    sample (and so what a checkpoint means) without anyone asking: refused."""
    if batch_size is None:
        return dataset.batch_size
    if dataset.batch_size not in (1, batch_size):
        raise ValueError(
            f"make_loader(batch_size={batch_size}) but the dataset was made with "
            f"batch_size={dataset.batch_size}; the batch size decides which worker serves which "
            "sample: give it once (make_dataset(..., batch_size=N) and make_loader without one)"
        )
    return batch_size


def make_loader(
    dataset: FmDataset,
    *,
    batch_size: int | None = None,
    num_workers: int = 0,
    prefetch_batches: int = 4,
    pin_memory: bool = False,
    log_every_s: float = 60.0,
) -> FmLoader:
    """Batches of `dataset` for one trainer process; see `FmLoader`.

    `batch_size` defaults to the dataset's; given, it becomes the dataset's (which decides the
    placement of samples on workers) unless the dataset already has a different one (refused).
    """
    return FmLoader(
        dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        prefetch_batches=prefetch_batches,
        pin_memory=pin_memory,
        log_every_s=log_every_s,
    )
