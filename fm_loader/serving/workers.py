"""Worker processes that build a rank's batches in parallel and hand them over in stream order.

Worker w of n builds the rank's batches w, w + n, w + 2n, ... (the dataset's placement,
`FmDataset.batch_stream`) into its shared-memory slots (`fm_loader.serving.transport`); the trainer
takes them round-robin, so it sees the rank's stream in order. A worker that reports its end leaves
the round (with shard sets every other worker then ends at its next turn too; a dataset tokenized in
the loader places whole pack groups, so its workers end at different times).

Why not torch's DataLoader: its per-batch machinery (an index queue per worker with a feeder
thread, a pickled result queue) cost the trainer process about as much CPU as building the batch
did, which on a 2-core host left two workers slower than one process. Here a batch costs the
trainer two semaphore operations and one small unpickle. Workers start with the given
multiprocessing context (fork, spawn, forkserver), run `worker_init_fn(worker_id)` first, use
one torch thread each (as DataLoader workers do) at niceness +5 (below), and stop on their own
when the trainer process goes away.
"""

from __future__ import annotations

import multiprocessing.context
import os
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch

from fm_loader.serving.transport import BATCH, END, BatchSlots, WorkerGone

Batch = dict[str, Any]
_JOIN_S = 5.0
# Workers yield to the trainer process: it is the one a step waits on. At equal priority, on a
# host with no core to spare, a trainer woken for its next batch queued behind busy workers,
# and the workers then stalled with their build-ahead room full. They still take every cycle
# the trainer leaves.
WORKER_NICENESS = 5


class WorkerPool:
    """One epoch of `num_workers` processes serving `dataset`'s batches through `slots`."""

    def __init__(
        self,
        dataset: Any,
        slots: BatchSlots,
        num_workers: int,
        context: multiprocessing.context.BaseContext,
        worker_init_fn: Callable[[int], None] | None,
    ) -> None:
        self.slots, self.num_workers = slots, num_workers
        self.stop = context.Event()
        parent = os.getpid()
        self.processes = [
            context.Process(  # type: ignore[attr-defined]
                target=_serve,
                args=(dataset, slots, w, num_workers, self.stop, parent, worker_init_fn),
                name=f"fm_loader-worker-{w}",
                daemon=True,
            )
            for w in range(num_workers)
        ]
        for process in self.processes:
            process.start()

    def batches(self, pin_memory: bool, on_wait: Callable[[float, int], None]) -> Iterator[Batch]:
        """The rank's batches in order; `on_wait(seconds, ready)` after each wait for one."""
        import time

        live = list(range(self.num_workers))
        turn = 0
        while live:
            worker = live[turn % len(live)]
            depth = sum(self.slots.ready_count(w) for w in live)
            started = time.perf_counter()
            process = self.processes[worker]
            try:
                self.slots.wait(worker, process.is_alive)
            except WorkerGone:
                raise RuntimeError(
                    f"loader worker {worker} (pid {process.pid}) died with exit code "
                    f"{process.exitcode}: killed, or out of memory?"
                ) from None
            status, batch = self.slots.take(worker, pin_memory)
            if status == END:
                live.remove(worker)  # the next live worker's turn is now at `turn`
                continue
            on_wait(time.perf_counter() - started, depth)
            if status != BATCH:
                error, trace = batch
                raise _in_worker(error, trace, worker)
            yield batch
            turn += 1

    def close(self) -> None:
        """Stop the workers (they notice within half a second) and reap them."""
        self.stop.set()
        for process in self.processes:
            process.join(timeout=_JOIN_S)
            if process.is_alive():
                process.terminate()
                process.join()


def _in_worker(error: BaseException, trace: str, worker: int) -> BaseException:
    """The worker's exception, its traceback added to the message (types are kept)."""
    note = f"\n\nin loader worker {worker}:\n{trace}"
    try:
        return type(error)(f"{error}{note}")
    except Exception:  # a type that takes other arguments
        return RuntimeError(f"{type(error).__name__}: {error}{note}")


def _serve(
    dataset: Any,
    slots: BatchSlots,
    worker: int,
    num_workers: int,
    stop: Any,
    parent: int,
    worker_init_fn: Callable[[int], None] | None,
) -> None:
    """A worker's life: build its batches into its slots until the epoch ends or it is stopped."""
    torch.set_num_threads(1)
    os.nice(WORKER_NICENESS)

    def alive() -> bool:
        return not stop.is_set() and os.getppid() == parent

    try:
        if worker_init_fn is not None:
            worker_init_fn(worker)
        # Each batch is built straight into the worker's next free slot.
        for batch in dataset.batch_stream(
            worker, num_workers, arrays=True, out=lambda count: slots.claim(worker, count, alive)
        ):
            batch["shard_fetch_s"] = dataset.take_fetch_latencies()
            batch["shard_refetch_bytes"] = dataset.take_refetched_bytes()
            batch["real_tokens"] = int(batch["num_tokens"].sum())  # here, not in the trainer
            slots.put(worker, batch, alive)
        slots.put_end(worker, alive)
    except WorkerGone:
        return
    except BaseException as error:  # reported to the trainer, which raises it
        if alive():
            slots.put_failure(worker, error, traceback.format_exc())
