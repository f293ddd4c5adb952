"""Stage scaling benchmark: every curation stage at 1 and at 2 Ray CPUs.

`python -m bench.stage_scaling` (the driver, `__main__`) alternates the configurations, each in
a `worker` process of its own, waits for the machine's other tenants to go quiet (`machine`)
before each, and writes `bench/results/stage_scaling.md` (`report`).
"""
