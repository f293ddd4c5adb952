"""5. Worker processes: ours (`make_loader`, shared-memory slots) at num_workers 0/1/2 against
upstream StreamingDataset in a torch DataLoader with the same workers, all-in (opening the set,
starting the workers and our first-use sha256 of every shard each worker maps are counted), and
what moving a batch out of two workers costs on its own through our slots. Our fastest
in-process path, the dataset's own `batch_stream()` with no loader around it, runs in the same
rotation: `make_loader(num_workers=0)` is compared with it, and 2 workers with the faster of
the two in-process paths. So is the ceiling of 2 workers on this machine: 2 processes building
exactly the batches the 2 workers build, at once, with no hand-over and no trainer. Each run
records the machine's load while it ran: the 1-minute load average as it started and the cores
the machine's other tenants kept busy meanwhile (all CPU time in `/proc/stat` less this run's
process tree), so a slow repeat can be told from a busy machine."""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.utils.data

from bench.harness import (
    interleave,
    machine_busy_seconds,
    median,
    median_and_range,
    met,
    tree_cpu_seconds,
)
from bench.loader.plan import Plan
from bench.loader.readers import BATCH, SEED, UPSTREAM_SEED, batch_len
from bench.loader.sets import THROUGHPUT
from bench.loader.upstream import close_upstream
from fm_loader import make_dataset, make_loader
from fm_loader.samples.tokens import TokenSamples
from fm_loader.serving.transport import BatchSlots
from fm_loader.serving.workers import WorkerPool

WORKERS = (0, 1, 2)
IN_PROCESS = "ours, in-process `batch_stream()`"
CEILING = "2 processes building the 2 workers' batches, no hand-over"


@dataclass(frozen=True)
class Run:
    samples: int
    all_in_s: float  # from opening the set to the last batch
    first_s: float  # from opening the set to the first batch
    cpu_s: float  # CPU seconds of the whole process tree (workers included)
    load: float  # the 1-minute load average as the run started
    others_cores: float  # cores the machine's other tenants kept busy during the run

    @property
    def steady_s(self) -> float:
        return self.all_in_s - self.first_s


class Machine:
    """The machine's load over one run: read at its start, `others_cores` at its end."""

    def __init__(self) -> None:
        self.load = os.getloadavg()[0]
        self.busy, self.ours = machine_busy_seconds(), tree_cpu_seconds()
        self.started = time.perf_counter()

    def others_cores(self) -> float:
        """Cores busy with other processes than this run's tree since the start, on average.
        Read before the run's children are reaped (they are then still in the tree)."""
        wall = time.perf_counter() - self.started
        theirs = (machine_busy_seconds() - self.busy) - (tree_cpu_seconds() - self.ours)
        return max(0.0, theirs / wall) if wall > 0 else 0.0


def _timed(open_and_iterate: Callable[[], Iterator[Any]], samples: int) -> Run:
    machine = Machine()
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    batches = open_and_iterate()
    got = batch_len(next(batches))
    first = time.perf_counter() - started
    for batch in batches:
        got += batch_len(batch)
        if got >= samples:
            break
    elapsed = time.perf_counter() - started
    cpu_s = tree_cpu_seconds() - cpu  # before the workers are stopped: they are still children
    others = machine.others_cores()
    close = getattr(batches, "close", None)
    if close is not None:
        close()
    return Run(got, elapsed, first, cpu_s, machine.load, others)


def ours(workers: int, samples: int) -> Run:
    def run() -> Iterator[Any]:
        dataset = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED)
        return iter(make_loader(dataset, batch_size=BATCH, num_workers=workers))

    return _timed(run, samples)


def ours_batch_stream(samples: int) -> Run:
    """The dataset's batches built in this process with nothing around them: no counting for
    a checkpoint, no metrics, no prefetch (the fastest way to take batches in one process)."""

    def run() -> Iterator[Any]:
        dataset = make_dataset(
            str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED, batch_size=BATCH
        )
        return dataset.batch_stream(0, 1)

    return _timed(run, samples)


