"""Section 2, A/B: the tokenize stage (A) and the bare `Tokenizer.encode_batch_fast` (B, the
call the stage's workers make) on the very same texts (the stage's input partition), one pair
per fresh JSONL batch, with the CPU seconds of the whole process tree and the machine's load.
B runs three ways: in this process on the library's own thread pool (B1), in one process per
CPU with a thread each (B2), and in the stage's own layout, one process per Ray worker with the
library's pool of threads each (B3); the fastest of the three is the library's limit. A goes
first in every other pair, B in the others, and the three B layouts rotate their order too."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pyarrow.compute as pc

from bench.harness import (
    MB,
    machine_busy_seconds,
    median,
    median_and_range,
    rotation,
    tree_cpu_seconds,
)
from bench.spine import ray_tasks
from bench.spine.stages import STAGES, StageTiming, run_timed_stage, with_input_bytes
from bench.spine.tokenize_processes import EncodingProcesses
from fm_assets.execution import pipeline
from fm_assets.settings import Settings
from fm_assets.storage import catalog

TOKENIZE = STAGES[-1]
TOKENIZE_TARGET = 0.95  # stage tokens/s over the library's fastest layout's tokens/s
TOKENIZE_INPUT = pipeline.upstream_of(TOKENIZE) or ""  # the partition the stage reads
LAYOUTS = ("B1", "B2", "B3")


@dataclass(frozen=True)
class Encoded:
    """One timed run of the bare library over a pair's texts."""

    seconds: float
    cpu_s: float  # CPU seconds of the whole process tree meanwhile
    tokens: int


@dataclass(frozen=True)
class TokenizePair:
    """One A/B pair: the tokenize stage and the bare library (three layouts) on the same texts."""

    docs: int
    text_bytes: int
    a_first: bool  # A ran before the B layouts (pairs 1, 3, ...) or after them (2, 4, ...)
    stage_s: float
    stage_cpu_s: float  # CPU seconds of the driver, Ray's daemons and workers during A
    stage_tokens: int  # includes one EOS per document
    library: dict[str, Encoded] = field(default_factory=dict)  # by layout, B1 B2 B3
    load_1m: float = 0.0  # the 1-minute load average when the pair started
    others_cores: float = 0.0  # cores the machine's other tenants used during the pair

    @property
    def best(self) -> str:
        """The fastest of the library's layouts in this pair."""
        return min(self.library, key=lambda name: self.library[name].seconds)

    @property
    def library_s(self) -> float:
        return self.library[self.best].seconds

    @property
    def library_cpu_s(self) -> float:
        return self.library[self.best].cpu_s

    @property
    def tokens(self) -> int:
        return self.library["B1"].tokens

    @property
    def ratio(self) -> float:
        """Stage throughput over library throughput (its fastest layout) on identical work."""
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


def raw_encode(tokenizer: object, texts: list[str]) -> Encoded:
    """One `encode_batch_fast` over `texts` in this process (the stage's own call: the same
    ids, no offsets), on the library's thread pool."""
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)  # type: ignore[attr-defined]
    seconds = time.perf_counter() - started
    return Encoded(seconds, tree_cpu_seconds() - cpu, sum(len(e) for e in encodings))


