"""A step whose driver lost its Ray cluster is retried by Dagster, in the same run.

A Ray head that restarts (a KubeRay upgrade, an evicted or OOM-killed head pod) takes every
driver's connection with it: the stage fails with Ray's errors, not its own. The run's retry
policy (`run_retries`) retries runs whose worker died, never a failed step, which would fail
the same way; this one would not. So the step drops its connection and asks Dagster to run it
again after `FM_RAY_LOST_RETRY_S`, up to `RAY_LOST_RETRIES` times; the retry connects to the
cluster at RAY_ADDRESS once it is back. Stages are content-keyed and commit once, at their
end: what the lost attempt did is either committed whole (the retry finds it up to date) or
not at all (its files are never referenced; `fm gc` sweeps them).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import dagster as dg

from fm_assets.defs.progress import progress_logger
from fm_assets.defs.resources import FmPlatform
from fm_assets.execution.compute import disconnect
from fm_assets.execution.ray_loss import lost_cluster

RAY_LOST_RETRIES = 3
T = TypeVar("T")


def retried_when_ray_is_lost(step: Callable[..., T]) -> Callable[..., T]:
    """`step` (an asset's function, taking `context` and the `fm` resource), with a lost Ray
    cluster turned into Dagster's `RetryRequested`."""

    @functools.wraps(step)  # Dagster reads the wrapped function's parameters
    def run(context: dg.AssetExecutionContext, fm: FmPlatform) -> T:
        try:
            return step(context, fm)
        except Exception as exc:
            if not lost_cluster(exc):
                raise
            disconnect()
            wait_s = fm.settings().ray_lost_retry_s
            said = str(exc).strip().splitlines()
            progress_logger(context)(
                f"lost the Ray cluster ({type(exc).__name__}: "
                f"{said[0] if said else 'no message'}); this step runs again in {wait_s:.0f} s, "
                "on the cluster at RAY_ADDRESS once it is back (a rerun neither loses nor "
                "doubles records)"
            )
            raise dg.RetryRequested(max_retries=RAY_LOST_RETRIES, seconds_to_wait=wait_s) from exc

    return run
