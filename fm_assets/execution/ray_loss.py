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


def _through(tb: TracebackType | None, package: Path) -> bool:
    """Whether `tb` passes through code of `package`."""
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).is_relative_to(package):
            return True
        tb = tb.tb_next
    return False


def lost_cluster(exc: BaseException) -> bool:
    """Whether `exc` says this process lost its Ray cluster (not that a stage failed on Ray).

    Ray's errors for a dead node, raylet or object owner, anywhere in the chain; a connection
    or gRPC error raised through Ray's own code (Ray Client's broken channel, or one that came
    back to a new server that knows none of the driver's objects; `ray.init` finding no
    cluster). A task's own exception (re-raised as itself by `compute.get`) is the stage's.
    """
    import grpc
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
        channel = isinstance(error, ConnectionError | grpc.RpcError)
        if channel and _through(error.__traceback__, package):
            return True
    return False
