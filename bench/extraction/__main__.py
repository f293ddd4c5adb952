"""Extraction benchmark: quality and speed of the extract stage on 181 real article pages.

One run, every figure from that run, written to `bench/results/extraction.md`:

1. Quality: token-level precision, recall and F1 of the text `ExtractStage.process` keeps, against
   each page's hand-made `articleBody`, next to the same figures for a raw default
   `trafilatura.extract(html)` on the same pages. Per page the score is a bag-of-tokens overlap
   with whitespace tokenisation; pages are combined both ways:
   - macro (headline, how the article-extraction benchmark aggregates): precision and recall
     averaged over pages, F1 = their harmonic mean; every page weighs the same;
   - micro: true/false positives and false negatives summed over pages, then P, R and F1; long
     pages weigh more.
   The benchmark's own shingle score (4-grams of `\\w+` tokens, macro) is shown as a cross-check.
2. Options: each trafilatura option of the stage varied on its own, with a paired bootstrap
   interval of the macro-F1 difference, so the choice of options rests on a measurement.
3. Speed: docs/s of `ExtractStage.process` on Arrow tables of the pages against raw
   `trafilatura.extract` loops over the already-decoded HTML, interleaved chunk by chunk in
   rotating order and repeated; each figure is the median of the repeats. The stage's own work
   around the library is also timed directly (trafilatura patched to a no-op). Pages that hit
   the stage's timeout are listed.

    python -m bench.extraction             # full run (~5 min on 2 cores)
    python -m bench.extraction --quick     # fewer speed repeats (~3 min)
    python -m bench.extraction --output /tmp/extraction.md

The data is read in place from `../shared/data/extraction/article-extraction-benchmark`
(scrapinghub/article-extraction-benchmark, MIT). It is not a test: the quality floor is asserted
by `tests/test_extraction_quality.py`, which computes the same macro figure.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.extraction.contestants import CONTESTANTS, STAGE
from bench.extraction.options import option_runs, options_section
from bench.extraction.pages import load_pages, raw_documents_table
from bench.extraction.quality import quality_section
from bench.extraction.speed import speed_runs, speed_section, stage_own_work, warm_up
from bench.harness import RESULTS, RunStart, log, median, parser, rerun_command, write_report
from fm_assets.formats.sniff import charset_from_meta
from fm_assets.stages.extract import ExtractStage

LIBRARIES = ("trafilatura", "lxml", "justext", "readability-lxml", "pyarrow")


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.extraction",
        __doc__.split("\n", 1)[0],
        RESULTS / "extraction.md",
        "two speed repeats instead of five",
    )
    args = cli.parse_args(argv)
    speed_repeats = 2 if args.quick else 5
    run_start = RunStart.now(rerun_command(cli, argv))
    pages = load_pages()
    table = raw_documents_table(pages)
    stage = ExtractStage()
    log(f"{len(pages)} pages, {sum(len(p.raw) for p in pages) / 1e6:.1f} MB of HTML")

    first = warm_up(stage, table, pages)
    speed = speed_runs(stage, table, pages, speed_repeats)
    for name in CONTESTANTS:
        for again in speed[name]:
            if again.texts != first[name].texts:
                raise RuntimeError(f"contestant {name} gave different text on a repeat")
    own_work_cpu = stage_own_work(stage, table, speed_repeats)
    log(f"stage's own work: {median(own_work_cpu):.2f} s CPU")
    variants = option_runs(pages)

    stamp = run_start.finish(LIBRARIES)
    lines = [
        "# Extraction quality and speed of the extract stage",
        "",
        f"{stamp.header()} Every figure below comes from that one run.",
        "",
        "## Data & method",
        "",
        f"{len(pages)} real article pages of the article-extraction benchmark "
        "(`../shared/data/extraction/article-extraction-benchmark`, scrapinghub, MIT), "
        f"{sum(len(p.raw) for p in pages) / 1e6:.1f} MB of HTML, each with a hand-made "
        "`articleBody`. The stage is `ExtractStage()` (default config, "
        f"`timeout_s={stage.timeout_s:g}`, version {ExtractStage.version}) and its "
        "`process` is called on one `RAW_DOCUMENTS` table of all the pages, filled as landing "
        "them would fill it: content type `html`, the page's bytes, the URL from the ground "
        "truth, the charset its `<meta>` declares (none for "
        f"{sum(1 for p in pages if charset_from_meta(p.raw) is None)} pages; no HTTP header). "
        "Its output text is read back by page id; a page it quarantines counts as empty "
        f"output. {stamp.machine_line()}",
        "",
        *quality_section(pages, first),
        *options_section(pages, variants, first[STAGE]),
        *speed_section(pages, stage, speed, first[STAGE], own_work_cpu),
    ]
    write_report(args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