def tokenize_pair(
    settings: Settings,
    batch_id: str,
    index: int,
    tokenizer: object,
    processes: dict[str, EncodingProcesses],
) -> tuple[StageTiming, TokenizePair]:
    """Pair `index` on a fresh batch: A, the tokenize stage, and B, the bare library on its very
    texts in each layout (B1 here, B2 and B3 in `processes`); A first when `index` is even."""
    texts = (
        catalog.read_batch(settings, TOKENIZE_INPUT, batch_id, columns=("text",))
        .column("text")
        .to_pylist()
    )
    library: dict[str, Encoded] = {}
    stage: list[tuple[StageTiming, float]] = []

    def run_a() -> None:
        cpu = tree_cpu_seconds()
        timing = run_timed_stage(settings, TOKENIZE, batch_id)
        stage.append((timing, tree_cpu_seconds() - cpu))

    def run_b() -> None:
        for name in rotation(LAYOUTS, index):
            library[name] = (
                raw_encode(tokenizer, texts)
                if name == "B1"
                else Encoded(*processes[name].encode(texts))
            )

    a_first = index % 2 == 0
    order: tuple[Callable[[], None], ...] = (run_a, run_b) if a_first else (run_b, run_a)
    load_1m = os.getloadavg()[0]
    busy, ours, started = machine_busy_seconds(), tree_cpu_seconds(), time.perf_counter()
    for step in order:
        step()
    wall = time.perf_counter() - started
    others = (machine_busy_seconds() - busy) - (tree_cpu_seconds() - ours)
    tokens = {e.tokens for e in library.values()}
    if len(tokens) != 1:
        raise RuntimeError(f"the library's layouts made different token counts: {library}")
    timing, stage_cpu_s = stage[0]
    timing = with_input_bytes(settings, batch_id, timing)
    counts = catalog.read_batch(settings, TOKENIZE, batch_id, columns=("num_tokens",))
    pair = TokenizePair(
        docs=len(texts),
        text_bytes=timing.bytes_in,
        a_first=a_first,
        stage_s=timing.seconds,
        stage_cpu_s=stage_cpu_s,
        stage_tokens=int(pc.sum(counts.column("num_tokens")).as_py() or 0),
        library=library,
        load_1m=load_1m,
        others_cores=max(0.0, others / wall),
    )
    return timing, pair


