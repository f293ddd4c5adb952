"""Part one: batches landed and processed one after another in one FM_HOME, through the
sensor, with catalog maintenance right after each reporting point."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import log
from bench.soak.corpus import write_batch
from bench.soak.footprint import Footprint, footprint
from bench.soak.home import land_batch, open_home
from bench.soak.launch import launch, tick
from bench.soak.timings import RunTime, read_events, run_time
from fm_assets.execution.pipeline import STAGE_NAMES
from fm_assets.settings import Settings
from fm_assets.stages.near_dedup import NearDupStage
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.run import maintain

NEAR_DEDUP = NearDupStage.name


@dataclass(frozen=True)
class BatchRecord:
    """One batch: its run's times and the catalog right after it."""

    batch: int  # 1-based
    batch_id: str
    process_s: float  # the run's process, from spawn to exit
    run: RunTime
    footprint: Footprint
    land_s: float = 0.0  # the landing operation
    tick_s: float = 0.0  # the sensor's evaluation, partitions added

    def line(self) -> str:
        near = self.run.stage(NEAR_DEDUP)
        return (
            f"batch {self.batch}: process {self.process_s:.1f}s, run {self.run.run_s:.1f}s, "
            f"stages {self.run.stages_s:.2f}s, near dedup {near.stage_s:.2f}s, commits "
            f"{self.run.commit_s:.2f}s; catalog {self.footprint.catalog_bytes / 1e6:.1f} MB"
        )


@dataclass(frozen=True)
class Maintenance:
    """Catalog maintenance run right after a reporting point."""

    point: int
    before: Footprint
    after: Footprint
    seconds: float
    snapshots: tuple[int, int]  # before, after
    files_deleted: int


@dataclass(frozen=True)
class SequentialResult:
    records: list[BatchRecord]
    maintenance: list[Maintenance]
    documents_per_batch: int


def maintain_now(settings: Settings, point: int) -> Maintenance:
    """`maintain` with no retention and no grace period, timed, with the footprint before and
    after. The default policy (7 days, 24 h) would keep every snapshot and file of a run this
    short; with nothing else running between two batches, nothing younger is in use."""
    before = footprint(settings)
    policy = MaintenancePolicy(retention=dt.timedelta(0), grace=dt.timedelta(0))
    started = time.perf_counter()
    report = maintain(settings, policy)
    seconds = time.perf_counter() - started
    totals = report.totals()
    return Maintenance(
        point=point,
        before=before,
        after=footprint(settings),
        seconds=seconds,
        snapshots=(totals["snapshots_before"], totals["snapshots_after"]),
        files_deleted=totals["files_deleted"],
    )


def run_sequential(
    scratch: Path,
    pool: Sequence[str],
    batches: int,
    points: Sequence[int],
    documents: int,
    cpus: int,
    keep: Callable[[dict[str, Any]], None] = lambda record: None,
) -> SequentialResult:
    """Land, tick, run: `batches` times, one after another; maintain after each point. `keep`
    gets every batch's and every maintenance's figures as they are measured."""
    from fm_assets.defs.materialize import dagster_instance
    from fm_assets.execution.local_ray import start_local_ray, stop_local_ray
    from fm_assets.storage.bookkeeping import stage_runs

    settings, env = open_home(scratch / "sequential", cpus)
    records: list[BatchRecord] = []
    maintenance: list[Maintenance] = []
    try:
        # Once per home, before batch 1: in production the cluster is up before batches land.
        start_local_ray(settings)
        instance = dagster_instance(settings)
        cursor = None
        for batch in range(1, batches + 1):
            out = scratch / "inputs" / f"{batch}.jsonl"
            path = write_batch(pool, "seq", batch, documents, out)
            started = time.perf_counter()
            batch_id = land_batch(settings, path)
            landed = time.perf_counter()
            path.unlink()  # the landing zone holds it now
            evaluated = tick(instance, cursor)
            ticked = time.perf_counter()
            cursor = evaluated.cursor
            requested = [r.partition_key for r in evaluated.requests]
            if requested != [batch_id]:
                raise RuntimeError(
                    f"the sensor requested {requested} after batch {batch_id} landed "
                    f"({evaluated.skip_reason or 'no skip reason'}): expected that batch alone"
                )
            launched = launch(evaluated.requests[0], env)
            if launched.returncode != 0:
                raise RuntimeError(
                    f"the run of batch {batch} ({batch_id}) exited {launched.returncode}:\n"
                    f"{launched.stderr_tail}"
                )
            record = BatchRecord(
                batch=batch,
                batch_id=batch_id,
                process_s=launched.process_s,
                run=run_time(read_events(instance, launched.run_id)),
                footprint=footprint(settings),
                land_s=landed - started,
                tick_s=ticked - landed,
            )
            records.append(record)
            keep({"kind": "batch", **dataclasses.asdict(record)})
            log(record.line())
            if batch in points:
                done = maintain_now(settings, batch)
                maintenance.append(done)
                keep({"kind": "maintenance", **dataclasses.asdict(done)})
                log(
                    f"maintenance after batch {batch}: {done.seconds:.1f}s, catalog "
                    f"{done.before.catalog_bytes / 1e6:.1f} -> {done.after.catalog_bytes / 1e6:.1f}"
                    f" MB, snapshots {done.snapshots[0]} -> {done.snapshots[1]}, "
                    f"{done.files_deleted} files deleted"
                )
        committed = Counter((r["batch_id"], r["stage"]) for r in stage_runs(settings))
        twice = [key for key, n in committed.items() if n > 1]
        expected = {(r.batch_id, s) for r in records for s in STAGE_NAMES}
        if twice or set(committed) != expected:
            raise RuntimeError(
                f"stage runs committed twice: {twice[:5]}; missing: "
                f"{sorted(expected - set(committed))[:5]}"
            )
    finally:
        stop_local_ray(settings)  # the home's Ray outlives this process otherwise
    return SequentialResult(records, maintenance, documents)
