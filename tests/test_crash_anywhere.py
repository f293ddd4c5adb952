"""Crash anywhere, rerun, same result: SIGKILL at seeded random points of every step.

A real WARC batch goes through every stage, its version and its shard set, once without
interruption (the reference) and once in a fresh FM_HOME where the run is SIGKILLed at a random
point of every step in turn, each rerun carrying on from what the last one committed; twice a
run first loses a busy Ray worker mid-stage and must finish that stage. After each kill no table
partition of the batch is partial; at the end every partition, the version, the shard checksums
and the samples' lineage equal the reference's, and the files the killed attempts wrote are
exactly the ones the orphan sweep removes. The seed is printed (FM_CRASH_SEED replays it);
`python -m bench.reliability` runs many more rounds.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from fm_assets.execution import pipeline
from tests.crash_driver import STEPS, VERSION_KEY
from tests.crash_injection import (
    Contents,
    Kill,
    Profile,
    contents,
    crash_at,
    kill_points,
    partial,
    prepare,
    run_through,
    unreferenced_files,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(
    ray_address: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Contents, Profile]:
    home = prepare(tmp_path_factory.mktemp("uninterrupted") / "fm", ray_address)
    profile = run_through(home)
    whole = contents(home.settings, home.batch_id)
    assert whole.shards and whole.version_hash and whole.partitions[pipeline.STAGE_NAMES[-1]]
    return whole, profile


def test_kills_at_random_points_of_every_step_converge_to_the_uninterrupted_result(
    reference: tuple[Contents, Profile],
    ray_address: str,
    ray_head_pid: int,
    tmp_path: Path,
) -> None:
    import datetime as dt

    from fm_assets.checks.integrity import verify
    from fm_assets.storage.bookkeeping import stage_runs
    from fm_assets.storage.orphans import sweep_orphans

    whole, profile = reference
    seed = int(os.environ.get("FM_CRASH_SEED") or random.SystemRandom().randrange(1 << 32))
    print(f"crash seed {seed} (FM_CRASH_SEED={seed} replays it)")
    home = prepare(tmp_path / "fm", ray_address)

    kills: list[Kill] = []
    for point in kill_points(seed):
        kill = crash_at(home, point, profile, ray_head_pid)
        kills.append(kill)
        seen = contents(home.settings, home.batch_id)
        bad = partial(seen, whole)
        shown = {n: (seen.partitions.get(n, ())[:3], whole.partitions.get(n, ())[:3]) for n in bad}
        assert bad == [], f"seed {seed}: {kill} left partial data (seen, whole): {shown}"

    landed = [k.landed_in for k in kills]
    print(f"kills landed in {landed}")
    # A kill lands in its step unless the delay after the step's last moment outlasted its
    # commit: then in the next step, or past the end.
    assert len(set(landed) & set(STEPS)) >= len(STEPS) - 2, f"seed {seed}: kills in {landed}"
    assert any(k.worker_pid for k in kills), f"seed {seed}: no Ray worker was busy to kill"

    run_through(home)
    after = contents(home.settings, home.batch_id)
    differ = sorted(n for n, rows in whole.partitions.items() if after.partitions.get(n) != rows)
    assert after == whole, f"seed {seed}: {differ} differ"
    committed = [r["stage"] for r in stage_runs(home.settings) if r["batch_id"] == home.batch_id]
    assert sorted(committed) == sorted(pipeline.STAGE_NAMES), "a stage was committed twice"

    # What the killed attempts wrote and never committed: unreferenced, then swept.
    orphans = unreferenced_files(home.settings)
    swept = sweep_orphans(home.settings, grace=dt.timedelta(0))
    assert sorted(swept.removed) == sorted(orphans)
    assert unreferenced_files(home.settings) == []
    assert contents(home.settings, home.batch_id) == whole
    assert verify(home.settings, VERSION_KEY).ok
    shard_dir = next((home.settings.home / "objects" / "shards").rglob("fm_manifest.json")).parent
    names = {p.name for p in shard_dir.iterdir()}
    assert names == {n for n, _, _ in whole.shards} | {
        "index.json",
        "fm_manifest.json",
        "fm_namespaces.json",
    }, "a killed build left files in the shard set"
