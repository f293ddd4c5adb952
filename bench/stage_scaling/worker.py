"""One configuration of the stage-scaling benchmark, in a process of its own.

Ray starts once per process: Ray with CPUS CPUs, a warm-up pipeline, every stage timed on the
benchmark batch and, with 1 CPU, every stage's `process()` alone once Ray has shut down. The
driver starts it as

    python -m bench.stage_scaling.worker CPUS ROOT RESULT DATA

and reads the JSON it writes to RESULT.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.fm_home import fresh_home, land, stage_phases
from bench.harness import WARC_FILES, log, tree_cpu_seconds
from bench.stage_scaling.machine import machine_busy_seconds


def timed_stage(settings: Any, stage: str, batch_id: str) -> dict[str, Any]:
    """One `run_stage` call that must do real work, split at its progress messages."""
    from fm_assets.execution.runner import run_stage

    events: list[tuple[float, str]] = []
    cpu, machine = tree_cpu_seconds(), machine_busy_seconds()
    started = time.perf_counter()
    report = run_stage(
        settings,
        stage,
        batch_id,
        run_id="bench-scaling",
        progress=lambda message: events.append((time.perf_counter(), message)),
    )
    ended = time.perf_counter()
    cpu_s = tree_cpu_seconds() - cpu
    machine_s = machine_busy_seconds() - machine
    if report.skipped:
        raise RuntimeError(f"{stage} for {batch_id} was up to date: nothing was measured")
    phases = stage_phases(stage, started, ended, events)
    return {
        "stage": stage,
        "seconds": ended - started,
        "report_seconds": report.seconds,
        "plan_s": phases.plan_s,
        "ray_s": phases.ray_s,
        "commit_s": phases.commit_s,
        "cpu_s": cpu_s,
        "others_cpu_s": max(0.0, machine_s - cpu_s),  # other tenants' CPU, steal included
        "slices": phases.slices,
        "docs_in": report.records_in,
        "docs_kept": report.records_kept,
    }


def run_pipeline(settings: Any, batch_id: str) -> list[dict[str, Any]]:
    from fm_assets.execution import pipeline

    return [timed_stage(settings, stage, batch_id) for stage in pipeline.STAGE_NAMES]


def worker(cpus: int, root: Path, result: Path, data: Path) -> None:
    """Start Ray with `cpus` CPUs, warm it up, time every stage on the benchmark batch.

    With 1 CPU, also time each stage's `process()` alone once Ray has shut down, so those
    figures are interleaved with the Ray runs rather than taken at another time of the day.
    """
    import ray

    from fm_assets.execution.compute import ensure_ray, ray_cpus
    from fm_assets.execution.local_ray import stop_local_ray

    load_start = os.getloadavg()
    settings = fresh_home(root / "home", cpus)
    started = time.perf_counter()
    ensure_ray(settings)
    ray_start_s = time.perf_counter() - started
    try:
        if ray_cpus() != cpus:
            raise RuntimeError(f"Ray reports {ray_cpus()} CPUs, expected {cpus}")
        # Warm-up in another home: Ray starts its worker processes and they import trafilatura
        # and load lid.176 and the tokenizer (cached per process by hash) before timing starts.
        warm = fresh_home(root / "warm-up", cpus)
        started = time.perf_counter()
        run_pipeline(warm, land(warm, WARC_FILES, "bench-warm-up"))
        warm_up_s = time.perf_counter() - started
        log(f"{cpus} CPU(s): Ray started in {ray_start_s:.1f}s, warm-up {warm_up_s:.1f}s")

        batch_id = land(settings, sorted(data.glob("*.warc.gz")), "bench-scaling")
        stages = []
        for stage in run_pipeline(settings, batch_id):
            log(
                f"{cpus} CPU(s) {stage['stage']}: {stage['docs_in']} -> {stage['docs_kept']} "
                f"docs in {stage['seconds']:.2f}s ({stage['slices']} slices)"
            )
            stages.append(stage)
        load_end = os.getloadavg()
    finally:
        ray.shutdown()
        stop_local_ray(settings)  # the FM_HOME's Ray outlives this process otherwise
    payload = {
        "cpus": cpus,
        "ray_start_s": ray_start_s,
        "warm_up_s": warm_up_s,
        "load_start": load_start,
        "load_end": load_end,
        "stages": stages,
        "alone": measure_alone(settings, batch_id) if cpus == 1 else [],
    }
    result.write_text(json.dumps(payload, indent=1), encoding="utf-8")


def stage_input(settings: Any, stage_name: str, batch_id: str) -> Any:
    """What the stage's `process` reads: the landed files (each whole), or the upstream
    partition as committed."""
    from fm_assets.execution import pipeline
    from fm_assets.execution.planning import landed_parts
    from fm_assets.storage import catalog
    from fm_assets.storage.bookkeeping import latest_stage_run
    from fm_assets.storage.landing import read_manifest
    from fm_assets.storage.objectstore import open_object_store

    upstream = pipeline.upstream_of(stage_name)
    if upstream is None:
        return landed_parts(settings, read_manifest(open_object_store(settings), batch_id), {})
    run = latest_stage_run(settings, batch_id, upstream)
    if run is None:
        raise RuntimeError(f"{upstream} never ran for {batch_id} in {settings.home}")
    return catalog.read_batch(settings, upstream, batch_id, int(run["output_snapshot_id"]))


def measure_alone(settings: Any, batch_id: str) -> list[dict[str, Any]]:
    """Each stage's `process` on its whole input, on one core, without Ray.

    The inputs are the partitions the Ray run just committed. One warm call on a few rows
    first: imports and model loads are the warm-up's business in the Ray runs too. Decisions
    across the batch's slices and other batches (exact and near duplicates) are Ray work with
    no single-process counterpart: `process` decides them within its input only.
    """
    from fm_assets.curation.policy import load_policy
    from fm_assets.execution import pipeline
    from fm_assets.storage.landing import read_manifest
    from fm_assets.storage.objectstore import open_object_store

    # "1 core" literally: threads a library starts from here on inherit the mask.
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core: one tokenizer thread
    policy = load_policy(settings, read_manifest(open_object_store(settings), batch_id).source)
    out = []
    for name in pipeline.STAGE_NAMES:
        stage = pipeline.entry(name).build(settings, policy)
        inputs = stage_input(settings, name, batch_id)
        stage.process(inputs.slice(0, min(4, inputs.num_rows)))
        started, cpu = time.perf_counter(), time.thread_time()
        stage.process(inputs)
        process_s, process_cpu_s = time.perf_counter() - started, time.thread_time() - cpu
        log(f"alone {name}: process {process_s:.2f}s")
        out.append({"stage": name, "process_s": process_s, "process_cpu_s": process_cpu_s})
    return out


def main(argv: Sequence[str] | None = None) -> None:
    cli = argparse.ArgumentParser(
        prog="python -m bench.stage_scaling.worker", description=__doc__.splitlines()[0]
    )
    cli.add_argument("cpus", type=int, help="CPUs to give Ray")
    cli.add_argument("root", type=Path, help="a fresh directory for the FM_HOMEs")
    cli.add_argument("result", type=Path, help="where to write the JSON result")
    cli.add_argument("data", type=Path, help="a directory of .warc.gz files: the batch")
    args = cli.parse_args(argv)
    worker(args.cpus, args.root, args.result, args.data)


if __name__ == "__main__":
    main()
