"""1. Throughput at seq_len 2048 in one process: our per-sample and batch paths, upstream
StreamingDataset shuffled and sequential, and two raw-memmap limits, interleaved."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.harness import interleave, median, median_and_range, met
from bench.loader.plan import Plan
from bench.loader.readers import (
    BATCH,
    Read,
    one,
    ours_batches,
    ours_samples,
    read_timed,
    take,
    upstream_samples,
)
from bench.loader.sets import THROUGHPUT, shard_token_rows
from fm_loader import read_manifest


def limit_memmap_samples(directory: Path, n: int) -> Read:
    """One np.memmap per shard file; each sample's input_ids bytes sliced in order -> int64."""
    manifest = read_manifest(directory)

    def read(_: Any) -> float:
        rows = (
            torch.from_numpy(row.astype(np.int64))
            for shard in manifest.shards
            for row in shard_token_rows(directory / shard.name, manifest.seq_len, 2)
        )
        take(rows, n, one)
        return 0.0

    return read_timed(lambda: None, read)


def limit_flat_batches(flat: Path, seq_len: int, n: int) -> Read:
    """A flat [samples, seq_len] uint16 file, np.memmap'd, read BATCH rows at a time -> int64."""

    def read(_: Any) -> float:
        tokens = np.memmap(flat, dtype=np.uint16, mode="r").reshape(-1, seq_len)
        rows = (
            torch.from_numpy(tokens[a : a + BATCH].astype(np.int64))
            for a in range(0, len(tokens), BATCH)
        )
        take(rows, n, len)
        return 0.0

    return read_timed(lambda: None, read)


THROUGHPUT_PATHS = {
    "ours_sample": "ours, per sample: `for s in make_dataset(dir, shuffle_window=65536)`",
    "ours_sample_w1": "ours, per sample, `shuffle_window=1` (shards permuted, samples in order)",
    "ours_batch": f"ours, batches: `make_loader(ds, batch_size={BATCH}, num_workers=0)`",
    "upstream_shuffle": f"upstream `StreamingDataset(shuffle=True, batch_size={BATCH})`",
    "upstream_sequential": f"upstream `StreamingDataset(shuffle=False, batch_size={BATCH})`",
    "limit_memmap": "limit, per sample: np.memmap per shard file, input_ids bytes in order → int64",
    "limit_flat": f"limit, batches: flat `tofile` token file, np.memmap, {BATCH} rows → int64",
}


def measure(plan: Plan, flat: Path) -> dict[str, list[Read]]:
    """Every path, interleaved, the starting path rotated each repeat."""
    d, seq_len = THROUGHPUT.directory, THROUGHPUT.seq_len
    paths: dict[str, Callable[[int], Read]] = {
        "ours_sample": lambda n: ours_samples(d, 1 << 16, n),
        "ours_sample_w1": lambda n: ours_samples(d, 1, n),
        "ours_batch": lambda n: ours_batches(d, n),
        "upstream_shuffle": lambda n: upstream_samples(d, True, n),
        "upstream_sequential": lambda n: upstream_samples(d, False, n),
        "limit_memmap": lambda n: limit_memmap_samples(d, n),
        "limit_flat": lambda n: limit_flat_batches(flat, seq_len, n),
    }
    for path in paths.values():  # one short untimed pass each: first use of every code path
        path(plan.warm_samples)
    n = plan.measured_samples
    return interleave({name: lambda p=path: p(n) for name, path in paths.items()}, plan.repeats)


def section(reads: dict[str, list[Read]], plan: Plan) -> list[str]:
    """Section 1 of the report."""
    m = read_manifest(THROUGHPUT.directory)
    n, seq_len, eff = plan.measured_samples, m.seq_len, m.packing_efficiency
    rates = {k: [n / r.steady_s for r in v] for k, v in reads.items()}
    cpu_rates = {k: [n / r.cpu_s for r in v] for k, v in reads.items()}
    rate = {k: median(v) for k, v in rates.items()}
    up, up_seq = rate["upstream_shuffle"], rate["upstream_sequential"]
    limit_of = {k: "limit_flat" if k == "ours_batch" else "limit_memmap" for k in rates}
    lines = [
        "## 1. Throughput, seq_len 2048, one process",
        "",
        f"Set `{THROUGHPUT.directory.name}`. Each path opens the set afresh and reads its first "
        f"{n:,} samples; {plan.repeats} repeats, all paths interleaved (first path rotated each "
        f"repeat) after one untimed pass of {plan.warm_samples:,} samples each; every file "
        "already in the page cache. samples/s: medians (min–max). tokens/s = samples/s × 2048 "
        f"(positions, padding included); real tokens/s = that × the set's packing efficiency "
        f"{eff:.3f}. Our first use of each shard in a new dataset maps it and checks its "
        "sha256 (upstream checks nothing by default): that time is taken out of the rate and "
        "shown on its own. `open` = `make_dataset` / the StreamingDataset constructor, not in "
        "the rate either. CPU/wall: process CPU time (all threads) over wall time while reading;"
        " below 1 for a one-thread path means other jobs took the core.",
        "",
        "| path | samples/s | tokens/s | real tokens/s | × upstream shuffled | "
        "× upstream sequential | share of its limit | CPU/wall | open s | map + sha256 s |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for key, label in THROUGHPUT_PATHS.items():
        r = rate[key]
        share = "—" if key.startswith("limit") else f"{r / rate[limit_of[key]]:.1%}"
        cpu_wall = median([x.cpu_s / x.read_s for x in reads[key]])
        verify = median([x.verify_s for x in reads[key]])
        lines.append(
            f"| {label} | {median_and_range(rates[key], ',.0f')} | {r * seq_len / 1e6:.2f} M | "
            f"{r * seq_len * eff / 1e6:.2f} M | {r / up:.2f}× | {r / up_seq:.2f}× | {share} | "
            f"{cpu_wall:.2f} | {median([x.open_s for x in reads[key]]):.3f} | "
            f"{verify:.3f} |"
        )
    sample_ratio, batch_ratio = rate["ours_sample"] / up, rate["ours_batch"] / up
    cpu_ratio = median(cpu_rates["ours_sample"]) / median(cpu_rates["upstream_shuffle"])
    cpu_batch = median(cpu_rates["ours_batch"]) / median(cpu_rates["upstream_shuffle"])
    with_verify = median([n / x.read_s for x in reads["ours_sample"]]) / up
    lines += [
        "",
        f"Goal, ours ≥ 5× upstream (both shuffled, as in training): per-sample path "
        f"**{sample_ratio:.2f}×** ({met(sample_ratio >= 5)}), batch path **{batch_ratio:.2f}×**"
        f" ({met(batch_ratio >= 5)}). Per CPU second instead of wall second: "
        f"{cpu_ratio:.2f}× and {cpu_batch:.2f}×. Counting our first-use sha256 in the rate, the"
        f" per-sample path is {with_verify:.2f}× upstream over these {n:,} samples. Ratio to "
        f"the limit: per-sample path at {rate['ours_sample'] / rate['limit_memmap']:.1%} of the"
        f" per-sample memmap read, batch path at "
        f"{rate['ours_batch'] / rate['limit_flat']:.1%} of the flat-file batch read. The limits"
        " produce input_ids only (int64), in stored order; ours also builds labels, loss_mask,"
        " position_ids, cu_seqlens and doc ids in shuffled order, and upstream decodes all "
        "three MDS columns.",
        "",
    ]
    return lines
