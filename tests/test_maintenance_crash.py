"""A maintenance run SIGKILLed at random points (seeded) leaves a catalog every reader reads as
before, and the next run completes: at each kill every version and every table reads the same
rows; at the end nothing unreferenced is left and every version verifies. The seed is printed
(FM_CRASH_SEED replays it)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fm_assets.checks.integrity import verify
from fm_assets.storage.maintenance.run import maintain
from fm_assets.storage.maintenance.tables import existing_tables, load
from tests.maintained_homes import Home, build_home, environment, readings
from tests.maintenance_driver import POLICY
from tests.paths import REPO

pytestmark = pytest.mark.slow

KILLS = 6
STEPS = ("rewriting", "expiring snapshots", "deleting unreferenced files")
TIMEOUT_S = 120.0


def _kill_at(home: Home, moment: str, delay: float, errors: Path) -> str:
    """Run the driver, SIGKILL it `delay` seconds after it says `moment`; return the last
    thing it said before it died (the step the kill landed in)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.maintenance_driver"],
        cwd=REPO,
        env=home.env,
        stdout=subprocess.PIPE,
        stderr=errors.open("w"),
        text=True,
        start_new_session=True,
    )
    said = ["nothing"]
    deadline = time.monotonic() + TIMEOUT_S
    try:
        assert process.stdout is not None
        for line in process.stdout:
            said.append(line.strip().removeprefix("fm-crash: "))
            if moment in line or "end maintain" in line or time.monotonic() > deadline:
                break
        time.sleep(delay)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        rest, _ = process.communicate(timeout=60)
    if process.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"the maintenance run failed on its own: {errors.read_text()[-3000:]}")
    said += [line.removeprefix("fm-crash: ") for line in rest.splitlines()]
    return said[-1]


def test_maintenance_killed_anywhere_leaves_a_readable_catalog_and_a_rerun_completes(
    ray_session: None, tmp_path: Path
) -> None:
    home = build_home(tmp_path / "fm")
    settings = home.settings
    before = readings(settings)
    seed = int(os.environ.get("FM_CRASH_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"crash seed {seed} (FM_CRASH_SEED={seed} replays it)")
    rng = random.Random(seed)
    # Tables with history: each kill lands in one of their steps (the others have nothing to do).
    busy = [r.identifier for r in existing_tables(settings) if load(settings, r).metadata.snapshots]
    kills: list[str] = []
    for _ in range(3 * KILLS):
        moment = f"{rng.choice(busy)}: {rng.choice(STEPS)}"
        landed = _kill_at(home, moment, rng.uniform(0.0, 0.15), tmp_path / "driver.err")
        changed = sorted(k for k, v in readings(settings).items() if before.get(k) != v)
        assert not changed, f"seed {seed}: a kill after {landed!r} changed {changed}"
        if "end maintain" not in landed:  # else the run finished before the kill: not counted
            kills.append(landed)
        if len(kills) == KILLS:
            break
    print(f"kills landed in {kills}")
    assert len(kills) == KILLS, f"seed {seed}: runs kept finishing before their kill"

    with environment(home.env):
        maintain(settings, POLICY)  # carries on where the killed runs stopped
        # The snapshots that run's own rewrites superseded were current when it started (a
        # reader may be on them), so the next run expires them; after it nothing is left.
        maintain(settings, POLICY)
        left = maintain(settings, POLICY, dry_run=True)
    assert readings(settings) == before
    assert left.totals()["files_deleted"] == 0, "files the killed runs left are still there"
    assert left.totals()["snapshots_after"] == left.totals()["snapshots_before"], (
        "snapshots the killed runs left are still there"
    )
    assert left.totals()["data_files_merged"] == 0, "small files the killed runs left remain"
    for key in home.versions:
        result = verify(settings, key)
        assert result.ok, [f"{b.location}: {b.problem}" for b in result.bad]
