"""Reliability under faults, counted: each figure with the records it lost (goal: 0).

    python -m bench.reliability            # full: ~30-60 min on 2 loaded cores
    python -m bench.reliability --quick    # one round of each: ~10-15 min
    python -m bench.reliability --seed 7   # other kill points, plants and mutations

1. crash injection: rounds of SIGKILLs of the run at seeded random moments of every step (every
   stage, the version cut, the shard-set build) and of Ray workers mid-stage; each round's rerun
   compared with an uninterrupted run (tables, version hash, shard checksums, lineage);
2. faults of the environment on a real S3 server (SeaweedFS) behind a proxy: resets mid-answer,
   reads that hang past the client's timeout, 500, 503 and SlowDown answers, a landed object
   reported missing (404), a store down then back, cut downloads and a stalled re-fetch in the
   loader;
3. corrupt bytes: one bit flipped in files of every kind a version stands on, found by
   `fm verify` (and the loader) naming the file;
4. fuzzing: seeded mutations through every reader, the raw and extract stages and the manifest
   readers, then a time-bounded atheris run.

It starts its own local Ray (2 CPUs) and SeaweedFS on loopback, works in a temporary directory
it deletes, and stops both by their pids. Nothing here is timed: the figures are counts.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.harness import RESULTS, RunStart, log, parser, rerun_command, write_report
from bench.reliability import corruption, crashes, faults, fuzz
from fm_assets.checks.integrity import verify
from fm_assets.execution.local_ray import start_local_ray, stop_local_ray
from fm_assets.settings import load_settings
from tests.crash_driver import VERSION_KEY
from tests.services.fixtures import s3_credentials

FULL = {
    "rounds": 5,
    "fault_rounds": 3,
    "per_kind": 10,
    "per_seed": 300,
    "stages": 100,
    "atheris": 120,
}
QUICK = {"rounds": 1, "fault_rounds": 1, "per_kind": 2, "per_seed": 40, "stages": 15, "atheris": 20}


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.reliability",
        __doc__.splitlines()[0],
        RESULTS / "reliability.md",
        "one round of each",
    )
    cli.add_argument("--seed", type=int, default=None, help="seed of every random choice")
    args = cli.parse_args(argv)
    plan = QUICK if args.quick else FULL
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    run_start = RunStart.now(rerun_command(cli, argv))
    log(f"seed {seed}")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    with tempfile.TemporaryDirectory(prefix="fm-bench-reliability-") as directory:
        workdir = Path(directory)
        ray_home = load_settings({"FM_HOME": str(workdir / "ray"), "FM_RAY_NUM_CPUS": "2"})
        # The nodes get the loopback S3 server's credentials from their environment, as a
        # cluster's pods do: the raw stage's workers read landed files from it.
        os.environ.update(s3_credentials())
        os.environ["RAY_ADDRESS"] = start_local_ray(ray_home)
        head = int(json.loads((ray_home.home / "ray" / "head.json").read_text())["pid"])
        try:
            crash = crashes.measure(
                workdir / "crashes", os.environ["RAY_ADDRESS"], head, seed, plan["rounds"]
            )
            reference = load_settings(
                {"FM_HOME": str(workdir / "crashes" / "reference"), **_ray_env()}
            )
            shard_dir = next((reference.home / "objects" / "shards").rglob("fm_manifest.json"))
            planted = corruption.measure(
                reference, VERSION_KEY, shard_dir.parent, plan["per_kind"], seed
            )
            clean_after = verify(reference, VERSION_KEY).ok
            kinds = faults.measure(workdir / "faults", plan["fault_rounds"])
        finally:
            import ray

            # Disconnect first: a driver whose cluster disappears under it exits the process.
            ray.shutdown()
            stop_local_ray(ray_home)
    targets = fuzz.measure(seed, plan["per_seed"], plan["stages"])
    atheris = fuzz.atheris_run(plan["atheris"])
    stamp = run_start.finish(["ray", "pyiceberg", "mosaicml-streaming", "hypothesis", "atheris"])
    report = "\n\n".join(
        [
            "# Reliability under faults",
            stamp.header(),
            stamp.machine_line(),
            f"Seed {seed} (`--seed {seed}` replays every random choice).",
            _summary(crash, kinds, planted, targets, atheris),
            crashes.section(crash),
            faults.section(kinds),
            corruption.section(planted, lambda: clean_after),
            fuzz.section(targets, atheris),
        ]
    )
    write_report(args.output, report)


def _ray_env() -> dict[str, str]:
    return {"RAY_ADDRESS": os.environ["RAY_ADDRESS"]}


def _summary(
    crash: crashes.CrashFigures,
    kinds: list[faults.Kind],
    planted: list[corruption.Planted],
    targets: list[fuzz.Target],
    atheris: fuzz.Atheris,
) -> str:
    killed = sum(k.landed_in != "finished" for k in crash.kills)
    workers = sum(bool(k.worker_pid) for k in crash.kills)
    return "\n".join(
        [
            "| figure | count | records lost (goal 0) |",
            "|---|---|---|",
            f"| crash-injection runs survived (SIGKILL of the run; of a Ray worker) | "
            f"{killed}; {workers} | {crash.rows_lost} rows, {crash.partial_seen} partial "
            "partitions seen |",
            *(
                f"| faults injected: {k.name} ({k.what}) | {k.injected} | {k.lost} "
                f"({k.wrongly_quarantined} wrongly quarantined) |"
                for k in kinds
            ),
            f"| corrupt files detected, naming the file, of planted | "
            f"{sum(p.named for p in planted)} of {sum(p.planted for p in planted)} | "
            f"{sum(p.consumed for p in planted)} consumed undetected |",
            f"| fuzz inputs tried (seeded mutations; atheris) | "
            f"{sum(t.inputs for t in targets):,}; {atheris.runs:,} | "
            f"{sum(t.broken for t in targets)} broke a contract"
            f"{'; atheris crashed' if atheris.crashed else ''} |",
        ]
    )


if __name__ == "__main__":
    main()
