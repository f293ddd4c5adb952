"""Stage scaling benchmark: every curation stage at 1 and at 2 Ray CPUs.

One run, every figure from that run, written to `bench/results/stage_scaling.md`:

1. Each stage of `pipeline.STAGE_NAMES`, timed through `run_stage` on one batch of real data
   (`--replicas` unique replicas of the shared WARCs' HTML pages and the article-extraction-
   benchmark pages, `bench.end_to_end.corpus`: 2,350 documents by default), with Ray given 1 CPU
   and with Ray given 2 CPUs. Ray starts once per process, so every (repeat, CPU count) runs
   in its own worker subprocess, alternating 1, 2, 1, 2, ..., each over a fresh FM_HOME.
2. In each 1-CPU subprocess, after Ray has shut down, every stage's `process`
   called directly on its input table read back from Iceberg, pinned to one core: the stage's
   own work without Ray or Iceberg, so `run_stage` at 1 CPU minus it is the fixed overhead.
3. After each repeat's pair of runs, the machine's own two-core ceiling (`ceiling`): the
   extract stage's extractor over the article-benchmark pages in one process, then in two at
   once, to read the pipeline's speed-up against what this machine gives two processes.

Ray start-up is timed but not counted; each worker first runs the whole pipeline once on a
small warm-up batch in another FM_HOME, so Ray's worker processes have started and loaded their
models (lid.176, the tokenizer) before the clock runs. The machine is shared and noisy.

    python -m bench.stage_scaling           # 10 replicas, 4 alternating repeats
    python -m bench.stage_scaling --quick   # 1 replica, 1 repeat per CPU count
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.end_to_end import corpus
from bench.harness import (
    ARTICLE_HTML_FILES,
    NEOX_TOKENIZER,
    REPO,
    RESULTS,
    SHARED_DATA,
    WARC_FILES,
    RunStart,
    log,
    parser,
    rerun_command,
    write_report,
)
from bench.stage_scaling import ceiling
from bench.stage_scaling.machine import wait_for_quiet
from bench.stage_scaling.report import CPU_COUNTS, Report

LIBRARIES = ("ray", "pyarrow", "pyiceberg", "trafilatura", "tokenizers")


def run_worker(cpus: int, run_root: Path, data: Path) -> dict[str, Any]:
    """Run one configuration in a worker process; its JSON result."""
    result = run_root / "result.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # always a local Ray
    env["RAY_AUTH_MODE"] = "disabled"  # local token auth is for clusters
    command = [sys.executable, "-m", "bench.stage_scaling.worker", str(cpus), str(run_root)]
    subprocess.run([*command, str(result), str(data)], check=True, cwd=REPO, env=env)
    return json.loads(result.read_text(encoding="utf-8"))


def data_sizes(built: corpus.Corpus) -> dict[str, float]:
    return {
        "replicas": built.replicas,
        "files": len(built.files),
        "documents": built.documents,
        "compressed_bytes": built.bytes_gz,
        "html_bytes": built.bytes_html,
    }


def drive(repeats: int, max_wait_s: float, command: str, keep: bool, replicas: int) -> Report:
    """Every configuration `repeats` times, alternating 1, 2, 1, 2, ...; the report."""
    run_start = RunStart.now(command)
    root = Path(tempfile.mkdtemp(prefix="fm_bench_scaling_", dir="/tmp"))
    log(f"working under {root}; load average {'/'.join(f'{v:.2f}' for v in run_start.load)}")
    runs: list[dict[str, Any]] = []
    ceilings: list[dict[str, Any]] = []
    built = corpus.build(root / "data", replicas)
    log(f"{built.documents} documents in {len(built.files)} WARCs")
    try:
        for repeat in range(repeats):
            for cpus in CPU_COUNTS:
                run_root = root / f"r{repeat}-cpus{cpus}"
                run_root.mkdir()
                waited, others = wait_for_quiet(max_wait_s)
                log(f"{cpus} CPU(s), repeat {repeat + 1}: others used {others:.2f} cores")
                run = run_worker(cpus, run_root, root / "data")
                runs.append({**run, "waited_s": waited, "others_at_start": others})
            wait_for_quiet(max_wait_s)
            ceilings.extend(c.as_json() for c in ceiling.measure(ARTICLE_HTML_FILES, 1))
            log(
                f"machine ceiling: {ceilings[-1]['alone_s']:.2f} s alone, "
                f"{ceilings[-1]['together_s']:.2f} s two at once"
            )
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return Report(
        stamp=run_start.finish(LIBRARIES),
        max_wait_s=max_wait_s,
        sizes=data_sizes(built),
        runs=runs,
        ceilings=ceilings,
    )


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.stage_scaling",
        __doc__.splitlines()[0],
        RESULTS / "stage_scaling.md",
        "1 repeat per CPU count instead of 4",
    )
    cli.add_argument("--repeats", type=int, help="repeats per CPU count (default 4, quick 1)")
    cli.add_argument(
        "--max-wait",
        type=float,
        default=30.0,
        help="seconds to wait, before each run, for other tenants to go quiet (default 30)",
    )
    cli.add_argument("--keep", action="store_true", help="keep the /tmp working directory")
    cli.add_argument("--replicas", type=int, help="unique replicas in the batch (default 10)")
    args = cli.parse_args(argv)
    missing = [p for p in (NEOX_TOKENIZER, *WARC_FILES) if not p.is_file()]
    if missing or len(WARC_FILES) != 4 or not ARTICLE_HTML_FILES:
        raise SystemExit(
            f"shared data missing under {SHARED_DATA}: expected the tokenizer, 4 "
            "warc/*.warc.gz files and the extraction benchmark's html/*.html.gz pages "
            f"(found {len(WARC_FILES)} WARCs, {len(ARTICLE_HTML_FILES)} pages, missing {missing})"
        )
    repeats = args.repeats or (1 if args.quick else 4)
    replicas = args.replicas or (1 if args.quick else 10)
    report = drive(repeats, args.max_wait, rerun_command(cli, argv), args.keep, replicas)
    text = report.render()
    print(text)
    write_report(args.output, text)


if __name__ == "__main__":
    main()
