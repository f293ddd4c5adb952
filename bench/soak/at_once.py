"""Part two: many batches landed at once, then a real `dagster-daemon` with the platform's
instance config (the repository's dagster.yaml, copied into the home's DAGSTER_HOME as every
`fm` command does, and the per-pool limits `fm dev` sets): its sensor requests them, the
QueuedRunCoordinator queues the runs within `max_concurrent_runs`, the DefaultRunLauncher
starts each run as a process of the code location, and the steps wait for their pool slots.

Checked from the platform's own records: every batch has exactly one run and it succeeded,
every (batch, stage) is committed once in the stage-run bookkeeping, and no more runs ran at
once, nor steps of a pool, than the limits allow (from the runs' start and end times and the
steps' events)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from bench.harness import REPO, log
from bench.soak.corpus import write_batch
from bench.soak.home import land_batch, open_home
from bench.soak.sequential import NEAR_DEDUP
from fm_assets.execution.pipeline import CURATION_STAGES, STAGE_NAMES

BATCH_JOB = "process_landing_batch"
POLL_S = 5.0


def max_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """The most intervals (start, end) open at one moment; one ending as another starts does
    not count as an overlap."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    open_now = most = 0
    for _, step in edges:  # at equal times the end (-1) sorts first
        open_now += step
        most = max(most, open_now)
    return most


@dataclass(frozen=True)
class AtOnceResult:
    batches: int
    land_s: float  # landing them all, before the daemon starts
    drain_s: float  # daemon start to the last run's end
    runs: int  # runs of the batch job
    succeeded: int
    batches_without_success: list[str]
    batches_run_twice: list[str]
    stage_commits: int
    committed_twice: list[tuple[str, str]]
    not_committed: int
    max_runs: int  # runs that ran at once, at most
    run_limit: int
    max_steps: dict[str, int]  # pool -> steps that ran at once, at most
    pool_limits: dict[str, int]
    run_seconds: list[float]


def _pool_limits(instance: dg.DagsterInstance) -> dict[str, int]:
    from fm_assets.defs.instance import embedded_config

    pools = {entry.pool for entry in CURATION_STAGES}
    default = int(embedded_config()["concurrency"]["pools"]["default_limit"])
    limits = {}
    for pool in sorted(pools):
        info = instance.event_log_storage.get_concurrency_info(pool)
        limits[pool] = int(info.slot_count) if info.slot_count else default
    return limits


def _step_intervals(
    instance: dg.DagsterInstance, run_ids: Sequence[str]
) -> dict[str, list[tuple[float, float]]]:
    """Per stage step, the (start, success) times of every run's step."""
    found: dict[str, list[tuple[float, float]]] = {}
    for run_id in run_ids:
        started: dict[str, float] = {}
        for entry in instance.all_logs(run_id):
            event = entry.dagster_event
            if event is None or entry.step_key is None:
                continue
            if event.event_type_value == "STEP_START":
                started[entry.step_key] = entry.timestamp
            elif event.event_type_value == "STEP_SUCCESS" and entry.step_key in started:
                found.setdefault(entry.step_key, []).append(
                    (started[entry.step_key], entry.timestamp)
                )
    return found


