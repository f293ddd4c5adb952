"""Where our time goes: the per-sample path by block size and torch thread count, the batch
path with and without the DataLoader, one torch comparison, and cProfile of our paths."""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.harness import median, median_and_range, rotation
from bench.loader.feed import Feed
from bench.loader.plan import Plan
from bench.loader.readers import (
    BATCH,
    SEED,
    batch_len,
    one,
    ours_batches,
    ours_samples,
    read_timed,
    take,
)
from bench.loader.sets import THROUGHPUT
from fm_loader import make_dataset
from fm_loader.samples.tokens import Block

ProfileRows = list[tuple[str, int, float, float]]  # function, calls, own s, cumulative s
Profiles = dict[str, tuple[int, float, ProfileRows]]  # name: (samples, seconds, rows)
Diagnostics = tuple[dict[str, list[float]], dict[str, list[float]]]  # rates, compare seconds
BLOCK_SIZES = (8, 16, 32, 128)  # 128: fm_loader's current block for the per-sample path


def with_threads(threads: int, fn: Callable[[], float]) -> float:
    """fn() with torch's intra-op thread count set to `threads` for the call."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn()
    finally:
        torch.set_num_threads(before)


def per_sample_with_block(block: int, n: int) -> float:
    """Samples/s of `for s in ds` with fm_loader building `block` samples at a time.

    Sets the module's private `_SAMPLES_PER_BLOCK` (read at each `__iter__`) for this call
    only: a diagnostic for the lead, not an API.
    """
    import fm_loader.serving.dataset as fm_dataset

    original = fm_dataset._SAMPLES_PER_BLOCK
    fm_dataset._SAMPLES_PER_BLOCK = block
    try:
        read = ours_samples(THROUGHPUT.directory, 1 << 16, n)
    finally:
        fm_dataset._SAMPLES_PER_BLOCK = original
    return n / read.steady_s


def batch_stream_rate(n: int) -> float:
    """Samples/s of `ds.batch_stream()` in this process: the loader's batches, no DataLoader."""

    def read(ds: Any) -> float:
        take(ds.batch_stream(0, 1), n, batch_len)
        return sum(ds.take_fetch_latencies())

    result = read_timed(
        lambda: make_dataset(
            str(THROUGHPUT.directory), rank=0, world_size=1, seed=SEED, batch_size=BATCH
        ),
        read,
    )
    return n / result.steady_s


def compare_seconds(elements: int) -> list[float]:
    """Seconds of each of 100 `tensor != -100` on `elements` int64s (Block's loss_mask op),
    2 ms apart, as between blocks."""
    tensor = torch.zeros(elements, dtype=torch.int64)
    times = []
    for _ in range(100):
        time.sleep(0.002)
        started = time.perf_counter()
        _ = tensor != -100
        times.append(time.perf_counter() - started)
    return times


def side_by_side(plan: Plan) -> Diagnostics:
    """Side by side, interleaved: the per-sample path by block size and torch thread count, the
    batch path with and without the DataLoader around it, and one torch comparison."""
    n = plan.profile_samples
    default = torch.get_num_threads()
    paths: dict[str, Callable[[], float]] = {}
    for threads in (default, 1):
        for b in BLOCK_SIZES:
            name = f"`for s in ds`, blocks of {b}{' (current)' if b == 128 else ''}, "
            paths[name + f"torch threads {threads}"] = lambda b=b, t=threads: with_threads(
                t, lambda: per_sample_with_block(b, n)
            )
    paths[f"`ds.batch_stream()`, batches of {BATCH}, no DataLoader"] = lambda: batch_stream_rate(n)
    for threads in (default, 1):
        paths[f"`make_loader(ds, batch_size={BATCH}, num_workers=0)`, torch threads {threads}"] = (
            lambda t=threads: with_threads(
                t, lambda: n / ours_batches(THROUGHPUT.directory, n).steady_s
            )
        )
    compares: dict[str, Callable[[], float]] = {
        f"{elements:,} elements, torch threads {threads}": (
            lambda e=elements, t=threads: with_threads(t, lambda: compare_seconds(e))
        )
        for elements in (1 << 15, 128 * THROUGHPUT.seq_len)
        for threads in (default, 1)
    }
    names = list(paths)
    rates: dict[str, list[float]] = {name: [] for name in names}
    seconds: dict[str, list[float]] = {name: [] for name in compares}  # every call
    for r in range(plan.feed_repeats + 1):
        for name in rotation(names, r):
            rates[name].append(paths[name]())
        for name, fn in compares.items():
            seconds[name] += fn()
    return rates, seconds


