"""The platform's side: the `fm` commands a user types, each in its own process, on a fresh
FM_HOME, with every line of progress timed as it arrives."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import NEOX_TOKENIZER, REPO

FM = Path(sys.executable).with_name("fm")
SOURCE = "webbench"
_STAGE_DONE = re.compile(r"\] (\w+): (\d+) kept, (\d+) quarantined in ([\d.]+)s$")
_RAY = re.compile(r"\] Ray: (.*) in ([\d.]+)s$")


def policy_text(limits: dict[str, float]) -> str:
    """The dataset policy with the thresholds DataTrove is given (FM_POLICY_FILE)."""
    return f"""[datasets.{SOURCE}]
extractor = "trafilatura"
allowed_languages = ["en"]
min_language_score = {limits["min_language_score"]}
quality_rule_sets = ["gopher_v1", "c4_v1", "fineweb_v1"]

[datasets.{SOURCE}.quality_thresholds]
gopher_min_words = {limits["gopher_min_words"]}
c4_min_kept_sentences = {limits["c4_min_kept_sentences"]}
fineweb_max_char_dup_ratio = {limits["fineweb_max_char_dup_ratio"]}
"""


@dataclass
class Command:
    """One `fm` command: wall seconds, its last stdout line and its timed progress lines."""

    argv: list[str]
    seconds: float
    output: str
    lines: list[tuple[float, str]] = field(default_factory=list)  # (seconds since start, line)
    peak_rss_bytes: int = 0  # the command's own process


@dataclass(frozen=True)
class StageTime:
    stage: str
    kept: int
    quarantined: int
    seconds: float  # as the stage reported it: run_stage from its lookups to its last commit


@dataclass(frozen=True)
class FmRun:
    """One run from a fresh FM_HOME to tokenized documents (and on to shards)."""

    setup_s: float  # fm tokenizer register
    land_s: float
    run_s: float
    version_s: float
    shards_s: float
    ray_s: float  # starting (or connecting to) Ray inside `fm run`
    first_stage_at_s: float  # `fm run` start -> its first stage reporting done
    stages: list[StageTime]
    checks_s: float  # last stage done -> `fm run` returned (the last asset's checks, exit)
    documents_in: int
    kept_after_quality: int
    kept_after_neardup: int
    tokens: int

    @property
    def headline_s(self) -> float:
        """Fresh FM_HOME to tokenized documents: what DataTrove's pipeline also does."""
        return self.setup_s + self.land_s + self.run_s


def environment(home: Path, cpus: int, policy: Path | None) -> dict[str, str]:
    """The caller's environment without its FM_* and Ray settings, plus this run's (no policy
    file: the default policy, every document through every stage)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FM_", "RAY_", "DAGSTER_")) and k != "PYTHONPATH"
    }
    return (
        env
        | {
            "FM_HOME": str(home),
            "FM_RAY_NUM_CPUS": str(cpus),
            "RAY_AUTH_MODE": "disabled",
            "PYTHONPATH": str(REPO),
        }
        | ({"FM_POLICY_FILE": str(policy)} if policy else {})
    )


def fm(env: dict[str, str], *args: str) -> Command:
    """Run `fm ARGS`, timing each progress line (stderr) as it arrives; fail loudly."""
    argv = [str(FM), *args]
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[tuple[float, str]] = []
    assert process.stderr is not None and process.stdout is not None
    for line in process.stderr:
        lines.append((time.perf_counter() - started, line.rstrip("\n")))
    output = process.stdout.read()
    # wait4, not wait: the peak RSS of this process alone (its local Ray runs in a session of
    # its own and outlives it, so none of Ray's processes count).
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = code = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if code != 0:
        tail = "\n".join(line for _, line in lines[-15:])
        raise RuntimeError(f"{' '.join(argv)} exited {code}:\n{tail}")
    last = output.strip().splitlines()[-1] if output.strip() else ""
    return Command(argv, seconds, last, lines, usage.ru_maxrss * 1024)


def _stages(run: Command) -> list[StageTime]:
    found = []
    for _, line in run.lines:
        match = _STAGE_DONE.search(line)
        if match:
            stage, kept, bad, seconds = match.groups()
            found.append(StageTime(stage, int(kept), int(bad), float(seconds)))
    return found


def run_fm(files: list[Path], home: Path, cpus: int, limits: dict[str, float]) -> FmRun:
    """Fresh FM_HOME → `fm tokenizer register`, `fm land`, `fm run`, then `fm version create`
    and `fm shards build`; the home's local Ray is stopped at the end (not timed)."""
    home.mkdir(parents=True)
    policy = home.parent / f"{home.name}-policy.toml"
    policy.write_text(policy_text(limits))
    env = environment(home, cpus, policy)
    try:
        setup = fm(env, "tokenizer", "register", str(NEOX_TOKENIZER), "--default")
        land = fm(env, "land", *map(str, files), "--source", SOURCE, "--license", "NOASSERTION")
        run = fm(env, "run", "--batch", land.output)
        version = fm(env, "version", "create", SOURCE)
        shards = fm(
            env,
            "shards",
            "build",
            version.output,
            "--tokenizer",
            str(NEOX_TOKENIZER),
            "--seq-len",
            "2048",
        )
    finally:
        subprocess.run([str(FM), "ray", "stop"], env=env, capture_output=True, check=False)
    stages = _stages(run)
    ray = [float(m.group(2)) for _, line in run.lines if (m := _RAY.search(line))]
    done_at = [t for t, line in run.lines if _STAGE_DONE.search(line)]
    by_stage = {s.stage: s for s in stages}
    raw = by_stage["raw_documents"]
    tokens = sum(
        int(m.group(1))
        for _, line in run.lines
        if (m := re.search(r"token_counts_consistent: passed \d+ documents, (\d+) tokens", line))
    )
    return FmRun(
        setup_s=setup.seconds,
        land_s=land.seconds,
        run_s=run.seconds,
        version_s=version.seconds,
        shards_s=shards.seconds,
        ray_s=ray[0] if ray else 0.0,
        first_stage_at_s=done_at[0] - by_stage[stages[0].stage].seconds if done_at else 0.0,
        stages=stages,
        checks_s=run.seconds - done_at[-1] if done_at else 0.0,
        documents_in=raw.kept + raw.quarantined,
        kept_after_quality=by_stage["quality_filtered_documents"].kept,
        kept_after_neardup=by_stage["near_deduplicated_documents"].kept,
        tokens=tokens,
    )
