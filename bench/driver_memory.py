"""Driver memory: the peak RSS of the orchestrating process (`fm run`) as the batch grows.

The platform's driver plans and commits while Ray workers read and write the data, so its memory
must stay flat however large the batch: a landing batch may be a thousand 1 GB WARCs. This lands
1×, 2× and 4× a batch of unique WARC replicas (`bench.end_to_end.corpus`), each in a fresh
FM_HOME, runs `fm run` on it as a user would, and reads the peak RSS of that process alone
(`wait4`: Ray's own processes run in a session of their own and are not counted). Extra driver
bytes per extra input byte = (peak at k× − peak at 1×) ÷ (input at k× − input at 1×); a driver
that held the batch would show ≥ 1 (26 before the workers wrote their own files), the goal is
≤ 0.1, judged on the least-squares slope over all points.

    python -m bench.driver_memory            # 1×, 2×, 4× of 5 replicas (1,175 documents)
    python -m bench.driver_memory --quick    # 1× and 2× of 1 replica
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.end_to_end import corpus
from bench.end_to_end.fm_side import SOURCE, environment, fm
from bench.harness import (
    MB,
    NEOX_TOKENIZER,
    RESULTS,
    RunStart,
    log,
    met,
    parser,
    rerun_command,
    write_report,
)

LIBRARIES = ("ray", "pyarrow", "pyiceberg", "dagster")


@dataclass(frozen=True)
class Point:
    multiple: int
    documents: int
    input_bytes: int  # gzipped WARC bytes landed
    run_peak: int  # peak RSS of `fm run`, bytes
    land_peak: int  # peak RSS of `fm land`, bytes
    run_s: float


def measure(files: list[Path], documents: int, multiple: int, home: Path) -> Point:
    home.mkdir(parents=True)
    env = environment(home, 2, None)
    try:
        fm(env, "tokenizer", "register", str(NEOX_TOKENIZER), "--default")
        land = fm(env, "land", *map(str, files), "--source", SOURCE, "--license", "NOASSERTION")
        run = fm(env, "run", "--batch", land.output)
    finally:
        fm(env, "ray", "stop")
    size = sum(p.stat().st_size for p in files)
    return Point(multiple, documents, size, run.peak_rss_bytes, land.peak_rss_bytes, run.seconds)


def render(points: list[Point], base_replicas: int, stamp_header: str, machine: str) -> str:
    first = points[0]
    xs = [float(p.input_bytes) for p in points]
    ys = [float(p.run_peak) for p in points]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    rows = []
    worst = 0.0
    for p in points:
        extra_in = p.input_bytes - first.input_bytes
        per_byte = (p.run_peak - first.run_peak) / extra_in if extra_in else None
        land_per_byte = (p.land_peak - first.land_peak) / extra_in if extra_in else None
        if per_byte is not None:
            worst = max(worst, per_byte)
        rows.append(
            f"| {p.multiple}× | {p.documents:,} | {p.input_bytes / MB:.1f} | "
            f"{p.run_peak / MB:.0f} | "
            f"{'—' if per_byte is None else f'{per_byte:+.3f}'} | {p.land_peak / MB:.0f} | "
            f"{'—' if land_per_byte is None else f'{land_per_byte:+.3f}'} | {p.run_s:.0f} |"
        )
    return "\n".join(
        [
            "# Driver memory: peak RSS of `fm run` as the batch grows",
            "",
            stamp_header,
            "",
            machine,
            "",
            f"Batch 1× = {base_replicas} unique replica(s) of the shared WARC pages "
            "(`bench.end_to_end.corpus`), k× = k times as many replicas, each landed as one "
            "batch in a fresh FM_HOME with the default policy (every document through every "
            "stage) and 2 Ray CPUs. Peak RSS of the command's own process (`wait4`); Ray's "
            "processes are not the driver and are not counted. Per extra input byte = (peak "
            "at k× − peak at 1×) ÷ (input at k× − input at 1×).",
            "",
            "| batch | documents | input MB (gz) | `fm run` peak RSS MB | extra driver bytes "
            "per extra input byte | `fm land` peak RSS MB | `fm land` per extra input byte | "
            "`fm run` s |",
            "|---|--:|--:|--:|--:|--:|--:|--:|",
            *rows,
            "",
            f"Goal ≤ 0.1 extra driver bytes per extra input byte, judged on the least-squares "
            f"slope of peak RSS over input bytes across all points (one pair alone is within the "
            f"run-to-run noise of a ~300 MB process when the batches are small): "
            f"{met(slope <= 0.1)} (slope {slope:+.3f}; worst pair {worst:+.3f}).",
        ]
    )


def main() -> None:
    cli = parser(
        "bench.driver_memory",
        __doc__.splitlines()[0] if __doc__ else "",
        RESULTS / "driver_memory.md",
        "1× and 2× of 1 replica",
    )
    cli.add_argument("--replicas", type=int, default=None, help="replicas in 1× (default 5)")
    args = cli.parse_args()
    base = args.replicas or (1 if args.quick else 5)
    multiples = (1, 2) if args.quick else (1, 2, 4)
    start = RunStart.now(rerun_command(cli))
    work = Path(tempfile.mkdtemp(prefix="fm-bench-memory-"))
    try:
        built = corpus.build(work / "corpus", base * multiples[-1])
        per_replica = len(built.files) // (base * multiples[-1])
        points = []
        for k in multiples:
            files = built.files[: k * base * per_replica]
            documents = built.documents * k // multiples[-1]
            log(f"{k}×: {len(files)} files, {documents} documents")
            point = measure(files, documents, k, work / f"x{k}" / "home")
            log(f"{k}×: fm run peak RSS {point.run_peak / MB:.0f} MB in {point.run_s:.0f} s")
            points.append(point)
            shutil.rmtree(work / f"x{k}", ignore_errors=True)
        stamp = start.finish(LIBRARIES)
        write_report(args.output, render(points, base, stamp.header(), stamp.machine_line()))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
