"""Soak: per-batch cost and catalog bytes over hundreds of small batches, and many at once.

1. `--batches` batches (default 500) of `--documents` unique documents (default 20), landed and
   processed one after another in one FM_HOME through `new_landing_batch_sensor` and a run
   process per requested run (`sequential.py`, `launch.py`); per batch the run's, the stages',
   near dedup's and the commits' seconds (`timings.py`) and the catalog's bytes
   (`footprint.py`); catalog maintenance right after each reporting point (10, 100, 250, 500).
   Goal: the batch-500 median ≤ 1.15× the batch-10 median; bytes bounded after maintenance.
2. `--at-once` batches (default 200) landed at once into a fresh home, then a real
   `dagster-daemon` (`at_once.py`): all succeed, each once, within the limits.

    python -m bench.soak             # 500 + 200 batches: hours
    python -m bench.soak --quick     # 20 batches (points 2, 10, 20) + 10 at once
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.harness import RESULTS, RunStart, log, parser, rerun_command, write_report
from bench.soak.at_once import AtOnceResult, run_at_once
from bench.soak.corpus import sentence_pool
from bench.soak.points import points_for
from bench.soak.records import RecordLog
from bench.soak.report import render
from bench.soak.sequential import SequentialResult, run_sequential

LIBRARIES = ("dagster", "pyiceberg", "ray", "pyarrow")
CPUS = 2


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.soak",
        __doc__.splitlines()[0],
        RESULTS / "soak.md",
        "20 batches (points 2, 10, 20) and 10 at once, not 500 and 200",
    )
    cli.add_argument("--batches", type=int, default=None, help="one after another [500; quick 20]")
    cli.add_argument("--at-once", type=int, default=None, help="landed at once [200; quick 10]")
    cli.add_argument("--documents", type=int, default=20, help="documents per batch [20]")
    cli.add_argument(
        "--records",
        type=Path,
        default=None,
        help="every batch's and maintenance's figures, a JSON line each as measured "
        "[the output with .batches.jsonl]",
    )
    args = cli.parse_args(argv)
    batches = args.batches or (20 if args.quick else 500)
    at_once = args.at_once if args.at_once is not None else (10 if args.quick else 200)
    points = points_for(batches, args.quick)
    run_start = RunStart.now(rerun_command(cli, argv))
    records = args.records or args.output.with_suffix(".batches.jsonl")
    pool = sentence_pool()

    def report(sequential: SequentialResult, together: AtOnceResult | None) -> None:
        stamp = run_start.finish(LIBRARIES)
        text = render(
            stamp.header(), stamp.machine_line(), sequential, points, together, args.quick
        )
        write_report(args.output, text)

    with tempfile.TemporaryDirectory(prefix="fm-bench-soak-") as scratch:
        log(f"{batches} batches one after another (points {points}), then {at_once} at once")
        with RecordLog(records) as keep:
            sequential = run_sequential(
                Path(scratch), pool, batches, points, args.documents, CPUS, keep
            )
        # Part one's table now: hours of batches are not lost if part two fails.
        report(sequential, None)
        if at_once:
            report(sequential, run_at_once(Path(scratch), pool, at_once, args.documents, CPUS))


if __name__ == "__main__":
    main()
