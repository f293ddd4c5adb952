"""The loader's figures (`LoaderMetrics`) as Prometheus metrics, served by the trainer's process.

    loader = fm_loader.make_loader(dataset, batch_size=8)
    fm_loader.prometheus.serve(loader.metrics, port=9400, rank=rank)   # or:
    prometheus_client.REGISTRY.register(LoaderCollector(loader.metrics, rank=rank))

Counters let Prometheus compute the stall over any window: `rate(fm_loader_wait_seconds_total[10m])
/ rate(fm_loader_elapsed_seconds_total[10m])` is the share of the last ten minutes the trainer
waited for data (deploy/prometheus/alerts.yaml, FmLoaderStalled). Needs `prometheus-client`
(installed with the platform; a trainer installs it beside `fm-platform[loader]`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from fm_loader.metrics import LoaderMetrics


class LoaderCollector:
    """A prometheus_client collector reading one loader's `LoaderMetrics` at each scrape."""

    def __init__(self, metrics: LoaderMetrics, rank: int | None = None) -> None:
        self.metrics = metrics
        self.labels = {"rank": str(rank)} if rank is not None else {}

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        m = self.metrics
        names, values = list(self.labels), list(self.labels.values())
        elapsed = time.perf_counter() - m.started if m.started is not None else 0.0
        snapshot = m.snapshot()
        counters = (
            ("elapsed_seconds", "Wall time since the trainer first asked for data", elapsed),
            ("wait_seconds", "Time the trainer spent blocked waiting for a batch", m.wait_s),
            ("trainer_seconds", "Time between handing a batch over and the next request",
             m.trainer_s),
            ("batches", "Batches handed to the trainer", m.batches),
            ("samples", "Samples handed to the trainer", m.samples),
            ("tokens", "Real (non-padding) tokens handed to the trainer", m.tokens),
            ("shard_fetches", "Shards fetched from the object store", m.fetch_count),
            ("shard_fetch_seconds", "Time spent fetching shards", m.fetch_s_total),
            ("cache_fetched_bytes", "Bytes fetched from the object store into the node cache",
             m.cache_fetched_bytes),
            ("storage_retries", "Object-store reads retried after a transient failure",
             snapshot["storage_retries"]),
        )  # fmt: skip
        for name, help_text, value in counters:
            family = CounterMetricFamily(f"fm_loader_{name}", help_text, labels=names)
            family.add_metric(values, float(value))
            yield family
        gauges = (
            ("stall_fraction", "Share of wall time waited for data since the start",
             snapshot["stall_fraction"]),
            ("prefetch_depth", "Batches ready when the trainer asked, on average",
             snapshot["prefetch_depth"]),
            ("cache_hit_ratio", "Share of remote bytes served from the node's cache",
             snapshot["cache_hit_rate"]),
        )  # fmt: skip
        for name, help_text, value in gauges:
            gauge = GaugeMetricFamily(f"fm_loader_{name}", help_text, labels=names)
            gauge.add_metric(values, float(value))
            yield gauge


def serve(metrics: LoaderMetrics, port: int, addr: str = "0.0.0.0", rank: int | None = None) -> Any:
    """Serve `metrics` on http://addr:port/metrics from a daemon thread of this process; returns
    the server (`.shutdown()` stops it, `.server_port` is the port when `port` was 0)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(LoaderCollector(metrics, rank))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server
