"""3. What one trainer process receives from make_loader(batch_size=8, num_workers=W) at
seq_len 2048, what moving batches out of workers costs on its own, and whether the dataset
pickles (what spawn/forkserver workers need)."""

from __future__ import annotations

import multiprocessing
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch.utils.data

from bench.harness import median, median_and_range, met
from bench.loader.plan import Plan
from bench.loader.readers import BATCH, SEED, batch_len
from bench.loader.sets import THROUGHPUT
from fm_loader import make_dataset, make_loader


@dataclass
class Feed:
    first_batch_s: float
    steady_s: float  # batches 2..N
    real_tokens: int  # batches 2..N
    total_tokens: int
    samples: int
    snapshot: dict[str, float]
    steady_stall: float  # share of batches 2..N's wall time spent waiting for a batch


def trainer_feed(workers: int, batches: int, step_s: float = 0.0) -> Feed:
    """A trainer loop over make_loader(batch_size=8): `step_s` of sleep per batch stands in
    for the training step (0: a trainer that only takes batches)."""
    ds = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED)
    loader = make_loader(ds, batch_size=BATCH, num_workers=workers)
    started = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter()
    first_wait = loader.metrics.wait_s
    real = total = samples = 0
    for i, batch in enumerate(it, start=2):
        real += int(batch["num_tokens"].sum())
        total += batch["input_ids"].numel()
        samples += batch_len(batch)
        if step_s:
            time.sleep(step_s)
        if i == batches:
            break
    steady = time.perf_counter() - first
    snapshot = loader.metrics.snapshot()
    stall = (loader.metrics.wait_s - first_wait) / steady
    del it  # stops the loader's workers (or its prefetch thread)
    return Feed(first - started, steady, real, total, samples, snapshot, stall)


class PrebuiltBatches(torch.utils.data.IterableDataset[Any]):
    """Copies of one real batch, no reading: what moving batches out of workers costs alone."""

    def __init__(self, batch: dict[str, Any], count: int, as_numpy: bool) -> None:
        super().__init__()
        self.batch, self.count, self.as_numpy = batch, count, as_numpy

    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        for _ in range(self.count // (info.num_workers if info else 1)):
            # A fresh copy each time: a worker moves each new tensor into shared memory once.
            out = {
                k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in self.batch.items()
            }
            if self.as_numpy:
                out = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in out.items()}
            yield out


def unchanged(batch: Any) -> Any:
    """collate_fn that keeps numpy arrays as they are, so they are pickled through the pipe."""
    return batch


def transfer_only(template: dict[str, Any], batches: int, as_numpy: bool) -> float:
    """Samples/s two DataLoader workers deliver when each batch is a copy of `template`."""
    loader = torch.utils.data.DataLoader(
        PrebuiltBatches(template, batches, as_numpy),
        batch_size=None,
        num_workers=2,
        collate_fn=unchanged if as_numpy else None,
    )
    it = iter(loader)
    next(it)
    started = time.perf_counter()
    count = sum(1 for _ in it)
    elapsed = time.perf_counter() - started
    del it
    return count * BATCH / elapsed


def measure(plan: Plan) -> tuple[dict[str, list[Feed]], dict[str, list[float]]]:
    """The trainer loops, then the transfer-only loops, in the same order every repeat."""
    step = BATCH * THROUGHPUT.seq_len / 1e6  # seconds per batch of a trainer at 1M tokens/s
    paths: dict[str, Callable[[], Feed]] = {
        "workers=2": lambda: trainer_feed(2, plan.feed_batches),
        "workers=0": lambda: trainer_feed(0, plan.feed_batches),
        "workers=2, trainer step = 1M tokens/s": lambda: trainer_feed(
            2, plan.feed_batches // 2, step
        ),
    }
    ds = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED, batch_size=BATCH)
    template = next(ds.batch_stream(0, 1))
    transfers: dict[str, Callable[[], float]] = {
        "tensors (torch default: shared memory, one fd per tensor)": lambda: transfer_only(
            template, plan.feed_batches, False
        ),
        "numpy arrays pickled through the pipe (collate_fn keeps them)": lambda: transfer_only(
            template, plan.feed_batches, True
        ),
    }
    runs: dict[str, list[Feed]] = {name: [] for name in paths}
    rates: dict[str, list[float]] = {name: [] for name in transfers}
    for _ in range(plan.feed_repeats):
        for name, fn in paths.items():
            runs[name].append(fn())
        for name, rate in transfers.items():
            rates[name].append(rate())
    return runs, rates


def pickle_check() -> dict[str, Any]:
    """Does the dataset pickle (what a spawn/forkserver DataLoader needs)?"""
    ds = make_dataset(str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED)
    first = int(next(iter(ds))["sample_index"])  # maps shards: the maps must not travel
    started = time.perf_counter()
    blob = pickle.dumps(ds)
    copy = pickle.loads(blob)
    seconds = time.perf_counter() - started
    same = int(next(iter(copy))["sample_index"]) == first
    return {"bytes": len(blob), "seconds": seconds, "same_first": same}


