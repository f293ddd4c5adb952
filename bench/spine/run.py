"""One spine benchmark run: every measurement once, in order, on one Ray, in a scratch folder."""

from __future__ import annotations

import gzip
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.fm_home import fresh_home, land
from bench.harness import NEOX_TOKENIZER, WARC_FILES, log, tree_timed
from bench.spine.shards import ShardRun, pack_version, shard_runs
from bench.spine.stages import (
    STAGES,
    StageTiming,
    describe_run,
    run_pipeline,
    warc_pages,
    write_big_jsonl,
)
from bench.spine.tokenize_ab import TokenizePair, tokenize_pair, worker_niceness
from bench.spine.tokenize_processes import EncodingProcesses
from bench.spine.tokenize_profile import profile_tokenize
from fm_assets.execution.compute import ensure_ray, worker_environment
from fm_assets.registries.tokenizers import default_tokenizer
from fm_assets.stages.tokenize import TokenizeStage
from fm_assets.versions.dataset_version import create_version

RAY_CPUS = 2


@dataclass(frozen=True)
class BenchConfig:
    """Input sizes and repeat counts of one benchmark run."""

    mode: str
    warc_repeats: int  # timed WARC pipelines, each in a fresh FM_HOME, after one cold run
    big_docs: int  # documents per generated JSONL batch
    batches: int  # generated JSONL batches = tokenize A/B pairs (A first in half of them)
    shard_repeats: int  # shard-set builds, each a new version over the first batch
    tofile_inner: int  # tofile calls per repeat (one call takes only milliseconds)
    profile_docs: int  # documents of the last batch the tokenize profile runs on


FULL = BenchConfig(
    "full",
    warc_repeats=3,
    big_docs=5_000,
    batches=10,
    shard_repeats=5,
    tofile_inner=5,
    profile_docs=2_000,
)
QUICK = BenchConfig(
    "quick",
    warc_repeats=1,
    big_docs=1_500,
    batches=4,
    shard_repeats=2,
    tofile_inner=3,
    profile_docs=1_000,
)


@dataclass
class Results:
    """Everything the report is built from."""

    config: BenchConfig
    ray_start_s: float = 0.0
    worker_niceness: int = 0
    split: tuple[int, int, int] = (0, 0, 0)  # B2's processes, B3's processes and threads
    idle_cores: float = 0.0  # CPU the idle Ray daemons (and this process) use, in cores
    version_s: float = 0.0
    warc_decompressed_bytes: int = 0
    warc_cold: list[StageTiming] = field(default_factory=list)
    warc_runs: list[list[StageTiming]] = field(default_factory=list)
    big_file_bytes: int = 0
    big_runs: list[list[StageTiming]] = field(default_factory=list)
    pairs: list[TokenizePair] = field(default_factory=list)
    profile: dict[str, float] = field(default_factory=dict)
    shard_runs: list[ShardRun] = field(default_factory=list)
    shard_samples: int = 0
    shard_tokens: int = 0


COLD_HOME = "home-warc-cold"  # the FM_HOME whose local Ray the whole run uses


def run(config: BenchConfig, scratch: Path) -> Results:
    """Run every measurement once, in order, on one Ray; each FM_HOME is a folder of `scratch`."""
    from tokenizers import Tokenizer

    results = Results(config=config)
    results.warc_decompressed_bytes = sum(len(gzip.decompress(p.read_bytes())) for p in WARC_FILES)

    cold = fresh_home(scratch / COLD_HOME, RAY_CPUS)
    started = time.perf_counter()
    ensure_ray(cold)
    results.ray_start_s = time.perf_counter() - started
    log(f"Ray started in {results.ray_start_s:.1f}s")
    results.worker_niceness = worker_niceness()
    _, idle_s, idle_cpu = tree_timed(lambda: time.sleep(3))
    results.idle_cores = idle_cpu / idle_s

    # The first run on a fresh Ray also starts the worker processes and their imports.
    cold_batch = land(cold, WARC_FILES, "bench")
    results.warc_cold = run_pipeline(cold, cold_batch, STAGES)
    describe_run("WARC cold run", results.warc_cold)
    pages = warc_pages(cold, cold_batch)
    for repeat in range(config.warc_repeats):
        # The same files land as the same batch id: a fresh home per repeat makes the work real.
        settings = fresh_home(scratch / f"home-warc-{repeat}", RAY_CPUS)
        results.warc_runs.append(
            run_pipeline(settings, land(settings, WARC_FILES, "bench"), STAGES)
        )
        describe_run(f"WARC repeat {repeat + 1}", results.warc_runs[-1])

    big = fresh_home(scratch / "home-big", RAY_CPUS)
    info = default_tokenizer(big)
    os.environ["TOKENIZERS_PARALLELISM"] = "true"  # B1: the library's pool in this process
    tokenizer = Tokenizer.from_file(str(NEOX_TOKENIZER))
    big_batches: list[str] = []
    # B3 mirrors the stage: one slice per Ray worker (`slices_per_cpu` 1, a warm worker per
    # CPU), each worker with the thread pool `compute.worker_environment` gives it.
    b3_processes = TokenizeStage.slices_per_cpu * RAY_CPUS
    b3_threads = int(worker_environment(big)["RAYON_NUM_THREADS"])
    results.split = (RAY_CPUS, b3_processes, b3_threads)
    with (
        EncodingProcesses(str(NEOX_TOKENIZER), RAY_CPUS, threads=1) as b2,
        EncodingProcesses(str(NEOX_TOKENIZER), b3_processes, threads=b3_threads) as b3,
    ):
        for repeat in range(config.batches):
            name = f"docs-{repeat}.jsonl"
            path = write_big_jsonl(pages, config.big_docs, repeat, scratch / name)
            results.big_file_bytes = path.stat().st_size
            batch = land(big, [path], "bench")
            big_batches.append(batch)
            timings = run_pipeline(big, batch, STAGES[:-1])
            stage, pair = tokenize_pair(big, batch, repeat, tokenizer, {"B2": b2, "B3": b3})
            results.big_runs.append([*timings, stage])
            results.pairs.append(pair)
            describe_run(f"JSONL repeat {repeat + 1}", results.big_runs[-1])
            log(
                f"  {'A first' if pair.a_first else 'B first'}: A tokenize stage "
                f"{pair.stage_s:.2f}s, "
                + ", ".join(f"{k} {v.seconds:.2f}s" for k, v in sorted(pair.library.items()))
                + f"; ratio {pair.ratio:.2f}; load {pair.load_1m:.1f}, others "
                f"{pair.others_cores:.2f} cores"
            )

    log("profiling the tokenize stage")
    results.profile = profile_tokenize(big, big_batches[-1], config.profile_docs)

    started = time.perf_counter()
    create_version(big, "bench@v1", [big_batches[0]], run_id=None)
    results.version_s = time.perf_counter() - started
    packed = pack_version(big, "bench@v1", tokenizer)
    results.shard_samples = len(packed.sequences)
    results.shard_tokens = sum(ids.size for _, ids in packed.sequences)
    results.shard_runs = shard_runs(
        big, big_batches[0], info, packed, scratch, config.shard_repeats, config.tofile_inner
    )
    return results
