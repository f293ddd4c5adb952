"""Warm workers: long-lived Ray workers that outlive the command that started them.

Ray gives every driver (every `fm` command) fresh worker processes, so each command pays each
worker's start-up and its imports (the platform, great_expectations for the checks, the stages'
models) again: about 10 s per command on two CPUs, more than all the work of a small batch.
Warm workers are detached actors, one per CPU, named after the platform's code and the
environment they were given: a later command with the same code and environment calls the same,
already warm, processes; one with other code or settings starts a new pool and retires the old.

Each worker runs one call at a time, whatever function it is handed (the same functions, with
the same arguments and results, as the tasks they replace). A worker that dies is restarted by
Ray and its calls are run again, as a task would be retried. Calls go to the worker with the
fewest calls outstanding; a worker runs its calls in the order they were sent, and every caller
sends a call only after the calls whose results it needs, so no worker waits on itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

NAMESPACE = "fm-warm-workers"
CALL_RETRIES = 2  # as a task's max_retries: a call whose worker died is run again, twice
_PACKAGES = ("fm_assets", "fm_loader")


class _Worker:
    """The actor: runs whatever function it is handed, in its own warm process."""

    def __init__(self) -> None:
        self._warmed: set[str] = set()

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        return function(*args)

    def warm(self, warm_up: Callable[[], None]) -> None:
        """Run `warm_up` once in this process: every command that opens the pool sends it, and
        a worker (or its restart) pays its first-call costs once, not inside a stage."""
        name = f"{warm_up.__module__}.{warm_up.__qualname__}"
        if name in self._warmed:
            return
        self._warmed.add(name)
        try:
            warm_up()
        except Exception:
            # Best effort: the call that needs what failed to load fails loudly itself.
            logging.getLogger(__name__).exception("warm-up %s failed", name)

    def pid(self) -> int:
        return os.getpid()


def code_fingerprint(worker_env: Mapping[str, str]) -> str:
    """A digest of the platform's source files and the workers' environment: warm workers run
    the code they imported when they started, so other code (or settings) needs other workers."""
    digest = hashlib.sha256(json.dumps(sorted(worker_env.items())).encode())
    root = Path(__file__).resolve().parents[2]
    for package in _PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class WarmPool:
    """Warm workers of one fingerprint, and the calls outstanding on each."""

    def __init__(self, actors: Sequence[Any], fingerprint: str) -> None:
        self.actors = list(actors)
        self.fingerprint = fingerprint
        self._outstanding: list[list[Any]] = [[] for _ in self.actors]
        self._turn = 0

    def submit(self, function: Callable[..., Any], args: Sequence[Any], num_returns: int) -> Any:
        """Call `function(*args)` on the least busy worker; the ref(s), as a task returns them."""
        index = self._least_busy()
        method = self.actors[index].call
        if num_returns != 1:
            method = method.options(num_returns=num_returns)
        refs = method.remote(function, *args)
        self._outstanding[index].append(refs if num_returns == 1 else refs[0])
        return refs

    def _least_busy(self) -> int:
        import ray

        for index, refs in enumerate(self._outstanding):
            if refs:
                _, pending = ray.wait(refs, num_returns=len(refs), timeout=0)
                self._outstanding[index] = pending
        # Ties go round: a burst of submissions spreads over every worker.
        order = [(self._turn + i) % len(self.actors) for i in range(len(self.actors))]
        index = min(order, key=lambda i: len(self._outstanding[i]))
        self._turn = (index + 1) % len(self.actors)
        return index


def open_pool(
    size: int, worker_env: Mapping[str, str], warm_up: Callable[[], None] | None = None
) -> WarmPool:
    """The pool of `size` warm workers for this code and environment: found if a command has
    started it, else started; pools of other code or environments are retired.

    `warm_up` is sent to every worker ahead of any call, and runs once per worker process: a
    stage whose small batch reaches one worker of two would otherwise leave the other to pay
    its imports and tables inside the next command's timed work."""
    import ray

    fingerprint = code_fingerprint(worker_env)
    prefix = f"fm-{fingerprint}-"
    worker = ray.remote(_Worker)
    options = {
        "namespace": NAMESPACE,
        "lifetime": "detached",
        "get_if_exists": True,
        # No CPU reserved: the pool's size bounds its work, and Ray tasks of other callers on
        # this Ray (or a pool being retired) are never starved of CPUs.
        "num_cpus": 0,
        "max_restarts": -1,
        "max_task_retries": CALL_RETRIES,
        "max_concurrency": 1,
        "runtime_env": {"env_vars": dict(worker_env)},
    }
    actors = [worker.options(name=f"{prefix}{i}", **options).remote() for i in range(size)]
    if warm_up is not None:
        for actor in actors:
            # Not awaited: the worker's later calls queue behind it.
            actor.warm.remote(warm_up)  # type: ignore[attr-defined]
    retire_other_pools(keep=prefix)
    return WarmPool(actors, fingerprint)


def retire_other_pools(keep: str = "") -> list[str]:
    """Kill warm workers whose names do not start with `keep` (all of them when empty); their
    names. A command still calling them sees its calls fail: retire only when code changed."""
    import ray

    retired = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != NAMESPACE or (keep and entry["name"].startswith(keep)):
            continue
        try:
            ray.kill(ray.get_actor(entry["name"], namespace=NAMESPACE), no_restart=True)
        except ValueError:  # gone meanwhile: another command retired it
            continue
        retired.append(str(entry["name"]))
    return retired
