"""Section 3: docs/s of the stage against raw trafilatura loops on the same pages, interleaved
chunk by chunk in rotating order, and the stage's own work around the library timed directly."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from unittest import mock

import pyarrow as pa

from bench.extraction.contestants import (
    CONTESTANTS,
    RAW_DEFAULT,
    RAW_SAME,
    STAGE,
    Run,
    merge_runs,
    raw_default,
    raw_stage_call,
    run_raw,
    run_stage_process,
)
from bench.extraction.pages import Page
from bench.harness import log, median, median_and_range, rotation
from fm_assets.stages import extract as extract_module
from fm_assets.stages.extract import ExtractStage

SPEED_TARGET = 0.85  # stage docs/s over raw trafilatura docs/s
# Pages per interleaving step: A, B and C each take ~1 s on a chunk, so a burst of load from the
# machine's other tenants lands on all three instead of on one 10-s pass.
CHUNK_PAGES = 20
LABELS = {
    STAGE: "A `ExtractStage.process(chunk)`",
    RAW_SAME: "B raw `trafilatura_text(html, url)` loop (the stage's own call)",
    RAW_DEFAULT: "C raw `trafilatura.extract(html)` loop (defaults)",
}


def run_contestant(
    name: str, stage: ExtractStage, table: pa.Table, pages: Sequence[Page], start: int, stop: int
) -> Run:
    """Contestant `name` on pages [start, stop)."""
    if name == STAGE:
        return run_stage_process(stage, table.slice(start, stop - start))
    return run_raw(pages[start:stop], raw_stage_call if name == RAW_SAME else raw_default)


def warm_up(stage: ExtractStage, table: pa.Table, pages: Sequence[Page]) -> dict[str, Run]:
    """One pass of each contestant over all pages: it warms imports and lxml, and its output is
    what the quality section scores."""
    first = {}
    for name in CONTESTANTS:
        first[name] = run_contestant(name, stage, table, pages, 0, len(pages))
        log(f"warm-up {name}: {first[name].timing.wall_s:.1f} s")
    return first


def speed_runs(
    stage: ExtractStage, table: pa.Table, pages: Sequence[Page], repeats: int
) -> dict[str, list[Run]]:
    """Each contestant's whole pass per repeat, summed over chunks run back to back."""
    speed: dict[str, list[Run]] = {name: [] for name in CONTESTANTS}
    step = 0
    for repeat in range(repeats):
        parts: dict[str, list[Run]] = {name: [] for name in CONTESTANTS}
        for start in range(0, len(pages), CHUNK_PAGES):
            # Rotate the order so no contestant always follows the same neighbour.
            order = rotation(CONTESTANTS, step)
            step += 1
            stop = min(start + CHUNK_PAGES, len(pages))
            for name in order:
                parts[name].append(run_contestant(name, stage, table, pages, start, stop))
        for name in CONTESTANTS:
            speed[name].append(merge_runs(parts[name]))
        log(
            f"repeat {repeat + 1}/{repeats}: "
            + ", ".join(f"{n} {speed[n][-1].timing.wall_s:.1f} s" for n in CONTESTANTS)
        )
    return speed


def stage_own_work(stage: ExtractStage, table: pa.Table, repeats: int) -> list[float]:
    """CPU seconds of `process` over the table with trafilatura replaced by a no-op.

    This is everything the stage adds around the library (Arrow access, decoding, the junk
    check, the timeout wrapper, building the output tables); it barely moves with load.
    """
    cpu = []
    # The stage looks its extractor up in EXTRACT_CALLS per page: replace it there.
    noop = {stage.extractor: lambda html, url: "text"}
    with mock.patch.dict(extract_module.EXTRACT_CALLS, noop):
        for _ in range(repeats):
            started = time.process_time()
            result = stage.process(table)
            cpu.append(time.process_time() - started)
    if set(result.kept.column("text").to_pylist()) != {"text"}:
        raise SystemExit(f"the no-op did not replace the stage's {stage.extractor} call")
    return cpu


