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
    # Workers read landed files and registry copies from the object store themselves.
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
