"""Telling a lost Ray cluster from a failing stage: a driver whose cluster went away (its head
restarted or was replaced, a network cut, a Ray Client connection broken) fails with Ray's own
errors, and the same work succeeds once it connects again. Stages are content-keyed and commit
once, at their end, so running the stage again neither loses nor doubles a record."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType


def _exceptions(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from or while handling, innermost last."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _raised_in(tb: TracebackType | None, package: Path) -> bool:
    """Whether the innermost frame of `tb` is code of `package`."""
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and Path(last.tb_frame.f_code.co_filename).is_relative_to(package)


def lost_cluster(exc: BaseException) -> bool:
    """Whether `exc` says this process lost its Ray cluster (not that a stage failed on Ray).

    Ray's errors for a dead node, raylet or object owner, and a connection error raised by Ray
    itself (Ray Client's broken channel, `ray.init` finding no cluster), anywhere in the chain.
    A task's own exception (re-raised as itself by `compute.get`) is the stage's, never this.
    """
    import ray
    import ray.exceptions as errors

    lost = (
        errors.LocalRayletDiedError,
        errors.NodeDiedError,
        errors.ObjectLostError,  # its node or owner died with the cluster
        errors.RaySystemError,
        errors.RpcError,
    )
    package = Path(ray.__file__).parent
    for error in _exceptions(exc):
        if isinstance(error, lost):
            return True
        if isinstance(error, ConnectionError) and _raised_in(error.__traceback__, package):
            return True
    return False
