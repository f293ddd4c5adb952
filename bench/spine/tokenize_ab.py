"""Section 2, A/B: the tokenize stage (A) and the bare `Tokenizer.encode_batch_fast` (B, the
call the stage's workers make) on the very same texts (the stage's input partition), one pair
per JSONL batch, with the CPU seconds of the whole process tree. B runs two ways: in this
process on the library's own threads, and in one process per CPU with a thread each; the faster
is the library's limit."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow.compute as pc

from bench.harness import MB, median, tree_cpu_seconds
from bench.spine import ray_tasks
from bench.spine.stages import STAGES, StageTiming, run_timed_stage, with_input_bytes
from bench.spine.tokenize_processes import EncodingProcesses
from fm_assets.execution import pipeline
from fm_assets.settings import Settings
from fm_assets.storage import catalog

TOKENIZE = STAGES[-1]
TOKENIZE_TARGET = 0.95  # stage tokens/s over raw encode_batch_fast tokens/s
TOKENIZE_INPUT = pipeline.upstream_of(TOKENIZE) or ""  # the partition the stage reads


@dataclass(frozen=True)
class TokenizePair:
    """One A/B pair: the tokenize stage, then the bare library on the same texts."""

    docs: int
    text_bytes: int
    stage_s: float
    stage_cpu_s: float  # CPU seconds of the driver, Ray's daemons and workers during A
    stage_tokens: int  # includes one EOS per document
    raw_s: float  # B in this process, the library's thread pool on every core
    raw_cpu_s: float  # the same during B: ~2x raw_s when B had both cores to itself
    raw_tokens: int
    split_s: float  # B in one process per CPU, one tokenizer thread each
    split_cpu_s: float

    @property
    def library_s(self) -> float:
        """The faster of the library's two layouts."""
        return min(self.raw_s, self.split_s)

    @property
    def library_cpu_s(self) -> float:
        return self.raw_cpu_s if self.raw_s <= self.split_s else self.split_cpu_s

    @property
    def ratio(self) -> float:
        """Stage throughput over library throughput (its faster layout) on identical work."""
        return self.library_s / self.stage_s

    @property
    def cpu_ratio(self) -> float:
        """Library CPU seconds over stage CPU seconds: efficiency, less sensitive to noise."""
        return self.library_cpu_s / self.stage_cpu_s


def worker_niceness() -> int:
    """The scheduling niceness Ray gives its worker processes (Ray's `worker_niceness`)."""
    import ray

    ray_tasks.by_value()
    return int(ray.get(ray.remote(num_cpus=1)(ray_tasks.niceness).remote()))


