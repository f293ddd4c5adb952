"""Connecting to Ray: a cluster when RAY_ADDRESS is set, else one local Ray per process."""

from __future__ import annotations

import os
from typing import Any

from fm_assets.settings import Settings


def ensure_ray(settings: Settings) -> None:
    """Initialise Ray once per process (a no-op when already connected)."""
    import ray

    if ray.is_initialized():
        return
    # Ray 2.60 turns on token auth for local clusters; embedded mode runs on one trusted host,
    # production sets RAY_AUTH_MODE=token and RAY_AUTH_TOKEN explicitly.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    worker_env = {"TOKENIZERS_PARALLELISM": "false", "RAY_AUTH_MODE": os.environ["RAY_AUTH_MODE"]}
    kwargs: dict[str, Any] = {
        "runtime_env": {"env_vars": worker_env},
        "logging_level": "WARNING",
        "log_to_driver": False,
    }
    if settings.ray_address:
        ray.init(address=settings.ray_address, **kwargs)
    else:
        ray.init(num_cpus=settings.ray_num_cpus, include_dashboard=False, **kwargs)


def ray_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))