def section(
    runs: dict[str, list[Feed]], transfers: dict[str, list[float]], pickled: dict[str, Any]
) -> list[str]:
    """Section 3 of the report."""
    seq_len = THROUGHPUT.seq_len
    repeats = len(next(iter(runs.values())))
    lines = [
        f"## 3. What one trainer process receives, seq_len 2048, batch_size {BATCH}",
        "",
        f"`make_loader(make_dataset(dir), batch_size={BATCH}, num_workers=W)` on "
        f"`{THROUGHPUT.directory.name}`. Rates over batches 2..N; the first batch (starting "
        "the workers, each mapping and checking its shards) is shown on its own. The last four "
        "columns are `loader.metrics.snapshot()` at the end of each run (medians): "
        "stall_fraction, prefetch_depth, shard_fetches, shard_fetch_mean_s; the column before "
        "them is the same wait share over batches 2..N only. The third row "
        f"sleeps {BATCH * seq_len / 1e3:.1f} ms per batch, a training step that consumes exactly "
        f"1M tokens/s while the loader works. {repeats} repeats interleaved; medians (min–max). "
        f"DataLoader start method: `{multiprocessing.get_start_method()}` (Linux default).",
        "",
        "| run | batches | first batch s | samples/s | real tokens/s | total tokens/s | "
        "stall fraction | stall after the first batch | prefetch depth | shard fetches | "
        "mean fetch ms |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, feeds in runs.items():
        snap = {k: median([f.snapshot[k] for f in feeds]) for k in feeds[0].snapshot}
        lines.append(
            f"| {name} | {feeds[0].samples // BATCH + 1:,} | "
            f"{median_and_range([f.first_batch_s for f in feeds], '.2f')} | "
            f"{median_and_range([f.samples / f.steady_s for f in feeds], ',.0f')} | "
            f"{median_and_range([f.real_tokens / f.steady_s / 1e6 for f in feeds], '.2f')} M | "
            f"{median_and_range([f.total_tokens / f.steady_s / 1e6 for f in feeds], '.2f')} M | "
            f"{snap['stall_fraction']:.2f} | {median([f.steady_stall for f in feeds]):.2f} | "
            f"{snap['prefetch_depth']:.2f} | "
            f"{snap['shard_fetches']:.0f} | {snap['shard_fetch_mean_s'] * 1e3:.0f} |"
        )
    got = median([f.real_tokens / f.steady_s for f in runs["workers=2"]])
    paced = runs["workers=2, trainer step = 1M tokens/s"]
    paced_rate = median([f.real_tokens / f.steady_s for f in paced])
    paced_stall = median([f.steady_stall for f in paced])
    paced_ms = median([f.steady_s / (f.samples / BATCH) for f in paced]) * 1e3
    lines += [
        "",
        f"Goal ≥ 1M tokens/s to one trainer, workers=2: **{got / 1e6:.2f} M real "
        f"tokens/s** ({met(got >= 1e6)}); a trainer whose step consumes exactly 1M tokens/s "
        f"received {paced_rate / 1e6:.2f} M/s, waiting {paced_stall:.0%} of the time after its "
        f"first batch ({paced_ms:.1f} ms per batch against the {BATCH * seq_len / 1e3:.1f} ms "
        "step: the rest is the loop's own time, `time.sleep` overshoot included). The "
        "snapshot's stall fraction counts the first batch's wait too. "
        "With a trainer that only takes batches the stall fraction is near 1 by construction: "
        "the loader is the bottleneck.",
        "",
        f"What moving batches out of 2 workers costs on its own (each batch a fresh copy of "
        f"one real batch of {BATCH} × 2048: the same 8 tensors and doc ids, no reading); "
        "samples/s, medians (min–max):",
        "",
        "| batches carried as | samples/s | total tokens/s |",
        "|---|--:|--:|",
    ]
    for name, rates in transfers.items():
        lines.append(
            f"| {name} | {median_and_range(rates, ',.0f')} "
            f"| {median(rates) * seq_len / 1e6:.2f} M |"
        )
    lines += [
        "",
        "These are torch DataLoader's two ways; `make_loader`'s own workers use neither "
        "(section 5: one reused shared-memory buffer per batch slot). "
        "For spawn/forkserver (`make_loader(multiprocessing_context=...)`) the dataset must "
        f"pickle: it does, {pickled['bytes'] / 1e3:.0f} kB in {pickled['seconds'] * 1e3:.0f} ms "
        "(memory maps are dropped; a worker re-maps and re-checks its shards, and never "
        "imports mosaicml-streaming), and the copy serves the same first sample "
        f"({pickled['same_first']}).",
        "",
    ]
    return lines
