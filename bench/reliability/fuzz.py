"""Fuzz inputs tried: seeded byte mutations of every seed through the readers (and some through
the raw and extract stages) and the manifest readers, then a time-bounded atheris run."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.harness import REPO, log
from tests.fuzzing import (
    MUTATIONS,
    Mutation,
    file_seeds,
    manifest_outcome,
    manifest_seeds,
    mutate,
    read_accounted,
    stages_accounted,
)


@dataclass
class Target:
    name: str
    inputs: int = 0
    records: int = 0  # items (reader), records (stages), or manifests read
    quarantined: int = 0  # unreadable items, quarantine rows, or manifests refused
    broken: int = 0  # inputs that raised or broke the accounting (goal 0)


def _mutations(rng: random.Random) -> list[Mutation]:
    return [
        Mutation(
            rng.choice(MUTATIONS),
            rng.randrange(1 << 20),
            rng.randrange(1 << 16),
            bytes(rng.randrange(256) for _ in range(rng.randrange(16))),
        )
        for _ in range(rng.randint(1, 4))
    ]


def measure(seed: int, per_seed: int, through_stages: int) -> list[Target]:
    rng = random.Random(seed)
    targets = []
    for name, data in sorted(file_seeds().items()):
        target = Target(f"reader: {name}")
        for _ in range(per_seed):
            target.inputs += 1
            try:
                got = read_accounted(name, mutate(data, _mutations(rng)))
            except Exception:  # the contract: nothing escapes a reader
                target.broken += 1
                continue
            target.records += got.items
            target.quarantined += sum(got.rules.values())
        targets.append(target)
    stages = Target("raw + extract stages, every seed")
    with tempfile.TemporaryDirectory(prefix="fm-fuzz-") as directory:
        names = sorted(file_seeds())
        for _ in range(through_stages):
            name = rng.choice(names)
            stages.inputs += 1
            try:
                got = stages_accounted(
                    Path(directory), name, mutate(file_seeds()[name], _mutations(rng))
                )
            except Exception:
                stages.broken += 1
                continue
            stages.records += got.records
            stages.quarantined += got.quarantined
    targets.append(stages)
    for kind, data in sorted(manifest_seeds().items()):
        target = Target(f"manifest: {kind}")
        for _ in range(per_seed):
            target.inputs += 1
            try:
                outcome = manifest_outcome(kind, mutate(data, _mutations(rng)))
            except Exception:
                target.broken += 1
                continue
            target.records += outcome == "read"
            target.quarantined += outcome == "refused"
        targets.append(target)
    broken = sum(t.broken for t in targets)
    log(f"fuzz: {sum(t.inputs for t in targets)} mutated inputs, {broken} broke a contract")
    return targets


@dataclass
class Atheris:
    seconds: int
    runs: int
    crashed: bool
    coverage: int


def atheris_run(seconds: int) -> Atheris:
    """tests/fuzz_atheris.py for `seconds`; its runs, final coverage and whether it crashed."""
    with tempfile.TemporaryDirectory(prefix="fm-atheris-") as directory:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.fuzz_atheris",
                str(Path(directory) / "corpus"),
                f"-max_total_time={seconds}",
                f"-artifact_prefix={directory}/",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=seconds + 300,
        )
    runs = re.search(r"Done (\d+) runs", done.stderr)
    coverage = re.findall(r"cov: (\d+)", done.stderr)
    log(f"atheris: {runs.group(1) if runs else '?'} runs in {seconds} s, exit {done.returncode}")
    return Atheris(
        seconds,
        int(runs.group(1)) if runs else 0,
        done.returncode != 0,
        int(coverage[-1]) if coverage else 0,
    )


def section(targets: list[Target], atheris: Atheris) -> str:
    lines = [
        "## 4. Fuzzing",
        "",
        "Seeded random byte mutations (flip, set, insert, delete, truncate, duplicate; 1-4 per "
        "input) of real seeds of every format (`tests/fuzzing.py`: the whirlwind WARC and WET, "
        "the legacy ARC, gzipped and not, JSONL, an HTML page, text) and of a valid landing "
        "and shard-set manifest. A reader's contract: never raise, at least one item, numbered, "
        "every unreadable item with a rule and a reason; the stages: records in = kept + "
        "quarantined with a reason; a manifest reader: a manifest or a ValueError.",
        "",
        "| target | inputs | items / records / manifests read | quarantined / refused | "
        "broke the contract (goal 0) |",
        "|---|---|---|---|---|",
    ]
    for t in targets:
        lines.append(f"| {t.name} | {t.inputs} | {t.records} | {t.quarantined} | {t.broken} |")
    total = sum(t.inputs for t in targets)
    crashed = "a crash (see its artifact)" if atheris.crashed else "no crash"
    lines += [
        f"| **all** | **{total}** | | | **{sum(t.broken for t in targets)}** |",
        "",
        f"Then atheris (libFuzzer, coverage-guided; `tests/fuzz_atheris.py`) over the same "
        f"targets for {atheris.seconds} s: {atheris.runs:,} inputs, final coverage "
        f"{atheris.coverage} edges, {crashed}.",
    ]
    return "\n".join(lines)
