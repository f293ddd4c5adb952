"""What the trainer's data feed is doing: stall fraction, throughput, prefetch depth, fetch latency.

`LoaderMetrics` lives in the trainer's process. The data-stall fraction is the share of wall time
(since the first request for data) that the consumer spent blocked waiting for the next batch:
near 0 the loader keeps up, near 1 the trainer is starved. A log line is emitted to the
`fm_loader` logger every `log_every_s` seconds while batches flow.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from fm_loader.retry import retries_so_far

LOG = logging.getLogger("fm_loader")


@dataclass
class LoaderMetrics:
    """Counters updated by the loader; read `snapshot()` for derived figures."""

    log_every_s: float = 60.0
    samples: int = 0
    tokens: int = 0  # real (non-padding) tokens delivered
    batches: int = 0
    wait_s: float = 0.0
    started: float | None = None
    depth_sum: int = 0  # prefetch queue depth seen at each request, summed
    fetch_count: int = 0
    fetch_s_total: float = 0.0
    fetch_s_max: float = 0.0
    _last_log: float = field(default=0.0, repr=False)

    def record_wait(self, seconds: float, depth: int) -> None:
        """One request for a batch: how long it blocked and how many batches were ready."""
        now = time.perf_counter()
        if self.started is None:
            self.started = now - seconds
            self._last_log = now
        self.wait_s += seconds
        self.depth_sum += depth
        if now - self._last_log >= self.log_every_s:
            self._last_log = now
            LOG.info(self.log_line())

    def record_batch(self, samples: int, tokens: int, fetch_latencies: list[float]) -> None:
        self.batches += 1
        self.samples += samples
        self.tokens += tokens
        for seconds in fetch_latencies:
            self.fetch_count += 1
            self.fetch_s_total += seconds
            self.fetch_s_max = max(self.fetch_s_max, seconds)

    def snapshot(self) -> dict[str, float]:
        """Derived figures: stall_fraction, samples_per_s, tokens_per_s, prefetch_depth, fetch."""
        wall = time.perf_counter() - self.started if self.started is not None else 0.0
        fetches = self.fetch_count
        return {
            "wall_s": wall,
            "stall_fraction": self.wait_s / wall if wall > 0 else 0.0,
            "samples_per_s": self.samples / wall if wall > 0 else 0.0,
            "tokens_per_s": self.tokens / wall if wall > 0 else 0.0,
            "prefetch_depth": self.depth_sum / self.batches if self.batches else 0.0,
            "shard_fetches": float(self.fetch_count),
            "shard_fetch_mean_s": self.fetch_s_total / fetches if fetches else 0.0,
            "shard_fetch_max_s": self.fetch_s_max,
            # object-store reads retried after a transient failure, in this process
            "storage_retries": float(retries_so_far()),
        }

    def log_line(self) -> str:
        s = self.snapshot()
        return (
            f"fm_loader: stall {s['stall_fraction']:.1%} | {s['samples_per_s']:,.0f} samples/s | "
            f"{s['tokens_per_s']:,.0f} tokens/s | prefetch depth {s['prefetch_depth']:.1f} | "
            f"{int(s['shard_fetches'])} shard fetches, mean {s['shard_fetch_mean_s'] * 1e3:.1f} ms"
        )
