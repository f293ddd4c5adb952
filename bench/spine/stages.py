"""Section 1: each curation stage through `run_stage`, timed on its own and split at its
progress messages, on the shared WARCs and on generated JSONL batches."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow.compute as pc

from bench.fm_home import StagePhases, stage_phases
from bench.harness import MB, log, median, median_and_range
from fm_assets.execution import pipeline
from fm_assets.execution.runner import run_stage
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import open_object_store

STAGES = pipeline.STAGE_NAMES


@dataclass(frozen=True)
class StageTiming:
    """One timed `run_stage` call and the phases its progress messages delimit."""

    stage: str
    seconds: float
    docs_in: int
    docs_kept: int
    bytes_in: int  # landed file bytes (raw stage), raw payload bytes, or UTF-8 text bytes
    phases: StagePhases


def stage_input_bytes(settings: Settings, stage: str, batch_id: str) -> int:
    """Bytes a stage consumed: landed file bytes, raw payload bytes, or UTF-8 text bytes."""
    upstream = pipeline.upstream_of(stage)
    if upstream is None:
        return read_manifest(open_object_store(settings), batch_id).total_bytes
    column = "raw_size" if upstream == "raw_documents" else "text"
    values = catalog.read_batch(settings, upstream, batch_id, columns=(column,)).column(column)
    if column == "text":
        values = pc.binary_length(values)
    return int(pc.sum(values).as_py() or 0)


def run_timed_stage(settings: Settings, stage: str, batch_id: str) -> StageTiming:
    """Time one `run_stage` call that must do real work (not the up-to-date short-circuit)."""
    events: list[tuple[float, str]] = []
    started = time.perf_counter()
    report = run_stage(
        settings,
        stage,
        batch_id,
        run_id="bench",
        progress=lambda message: events.append((time.perf_counter(), message)),
    )
    ended = time.perf_counter()
    if report.skipped:
        raise RuntimeError(f"{stage} for {batch_id} was up to date: nothing was measured")
    return StageTiming(
        stage=stage,
        seconds=ended - started,
        docs_in=report.records_in,
        docs_kept=report.records_kept,
        bytes_in=0,
        phases=stage_phases(stage, started, ended, events),
    )


def with_input_bytes(settings: Settings, batch_id: str, timing: StageTiming) -> StageTiming:
    """The timing with the stage's input bytes filled in (measured after the clock stopped)."""
    return replace(timing, bytes_in=stage_input_bytes(settings, timing.stage, batch_id))


def run_pipeline(settings: Settings, batch_id: str, stages: Sequence[str]) -> list[StageTiming]:
    """Run `stages` in order for one batch, each timed on its own."""
    timings = [run_timed_stage(settings, stage, batch_id) for stage in stages]
    return [with_input_bytes(settings, batch_id, t) for t in timings]


def describe_run(label: str, timings: Sequence[StageTiming]) -> None:
    parts = ", ".join(f"{t.stage.split('_')[0]} {t.seconds:.2f}s" for t in timings)
    log(f"{label}: {parts}; total {sum(t.seconds for t in timings):.2f}s")


Page = tuple[str, str | None, str | None]  # extracted text, url, lang hint


def warc_pages(settings: Settings, batch_id: str) -> list[Page]:
    """The extracted text, url and language hint of every kept WARC page."""
    table = catalog.read_batch(
        settings, "extracted_documents", batch_id, columns=("text", "url", "lang_hint")
    )
    columns = [table.column(name).to_pylist() for name in ("text", "url", "lang_hint")]
    return list(zip(*columns, strict=True))


def write_big_jsonl(pages: Sequence[Page], count: int, repeat: int, out: Path) -> Path:
    """Write `count` distinct documents built from the WARC pages' text as one JSONL file.

    Document i is page i mod len(pages) with its lines shuffled (seeded) under a header line
    naming the repeat and the index, so no two documents, within or across repeats, share bytes
    and exact dedup keeps every one of them.
    """
    rng = random.Random(repeat * 1_000_003 + count)
    with out.open("w", encoding="utf-8") as f:
        for i in range(count):
            text, url, lang = pages[i % len(pages)]
            lines = text.split("\n")
            rng.shuffle(lines)
            body = "\n".join([f"Benchmark document {repeat}-{i}", *lines])
            record = {"id": f"bench-{repeat}-{i}", "text": body, "url": url, "lang": lang}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return out


def stage_rows(label: str, runs: Sequence[Sequence[StageTiming]]) -> list[str]:
    """Table rows for one input: a row per stage (median over repeats) and a total row."""
    rows = []
    for index, first in enumerate(runs[0]):
        timings = [run[index] for run in runs]
        seconds = [t.seconds for t in timings]
        s = median(seconds)
        phases = " / ".join(
            f"{median([getattr(t.phases, name) for t in timings]):.2f}"
            for name in ("plan_s", "ray_s", "commit_s")
        )
        rows.append(
            f"| {label} | {first.stage} | {first.docs_in:,} | {first.docs_kept:,} "
            f"| {first.bytes_in / MB:.2f} | {median_and_range(seconds)} | {first.docs_in / s:,.0f} "
            f"| {first.bytes_in / MB / s:.2f} | {phases} |"
        )
    totals = [sum(t.seconds for t in run) for run in runs]
    total = median(totals)
    landed, docs, kept = runs[0][0].bytes_in, runs[0][0].docs_in, runs[0][-1].docs_kept
    rows.append(
        f"| {label} | **all {len(runs[0])} stages** | {docs:,} | {kept:,} | {landed / MB:.2f} "
        f"| {median_and_range(totals)} | {docs / total:,.0f} | {landed / MB / total:.2f} | |"
    )
    return rows


def stages_section(
    warc_runs: Sequence[Sequence[StageTiming]], big_runs: Sequence[Sequence[StageTiming]]
) -> list[str]:
    """Section 1 of the report: a row per stage and input, and a total per input."""
    return [
        "## 1. End-to-end stages",
        "",
        "MB in: landed file bytes for `raw_documents` (compressed for WARC), record payload bytes "
        "for `extracted_documents`, UTF-8 text bytes for every later stage. The phase column "
        "splits each call at its progress messages: lookups + planning / Ray tasks (reading, "
        "processing, writing data files) / Iceberg commits. JSONL documents are text, so "
        "`extracted_documents` only decodes and checks them (no trafilatura); `raw_documents` "
        "cuts a large JSONL file into parts at line boundaries and parses them in parallel.",
        "",
        "| input | stage | docs in | docs kept | MB in | seconds | docs/s | MB/s "
        "| plan / Ray / commit s |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
        *stage_rows("WARC", warc_runs),
        *stage_rows("JSONL", big_runs),
    ]