def stack_ids(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The least a trainer does with upstream's samples: input_ids stacked into one tensor, the
    other columns kept as lists."""
    return {
        "input_ids": torch.from_numpy(np.stack([s["input_ids"] for s in samples])),
        "doc_ids": [s["doc_ids"] for s in samples],
        "doc_spans": [s["doc_spans"] for s in samples],
        "sample_index": [0] * len(samples),
    }


def upstream(workers: int, samples: int) -> Run:
    from streaming import StreamingDataset

    handle: list[Any] = []

    def run() -> Iterator[Any]:
        dataset = StreamingDataset(
            local=str(THROUGHPUT.directory),
            shuffle=True,
            batch_size=BATCH,
            shuffle_seed=UPSTREAM_SEED,
        )
        handle.append(dataset)
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=BATCH, num_workers=workers, collate_fn=stack_ids
        )
        return iter(loader)

    result = _timed(run, samples)
    close_upstream(handle.pop())
    return result


def _build_share(worker: int, samples: int, ready: Any, start: Any, done: Any) -> None:
    """In a child process: worker `worker` of 2's batches, its first one before `start`."""
    dataset = make_dataset(
        str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED, batch_size=BATCH
    )
    batches = dataset.batch_stream(worker, 2)
    got = batch_len(next(batches))
    ready.put(worker)
    start.wait()
    for batch in batches:
        got += batch_len(batch)
        if got >= samples // 2:
            break
    done.put(time.perf_counter())


def two_builders(samples: int) -> Run:
    """2 processes each building what worker w of 2 would (fork), from opening the set; the
    clock of the steady part starts when both have their first batch."""
    context = multiprocessing.get_context("fork")
    ready, done, start = context.Queue(), context.Queue(), context.Event()
    machine = Machine()
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    children = [
        context.Process(target=_build_share, args=(w, samples, ready, start, done))
        for w in range(2)
    ]
    for child in children:
        child.start()
    for _ in children:
        ready.get()
    first = time.perf_counter()
    start.set()
    ends = [done.get() for _ in children]
    cpu_s = tree_cpu_seconds() - cpu
    others = machine.others_cores()
    for child in children:
        child.join()
    return Run(samples, max(ends) - started, first - started, cpu_s, machine.load, others)


class PrebuiltBatches:
    """A stand-in dataset for `WorkerPool`: each batch a fresh copy of one real batch, written
    into the worker's slot as a dataset would build it there (no reading, no building)."""

    def __init__(self, template: dict[str, Any], count: int) -> None:
        self.template, self.count = template, count

    def batch_stream(
        self, worker: int, num_workers: int, *, arrays: bool, out: Any = None
    ) -> Iterator[dict[str, Any]]:
        rows = len(self.template["sample_index"])
        for _ in range(self.count // num_workers):
            batch = dict(self.template)
            if out is not None:
                views = out(rows)
                for name, view in views.items():
                    value = self.template[name]
                    if view.shape != value.shape:  # cu_seqlens: not one row per sample
                        continue  # the slot copies it in when the batch is posted
                    np.copyto(view, value)
                    batch[name] = view
            yield batch

    def take_fetch_latencies(self) -> list[float]:
        return []

    def take_refetched_bytes(self) -> int:
        return 0


def slots_transfer(template: dict[str, Any], batches: int) -> float:
    """Samples/s two of our workers hand over when each batch is a copy of `template`."""
    context = multiprocessing.get_context()
    slots = BatchSlots(
        TokenSamples(THROUGHPUT.seq_len).slot_fields(BATCH),
        2,
        2,
        context,
        lend=2,
        tail_bytes=64 << 10,
    )
    pool = WorkerPool(PrebuiltBatches(template, batches), slots, 2, context, None)
    try:
        stream = pool.batches(False, lambda seconds, depth: None)
        next(stream)
        started = time.perf_counter()
        count = sum(1 for _ in stream)
        elapsed = time.perf_counter() - started
    finally:
        pool.close()
    return count * BATCH / elapsed


def measure(plan: Plan) -> tuple[dict[str, list[Run]], list[float]]:
    n = plan.worker_samples
    paths: dict[str, Callable[[], Run]] = {
        IN_PROCESS: lambda: ours_batch_stream(n),
        CEILING: lambda: two_builders(n),
    }
    for workers in WORKERS:
        paths[f"ours, num_workers={workers}"] = lambda w=workers: ours(w, n)
        paths[f"upstream, num_workers={workers}"] = lambda w=workers: upstream(w, n)
    runs = interleave(paths, plan.feed_repeats)
    ds = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED, batch_size=BATCH)
    template = next(ds.batch_stream(0, 1, arrays=True))
    transfers = [slots_transfer(template, plan.feed_batches) for _ in range(plan.feed_repeats)]
    return runs, transfers


def section(runs: dict[str, list[Run]], transfers: list[float], plan: Plan) -> list[str]:
    """Section 5 of the report."""
    tokens = THROUGHPUT.seq_len
    repeats = len(next(iter(runs.values())))
    rate = {k: median([r.samples / r.all_in_s for r in v]) for k, v in runs.items()}
    lines = [
        f"## 5. Worker processes: num_workers 0, 1, 2, ours against upstream, batch_size {BATCH}",
        "",
        f"`make_loader(make_dataset(dir), batch_size={BATCH}, num_workers=W)` against upstream "
        f"`DataLoader(StreamingDataset(local=dir, shuffle=True, batch_size={BATCH}), "
        f"batch_size={BATCH}, num_workers=W)` (its collate_fn stacks input_ids and keeps the "
        f"other columns as lists: the least a trainer does), on `{THROUGHPUT.directory.name}`, "
        f"{plan.worker_samples:,} samples each, {repeats} repeats interleaved, every file in the"
        " page cache. **All-in**: from opening the set to the last batch (the constructor, "
        "starting the workers and our sha256 of every shard a worker maps on first use are "
        "counted); steady: after the first batch. CPU: seconds of the whole process tree "
        "(trainer and workers) per 1,000 samples. Ours hands batches over through shared-memory "
        "slots built in place by its own worker processes (`fm_loader.serving.workers`); "
        "upstream's go through torch's DataLoader (pickled lists, tensors in shared memory one "
        "file descriptor each). Machine load, per run: the 1-minute load average as it started, "
        "and the cores the machine's other tenants kept busy while it ran (of 2; all CPU time in "
        "`/proc/stat` less this run's process tree).",
        "",
        "| path | samples/s all-in | samples/s steady | first batch s | tokens/s all-in | "
        "CPU s / 1k samples | load (1 min) | other tenants' cores |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, values in runs.items():
        cpu = median([r.cpu_s / r.samples * 1e3 for r in values])
        lines.append(
            f"| {name} | {median_and_range([r.samples / r.all_in_s for r in values], ',.0f')} | "
            f"{median_and_range([(r.samples - BATCH) / r.steady_s for r in values], ',.0f')} | "
            f"{median_and_range([r.first_s for r in values], '.2f')} | "
            f"{rate[name] * tokens / 1e6:.2f} M | {cpu:.3f} | "
            f"{median_and_range([r.load for r in values], '.1f')} | "
            f"{median_and_range([r.others_cores for r in values], '.2f')} |"
        )

    def against_upstream(workers: int) -> float:
        return rate[f"ours, num_workers={workers}"] / rate[f"upstream, num_workers={workers}"]

    def paired(
        top: str, *bottoms: str, steady_only: bool = False, per_cpu: bool = False
    ) -> list[float]:
        """Per repeat: `top`'s rate over the fastest of `bottoms` in the same repeat (samples
        per wall second, all-in or steady, or per CPU second of the process tree)."""

        def value(run: Run) -> float:
            if per_cpu:
                return run.samples / run.cpu_s
            if steady_only:
                return (run.samples - BATCH) / run.steady_s
            return run.samples / run.all_in_s

        return [
            value(runs[top][i]) / max(value(runs[b][i]) for b in bottoms) for i in range(repeats)
        ]

    hand_off = paired("ours, num_workers=0", IN_PROCESS)
    hand_off_steady = paired("ours, num_workers=0", IN_PROCESS, steady_only=True)
    hand_off_cpu = paired("ours, num_workers=0", IN_PROCESS, per_cpu=True)
    fastest = (IN_PROCESS, "ours, num_workers=0")
    workers2 = paired("ours, num_workers=2", *fastest)
    workers2_steady = paired("ours, num_workers=2", *fastest, steady_only=True)
    workers2_cpu = paired("ours, num_workers=2", *fastest, per_cpu=True)
    ceiling = paired(CEILING, IN_PROCESS, steady_only=True)
    of_ceiling = paired("ours, num_workers=2", CEILING, steady_only=True)
    lines += [
        "",
        "Ratios per repeat (each against runs of the same repeat), median (min–max). Per CPU "
        "second: samples per CPU second of the whole process tree, all-in, which the machine's "
        "other tenants disturb far less than wall time (for 2 workers it shows what the "
        "hand-over costs in CPU, not the speed-up).",
        "",
        "| ratio | all-in | steady | per CPU second | goal |",
        "|---|--:|--:|--:|---|",
        f"| `make_loader(num_workers=0)` / `batch_stream()` | "
        f"{median_and_range(hand_off, '.2f')} | {median_and_range(hand_off_steady, '.2f')} | "
        f"{median_and_range(hand_off_cpu, '.2f')} | ≥ 0.95: {met(median(hand_off) >= 0.95)} |",
        f"| num_workers=2 / fastest in-process path | {median_and_range(workers2, '.2f')} | "
        f"{median_and_range(workers2_steady, '.2f')} | {median_and_range(workers2_cpu, '.2f')} "
        f"| ≥ 1.0: {met(median(workers2) >= 1.0)} |",
        f"| 2 processes, no hand-over / `batch_stream()`: the machine's ceiling for 2 workers | "
        f"| {median_and_range(ceiling, '.2f')} | | |",
        f"| num_workers=2 / that ceiling: what the hand-over and the trainer's share cost | "
        f"| {median_and_range(of_ceiling, '.2f')} | | |",
        "",
        f"Goals, all-in medians: `make_loader(num_workers=0)` at {median(hand_off):.2f}× "
        f"`batch_stream()` ({_against_goal(median(hand_off), 0.95)}); 2 workers at "
        f"{median(workers2):.2f}× the fastest in-process path "
        f"({_against_goal(median(workers2), 1.0)}). The fastest in-process path is, per "
        "repeat, the faster of `batch_stream()` and `make_loader(num_workers=0)`.",
        "",
        "Against upstream with the same workers, all-in: "
        + ", ".join(f"{w} workers {against_upstream(w):.2f}×" for w in WORKERS)
        + ".",
        "",
        f"Moving copies of one real batch out of 2 of our workers through the slots, no reading"
        f" (compare with section 3's torch transfers): {median_and_range(transfers, ',.0f')} "
        "samples/s.",
        "",
    ]
    return lines


def _against_goal(ratio: float, goal: float) -> str:
    """'goal ≥ X: met', or by how much it is missed."""
    if ratio >= goal:
        return f"goal ≥ {goal:.2f}: met"
    return f"goal ≥ {goal:.2f}: **NOT met**, {1 - ratio / goal:.0%} short"
