"""The three contestants on the same pages: A the stage's `process`, B the stage's own
trafilatura call in a plain loop, C trafilatura's default call in a plain loop; each run keeps
its texts and its wall and CPU seconds."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import trafilatura

from bench.extraction.pages import Page, stage_texts
from bench.harness import timed
from fm_assets.stages.extract import ExtractStage, trafilatura_text  # the stage's exact call

STAGE = "A"
RAW_SAME = "B"
RAW_DEFAULT = "C"
CONTESTANTS = (STAGE, RAW_SAME, RAW_DEFAULT)


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class Run:
    texts: dict[str, str | None]
    timing: Timing
    slowest_s: float  # slowest single page (raw loops only; 0 for the stage)
    slowest_page: str
    rules: dict[str, str]  # quarantine rule by page (stage only)


def run_stage_process(stage: ExtractStage, table: pa.Table) -> Run:
    """A: `process` on a table of pages, as the runner calls it on a chunk."""
    (kept, rules), wall, cpu = timed(lambda: stage_texts(stage, table))
    timing = Timing(wall, cpu)
    ids = table.column("external_id").to_pylist()
    return Run({i: kept.get(i) for i in ids}, timing, 0.0, "", rules)


def run_raw(pages: Sequence[Page], extract: Callable[[Page], str | None]) -> Run:
    """B or C: `extract` on each page's decoded HTML in a plain loop, the slowest page noted."""
    texts: dict[str, str | None] = {}
    slowest, slowest_page = 0.0, ""
    wall, cpu = time.perf_counter(), time.process_time()
    for page in pages:
        started = time.perf_counter()
        texts[page.page_id] = extract(page)
        took = time.perf_counter() - started
        if took > slowest:
            slowest, slowest_page = took, page.page_id
    timing = Timing(time.perf_counter() - wall, time.process_time() - cpu)
    return Run(texts, timing, slowest, slowest_page, {})


def merge_runs(parts: Sequence[Run]) -> Run:
    """One pass over all the pages from its per-chunk pieces."""
    slowest = max(parts, key=lambda r: r.slowest_s)
    return Run(
        texts={k: v for r in parts for k, v in r.texts.items()},
        timing=Timing(sum(r.timing.wall_s for r in parts), sum(r.timing.cpu_s for r in parts)),
        slowest_s=slowest.slowest_s,
        slowest_page=slowest.slowest_page,
        rules={k: v for r in parts for k, v in r.rules.items()},
    )


def raw_default(page: Page) -> str | None:
    """The library's plain default call, as the benchmark's harness makes it."""
    return trafilatura.extract(page.html)


def raw_stage_call(page: Page) -> str | None:
    """The very call the stage makes, without decoding, checks, timeout or Arrow."""
    return trafilatura_text(page.html, page.url)
