"""What the trainer's data feed is doing: stall, step time, throughput, depth, fetches, cache.

`LoaderMetrics` lives in the trainer's process. The data-stall fraction is the share of wall time
(since the first request for data) that the consumer spent blocked waiting for the next batch:
near 0 the loader keeps up, near 1 the trainer is starved. Each step splits into the wait for
its batch and the trainer's own time (from handing a batch over to the next request), so the
figures also say which side is the bottleneck. A log line is emitted to the `fm_loader` logger
every `log_every_s` seconds while batches flow.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from fm_loader.storage.retry import retries_so_far

LOG = logging.getLogger("fm_loader")
STALL_BOUND = 0.05  # above this stall fraction the loader, not the trainer, sets the pace


@dataclass
class LoaderMetrics:
    """Counters updated by the loader; read `snapshot()` for derived figures."""

    log_every_s: float = 60.0
    samples: int = 0
    tokens: int = 0  # real (non-padding) tokens delivered
    batches: int = 0
    wait_s: float = 0.0
    trainer_s: float = 0.0  # between handing a batch over and the next request, summed
    started: float | None = None
    depth_sum: int = 0  # prefetch queue depth seen at each request, summed
    fetch_count: int = 0
    fetch_s_total: float = 0.0
    fetch_s_max: float = 0.0
    cache_warm_bytes: int = 0  # bytes of remote sets found in the node's cache
    cache_fetched_bytes: int = 0  # ... and fetched from the object store (at open or again)
    cache_warmup_s: float = 0.0  # spent fetching when the sets were opened
    synthetic_step_s: float | None = None  # set by `fm_loader.probe`: a step with no loading
    _last_log: float = field(default=0.0, repr=False)
    _handed_at: float | None = field(default=None, repr=False)

    def record_wait(self, seconds: float, depth: int) -> None:
        """One request for a batch: how long it blocked and how many batches were ready."""
        now = time.perf_counter()
        if self.started is None:
            self.started = now - seconds
            self._last_log = now
        if self._handed_at is not None:
            self.trainer_s += max(0.0, now - seconds - self._handed_at)
        self._handed_at = now
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

    def record_cache(self, warm_bytes: int, fetched_bytes: int, warmup_s: float) -> None:
        """What opening one cached set cost (`make_dataset` on a remote set)."""
        self.cache_warm_bytes += warm_bytes
        self.cache_fetched_bytes += fetched_bytes
        self.cache_warmup_s += warmup_s

    def record_refetch(self, fetched_bytes: int) -> None:
        """Cached shards that failed their check when mapped and were fetched again."""
        self.cache_fetched_bytes += fetched_bytes

    def snapshot(self) -> dict[str, float]:
        """Derived figures: stall_fraction, step times, throughput, prefetch_depth, fetches,
        cache hit rate and warm-up time."""
        wall = time.perf_counter() - self.started if self.started is not None else 0.0
        fetches = self.fetch_count
        steps = self.batches
        remote = self.cache_warm_bytes + self.cache_fetched_bytes
        figures = {
            "wall_s": wall,
            "stall_fraction": self.wait_s / wall if wall > 0 else 0.0,
            "samples_per_s": self.samples / wall if wall > 0 else 0.0,
            "tokens_per_s": self.tokens / wall if wall > 0 else 0.0,
            # per step: the whole of it, the wait for the batch, the trainer's own part
            "step_s": wall / steps if steps else 0.0,
            "wait_per_step_s": self.wait_s / steps if steps else 0.0,
            "trainer_per_step_s": self.trainer_s / steps if steps else 0.0,
            "prefetch_depth": self.depth_sum / self.batches if self.batches else 0.0,
            "shard_fetches": float(self.fetch_count),
            "shard_fetch_mean_s": self.fetch_s_total / fetches if fetches else 0.0,
            "shard_fetch_max_s": self.fetch_s_max,
            # object-store reads retried after a transient failure, in this process
            "storage_retries": float(retries_so_far()),
            # share of remote bytes served from the node's cache (1.0: nothing fetched)
            "cache_hit_rate": self.cache_warm_bytes / remote if remote else 1.0,
            "cache_warmup_s": self.cache_warmup_s,
            "cache_fetched_bytes": float(self.cache_fetched_bytes),
        }
        if self.synthetic_step_s is not None:
            figures["synthetic_step_s"] = self.synthetic_step_s
        return figures

    def bottleneck(self) -> str:
        """ "loader" when the trainer waits for data more than 5% of the time, else "trainer"."""
        return "loader" if self.snapshot()["stall_fraction"] > STALL_BOUND else "trainer"

    def log_line(self) -> str:
        s = self.snapshot()
        return (
            f"fm_loader: stall {s['stall_fraction']:.1%} ({self.bottleneck()}-bound) | "
            f"step {s['step_s'] * 1e3:.1f} ms (wait {s['wait_per_step_s'] * 1e3:.1f}) | "
            f"{s['samples_per_s']:,.0f} samples/s | {s['tokens_per_s']:,.0f} tokens/s | "
            f"prefetch depth {s['prefetch_depth']:.1f} | {int(s['shard_fetches'])} shard "
            f"fetches, mean {s['shard_fetch_mean_s'] * 1e3:.1f} ms | cache hit "
            f"{s['cache_hit_rate']:.0%}"
        )