def profile_ours(n: int, window: int, batches: bool) -> tuple[float, ProfileRows]:
    """cProfile of our per-sample iteration or of `batch_stream` (what a DataLoader worker
    runs) over n samples, shards already mapped and verified; the top entries by own time."""
    ds = make_dataset(
        str(THROUGHPUT.directory),
        rank=0,
        world_size=1,
        seed=SEED,
        shuffle_window=window,
        batch_size=BATCH,
    )

    def run() -> None:
        if batches:
            take(ds.batch_stream(0, 1), n, batch_len)
        else:
            take(iter(ds), n, one)

    run()  # maps and verifies the shards outside the profile
    profiler = cProfile.Profile()
    profiler.enable()
    run()
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = []
    for (path, line, func), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(path).name}:{line}({func})" if line else func
        rows.append((where, calls, own, cumulative))
    rows.sort(key=lambda r: -r[2])
    return stats.total_tt, rows  # type: ignore[attr-defined]


def measure(plan: Plan) -> tuple[Diagnostics, Profiles]:
    """The side-by-side diagnostics, then cProfile of our three paths."""
    diag = side_by_side(plan)
    n = plan.profile_samples
    profiles = {
        "per-sample path, `for s in ds` (shuffle_window 65536)": (
            n,
            *profile_ours(n, 1 << 16, batches=False),
        ),
        "per-sample path, shuffle_window=1": (n // 4, *profile_ours(n // 4, 1, batches=False)),
        f"`ds.batch_stream()`, batch_size {BATCH} (what each DataLoader worker runs)": (
            n,
            *profile_ours(n, 1 << 16, batches=True),
        ),
    }
    return diag, profiles


def cumulative_of(rows: ProfileRows, name: str) -> float:
    """Cumulative seconds of the profiled function whose label ends with `name`."""
    return sum(cum for where, _, _, cum in rows if where.endswith(name))


def section(
    profiles: Profiles,
    diag: Diagnostics,
    transfers: dict[str, list[float]],
    feeds: dict[str, list[Feed]],
) -> list[str]:
    """The "where the time goes" section of the report."""
    (_, total1, rows1), (_, total_w1, rows_w1), _ = profiles.values()
    rates, compares = diag
    rate = {k: median(v) for k, v in rates.items()}
    default = torch.get_num_threads()

    def block_rate(block: int, threads: int) -> float:
        return next(
            r for k, r in rate.items() if f"blocks of {block}" in k and k.endswith(f" {threads}")
        )

    def compare_us(elements: int, threads: int, q: float = 0.5) -> float:
        values = sorted(compares[f"{elements:,} elements, torch threads {threads}"])
        return values[min(len(values) - 1, int(q * len(values)))] * 1e6

    stream_rate = next(r for k, r in rate.items() if "batch_stream" in k)
    loader_rate = next(
        r for k, r in rate.items() if "make_loader" in k and k.endswith(f" {default}")
    )
    loader_rate1 = next(r for k, r in rate.items() if "make_loader" in k and k.endswith(" 1"))
    best_block = max(BLOCK_SIZES, key=lambda b: block_rate(b, 1))
    tensor_rate, numpy_rate = (median(v) for v in transfers.values())
    workers2 = median([f.samples / f.steady_s for f in feeds["workers=2"]])
    workers0 = median([f.samples / f.steady_s for f in feeds["workers=0"]])
    fetch_ms = median([f.snapshot["shard_fetch_mean_s"] for f in feeds["workers=0"]]) * 1e3
    block_init = f"blocks.py:{Block.__init__.__code__.co_firstlineno}(__init__)"
    init = cumulative_of(rows1, block_init) / total1
    read_raw = cumulative_of(rows1, "(read_raw)") / total1
    sample = cumulative_of(rows1, "(sample)") / total1
    sample_ids = cumulative_of(rows_w1, "(sample_ids)") / total_w1
    permutation = cumulative_of(rows_w1, "(permutation)") / total_w1
    block_elements = 128 * THROUGHPUT.seq_len
    lines = [
        "## Where the time goes",
        "",
        "Measured side by side in this run (samples/s of seq_len 2048, medians (min–max), "
        f"{len(next(iter(rates.values())))} repeats interleaved, shard checks taken out as in "
        f"section 1; torch's default here is {default} intra-op threads; the block size is "
        "fm_loader's private `_SAMPLES_PER_BLOCK`, set for this diagnostic only):",
        "",
        "| path | samples/s |",
        "|---|--:|",
    ]
    lines += [f"| {name} | {median_and_range(values, ',.0f')} |" for name, values in rates.items()]
    lines += [
        "",
        "`tensor != -100` on int64 tensors (the op that makes `loss_mask`), calls 2 ms apart "
        "as between blocks, all repeats pooled, µs:",
        "",
        "| tensor | median | 90th percentile | max |",
        "|---|--:|--:|--:|",
    ]
    for name, values in compares.items():
        ordered = sorted(values)
        lines.append(
            f"| {name} | {median(values) * 1e6:,.0f} | "
            f"{ordered[int(0.9 * len(ordered))] * 1e6:,.0f} | {ordered[-1] * 1e6:,.0f} |"
        )
    lines += [
        "",
        f"1. **Per-sample path and torch's intra-op threads.** The block build is numpy only "
        "(torch splits element-wise ops over its intra-op threads above 32,768 elements, which "
        f"the comparison table above shows costing {compare_us(block_elements, default, 0.9):,.0f}"
        f" µs at the 90th percentile with {default} threads against "
        f"{compare_us(block_elements, 1, 0.9):,.0f} µs with 1 on this shared machine). "
        f"Per-sample rate with 128-sample blocks: {block_rate(128, default):,.0f} samples/s with "
        f"{default} torch threads, {block_rate(128, 1):,.0f} with 1; best block size with one "
        f"thread {best_block} ({block_rate(best_block, 1):,.0f} samples/s).",
        f"2. In the profile below (default threads), `Block.__init__` is {init:.0%} of the "
        f"per-sample path (cumulative), `ShardSet.read_raw` {read_raw:.0%} (per sample: a view "
        f"of the tokens, the doc ids and the spans read in place) and `Block.sample` "
        f"{sample:.0%}.",
        f"3. **Batch path:** `batch_stream` bare gives {stream_rate:,.0f} samples/s, "
        f"`make_loader(num_workers=0)` {loader_rate:,.0f} ({loader_rate1:,.0f} with one torch "
        "thread): without workers the trainer's thread builds each batch (a background thread "
        "builds ahead only while the trainer idles, which this loop never does), so the "
        "difference is the loader's own work per batch: counting it for the checkpoint, the "
        "metrics and the tensors' hand-over.",
        f"4. **num_workers=2:** {workers2:,.0f} samples/s against {workers0:,.0f} with none. "
        f"Moving copies of one prebuilt batch out of 2 workers, no reading: {tensor_rate:,.0f} "
        "samples/s as torch tensors (one shared-memory block per tensor, passed by file "
        f"descriptor) against {numpy_rate:,.0f} as numpy arrays pickled through the pipe "
        f"({numpy_rate / tensor_rate:.1f}×); `make_loader` uses neither: its workers build "
        "each batch in a reused shared-memory slot (section 5).",
        f"5. **Small shuffle windows:** with `shuffle_window=1`, `SourceOrder.sample_ids` is "
        f"{sample_ids:.0%} of the time and `permutation` {permutation:.0%} (positions are "
        "grouped by window once per chunk; one-sample windows draw no permutation).",
        "6. **Resume** meets its requirement. What remains is the sha256 of each shard on its "
        f"first use in a process (mean {fetch_ms:.0f} ms per 64 MB shard in section 3) and, "
        "for mixtures, `state_dict` walking the quota schedule position by position in Python "
        "(section 2).",
        "",
        "cProfile of our paths on the same set, shards already mapped and checked (a first "
        "untimed pass), so this is the steady state. The profiler adds its own overhead to every"
        " Python call: read the shares, not the µs. Top entries by own time.",
        "",
    ]
    for name, (n, total, rows) in profiles.items():
        lines += [
            f"**{name}**: {n:,} samples, {total:.2f} s profiled, {total / n * 1e6:.0f} µs per "
            "sample",
            "",
            "| function | calls | own s | share | cumulative s |",
            "|---|--:|--:|--:|--:|",
        ]
        for where, calls, own, cumulative in rows[:12]:
            lines.append(
                f"| `{where}` | {calls:,} | {own:.3f} | {own / total:.1%} | {cumulative:.3f} |"
            )
        lines.append("")
    return lines