def tokenize_section(
    pairs: Sequence[TokenizePair], worker_niceness: int, split: tuple[int, int, int]
) -> list[str]:
    """Section 2's A/B table and verdict; the breakdown (`tokenize_profile`) follows it.
    `split` = (B2's processes, B3's processes, B3's threads per process)."""
    b2_processes, b3_processes, b3_threads = split
    ratios = [p.ratio for p in pairs]
    cpu_ratios = [p.cpu_ratio for p in pairs]
    ratio = median(ratios)
    verdict = "meets" if ratio >= TOKENIZE_TARGET else "misses"
    a_first = [p.ratio for p in pairs if p.a_first]
    b_first = [p.ratio for p in pairs if not p.a_first]
    lines = [
        "## 2. Tokenize stage vs the library",
        "",
        f"{len(pairs)} pairs, each on a fresh JSONL batch (the stage does the whole work every "
        'time; none short-circuited). A = `run_stage(settings, "tokenized_documents", batch)` '
        "(lookups, Iceberg read, Ray tasks: a slice per worker, each worker running the "
        "library's thread pool, Arrow, Iceberg commits); B = "
        "`Tokenizer.encode_batch_fast(texts, add_special_tokens=False)` (the call the stage's "
        f"workers make) on the very same texts, the `{TOKENIZE_INPUT}` partition the stage "
        "reads, in three layouts: **B1** in this process with `TOKENIZERS_PARALLELISM=true` "
        f"(one in-process thread pool on every core); **B2** {b2_processes} worker processes "
        "(one per CPU) with one tokenizer thread each; **B3** the stage's own layout, "
        f"{b3_processes} worker processes (a slice per Ray worker) with the library's pool of "
        f"{b3_threads} threads each (`TOKENIZERS_PARALLELISM=true`, "
        f"`RAYON_NUM_THREADS={b3_threads}`, as `compute.worker_environment` gives the Ray "
        "workers). B2 and B3 processes hold their share of the text (equal by characters) "
        "before the clock starts. The library's limit is the **fastest of B1, B2 and B3** in "
        "each pair. **Order**: A runs first in the odd-numbered pairs and after B in the "
        "even-numbered ones (half each), and the three B layouts rotate their order from pair "
        "to pair. Ratio = limit seconds / A seconds: stage throughput over the library's best "
        f"on identical work; target ≥ {TOKENIZE_TARGET}, judged on the median of the per-pair "
        "ratios, min–max in brackets. A's tokens include one EOS per document. CPU s: CPU "
        "seconds of this process and all its descendants (Ray's daemons and workers, B2's and "
        "B3's processes) during A or the limit's layout, read from /proc; B1 CPU/wall near 2.0 "
        "means B1 had both cores to itself; CPU ratio = the limit's CPU s / A CPU s. **Load**: "
        "the 1-minute load average when the pair started, and the cores the machine's other "
        "tenants used during the pair (all CPU time in `/proc/stat` less this run's process "
        "tree, over the pair's wall time).",
        "",
        "| pair | first | load 1 min | others' cores | docs | tokens | A s | B1 s | B2 s | B3 s "
        "| limit | A M tok/s | limit M tok/s | A CPU s | limit CPU s | B1 CPU/wall | ratio "
        "| CPU ratio |",
        "|--:|:-:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for n, p in enumerate(pairs, 1):
        b1 = p.library["B1"]
        lines.append(
            f"| {n} | {'A' if p.a_first else 'B'} | {p.load_1m:.1f} | {p.others_cores:.2f} "
            f"| {p.docs:,} | {p.tokens:,} | {p.stage_s:.2f} "
            + " ".join(f"| {p.library[name].seconds:.2f}" for name in LAYOUTS)
            + f" | {p.best} | {p.stage_tokens / p.stage_s / 1e6:.3f} "
            f"| {p.tokens / p.library_s / 1e6:.3f} | {p.stage_cpu_s:.2f} "
            f"| {p.library_cpu_s:.2f} | {b1.cpu_s / b1.seconds:.2f} "
            f"| {p.ratio:.2f} | {p.cpu_ratio:.2f} |"
        )
    stage_s = median([p.stage_s for p in pairs])
    library_s = median([p.library_s for p in pairs])
    tokens = median([p.tokens for p in pairs])
    busy = median([p.library["B1"].cpu_s / p.library["B1"].seconds for p in pairs])
    lines += [
        f"| **median** | | {median([p.load_1m for p in pairs]):.1f} "
        f"| {median([p.others_cores for p in pairs]):.2f} | {median([p.docs for p in pairs]):,.0f} "
        f"| {tokens:,.0f} | {stage_s:.2f} "
        + " ".join(f"| {median([p.library[name].seconds for p in pairs]):.2f}" for name in LAYOUTS)
        + f" | | {tokens / stage_s / 1e6:.3f} | {tokens / library_s / 1e6:.3f} "
        f"| {median([p.stage_cpu_s for p in pairs]):.2f} "
        f"| {median([p.library_cpu_s for p in pairs]):.2f} | {busy:.2f} | **{ratio:.2f}** "
        f"| **{median(cpu_ratios):.2f}** |",
        "",
        "The library's limit was "
        + ", ".join(f"{name} in {sum(p.best == name for p in pairs)}" for name in LAYOUTS)
        + f" of {len(pairs)} pairs. Text per batch "
        f"{median_and_range([p.text_bytes / MB for p in pairs])} MB.",
        "",
        f"**Ratio {median_and_range(ratios)}** (median of {len(pairs)} pairs, min–max); CPU "
        f"ratio {median_and_range(cpu_ratios)}. With A first: "
        f"{median_and_range(a_first) if a_first else '—'}; with B first: "
        f"{median_and_range(b_first) if b_first else '—'}. The stage {verdict} the "
        f"{TOKENIZE_TARGET} target. Ray runs its workers at niceness {worker_niceness} (Ray's "
        f"`worker_niceness`), the driver at {os.nice(0)}"
        + (
            ": when other tenants load the machine, A's workers yield to them and B does not."
            if worker_niceness > os.nice(0)
            else ": A's workers and B compete for the cores on equal terms."
        ),
        "",
    ]
    return lines
