"""Spine benchmark: landing -> the ten stages on Ray -> dataset version -> MDS shards.

One run, every figure from that run, written to `bench/RESULTS.md`:

1. End-to-end stage throughput (docs/s, MB/s) on the shared WARCs and on generated JSONL batches
   of ~5,000 distinct documents built from the WARC pages' extracted text.
2. The tokenize stage against the library limit: `run_stage("tokenized_documents")` and a raw
   `Tokenizer.encode_batch_fast` on the same texts in three layouts (in this process on the
   library's thread pool, one process per CPU with a thread each, and the stage's own processes
   × threads; the fastest is the limit), one pair per fresh batch, A first in half the pairs.
3. MDS write throughput: `build_shard_set`, the bare `write_shard_set` and `ndarray.tofile` of the
   same token bytes (the disk limit), interleaved.

The machine is shared and noisy: compare the ratios measured side by side, not absolute numbers.
Everything lives in a temporary FM_HOME; the user's state is never touched.

    python -m bench.spine            # full run
    python -m bench.spine --quick    # smaller inputs, fewer repeats
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.harness import (
    MB,
    NEOX_TOKENIZER,
    REPO,
    SHARED_DATA,
    WARC_FILES,
    RunStart,
    Stamp,
    median,
    parser,
    rerun_command,
    write_report,
)
from bench.spine.run import COLD_HOME, FULL, QUICK, RAY_CPUS, Results, run
from bench.spine.shards import shard_section
from bench.spine.stages import stages_section
from bench.spine.tokenize_ab import tokenize_section
from bench.spine.tokenize_profile import profile_lines
from fm_assets.execution.local_ray import stop_local_ray
from fm_assets.settings import load_settings

LIBRARIES = ("ray", "pyarrow", "pyiceberg", "tokenizers", "mosaicml-streaming", "numpy")


def render(results: Results, stamp: Stamp) -> str:
    """The Markdown report."""
    config = results.config
    warc = results.warc_runs[0]
    payload = warc[1].bytes_in
    lines = [
        "# fm platform spine benchmark",
        "",
        f"{stamp.header()} See `bench/README.md` for what each figure means.",
        "",
        "## Machine & method",
        "",
        f"{stamp.machine_line()} Ray was given {RAY_CPUS} CPUs. The machine is shared and "
        "noisy: read the ratios measured side by side in this run, not the absolute rates. "
        "Inputs: the 4 shared `warc/*.warc.gz` files "
        f"({results.warc_cold[0].bytes_in / MB:.2f} MB compressed, "
        f"{results.warc_decompressed_bytes / MB:.2f} MB decompressed, "
        f"{warc[0].docs_in} records, {payload / MB:.2f} MB of record payload), run "
        f"{config.warc_repeats}× in fresh FM_HOMEs after one cold run; and {config.batches} "
        f"generated JSONL batches of {config.big_docs:,} distinct documents each "
        f"({results.big_file_bytes / MB:.1f} MB; every WARC page's extracted text with shuffled "
        "lines under a unique header line). Each figure is the median of the repeats "
        "(min–max in brackets); every timed `run_stage` did real work (none short-circuited). "
        "Ray start-up is excluded and reported below; the tokenizer is GPT-NeoX-20B.",
        "",
        *stages_section(results.warc_runs, results.big_runs),
        "",
        f"One-time costs, not in the rows above: Ray start-up {results.ray_start_s:.1f} s; "
        f"the first (cold) WARC pipeline took {sum(t.seconds for t in results.warc_cold):.1f} s "
        f"against {median([sum(t.seconds for t in r) for r in results.warc_runs]):.1f} s warm "
        "(Ray worker processes start and import on first use); "
        f"`create_version` over one JSONL batch {results.version_s:.2f} s.",
        "",
        *tokenize_section(results.pairs, results.worker_niceness, results.split),
        *profile_lines(
            results.profile,
            [batch_run[-1] for batch_run in results.big_runs],
            results.pairs,
            results.idle_cores,
        ),
        *shard_section(
            results.shard_runs,
            results.shard_samples,
            results.shard_tokens,
            config.tofile_inner,
        ),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.spine",
        __doc__.splitlines()[0],
        REPO / "bench" / "RESULTS.md",
        "smaller inputs, fewer repeats",
    )
    args = cli.parse_args(argv)
    missing = [p for p in (NEOX_TOKENIZER, *WARC_FILES) if not p.is_file()]
    if missing or len(WARC_FILES) != 4:
        raise SystemExit(
            f"shared data missing under {SHARED_DATA}: expected the tokenizer and 4 warc/*.warc.gz "
            f"files next to the repository (found {len(WARC_FILES)} WARCs, missing {missing})"
        )
    # Ray's local token auth is for clusters; this run is one process on one host.
    os.environ["RAY_AUTH_MODE"] = "disabled"
    config = QUICK if args.quick else FULL
    import ray

    run_start = RunStart.now(rerun_command(cli, argv))
    with tempfile.TemporaryDirectory(prefix="fm-bench-") as scratch:
        try:
            results = run(config, Path(scratch))
            stamp = run_start.finish(LIBRARIES)
        finally:
            ray.shutdown()
            # The Ray the run started belongs to its first FM_HOME and outlives this process.
            stop_local_ray(load_settings({"FM_HOME": str(Path(scratch) / COLD_HOME)}))
    report = render(results, stamp)
    print(report)
    write_report(args.output, report)


if __name__ == "__main__":
    main()
