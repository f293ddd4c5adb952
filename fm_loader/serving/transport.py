"""Batches from worker processes to the trainer through shared memory: one reused buffer per slot.

Pickling a batch through a pipe copies it three times and costs the trainer a full unpickle per
batch; torch's default instead moves every tensor into a fresh shared-memory block passed by file
descriptor, one per tensor per batch. Here each worker owns a small ring of slots, each one
shared-memory buffer big enough for a whole batch, made once per epoch by the trainer process
before the workers start (inherited by fork, passed by file descriptor once to spawned workers).

    slot = [ header: status, tail bytes | tail: pickled shapes + small values | arrays ... ]

A worker builds a batch's arrays in a free slot, writes the shapes and the small Python values
(doc ids, fetch times) into the slot's tail, notes the slot in its ring of posted slots and
posts its `ready` semaphore; the trainer takes the posted slots in that order. Two semaphores per
worker count its free and its filled slots and a small shared table marks which slots are free
(the trainer may free them out of order): nothing else crosses between the processes (a tail
too big for its area goes through the worker's pipe instead).

The trainer hands the slot's memory itself to the caller as tensors: the slot is free again
when the last tensor (or view of one) of that batch is gone. A trainer that keeps batches
around (a list of them) would starve the workers, so once it holds `lend` slots of a worker,
further batches of that worker are copied out and their slots freed at once. With
`pin_memory=True` every batch is copied into page-locked memory, which frees its slot.

Nothing is named in /dev/shm: torch's file-descriptor sharing unlinks each buffer's name as soon
as it is made, so a killed trainer or worker leaves nothing behind.
"""

from __future__ import annotations

import ctypes
import functools
import math
import multiprocessing
import multiprocessing.connection
import multiprocessing.context
import pickle
import struct
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.multiprocessing  # registers the file-descriptor sharing of tensors for spawn

from fm_loader.samples.kind import Field

_ALIGN = 64
_HEADER = 64  # bytes: int64 status, int64 tail length
_HEAD = struct.Struct("<qq")
BATCH, END, FAILED, TAIL_IN_PIPE = 0, 1, 2, 3


class WorkerGone(RuntimeError):
    """A wait was abandoned because the other side stopped (`alive()` returned False)."""


