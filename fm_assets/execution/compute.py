"""Ray: connecting (a cluster when RAY_ADDRESS is set, else one local Ray per process), and
running a stage over chunks of rows on Ray workers."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.stages.base import Stage, StageResult

Progress = Callable[[str], None]
MAX_ROWS_PER_CHUNK = 2_000
CHUNKS_PER_CPU = 6


def ensure_ray(settings: Settings) -> None:
    """Initialise Ray once per process (a no-op when already connected)."""
    import ray

    if ray.is_initialized():
        return
    # Ray 2.60 turns on token auth for local clusters; embedded mode runs on one trusted host,
    # production sets RAY_AUTH_MODE=token and RAY_AUTH_TOKEN explicitly.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    worker_env = {"TOKENIZERS_PARALLELISM": "false", "RAY_AUTH_MODE": os.environ["RAY_AUTH_MODE"]}
    if not settings.ray_address:
        # Workers read landed files and registry copies from the object store themselves. A
        # cluster's nodes get credentials from their own environment (the pods' secret): a
        # runtime_env would put them in the cluster's job table and dashboard.
        worker_env |= {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    kwargs: dict[str, Any] = {
        "runtime_env": {"env_vars": worker_env},
        "logging_level": "WARNING",
        "log_to_driver": False,
    }
    if settings.ray_address:
        ray.init(address=settings.ray_address, **kwargs)
    else:
        # Local Ray runs workers at niceness 15, behind the driver; on a shared laptop that
        # costs the stages CPU for nothing. A cluster keeps its own policy.
        ray.init(
            num_cpus=settings.ray_num_cpus,
            include_dashboard=False,
            _system_config={"worker_niceness": 0},
            **kwargs,
        )


def ray_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def split_rows(table: pa.Table, cpus: int, *, one_per_row: bool = False) -> list[pa.Table]:
    """Cut `table` into chunks for Ray tasks: several per CPU, or one per row (landed files)."""
    if one_per_row:
        return [table.slice(i, 1) for i in range(table.num_rows)]
    if table.num_rows == 0:
        return []
    # Several chunks per CPU: one slow chunk then holds up the stage less at the end.
    size = min(MAX_ROWS_PER_CHUNK, -(-table.num_rows // (CHUNKS_PER_CPU * cpus)))
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


def process_on_ray(stage: Stage, chunks: list[pa.Table], progress: Progress) -> StageResult:
    """`stage.process` over every chunk on Ray workers; the results concatenated in chunk order."""
    import ray

    @ray.remote(num_cpus=1, max_retries=2)
    def process(stage: Stage, chunk: pa.Table) -> StageResult:
        return stage.process(chunk)

    pending = [process.remote(stage, chunk) for chunk in chunks]
    order = {ref: i for i, ref in enumerate(pending)}
    done: dict[int, StageResult] = {}
    remaining = list(pending)
    while remaining:
        ready, remaining = ray.wait(remaining, num_returns=1)
        for ref in ready:
            done[order[ref]] = ray.get(ref)
        progress(f"{stage.name}: {len(done)}/{len(pending)} chunks")
    # Keep input order: "first occurrence wins" in dedup must not depend on task timing.
    schema = stage.work_schema or stage.output_schema
    return StageResult.concat((done[i] for i in range(len(pending))), schema)
