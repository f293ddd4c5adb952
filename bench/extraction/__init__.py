"""Extraction benchmark: quality and speed of the extract stage on 181 real article pages.

`python -m bench.extraction` writes `bench/results/extraction.md`, one section per module:
`quality` (token P/R/F1 against `articleBody`), `options` (each trafilatura option varied on
its own) and `speed` (the stage against raw trafilatura loops, interleaved). `pages` builds the
stage's input, `scores` the per-page overlaps, `contestants` the three things timed.
"""
