"""The results table of `bench.near_dedup_lookup`."""

from __future__ import annotations

from typing import Any

from bench.harness import Stamp, median, median_and_range, met

GOAL = 1.5  # at most this many times the reads (bytes, seconds) at 10^7 rows as at 10^5


def _figure(values: list[float], fmt: str) -> str:
    return median_and_range(values, fmt)


def _lookups(kind: str, built: dict[int, Any], runs: dict[int, list[Any]]) -> list[str]:
    lines = [
        f"| index rows | {kind} s | plan · bands · indexed · sets s | MB read | footers read "
        "(KB) | row groups read | filter blocks read | files opened |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for size, done in runs.items():
        looked = [getattr(r, kind) for r in done]
        parts = " · ".join(
            f"{median([getattr(x, p) for x in looked]):.3f}"
            for p in ("plan_s", "bands_s", "indexed_s", "shingles_s")
        )
        lines.append(
            f"| {built[size].rows:,} | {_figure([x.seconds for x in looked], '.3f')} | {parts} | "
            f"{_figure([x.bytes_read / 1e6 for x in looked], '.2f')} | "
            f"{looked[0].footers_read} ({looked[0].footer_bytes / 1e3:.0f}) | "
            f"{looked[0].row_groups} | {looked[0].filter_blocks:,} | {looked[0].files_opened} |"
        )
    return lines


def _ratio(runs: dict[int, list[Any]], kind: str, field: str) -> float:
    sizes = sorted(runs)
    low, high = sizes[0], sizes[-1]

    def of(size: int) -> float:
        return median([float(getattr(getattr(r, kind), field)) for r in runs[size]])

    return of(high) / of(low)


def report(stamp: Stamp, built: dict[int, Any], runs: dict[int, list[Any]]) -> str:
    sizes = sorted(runs)
    low, high = built[sizes[0]].rows, built[sizes[-1]].rows
    repeats = len(runs[sizes[0]])
    lines = [
        "# Near-dup index lookups as the index grows",
        "",
        f"{stamp.header()} {stamp.machine_line()}",
        "",
        "What one 20-document batch's near dedup reads of its namespace's index (the one-task "
        "path's reads: the index's files planned from the snapshot, the band rows sharing its "
        "hashes, its documents already indexed, its candidates' shingle sets) at each index "
        "size. The index: synthetic documents (random band hashes, 256 random shingles each; "
        "14 band rows and a shingle-set row a document) written by the stage's writer 20,000 "
        "documents at a time, each run followed by the stage's compaction. The batch: 14 new "
        "documents, 5 sharing 1, 2, 4, 8 and 14 band hashes with indexed ones (their shingle "
        "sets 95% alike: confirmed), 1 already indexed. MB read: the process's `rchar` over "
        "those steps (every read and pread, page-cache hits included). Each repeat is a fresh "
        "process: a cold lookup (no footer cached), then a warm one, of another batch of the "
        f"same shape (footers cached, as on a warm worker). {repeats} repeat(s) a size, "
        "interleaved; seconds and MB are medians (min–max); the counts are the first repeat's "
        "(every repeat read the same rows).",
        "",
        "## The index",
        "",
        "| index rows | documents | runs | band files (MB) | shingle-set files (MB) | built in |",
        "|--:|--:|--:|--:|--:|--:|",
    ]
    for size in sizes:
        b = built[size]
        lines.append(
            f"| {b.rows:,} | {b.documents:,} | {b.runs} | {b.band_files} ({b.band_mb:.1f}) | "
            f"{b.set_files} ({b.set_mb:.1f}) | {b.build_s:.0f} s |"
        )
    lines += [
        "",
        "Before this layout, the band lookup alone read every band row of the namespace: about "
        "the band files' megabytes above, per batch.",
        "",
        "## Cold: a fresh process",
        "",
        *_lookups("cold", built, runs),
        "",
        "## Warm: footers cached",
        "",
        *_lookups("warm", built, runs),
        "",
        f"## From {low:,} to {high:,} index rows ({high // low}× the index)",
        "",
        "| lookup | seconds | MB read |",
        "|---|--:|--:|",
    ]
    verdicts = []
    for kind in ("cold", "warm"):
        seconds, read = _ratio(runs, kind, "seconds"), _ratio(runs, kind, "bytes_read")
        verdicts.append(seconds <= GOAL and read <= GOAL)
        lines.append(f"| {kind} | {seconds:.2f}× | {read:.2f}× |")
    lines += [
        "",
        f"Goal: at most {GOAL}× in both. Cold: {met(verdicts[0])}. Warm: {met(verdicts[1])}.",
    ]
    return "\n".join(lines)