class BatchSlots:
    """Shared-memory slots for the batches of `num_workers` workers (made per epoch)."""

    def __init__(
        self,
        fields: Mapping[str, Field],
        num_workers: int,
        ahead: int,
        context: multiprocessing.context.BaseContext,
        *,
        lend: int,
        tail_bytes: int,
    ) -> None:
        """`ahead`: batches a worker may have filled and not yet taken; `lend`: slots per worker
        the trainer may hand out without copying; `tail_bytes`: room for a batch's pickled
        small values. Each worker gets `ahead + lend + 1` slots: it never waits for memory."""
        slots_per_worker = ahead + lend + 1  # one spare: a worker waits on `room` alone
        self.fields = dict(fields)
        # name -> (byte offset in a slot, numpy dtype, item size)
        self.places: dict[str, tuple[int, np.dtype[Any], int]] = {}
        self.tail_bytes = tail_bytes
        at = _HEADER + -(-tail_bytes // _ALIGN) * _ALIGN
        for name, field in self.fields.items():
            self.places[name] = (at, np.dtype(field.dtype), field.itemsize)
            at += -(-field.max_bytes // _ALIGN) * _ALIGN
        self.slot_bytes = at
        self.slots_per_worker = slots_per_worker
        # Every field is built in place from its start (a prefix of its largest shape).
        self._rows = tuple(self.fields)
        # One buffer per (worker, slot); share_memory_() unlinks the name at once.
        self.buffers = [
            [_shared(torch.empty(at, dtype=torch.uint8)) for _ in range(slots_per_worker)]
            for _ in range(num_workers)
        ]
        self.room = [context.Semaphore(ahead) for _ in range(num_workers)]  # built, not taken
        self.free = [context.Semaphore(slots_per_worker) for _ in range(num_workers)]
        self.ready = [context.Semaphore(0) for _ in range(num_workers)]
        pipes = [context.Pipe(duplex=False) for _ in range(num_workers)]
        self.tail_readers = [r for r, _ in pipes]
        self.tail_writers = [w for _, w in pipes]
        self.lend = lend
        # Per worker: slot in use (1) or free (0), then the ring of posted slot numbers.
        self.table = _shared(torch.zeros(num_workers, 2 * slots_per_worker, dtype=torch.int64))
        self._posted = [0] * num_workers  # worker side: batches posted; trainer side: taken
        self._lent = [0] * num_workers  # trainer side: slots whose batch the caller still holds
        self._lock = threading.Lock()
        # This process's numpy views: of each slot, and of each field of a slot at its largest.
        self._raw: dict[tuple[int, int], npt.NDArray[Any]] = {}
        self._views: dict[tuple[int, int], dict[str, npt.NDArray[Any]]] = {}
        self._claimed: int | None = None  # worker side: the slot claimed, not posted yet

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]  # trainer-side bookkeeping: spawned workers never use it
        # Numpy views of the buffers would pickle as copies: each process makes its own.
        state["_raw"], state["_views"] = {}, {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _table(self) -> npt.NDArray[np.int64]:
        table = self._raw.get((-1, -1))
        if table is None:
            table = self._raw[(-1, -1)] = self.table.numpy()
        return table  # type: ignore[return-value]

    def _slot(self, worker: int, slot: int) -> npt.NDArray[np.uint8]:
        raw = self._raw.get((worker, slot))
        if raw is None:
            raw = self._raw[(worker, slot)] = self.buffers[worker][slot].numpy()
        return raw

    def _slice(self, raw: npt.NDArray[Any], name: str, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        start, dtype, itemsize = self.places[name]
        return raw[start : start + math.prod(shape) * itemsize].view(dtype).reshape(shape)

    def _field_views(self, worker: int, slot: int) -> dict[str, npt.NDArray[Any]]:
        """Every field of a slot at its largest shape (made once: a batch takes a prefix)."""
        views = self._views.get((worker, slot))
        if views is None:
            raw = self._slot(worker, slot)
            views = {name: self._slice(raw, name, f.max_shape) for name, f in self.fields.items()}
            self._views[(worker, slot)] = views
        return views

    # -- worker side --------------------------------------------------------------------
    def claim(
        self, worker: int, count: int, alive: Callable[[], bool]
    ) -> dict[str, npt.NDArray[Any]]:
        """Wait for this worker's next free slot; its [count, ...] arrays to build into."""
        slot = self._claimed = self._claim(worker, alive)
        views = self._field_views(worker, slot)
        return {name: views[name][:count] for name in self._rows}

    def put(self, worker: int, batch: dict[str, Any], alive: Callable[[], bool]) -> None:
        """Post a batch in this worker's claimed slot (`claim`), or in its next free one: arrays
        already built in the slot stay, other arrays the layout holds are copied in."""
        slot = self._claimed if self._claimed is not None else self._claim(worker, alive)
        self._claimed = None
        raw, views = self._slot(worker, slot), self._field_views(worker, slot)
        shapes: dict[str, tuple[int, ...]] = {}
        small: dict[str, Any] = {}
        for name, value in batch.items():
            full = views.get(name)
            if full is None or not isinstance(value, np.ndarray) or value.ndim != full.ndim:
                small[name] = value  # small values, or an array the layout does not know
                continue
            shape = value.shape
            if shape[1:] == full.shape[1:] and shape[0] <= full.shape[0]:
                target = full[: shape[0]]
            elif all(n <= m for n, m in zip(shape, full.shape, strict=True)):
                target = self._slice(raw, name, shape)
            else:
                small[name] = value  # larger than the layout holds: it travels pickled
                continue
            if (
                value.base is not raw  # not a view of this slot: certainly not built in place
                or value.dtype != target.dtype
                or value.ctypes.data != target.ctypes.data
            ):
                np.copyto(target, value, casting="unsafe")
            shapes[name] = shape
        self._post(worker, slot, BATCH, pickle.dumps((shapes, small), protocol=5))

    def put_end(self, worker: int, alive: Callable[[], bool]) -> None:
        self._post(worker, self._claim(worker, alive), END, b"")

    def put_failure(self, worker: int, error: BaseException, trace: str) -> None:
        """Report the worker's exception (waiting for a slot at most a few seconds)."""
        try:
            slot = self._claim(worker, lambda: True, give_up_s=5.0)
        except WorkerGone:
            return
        try:
            payload = pickle.dumps((error, trace))
        except Exception:  # an exception that does not pickle: keep its text
            payload = pickle.dumps((RuntimeError(f"{type(error).__name__}: {error}"), trace))
        self._post(worker, slot, FAILED, payload)

    def _claim(self, worker: int, alive: Callable[[], bool], give_up_s: float | None = None) -> int:
        """The number of this worker's next free slot, marked in use."""
        if not alive():
            raise WorkerGone(f"worker {worker}: stopped")
        waited = 0.0
        for semaphore in (self.room[worker], self.free[worker]):
            while not semaphore.acquire(timeout=0.5):
                waited += 0.5
                if not alive() or (give_up_s is not None and waited >= give_up_s):
                    raise WorkerGone(f"worker {worker}: no free batch slot, the trainer is gone")
        in_use = self._table()[worker][: self.slots_per_worker]
        slot = int(np.flatnonzero(in_use == 0)[0])  # the semaphore says one is free
        in_use[slot] = 1
        return slot

    def _post(self, worker: int, slot: int, status: int, tail: bytes) -> None:
        count = self.slots_per_worker
        self._table()[worker, count + self._posted[worker] % count] = slot
        self._posted[worker] += 1
        raw = self._slot(worker, slot)
        if len(tail) <= self.tail_bytes:
            raw[_HEADER : _HEADER + len(tail)] = np.frombuffer(tail, np.uint8)
            _HEAD.pack_into(raw.data, 0, status, len(tail))
            self.ready[worker].release()
        else:  # rare (thousands of documents in one batch): the tail goes through the pipe
            _HEAD.pack_into(raw.data, 0, TAIL_IN_PIPE, status)
            self.ready[worker].release()
            self.tail_writers[worker].send_bytes(tail)

    # -- trainer side -------------------------------------------------------------------
    def ready_count(self, worker: int) -> int:
        """Batches of `worker` filled and not yet taken (prefetch depth)."""
        try:
            return int(self.ready[worker].get_value())
        except NotImplementedError:  # macOS has no sem_getvalue
            return 0

    def wait(self, worker: int, alive: Callable[[], bool]) -> None:
        """Block until `worker` has posted its next slot; WorkerGone if it died first."""
        while not self.ready[worker].acquire(timeout=0.2):
            if not alive():
                if self.ready[worker].acquire(block=False):  # posted just before it ended
                    return
                raise WorkerGone(f"loader worker {worker} ended without a word")

    def take(self, worker: int, pin_memory: bool) -> tuple[int, Any]:
        """(status, batch) of `worker`'s next slot, after `wait`. For a batch: tensors over the
        slot's memory (freed when the caller drops them) or a copy (pinned memory, or too
        many slots held) freed at once. For END: None; for FAILED: (exception, trace)."""
        count = self.slots_per_worker
        slot = int(self._table()[worker, count + self._posted[worker] % count])
        self._posted[worker] += 1
        raw = self._slot(worker, slot)
        status, length = _HEAD.unpack_from(raw.data, 0)
        self.room[worker].release()  # taken: the worker may build one more ahead
        tail: Any
        if status == TAIL_IN_PIPE:
            status, tail = length, self.tail_readers[worker].recv_bytes()
        else:
            tail = raw[_HEADER : _HEADER + length]  # read before the slot is freed
        if status != BATCH:
            self._free(worker, slot)
            return status, pickle.loads(tail) if status == FAILED else None
        shapes, batch = pickle.loads(tail)
        with self._lock:
            lending = not pin_memory and self._lent[worker] < self.lend
            if lending:
                self._lent[worker] += 1
        if lending:
            # A fresh owner of the slot's memory: every tensor of the batch keeps it alive, so it
            # dies with the last of them, freeing the slot.
            buffer = self.buffers[worker][slot]
            lease: Any = _lease_type(self.slot_bytes).from_address(buffer.data_ptr())
            lease.buffer = buffer  # the shared memory stays mapped while anything uses it
            weakref.finalize(lease, self._give_back, worker, slot)
            leased = np.frombuffer(lease, dtype=np.uint8)
            for name, shape in shapes.items():
                batch[name] = torch.from_numpy(self._slice(leased, name, shape))
        else:
            try:
                for name, shape in shapes.items():
                    source = torch.from_numpy(self._slice(raw, name, shape))
                    out = torch.empty(source.shape, dtype=source.dtype, pin_memory=pin_memory)
                    out.copy_(source)
                    batch[name] = out
            finally:
                self._free(worker, slot)
        for name, value in batch.items():
            if isinstance(value, np.ndarray):
                batch[name] = torch.from_numpy(value)
        return BATCH, batch

    def _give_back(self, worker: int, slot: int) -> None:
        with self._lock:
            self._lent[worker] -= 1
        self._free(worker, slot)

    def _free(self, worker: int, slot: int) -> None:
        self._table()[worker][slot] = 0  # before the semaphore: the worker then sees it
        self.free[worker].release()


def _shared(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor moved into shared memory (file-descriptor backed, no name left in /dev/shm)."""
    shared: torch.Tensor = tensor.share_memory_()  # type: ignore[no-untyped-call]
    return shared


@functools.cache
def _lease_type(size: int) -> type[ctypes.Array[ctypes.c_uint8]]:
    """A ctypes byte array type of `size` whose instances take attributes."""
    return type("SlotLease", (ctypes.c_uint8 * size,), {})


def start_method_context(
    context: str | multiprocessing.context.BaseContext | None,
) -> multiprocessing.context.BaseContext:
    """The multiprocessing context workers run in (the platform's default if None)."""
    if context is None:
        return multiprocessing.get_context()
    if isinstance(context, str):
        return multiprocessing.get_context(context)
    return context


def pinned_memory_available(asked: bool) -> bool:
    """Pinned (page-locked) host memory makes host-to-device copies asynchronous; it needs an
    accelerator. Asked for without one, it is skipped with a warning, as torch's DataLoader does."""
    if not asked:
        return False
    if torch.cuda.is_available():
        return True
    warnings.warn(
        "make_loader(pin_memory=True) but no CUDA device is available: batches stay in pageable "
        "memory",
        stacklevel=3,
    )
    return False
