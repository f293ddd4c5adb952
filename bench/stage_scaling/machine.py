"""The whole machine's CPU use, steal included, and waiting for its other tenants to go quiet."""

from __future__ import annotations

import os
import time
from pathlib import Path

QUIET_CORES = 0.5  # start a run once other tenants use less than this many cores


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent busy since boot, steal included (Linux /proc/stat).

    Steal is time the hypervisor gave another guest: as unavailable to this run as a core
    another process of this machine holds.
    """
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields)
    busy = user + nice + system + irq + softirq + steal
    return busy / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(max_wait_s: float) -> tuple[float, float]:
    """Wait until the rest of the machine uses under QUIET_CORES (3 s windows), at most
    `max_wait_s`; return (seconds waited, others' cores in the last window).

    The machine is shared: a run that starts while another tenant holds a core measures the
    tenant, not the stage. Waiting is bounded, so a busy machine delays the run but never
    blocks it; the report shows what each run started under.
    """
    started = time.perf_counter()
    while True:
        busy, at = machine_busy_seconds(), time.perf_counter()
        time.sleep(3.0)
        others = (machine_busy_seconds() - busy) / (time.perf_counter() - at)
        waited = time.perf_counter() - started
        if others < QUIET_CORES or waited >= max_wait_s:
            return waited, others
