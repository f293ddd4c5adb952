"""A live Dagster run holding every slot of the `ray` pool, for tests of what waits behind it.

    python -m tests.slot_holder      # FM_HOME (and DAGSTER_HOME) as for `fm`

It executes a one-op job in-process on the FM_HOME's instance, tagged with this process as `fm`
tags the runs it executes; the op claims every slot of the pool, as running steps do, prints
"holding RUN_ID" and keeps them until stdin closes (then frees them, and the run succeeds) or
the process is killed (then the run stays STARTED holding them, as after a crash).
"""

# No `from __future__ import annotations`: Dagster reads the op's `context` annotation.
import sys

import dagster as dg

from fm_assets.defs.materialize import dagster_instance
from fm_assets.defs.run_health import process_tags
from fm_assets.settings import load_settings

POOL = "ray"


@dg.op
def hold_every_slot(context: dg.OpExecutionContext) -> None:
    storage = context.instance.event_log_storage
    storage.initialize_concurrency_limit_to_default(POOL)
    limit = storage.get_concurrency_info(POOL).slot_count
    for slot in range(limit):
        claim = storage.claim_concurrency_slot(POOL, context.run_id, f"hold_{slot}")
        if not claim.is_claimed:
            raise RuntimeError(f"slot {slot} of pool {POOL!r} is taken already: {claim}")
    print(f"holding {context.run_id}", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or kills us)
    storage.free_concurrency_slots_for_run(context.run_id)


@dg.job
def hold_ray_slots() -> None:
    hold_every_slot()


def main() -> None:
    instance = dagster_instance(load_settings())
    result = hold_ray_slots.execute_in_process(instance=instance, tags=process_tags())
    sys.exit(0 if result.success else 1)


if __name__ == "__main__":
    main()