def _wait_for_runs(
    instance: dg.DagsterInstance, daemon: subprocess.Popen[bytes], n: int, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        runs = instance.get_runs(dg.RunsFilter(job_name=BATCH_JOB))
        status = Counter(run.status.value for run in runs)
        finished = sum(status[s] for s in ("SUCCESS", "FAILURE", "CANCELED"))
        summary = ", ".join(f"{k.lower()} {v}" for k, v in sorted(status.items()))
        if summary != last:
            log(f"runs of {n} batches: {summary or 'none yet'}")
            last = summary
        if len(runs) >= n and finished == len(runs):
            return
        if daemon.poll() is not None:
            raise RuntimeError(f"dagster-daemon exited {daemon.returncode} before the runs ended")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the runs did not all end within {timeout_s:.0f} s: {summary}")
        time.sleep(POLL_S)


def run_at_once(
    scratch: Path, pool: Sequence[str], batches: int, documents: int, cpus: int
) -> AtOnceResult:
    """Land `batches` batches, then let a real daemon process them; check the records."""
    from fm_assets.commands.dev import stop_process_tree
    from fm_assets.defs.instance import embedded_config
    from fm_assets.defs.materialize import dagster_instance
    from fm_assets.execution.local_ray import start_local_ray, stop_local_ray
    from fm_assets.storage.bookkeeping import stage_runs

    settings, env = open_home(scratch / "at-once", cpus)
    instance = dagster_instance(settings)  # writes DAGSTER_HOME's dagster.yaml, pool limits
    try:
        start_local_ray(settings)
        started = time.perf_counter()
        batch_ids = []
        for batch in range(1, batches + 1):
            out = scratch / "inputs" / f"{batch}.jsonl"
            path = write_batch(pool, "once", batch, documents, out)
            batch_ids.append(land_batch(settings, path))
            path.unlink()
        land_s = time.perf_counter() - started
        log(f"landed {batches} batches in {land_s:.1f}s; starting dagster-daemon")
        daemon_log = scratch / "dagster-daemon.log"
        with daemon_log.open("wb") as out:
            daemon = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("dagster-daemon")),
                    "run",
                    "-w",
                    str(REPO / "workspace.yaml"),
                ],
                cwd=REPO,
                env=env | {"PYTHONPATH": str(REPO)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started = time.perf_counter()
        try:
            _wait_for_runs(instance, daemon, batches, timeout_s=600 + 120 * batches)
        except RuntimeError as exc:
            tail = daemon_log.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"{exc}\n--- {daemon_log} (end) ---\n{tail}") from exc
        finally:
            stop_process_tree(daemon)  # its own process group: daemon, code server, run workers
        drain_s = time.perf_counter() - started
    finally:
        stop_local_ray(settings)

    runs = instance.get_runs(dg.RunsFilter(job_name=BATCH_JOB))
    per_batch = Counter(run.tags.get("fm/batch", "") for run in runs)
    success = dg.DagsterRunStatus.SUCCESS
    succeeded = {run.tags.get("fm/batch") for run in runs if run.status == success}
    records = [instance.get_run_record_by_id(run.run_id) for run in runs]
    spans = [(r.start_time, r.end_time) for r in records if r and r.start_time and r.end_time]
    steps = _step_intervals(instance, [run.run_id for run in runs])
    pools = {entry.name: entry.pool for entry in CURATION_STAGES}
    by_pool: dict[str, list[tuple[float, float]]] = {}
    for step, intervals in steps.items():
        if step in pools:
            by_pool.setdefault(pools[step], []).extend(intervals)
    committed = Counter((r["batch_id"], r["stage"]) for r in stage_runs(settings))
    expected = {(b, s) for b in batch_ids for s in STAGE_NAMES}
    if NEAR_DEDUP not in pools:
        raise RuntimeError(f"{NEAR_DEDUP} is no longer a stage of the pipeline")
    return AtOnceResult(
        batches=batches,
        land_s=land_s,
        drain_s=drain_s,
        runs=len(runs),
        succeeded=len(succeeded & set(batch_ids)),
        batches_without_success=sorted(set(batch_ids) - succeeded),
        batches_run_twice=sorted(b for b, n in per_batch.items() if n > 1),
        stage_commits=sum(committed.values()),
        committed_twice=sorted(k for k, n in committed.items() if n > 1),
        not_committed=len(expected - set(committed)),
        max_runs=max_overlap(spans),
        run_limit=int(embedded_config()["concurrency"]["runs"]["max_concurrent_runs"]),
        max_steps={pool: max_overlap(spans_) for pool, spans_ in sorted(by_pool.items())},
        pool_limits=_pool_limits(instance),
        run_seconds=[end - start for start, end in spans],
    )
