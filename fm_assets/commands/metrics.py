"""`fm metrics serve`: the platform's Prometheus metrics, read at each scrape from what it already
keeps (no process of the platform needs to push anything):

- per stage, from the catalog's bookkeeping (`fm_stage_runs`): committed runs, records in, kept
  and quarantined (counters) and the last commit's time;
- per asset and check (`fm_check_results`): evaluations passed and failed, and the partitions
  whose latest evaluation failed;
- from the Dagster instance: runs by status (the queue's depth is `QUEUED`), the oldest queued
  run's age, and each finished run's step durations and step failures (a histogram per stage,
  read once per run when the run ends; runs that ended before the exporter started are read
  back `lookback` seconds);
- `fm_metrics_source_up{source}`: 0 while the catalog or Dagster's storage does not answer (the
  other source's metrics are still served).

The trainer side (stall, throughput, prefetch depth) is exposed by the trainer process itself:
`fm_loader.prometheus`. Alert rules over both: deploy/prometheus/alerts.yaml.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import click

from fm_assets.settings import Settings, load_settings

LOG = logging.getLogger("fm.metrics")
# Stage durations: from seconds (a small batch's stage) to hours (a large one's near dedup).
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, float("inf"))
RUN_STATUSES = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")


@dataclass
class _Durations:
    """Step durations of finished runs, accumulated as a histogram per stage."""

    buckets: dict[str, list[int]] = field(default_factory=dict)
    sums: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)  # run id -> its end, for pruning

    def observe(self, stage: str, seconds: float) -> None:
        counts = self.buckets.setdefault(stage, [0] * len(DURATION_BUCKETS))
        for i, bound in enumerate(DURATION_BUCKETS):
            if seconds <= bound:
                counts[i] += 1
        self.sums[stage] = self.sums.get(stage, 0.0) + seconds


class PlatformCollector:
    """A prometheus_client collector over the platform's bookkeeping and Dagster instance."""

    def __init__(self, settings: Settings, lookback_s: float = 3600.0) -> None:
        self.settings = settings
        self.since = time.time() - lookback_s
        self.durations = _Durations()
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        up = GaugeMetricFamily(
            "fm_metrics_source_up", "1 when the source answered this scrape", labels=["source"]
        )
        for source, families in (("catalog", self._catalog), ("dagster", self._dagster)):
            try:
                with self._lock:  # one scrape at a time reads and updates the run cursor
                    produced = list(families())
            except Exception as exc:  # a source that does not answer: say so, serve the rest
                LOG.warning("metrics: %s did not answer: %s", source, exc)
                up.add_metric([source], 0)
                continue
            up.add_metric([source], 1)
            yield from produced
        yield up

    def _catalog(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from fm_assets.storage.bookkeeping import check_totals, stage_totals

        runs = CounterMetricFamily(
            "fm_stage_runs",
            "Stage runs committed (a batch's stage, once per content key)",
            labels=["stage"],
        )
        records = CounterMetricFamily(
            "fm_stage_records",
            "Records of committed stage runs: in = kept + quarantined",
            labels=["stage", "outcome"],
        )
        last = GaugeMetricFamily(
            "fm_stage_last_commit_timestamp_seconds",
            "When the stage last committed",
            labels=["stage"],
        )
        for row in stage_totals(self.settings):
            stage = row["stage"]
            runs.add_metric([stage], int(row["runs"]))
            for outcome in ("in", "kept", "quarantined"):
                records.add_metric([stage, outcome], int(row[f"records_{outcome}"] or 0))
            last.add_metric([stage], row["last_commit"].timestamp())
        checks = CounterMetricFamily(
            "fm_check_evaluations", "Data check evaluations", labels=["asset", "check", "result"]
        )
        failing = GaugeMetricFamily(
            "fm_check_failing_partitions",
            "Partitions whose latest evaluation of the check failed",
            labels=["asset", "check"],
        )
        for row in check_totals(self.settings):
            for result in ("passed", "failed"):
                checks.add_metric([row["asset"], row["check"], result], row[result])
            failing.add_metric([row["asset"], row["check"]], row["failing"])
        yield from (runs, records, last, checks, failing)

    def _dagster(self) -> Iterator[Any]:
        from dagster import DagsterRunStatus, RunsFilter
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        from fm_assets.defs.materialize import dagster_instance

        instance = dagster_instance(self.settings)
        by_status = GaugeMetricFamily(
            "fm_dagster_runs",
            "Dagster runs by status (QUEUED: the queue's depth)",
            labels=["status"],
        )
        for status in RUN_STATUSES:
            count = instance.get_runs_count(RunsFilter(statuses=[DagsterRunStatus(status)]))
            by_status.add_metric([status], count)
        oldest = GaugeMetricFamily(
            "fm_dagster_oldest_queued_run_age_seconds",
            "How long the oldest queued run has waited (0: none waits)",
        )
        queued = instance.get_run_records(
            RunsFilter(statuses=[DagsterRunStatus.QUEUED]),
            limit=1,
            order_by="create_timestamp",
            ascending=True,
        )
        oldest.add_metric([], time.time() - queued[0].create_timestamp.timestamp() if queued else 0)
        self._read_finished_runs(instance)
        histogram = HistogramMetricFamily(
            "fm_stage_duration_seconds",
            "Wall time of each stage's Dagster step, per finished run",
            labels=["stage"],
        )
        for stage, counts in sorted(self.durations.buckets.items()):
            bounds = [
                ("+Inf" if bound == float("inf") else str(bound), n)
                for bound, n in zip(DURATION_BUCKETS, counts, strict=True)
            ]
            histogram.add_metric([stage], bounds, self.durations.sums[stage])
        failures = CounterMetricFamily(
            "fm_stage_failures", "Failed Dagster steps per stage", labels=["stage"]
        )
        # Zero for every stage seen: a counter that first appears at 1 hides that failure
        # from increase().
        for stage in sorted(set(self.durations.buckets) | set(self.durations.failures)):
            failures.add_metric([stage], self.durations.failures.get(stage, 0))
        yield from (by_status, oldest, histogram, failures)

    def _read_finished_runs(self, instance: Any) -> None:
        """Fold the step events of runs that finished since the last scrape into the
        histogram, each run once."""
        import datetime as dt

        from dagster import DagsterEventType, DagsterRunStatus, RunsFilter

        statuses = [DagsterRunStatus(s) for s in FINISHED]
        after = dt.datetime.fromtimestamp(self.since - 60, dt.UTC)  # clock skew between hosts
        records = instance.get_run_records(RunsFilter(statuses=statuses, updated_after=after))
        wanted = {DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE}
        newest = self.since
        for record in records:
            run_id = record.dagster_run.run_id
            ended = record.update_timestamp.timestamp()
            newest = max(newest, ended)
            if run_id in self.durations.seen:
                continue
            for entry in instance.all_logs(run_id, of_type=wanted):
                event = entry.dagster_event
                stage = event.step_key or "?"
                if event.event_type == DagsterEventType.STEP_SUCCESS:
                    self.durations.observe(stage, event.event_specific_data.duration_ms / 1000)
                else:
                    self.durations.failures[stage] = self.durations.failures.get(stage, 0) + 1
            self.durations.seen[run_id] = ended
        self.since = newest
        # Keep the ids of runs that can still show up in the next query only.
        cutoff = self.since - 120
        self.durations.seen = {k: v for k, v in self.durations.seen.items() if v >= cutoff}


def serve(settings: Settings, host: str, port: int, lookback_s: float) -> None:
    """Serve /metrics on host:port until SIGTERM or SIGINT."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import CollectorRegistry, make_wsgi_app

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # one line per scrape: no
            pass

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PlatformCollector(settings, lookback_s))  # type: ignore[arg-type]
    server = make_server(host, port, make_wsgi_app(registry), handler_class=QuietHandler)

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for serve_forever to return: not from the thread that runs it.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    click.echo(f"[fm metrics] serving http://{host}:{server.server_port}/metrics", err=True)
    server.serve_forever(poll_interval=0.5)
    server.server_close()


@click.group()
def metrics() -> None:
    """The platform's Prometheus metrics (docs/deploy.md, "Metrics and alerts")."""


@metrics.command("serve")
@click.option("--host", default="0.0.0.0", show_default=True)
@click.option("--port", default=9464, show_default=True, type=int)
@click.option(
    "--lookback",
    "lookback_s",
    default=3600.0,
    show_default=True,
    help="Seconds of finished runs read back at start for stage durations.",
)
def serve_command(host: str, port: int, lookback_s: float) -> None:
    """Serve /metrics for Prometheus to scrape (stage records, durations, checks, queue)."""
    serve(load_settings(), host, port, lookback_s)
