"""Ray: connecting (the cluster at RAY_ADDRESS, else this FM_HOME's local Ray, started on first
use and kept alive), and running tasks with a bounded number in flight."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from fm_assets.execution.heap import freeze_long_lived
from fm_assets.execution.local_ray import connecting, running_local_ray, start_local_ray
from fm_assets.execution.ray_loss import lost_cluster
from fm_assets.execution.task_clock import measured
from fm_assets.execution.warm_pool import WarmPool, open_pool
from fm_assets.execution.warm_up import warm_worker
from fm_assets.settings import Settings
from fm_assets.stages.base import Stage, StageResult

Progress = Callable[[str], None]


class ProgressLine(str):
    """A progress message that also carries its figures (tasks done, records, bytes, ETA), so
    the Dagster side can record them as metadata; anywhere else it is the message itself."""

    figures: dict[str, float]

    def __new__(cls, text: str, figures: dict[str, float]) -> ProgressLine:
        line = super().__new__(cls, text)
        line.figures = figures
        return line


MAX_ROWS_PER_CHUNK = 2_000
CHUNKS_PER_CPU = 6
TASKS_IN_FLIGHT_PER_CPU = 2  # backpressure: enough to keep every CPU busy, no more
LIMIT_REFRESH_S = 2.0  # how often a running stage looks again at how many CPUs the cluster has
TASK_RETRIES = 2  # a task whose worker died runs again, twice
LIBRARY_THREADS_PER_WORKER = 2  # a native library's thread pool in each worker (see below)


@dataclass
class _Connection:
    """What this process's connection to Ray decided: the workers' environment and whether
    functions run on warm workers (`warm_pool`) or as tasks."""

    worker_env: dict[str, str] = field(default_factory=dict)
    warm_workers: int = 0  # 0: tasks
    pool: WarmPool | None = None


_connection = _Connection()
# Checks `run_tasks` makes between results while a `guarded` block runs (a stage's locks).
_guards: contextvars.ContextVar[tuple[Callable[[], None], ...]] = contextvars.ContextVar(
    "fm_guards", default=()
)


@contextlib.contextmanager
def guarded(check: Callable[[], None]) -> Iterator[None]:
    """While the block runs, `run_tasks` calls `check` between results, at least every second:
    it raises to stop the work (a stage whose lock was lost must not go on)."""
    token = _guards.set((*_guards.get(), check))
    try:
        yield
    finally:
        _guards.reset(token)


def worker_environment(settings: Settings) -> dict[str, str]:
    """The environment this process gives every Ray worker (its runtime_env).

    Native libraries with their own thread pools (tokenizers' Rayon pool) get
    `LIBRARY_THREADS_PER_WORKER` threads, never more than a local Ray's CPUs: one worker per
    CPU each running that many threads oversubscribes the cores a little while every worker is
    busy, and lets the last workers of a stage take up the cores the others left idle.
    """
    threads = LIBRARY_THREADS_PER_WORKER
    if not settings.ray_address:
        threads = min(threads, settings.ray_num_cpus or os.cpu_count() or 1)
    env = {
        "TOKENIZERS_PARALLELISM": "true",
        "RAYON_NUM_THREADS": str(threads),
        "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled"),  # as `ensure_ray` sets
    }
    if not settings.ray_address:
        # Workers read landed files and registry copies from the object store themselves. A
        # cluster's nodes get credentials from their own environment (the pods' secret): a
        # runtime_env would put them in the cluster's job table, dashboard and logs.
        env |= {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
        if settings.worker_s3_credentials:
            # Workers parse untrusted input: they get the identity that may write new data
            # files only, never this process's, which may delete and commit.
            env |= settings.worker_s3_credentials.environment()
    return env


def ensure_ray(settings: Settings, progress: Progress = lambda message: None) -> None:
    """Connect to Ray once per process (a no-op when already connected); say what it took."""
    import ray

    if ray.is_initialized():
        return
    started = time.monotonic()
    # Ray 2.60 turns on token auth for local clusters; embedded mode runs on one trusted host,
    # production sets RAY_AUTH_MODE=token and RAY_AUTH_TOKEN explicitly.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    worker_env = worker_environment(settings)
    what = "connected to the Ray cluster at RAY_ADDRESS"
    with contextlib.ExitStack() as held:
        if not settings.ray_address:
            # Its watchdog never stops a local head while a command connects to it.
            held.enter_context(connecting(settings.home))
            running = running_local_ray(settings)
            what = "connected to this FM_HOME's local Ray" if running else "started a local Ray"
        address = settings.ray_address or start_local_ray(settings)
        ray.init(
            address=address,
            runtime_env={"env_vars": worker_env},
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    _connection.worker_env = worker_env
    _connection.warm_workers = _warm_workers(settings)
    _connection.pool = None
    freeze_long_lived("ray")  # Ray's modules and its connection stay for the process's life
    progress(f"Ray: {what} ({address}) in {time.monotonic() - started:.1f}s")


def disconnect() -> None:
    """Drop this process's connection to Ray (one that lost its cluster), so that the next
    `ensure_ray` connects afresh: to the cluster at RAY_ADDRESS once it is back."""
    import ray

    with contextlib.suppress(Exception):  # a connection to a dead cluster may fail to close
        ray.shutdown()
    _connection.worker_env, _connection.warm_workers, _connection.pool = {}, 0, None


def _warm_workers(settings: Settings) -> int:
    """How many warm workers to call (0: run tasks): FM_WARM_WORKERS, by default one per CPU of
    this FM_HOME's local Ray and none on a cluster, whose autoscaler sizes itself on tasks."""
    if settings.warm_workers == "auto":
        return 0 if settings.ray_address else ray_cpus()
    return int(settings.warm_workers)


class RemoteFunction:
    """`function` run on Ray: a call on a warm worker (`execution/warm_pool.py`) when this
    process uses them, else a task of one CPU retried if its worker dies. Either way
    `.remote(*args)` returns what a task would: one ref, or a list of `num_returns` refs."""

    def __init__(
        self, function: Callable[..., Any], num_returns: int = 1, num_gpus: float = 0
    ) -> None:
        # Measured: a slice's outcome reports the CPU time of the call that made it.
        self.function = measured(function)
        self.num_returns = num_returns
        self.num_gpus = num_gpus
        self._task: Any = None

    def remote(self, *args: Any) -> Any:
        import ray

        # Warm workers hold no GPU: a task that needs one is scheduled on a GPU node by Ray.
        if _connection.warm_workers > 0 and not self.num_gpus:
            if _connection.pool is None:
                _connection.pool = open_pool(
                    _connection.warm_workers, _connection.worker_env, warm_worker
                )
            return _connection.pool.submit(self.function, args, self.num_returns)
        if self._task is None:
            task = ray.remote(num_cpus=1, num_gpus=self.num_gpus, max_retries=TASK_RETRIES)(
                self.function
            )
            self._task = task.options(num_returns=self.num_returns)
        return self._task.remote(*args)


def remote(
    function: Callable[..., Any], *, num_returns: int = 1, num_gpus: float = 0
) -> RemoteFunction:
    """`function`, to be run on Ray with `.remote(*args)` (see `RemoteFunction`)."""
    return RemoteFunction(function, num_returns, num_gpus)


def ray_cpus() -> int:
    """The CPUs of the Ray this process is connected to, now."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def ray_gpus() -> int:
    """GPUs the Ray cluster has (0 on a CPU-only cluster)."""
    import ray

    return int(ray.cluster_resources().get("GPU", 0))


def plan_width(total_bytes: int, cpus: int, slice_bytes: int | None) -> int:
    """The CPUs a stage plans its slices for (`planning.slice_count` cuts a multiple of it):
    `cpus`, or, on a cluster (`slice_bytes` given), as many as its data fills at `slice_bytes`
    a slice if that is more. A cluster may grow while the stage runs: planned from the CPUs
    present at its start, a small cluster's stage would leave the nodes that join nothing."""
    if slice_bytes is None:
        return cpus
    return max(cpus, -(-total_bytes // max(1, slice_bytes)))


def planning_cpus(settings: Settings, total_bytes: int) -> int:
    """`plan_width` for a stage reading `total_bytes`: on this FM_HOME's local Ray its CPUs (no
    node joins it; its slices stay a multiple of them), on a cluster (RAY_ADDRESS) from the
    data's size at FM_SLICE_BYTES a slice."""
    slice_bytes = settings.cluster_slice_bytes if settings.ray_address else None
    return plan_width(total_bytes, ray_cpus(), slice_bytes)


def _in_flight_limit() -> int:
    """Calls in flight at once: one per warm worker, else two tasks per CPU (of the cluster as
    it is now: `run_tasks` asks again while it runs).

    A warm worker runs the calls sent to it in order, so a second call queued behind a long
    one waits there while another worker may sit idle at the end of the stage; one call each,
    and the next goes to whichever worker finishes first (a round trip of ~1 ms). Ray's own
    scheduler hands queued tasks to free workers, so tasks can be sent ahead.
    """
    if _connection.warm_workers > 0:
        return _connection.warm_workers
    return TASKS_IN_FLIGHT_PER_CPU * ray_cpus()


def get(ref: Any) -> Any:
    """A task's result; a task that raised re-raises its own exception here, not Ray's wrapper,
    so the stage's message (which says what to do) is what the user sees."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, Exception):
            raise exc.cause from exc
        raise


@dataclass
class _Tally:
    """A `run_tasks` call's progress: tasks done, records and bytes read, reported every 2 s."""

    count: int
    label: str
    progress: Progress
    started: float = field(default_factory=time.monotonic)
    finished: int = 0
    records: int = 0
    read: int = 0
    last_report: float = 0.0

    def add(self, result: Any) -> None:
        self.finished += 1
        self.records += int(getattr(result, "records_in", 0))
        self.read += int(getattr(result, "bytes_in", 0))

    def report(self) -> None:
        now = time.monotonic()
        if now - self.last_report < 2.0 and self.finished < self.count:
            return
        self.last_report = now
        elapsed = now - self.started
        eta = elapsed / self.finished * (self.count - self.finished)
        volume = (
            f"{self.records:,} records, {self.read / 1e6:.1f} MB read, "
            if self.read or self.records
            else ""
        )
        figures = {
            "tasks_done": self.finished,
            "tasks": self.count,
            "records_read": self.records,
            "bytes_read": self.read,
            "elapsed_s": round(elapsed, 1),
            "eta_s": round(eta, 1),
        }
        self.progress(
            ProgressLine(
                f"{self.label}: {self.finished}/{self.count} done, {volume}{elapsed:.0f}s "
                f"elapsed, ETA {eta:.0f}s",
                figures,
            )
        )


def run_tasks(
    submit: Callable[[int], Any],
    count: int,
    *,
    on_done: Callable[[int, Any], None] | None = None,
    max_in_flight: int | None = None,
    progress: Progress = lambda message: None,
    label: str = "tasks",
) -> list[Any]:
    """Run `submit(i)` (which returns a Ray ObjectRef) for i in range(count), at most
    `max_in_flight` at a time, and return their results in order of i.

    `on_done(i, result)` sees each result as it arrives. Holding back submissions is the
    backpressure: Ray never holds more pending inputs and outputs than the cluster can use, and
    each task reads and writes its own objects, so object-store traffic in flight is bounded
    too. Without `max_in_flight` the bound follows the cluster's CPUs as they are now, so nodes
    that join while the tasks run get some. Progress (at most every 2 s) counts tasks, and the
    records and bytes read by results that carry `records_in` and `bytes_in` (a slice's
    outcome), with an ETA. The `guarded` checks run between results; when one raises (or a
    task does), what is still queued is cancelled.
    """
    import ray

    limit = max_in_flight or _in_flight_limit()
    limit_at = time.monotonic()
    results: list[Any] = [None] * count
    pending: dict[Any, int] = {}
    submitted = 0
    tally = _Tally(count, label, progress)
    try:
        while tally.finished < count:
            for check in _guards.get():
                check()
            if max_in_flight is None and time.monotonic() - limit_at >= LIMIT_REFRESH_S:
                limit, limit_at = _in_flight_limit(), time.monotonic()
            while submitted < count and len(pending) < limit:
                pending[submit(submitted)] = submitted
                submitted += 1
            # Not forever: the guards and the in-flight limit are looked at every second.
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                index = pending.pop(ref)
                results[index] = get(ref)
                tally.add(results[index])
                if on_done is not None:
                    on_done(index, results[index])
            if ready:
                tally.report()
    except BaseException as exc:
        # What is still queued would only write files nobody commits (best effort: a running
        # call finishes, and `fm gc` sweeps what it wrote). Not on a lost cluster: nothing runs
        # there any more, and each call would wait for the dead connection.
        if not lost_cluster(exc):
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref)
        raise
    return results


def split_rows(table: pa.Table, cpus: int) -> list[pa.Table]:
    """Cut `table` into chunks for Ray tasks, several per CPU."""
    if table.num_rows == 0:
        return []
    # Several chunks per CPU: one slow chunk then holds up the stage less at the end.
    size = min(MAX_ROWS_PER_CHUNK, -(-table.num_rows // (CHUNKS_PER_CPU * cpus)))
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


def process_on_ray(stage: Stage, chunks: Sequence[pa.Table], progress: Progress) -> StageResult:
    """`stage.process` over every chunk on Ray workers; the results concatenated in chunk order.

    The results come back to the caller: for work whose output is small or needed whole (shard
    builds re-tokenizing a version). Curation stages run through the runner, which never
    gathers rows.
    """
    process = remote(_process)
    results = run_tasks(
        lambda i: process.remote(stage, chunks[i]), len(chunks), progress=progress, label=stage.name
    )
    return StageResult.concat(results, stage.output_schema)


def _process(stage: Stage, chunk: pa.Table) -> StageResult:
    return stage.process(chunk)
