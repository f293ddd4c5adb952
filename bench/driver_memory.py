"""Driver memory: the peak RSS of the orchestrating process (`fm run`) as the batch grows.

The platform's driver plans and commits while Ray workers read and write the data, so its memory
must stay flat however large the batch: a landing batch may be a thousand 1 GB WARCs. This lands
1×, 2×, 4× and 8× a batch of WARC replicas whose text differs from replica to replica
(`bench.unique_corpus`: near dedup keeps every replica, so every stage sees k× the documents;
the run fails if the kept documents do not grow with k), each run in a fresh FM_HOME, runs `fm
run` on it as a user would, and reads the peak RSS of that process alone (`wait4`: Ray's own
processes run in a session of their own and are not counted). Every point runs `--runs` times
(3), the points interleaved round by round in rotated order; each row gives the median and the
min–max, and the load average at the start and end of its runs. Extra driver bytes per extra
input byte: the least-squares slope of the median peaks over input bytes; a driver that held
the batch would show ≥ 1 (26 before the workers wrote their own files), the goal is ≤ 0.1.

    python -m bench.driver_memory            # 1×, 2×, 4×, 8× of 5 replicas, 3 runs each
    python -m bench.driver_memory --quick    # 1× and 2× of 1 replica, 2 runs each
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import unique_corpus
from bench.end_to_end.fm_side import SOURCE, Command, environment, fm
from bench.harness import (
    MB,
    NEOX_TOKENIZER,
    RESULTS,
    RunStart,
    log,
    median,
    median_and_range,
    met,
    parser,
    rerun_command,
    rotation,
    write_report,
)

LIBRARIES = ("ray", "pyarrow", "pyiceberg", "dagster")
# What the step from 1× to 2× in earlier runs was, found with an RSS sampler inside `fm run`
# (each progress line and, at every jump of 0.4 MB or more, every thread's Python stack).
STEP_NOTE = [
    "Earlier runs showed a step from 1× to 2× (+9 to +14 MB in all 8 regenerations, with 4× "
    "below 2×). It came from the commits' checksums of the data files they add "
    "(`storage.data_files.file_sha256`, pinned for `fm verify`), read back in 8 MB chunks: each "
    "read allocates its whole size and the file fills what it can, so the driver's peak grew by "
    "about the size of the data files while they were under 8 MB and not at all once they were "
    "larger. The raw stage's files (5 replicas a point) were 0.4–6.5 MB at 1×, 6.5–12.6 MB at "
    "2× and 13.5–19.2 MB at 4×. Evidence: an RSS sampler in `fm run` put the jump inside "
    "`file_sha256` at the raw stage's commit (+5 MB at 1×, +14 MB at 2×, also with Ray's "
    "inlining of small task results turned off; Python's allocated blocks and Arrow's pool did "
    "not move); hashing four files alone raised a process's peak RSS by 3, 6, 1 and 0 MB for "
    "files of 3, 6, 12 and 24 MB with 8 MB reads, and by 2 MB at every size with 1 MB reads. "
    "The hashing now reads 1 MB at a time: the jump at the raw stage's commit fell to +3 MB at "
    "1× and +4 MB at 2×.",
]


_TOKENIZED = re.compile(r"\] tokenized_documents: (\d+) kept, \d+ quarantined in [\d.]+s$")


@dataclass(frozen=True)
class Run:
    """One `fm land` + `fm run` of a k× batch in a fresh FM_HOME."""

    multiple: int
    documents: int  # documents landed
    kept: int  # documents the tokenize stage kept: what reached the end
    input_bytes: int  # gzipped WARC bytes landed
    run_peak: int  # peak RSS of `fm run`, bytes
    land_peak: int  # peak RSS of `fm land`, bytes
    run_s: float
    load: tuple[float, float]  # 1-minute load average at the start and the end


def tokenized_kept(run: Command) -> int:
    """The documents `fm run`'s tokenize stage kept, from its progress line."""
    for _, line in run.lines:
        match = _TOKENIZED.search(line)
        if match:
            return int(match.group(1))
    raise RuntimeError("`fm run` printed no tokenized_documents line: did every stage run?")


def measure(files: list[Path], documents: int, multiple: int, home: Path) -> Run:
    home.mkdir(parents=True)
    env = environment(home, 2, None)
    load_start = os.getloadavg()[0]
    try:
        fm(env, "tokenizer", "register", str(NEOX_TOKENIZER), "--default")
        land = fm(env, "land", *map(str, files), "--source", SOURCE, "--license", "NOASSERTION")
        run = fm(env, "run", "--batch", land.output)
    finally:
        fm(env, "ray", "stop")
    size = sum(p.stat().st_size for p in files)
    return Run(
        multiple,
        documents,
        tokenized_kept(run),
        size,
        run.peak_rss_bytes,
        land.peak_rss_bytes,
        run.seconds,
        (load_start, os.getloadavg()[0]),
    )


def check_unique(points: dict[int, list[Run]]) -> None:
    """Fail unless the kept documents grow with k: replicas near dedup collapsed would give the
    later stages no more input, and the slope would say nothing about them."""
    first = median([r.kept for r in points[min(points)]])
    for k, runs in points.items():
        kept = median([r.kept for r in runs])
        if kept < 0.8 * k * first:
            raise RuntimeError(
                f"{k}× kept {kept:.0f} documents against {first:.0f} at 1×: the replicas are "
                "not unique enough to grow the later stages' input; see bench/unique_corpus.py"
            )


def slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of `ys` over `xs`."""
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def render(
    points: dict[int, list[Run]], base_replicas: int, stamp_header: str, machine: str
) -> str:
    multiples = sorted(points)
    peaks = {k: median([r.run_peak for r in points[k]]) for k in multiples}
    lands = {k: median([r.land_peak for r in points[k]]) for k in multiples}
    inputs = {k: points[k][0].input_bytes for k in multiples}
    first = multiples[0]
    rows = []
    for k in multiples:
        runs = points[k]
        extra_in = inputs[k] - inputs[first]
        per_byte = f"{(peaks[k] - peaks[first]) / extra_in:+.3f}" if extra_in else "—"
        land_per_byte = f"{(lands[k] - lands[first]) / extra_in:+.3f}" if extra_in else "—"
        loads = [value for r in runs for value in r.load]
        rows.append(
            f"| {k}× | {runs[0].documents:,} | {median_and_range([r.kept for r in runs], ',.0f')} "
            f"| {inputs[k] / MB:.1f} "
            f"| {median_and_range([r.run_peak / MB for r in runs], '.0f')} | {per_byte} "
            f"| {median_and_range([r.land_peak / MB for r in runs], '.0f')} | {land_per_byte} "
            f"| {median_and_range([r.run_s for r in runs], '.0f')} "
            f"| {min(loads):.1f}–{max(loads):.1f} |"
        )
    fitted = slope([float(inputs[k]) for k in multiples], [float(peaks[k]) for k in multiples])
    runs_per_point = min(len(points[k]) for k in multiples)
    return "\n".join(
        [
            "# Driver memory: peak RSS of `fm run` as the batch grows",
            "",
            stamp_header,
            "",
            machine,
            "",
            f"Batch 1× = {base_replicas} replica(s) of the shared WARC pages, k× = k times as "
            "many, each replica's text made its own (`bench.unique_corpus`: the words of four "
            "letters or more swapped through a permutation per replica), so near dedup keeps "
            "every replica and every later stage sees k× the documents (the kept column). Each "
            "run lands its batch in a fresh FM_HOME and runs the default policy (every document "
            "through every stage; in a fresh FM_HOME `fm run` also trains the default quality "
            "classifier once, the same work at every k) "
            f"on 2 Ray CPUs; {runs_per_point} runs per point, the points "
            "interleaved round by round in rotated order. Peak RSS of the command's own process "
            "(`wait4`); Ray's processes are not the driver and are not counted. Each cell is "
            "the median (min–max) of the runs; per extra input byte = (median peak at k× − "
            "median peak at 1×) ÷ (input at k× − input at 1×); load = the 1-minute load "
            "average at the start and end of the point's runs.",
            "",
            "| batch | documents | kept (tokenized) | input MB (gz) | `fm run` peak RSS MB "
            "| extra driver bytes per extra input byte | `fm land` peak RSS MB "
            "| `fm land` per extra input byte | `fm run` s | load |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
            *rows,
            "",
            f"Goal ≤ 0.1 extra driver bytes per extra input byte, judged on the least-squares "
            f"slope of the median peak RSS over input bytes across all points: "
            f"{met(fitted <= 0.1)} (slope {fitted:+.3f}).",
            "",
            *STEP_NOTE,
        ]
    )


def main() -> None:
    cli = parser(
        "bench.driver_memory",
        __doc__.splitlines()[0] if __doc__ else "",
        RESULTS / "driver_memory.md",
        "1× and 2× of 1 replica, 2 runs each",
    )
    cli.add_argument("--replicas", type=int, default=None, help="replicas in 1× (default 5)")
    cli.add_argument("--runs", type=int, default=None, help="runs per point (default 3)")
    args = cli.parse_args()
    base = args.replicas or (1 if args.quick else 5)
    runs = args.runs or (2 if args.quick else 3)
    multiples = (1, 2) if args.quick else (1, 2, 4, 8)
    start = RunStart.now(rerun_command(cli))
    work = Path(tempfile.mkdtemp(prefix="fm-bench-memory-"))
    try:
        built = unique_corpus.build(work / "corpus", base * multiples[-1])
        per_replica = len(built.files) // (base * multiples[-1])
        points: dict[int, list[Run]] = {k: [] for k in multiples}
        for round_ in range(runs):
            for k in rotation(multiples, round_):
                files = built.files[: k * base * per_replica]
                documents = built.documents * k // multiples[-1]
                home = work / f"x{k}-{round_}"
                log(f"round {round_ + 1}, {k}×: {len(files)} files, {documents} documents")
                run = measure(files, documents, k, home / "home")
                log(
                    f"  fm run peak RSS {run.run_peak / MB:.0f} MB in {run.run_s:.0f} s, "
                    f"{run.kept} kept; load {run.load[0]:.1f} → {run.load[1]:.1f}"
                )
                points[k].append(run)
                shutil.rmtree(home, ignore_errors=True)
        check_unique(points)
        stamp = start.finish(LIBRARIES)
        write_report(args.output, render(points, base, stamp.header(), stamp.machine_line()))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
