"""What each warm worker does once, before its first call: the stages' first-call costs.

A worker pays these on its first call of a stage: importing the stages and their task modules,
and for near dedup the code-point table and MinHash permutations (~0.8 s). On a small batch a
light stage reaches one worker of two, so the other paid them inside a later, larger run (near
dedup then used twice the CPU at 2 CPUs as at 1). Sent by `compute` when it opens the pool.
"""

from __future__ import annotations


def warm_worker() -> None:
    """Import the stages and the slice tasks; build the default MinHash tables."""
    from fm_assets.curation.minhash.signatures import MinHashConfig, sketch
    from fm_assets.execution import (  # noqa: F401  (imported to be loaded, not used)
        exact_dedup,
        pipeline,
        slice_tasks,
    )
    from fm_assets.execution.near_dedup import tasks, writes  # noqa: F401

    sketch(["a warm worker primes its shingling and permutation tables"], MinHashConfig())
    from fm_assets.execution.heap import freeze_long_lived

    freeze_long_lived("worker")  # the worker keeps what it imported and built for its whole life
