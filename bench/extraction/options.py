"""Section 2: each trafilatura option of the stage varied on its own, with a paired bootstrap
interval of the macro-F1 difference, so the choice of options rests on a measurement."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import trafilatura

from bench.extraction.contestants import Run, run_raw
from bench.extraction.pages import Page
from bench.extraction.quality import page_overlaps
from bench.extraction.scores import (
    BOOTSTRAP_SAMPLES,
    bootstrap_difference,
    macro_f1,
    scores,
    token_overlap,
)
from bench.harness import log

# The options `trafilatura_text` passes, mirrored so section 2 can vary them one at a time; the run
# checks that this mirror reproduces the stage's output page for page.
STAGE_OPTIONS: dict[str, Any] = {
    "include_comments": False,
    "include_tables": True,
    "deduplicate": False,
    "with_metadata": False,
}
OPTION_VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("stage options", {}),
    ("include_comments=True (the library default)", {"include_comments": True}),
    ("include_tables=False", {"include_tables": False}),
    ("deduplicate=True", {"deduplicate": True}),
    ("favor_precision=True", {"favor_precision": True}),
    ("favor_recall=True", {"favor_recall": True}),
    ("fast=True (no fallback extractors)", {"fast": True}),
]


def raw_with(options: dict[str, Any]) -> Callable[[Page], str | None]:
    """Raw `trafilatura.extract` with the stage's options, `options` changed."""

    def extract(page: Page) -> str | None:
        return trafilatura.extract(page.html, url=page.url, **{**STAGE_OPTIONS, **options})

    return extract


def option_runs(pages: Sequence[Page]) -> list[tuple[str, Run]]:
    """One pass of raw `trafilatura.extract` per row of OPTION_VARIANTS."""
    variants = []
    for label, options in OPTION_VARIANTS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            variants.append((label, run_raw(pages, raw_with(options))))
        log(f"variant {label}: {variants[-1][1].timing.wall_s:.1f} s")
    return variants


def options_section(
    pages: Sequence[Page], variants: list[tuple[str, Run]], stage_run: Run
) -> list[str]:
    """Section 2 of the report; the first variant must reproduce `stage_run`'s text."""
    n = len(pages)
    mirror = variants[0][1].texts
    mirror_matches = sum(mirror[p.page_id] == stage_run.texts[p.page_id] for p in pages)
    lines = [
        "",
        "## 2. Options",
        "",
        "Raw `trafilatura.extract(html, url=url, **options)` with the stage's options "
        f"({', '.join(f'`{k}={v}`' for k, v in STAGE_OPTIONS.items())}) and one option changed "
        "per row. Δ = macro F1 of the row minus that of the stage's options, with a paired "
        f"bootstrap 95% interval over pages ({BOOTSTRAP_SAMPLES:,} resamples). docs/s is a "
        "single pass each, indicative only. The first row reproduces the stage's output on "
        f"{mirror_matches}/{n} pages.",
        "",
        "| options | macro P | macro R | macro F1 | Δ macro F1 (95% interval) | micro F1 "
        "| docs/s |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    base = page_overlaps(pages, variants[0][1], token_overlap)
    for label, variant in variants:
        overlaps = page_overlaps(pages, variant, token_overlap)
        s = scores(overlaps)
        if variant is variants[0][1]:
            delta = "—"
        else:
            lo, hi = bootstrap_difference(overlaps, base)
            delta = f"{s.macro_f1 - macro_f1(base):+.4f} ({lo:+.4f} to {hi:+.4f})"
        lines.append(
            f"| {label} | {s.macro_precision:.4f} | {s.macro_recall:.4f} | {s.macro_f1:.4f} "
            f"| {delta} | {s.micro_f1:.4f} | {n / variant.timing.wall_s:.1f} |"
        )
    return lines