def speed_section(
    pages: Sequence[Page],
    stage: ExtractStage,
    speed: dict[str, list[Run]],
    first_stage_run: Run,
    own_work_cpu: list[float],
) -> list[str]:
    """Section 3 of the report; `first_stage_run` is the warm-up pass of A (its timeouts count)."""
    n = len(pages)
    repeats = len(speed[STAGE])
    walls = {name: [r.timing.wall_s for r in speed[name]] for name in CONTESTANTS}
    cpus = {name: [r.timing.cpu_s for r in speed[name]] for name in CONTESTANTS}
    same_ratios = [b / a for a, b in zip(walls[STAGE], walls[RAW_SAME], strict=True)]
    default_ratios = [c / a for a, c in zip(walls[STAGE], walls[RAW_DEFAULT], strict=True)]
    same_cpu = [b / a for a, b in zip(cpus[STAGE], cpus[RAW_SAME], strict=True)]
    default_cpu = [c / a for a, c in zip(cpus[STAGE], cpus[RAW_DEFAULT], strict=True)]
    timeouts = sorted(
        {
            page
            for r in [*speed[STAGE], first_stage_run]
            for page, rule in r.rules.items()
            if rule == "extraction_timeout"
        }
    )
    other_rules = Counter(
        rule
        for r in [*speed[STAGE], first_stage_run]
        for rule in r.rules.values()
        if rule != "extraction_timeout"
    )
    raw_runs = [*speed[RAW_SAME], *speed[RAW_DEFAULT]]
    slowest = max(raw_runs, key=lambda r: r.slowest_s)
    lines = [
        "",
        "## 3. Speed",
        "",
        f"{repeats} repeats after one warm-up pass of each over all pages. "
        f"Each repeat walks the pages in chunks of {CHUNK_PAGES}, and on each chunk the three "
        "run back to back in rotating order (A B C, B C A, C A B, ...), so a burst of load "
        "lands on all three alike; a contestant's time for the repeat is the sum over its "
        "chunks. All in this one process on one core; A is called on each chunk as a table "
        "slice, as the runner calls it. A includes everything `process` does per row: decode the "
        "bytes (declared charset, then UTF-8), the junk-character check, the SIGALRM timeout "
        "around trafilatura, and building the kept/quarantined Arrow tables. B and C start "
        "from the already-decoded `str`, as the benchmark's harness does. Ratio = raw seconds / "
        "stage seconds of the same repeat (stage docs/s over raw docs/s); CPU ratio is the "
        "same with this process's CPU seconds, which the machine's other tenants disturb far "
        "less. Medians, min–max in brackets.",
        "",
        "| contestant | seconds | docs/s | CPU s |",
        "|---|--:|--:|--:|",
    ]
    for name in CONTESTANTS:
        rates = [n / w for w in walls[name]]
        lines.append(
            f"| {LABELS[name]} | {median_and_range(walls[name])} "
            f"| {median_and_range(rates, '.1f')} | {median_and_range(cpus[name])} |"
        )
    own = median(own_work_cpu) / median(cpus[RAW_SAME])
    own_ratio = 1 / (1 + own)
    same_verdict = "meets" if median(same_ratios) >= SPEED_TARGET else "**misses**"
    default_verdict = "meets" if median(default_ratios) >= SPEED_TARGET else "**misses**"
    lines += [
        "",
        "| ratio | wall | CPU |",
        "|---|--:|--:|",
        f"| stage / raw same call (A vs B): the stage's own overhead | "
        f"**{median_and_range(same_ratios, '.3f')}** | {median_and_range(same_cpu, '.3f')} |",
        f"| stage / raw default call (A vs C) | **{median_and_range(default_ratios, '.3f')}** "
        f"| {median_and_range(default_cpu, '.3f')} |",
        "",
        f"Against the target of ≥ {SPEED_TARGET}× (medians): the stage {same_verdict} it against "
        f"its own library call and {default_verdict} it against the library's default call.",
        "",
        f"The stage's own work, measured directly: `process` over all {n} rows with "
        "`trafilatura_text` patched to a no-op (Arrow access, decoding, junk check, timeout "
        "wrapper, "
        f"output tables) takes {median_and_range(own_work_cpu, '.3f')} CPU s per pass, "
        f"{own:.1%} of B's median CPU s, so with B's work unchanged the stage's throughput "
        f"is {own_ratio:.3f}× the raw call's. The wall and CPU ratios above spread far wider "
        "than that because the machine's other tenants slow whole chunks unevenly (see the "
        "load average in the method section); read them as noise around this figure.",
        "",
        f"Timeouts: {len(timeouts)} page(s) hit the stage's {stage.timeout_s:g} s "
        f"timeout in {1 + repeats} runs of `process`"
        + (f" ({', '.join(f'`{t[:12]}`' for t in timeouts)})" if timeouts else "")
        + "; other quarantines: "
        + (", ".join(f"{rule} ×{count}" for rule, count in other_rules.items()) or "none")
        + f". The slowest single page in any raw loop took {slowest.slowest_s:.2f} s "
        f"(`{slowest.slowest_page[:12]}`), "
        f"{slowest.slowest_s / stage.timeout_s:.0%} of the timeout.",
        "",
    ]
    return lines
