"""Crash injection, many rounds: SIGKILL the run at seeded random points of every step (and a
Ray worker mid-stage), rerun, and compare everything with an uninterrupted run."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import log
from fm_assets.storage.orphans import sweep_orphans
from tests.crash_driver import STEPS
from tests.crash_injection import (
    Contents,
    Kill,
    contents,
    crash_at,
    kill_points,
    partial,
    prepare,
    run_through,
    unreferenced_files,
)


@dataclass
class CrashFigures:
    seed: int
    rounds: int
    reference_rows: int = 0
    kills: list[Kill] = field(default_factory=list)
    partial_seen: int = 0  # partitions a reader could have seen half-done, after any kill
    rows_lost: int = 0  # rows of the uninterrupted result missing after the rerun
    rows_extra: int = 0  # rows the uninterrupted result does not have
    identical_rounds: int = 0  # reruns whose tables, version and shard checksums all matched
    orphans_swept: int = 0  # files killed attempts wrote, unreferenced, removed by the sweep


def _diff(seen: Contents, whole: Contents) -> tuple[int, int]:
    lost = extra = 0
    for name, rows in whole.partitions.items():
        mine = set(seen.partitions.get(name, ()))
        lost += len(set(rows) - mine)
        extra += len(mine - set(rows))
    return lost, extra


def measure(workdir: Path, ray_address: str, ray_head: int, seed: int, rounds: int) -> CrashFigures:
    figures = CrashFigures(seed, rounds)
    reference = prepare(workdir / "reference", ray_address)
    log("crashes: the uninterrupted run")
    profile = run_through(reference)
    whole = contents(reference.settings, reference.batch_id)
    figures.reference_rows = sum(len(rows) for rows in whole.partitions.values())
    for round_ in range(rounds):
        home = prepare(workdir / f"round-{round_}", ray_address)
        points = kill_points(seed + round_)
        log(f"crashes: round {round_ + 1}/{rounds}, {len(points)} kills (seed {seed + round_})")
        for point in points:
            kill = crash_at(home, point, profile, ray_head)
            figures.kills.append(kill)
            figures.partial_seen += len(partial(contents(home.settings, home.batch_id), whole))
        run_through(home)
        after = contents(home.settings, home.batch_id)
        lost, extra = _diff(after, whole)
        figures.rows_lost += lost
        figures.rows_extra += extra
        orphans = unreferenced_files(home.settings)
        figures.orphans_swept += len(sweep_orphans(home.settings, grace=dt.timedelta(0)).removed)
        if len(orphans) and unreferenced_files(home.settings):
            raise RuntimeError("the orphan sweep left unreferenced files behind")
        if contents(home.settings, home.batch_id) == whole:
            figures.identical_rounds += 1
    return figures


def section(figures: CrashFigures) -> str:
    run_kills = [k for k in figures.kills if k.landed_in != "finished"]
    by_step = {step: sum(k.landed_in == step for k in run_kills) for step in STEPS}
    workers = [k for k in figures.kills if k.worker_pid]
    lines = [
        "## 1. Crashes: SIGKILL anywhere, rerun, same result",
        "",
        f"{figures.rounds} rounds (seeds {figures.seed}..{figures.seed + figures.rounds - 1}), "
        "each in a fresh FM_HOME over the shared WARC `wget-sample-0000.warc.gz`: the run "
        "(`tests/crash_driver.py`: every stage, the version, the shard set) is SIGKILLed at a "
        "seeded random point of every step in turn, each rerun carrying on; in two of them it "
        "first loses a busy Ray worker mid-stage and must finish that stage. Compared with one "
        "uninterrupted run: every table partition of the batch (quarantine per stage), the "
        "version's content hash, the MDS shard checksums and the samples' lineage.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| runs killed (SIGKILL of the process group) | {len(run_kills)} |",
        f"| Ray workers killed mid-stage (the run went on) | {len(workers)} |",
        f"| kills that found the step already done | "
        f"{sum(k.landed_in == 'finished' for k in figures.kills)} |",
        f"| partial partitions a reader could see after a kill (goal 0) | {figures.partial_seen} |",
        f"| reruns identical to the uninterrupted run | {figures.identical_rounds} of "
        f"{figures.rounds} |",
        f"| rows of the uninterrupted result ({figures.reference_rows} per round) lost "
        f"(goal 0) | {figures.rows_lost} |",
        f"| rows the uninterrupted result does not have (goal 0) | {figures.rows_extra} |",
        f"| files of killed attempts swept as orphans | {figures.orphans_swept} |",
        "",
        "Kills by the step they landed in: "
        + ", ".join(f"{step} {n}" for step, n in by_step.items())
        + ".",
    ]
    return "\n".join(lines)