def raw_encode(tokenizer: object, texts: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (process tree) and tokens of one `encode_batch_fast` over
    `texts` (the stage's own call: the same ids, no offsets)."""
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)  # type: ignore[attr-defined]
    seconds = time.perf_counter() - started
    return seconds, tree_cpu_seconds() - cpu, sum(len(e) for e in encodings)


def tokenize_pair(
    settings: Settings, batch_id: str, tokenizer: object, processes: EncodingProcesses
) -> tuple[StageTiming, TokenizePair]:
    """A: the tokenize stage on a batch; B: the bare library on its very texts, right after, in
    this process, then in `processes`."""
    texts = (
        catalog.read_batch(settings, TOKENIZE_INPUT, batch_id, columns=("text",))
        .column("text")
        .to_pylist()
    )
    cpu = tree_cpu_seconds()
    timing = run_timed_stage(settings, TOKENIZE, batch_id)
    stage_cpu_s = tree_cpu_seconds() - cpu
    stage = with_input_bytes(settings, batch_id, timing)
    raw_s, raw_cpu_s, raw_tokens = raw_encode(tokenizer, texts)
    split_s, split_cpu_s, split_tokens = processes.encode(texts)
    if split_tokens != raw_tokens:
        raise RuntimeError(
            f"the tokenizer in worker processes made {split_tokens} tokens, here {raw_tokens}"
        )
    tokens = catalog.read_batch(settings, TOKENIZE, batch_id, columns=("num_tokens",))
    pair = TokenizePair(
        docs=len(texts),
        text_bytes=stage.bytes_in,
        stage_s=stage.seconds,
        stage_cpu_s=stage_cpu_s,
        stage_tokens=int(pc.sum(tokens.column("num_tokens")).as_py() or 0),
        raw_s=raw_s,
        raw_cpu_s=raw_cpu_s,
        raw_tokens=raw_tokens,
        split_s=split_s,
        split_cpu_s=split_cpu_s,
    )
    return stage, pair


def tokenize_section(pairs: Sequence[TokenizePair], worker_niceness: int) -> list[str]:
    """Section 2's A/B table and verdict; the breakdown (`tokenize_profile`) follows it."""
    ratio = median([p.ratio for p in pairs])
    verdict = "meets" if ratio >= TOKENIZE_TARGET else "misses"
    lines = [
        "## 2. Tokenize stage vs the library",
        "",
        'A = `run_stage(settings, "tokenized_documents", batch)` on a fresh batch (lookups, '
        "Iceberg read, Ray tasks: a slice per worker, each with the library's pool of two "
        "threads, Arrow, Iceberg commits); "
        "B = `Tokenizer.encode_batch_fast(texts, add_special_tokens=False)` (the call the "
        f"stage's workers make) on the very same texts, the `{TOKENIZE_INPUT}` partition the "
        "stage reads, right after A, two ways: **B1** in this process with "
        "`TOKENIZERS_PARALLELISM=true` (the library's thread pool on both cores), **B2** in two "
        "worker processes with one tokenizer thread each (a process per CPU, as the stage's "
        "workers), each holding "
        "half the text (by characters) before the clock starts. The library's limit is the "
        "faster of B1 and B2 in each pair. "
        "Ratio = limit seconds / A seconds: stage throughput over library throughput on "
        f"identical work; target ≥ {TOKENIZE_TARGET}. A's tokens include one EOS per document. "
        "CPU s: CPU seconds of this process and all its descendants (Ray's daemons and workers, "
        "B2's processes) during A or B, read from /proc; B1 CPU/wall near 2.0 means B1 had both "
        "cores to itself. CPU ratio = the limit's CPU s / A CPU s: how much CPU the stage spends "
        "per unit of the library's work, which the machine's other tenants disturb far less "
        "than wall time.",
        "",
        "| pair | docs | text MB | tokens | A s | B1 s | B2 s | A M tok/s | limit M tok/s "
        "| A CPU s | B1 CPU s | B2 CPU s | B1 CPU/wall | ratio | CPU ratio |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for n, p in enumerate(pairs, 1):
        lines.append(
            f"| {n} | {p.docs:,} | {p.text_bytes / MB:.2f} | {p.raw_tokens:,} | {p.stage_s:.2f} "
            f"| {p.raw_s:.2f} | {p.split_s:.2f} | {p.stage_tokens / p.stage_s / 1e6:.3f} "
            f"| {p.raw_tokens / p.library_s / 1e6:.3f} | {p.stage_cpu_s:.2f} "
            f"| {p.raw_cpu_s:.2f} | {p.split_cpu_s:.2f} | {p.raw_cpu_s / p.raw_s:.2f} "
            f"| {p.ratio:.2f} | {p.cpu_ratio:.2f} |"
        )
    stage_s = median([p.stage_s for p in pairs])
    library_s = median([p.library_s for p in pairs])
    tokens = median([p.raw_tokens for p in pairs])
    busy = median([p.raw_cpu_s / p.raw_s for p in pairs])
    cpu_ratio = median([p.cpu_ratio for p in pairs])
    b1_faster = sum(p.raw_s <= p.split_s for p in pairs)
    lines += [
        f"| **median** | | | | {stage_s:.2f} | {median([p.raw_s for p in pairs]):.2f} "
        f"| {median([p.split_s for p in pairs]):.2f} | {tokens / stage_s / 1e6:.3f} "
        f"| {tokens / library_s / 1e6:.3f} | {median([p.stage_cpu_s for p in pairs]):.2f} "
        f"| {median([p.raw_cpu_s for p in pairs]):.2f} "
        f"| {median([p.split_cpu_s for p in pairs]):.2f} | {busy:.2f} | **{ratio:.2f}** "
        f"| **{cpu_ratio:.2f}** |",
        "",
        f"The library's limit was B1 in {b1_faster} of {len(pairs)} pairs, B2 in the others.",
        "",
        f"The stage {verdict} the {TOKENIZE_TARGET} target (median of the per-pair ratios "
        f"{ratio:.2f}; CPU ratio {cpu_ratio:.2f}). Ray runs its workers at niceness "
        f"{worker_niceness} (Ray's `worker_niceness`), the driver at "
        f"{os.nice(0)}"
        + (
            ": when other tenants load the machine, A's workers yield to them and B does not."
            if worker_niceness > os.nice(0)
            else ": A's workers and B compete for the cores on equal terms."
        ),
        "",
    ]
    return lines
