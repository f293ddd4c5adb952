"""fm_loader against upstream `streaming.StreamingDataset` and a raw memmap read, same MDS shards.

One run writes every figure to `bench/results/loader.md`:

    python -m bench.loader            # full: ~5-7 min (+ ~3 min first build)
    python -m bench.loader --quick    # fewer samples and repeats: ~4-5 min
    python -m bench.loader --output /tmp/loader.md

Data: the visible text of the HTML pages of the four shared WARCs (`../shared/data/warc`, read in
place), tokenized with `tokenizers/gpt-neox-20b.json`. Those 53 real pages hold only ~107k
tokens, so each shard set repeats them under distinct doc ids (sha256 of "<page id>:<copy>")
until it has the samples it needs, packs them with `fm_assets.shards.packing.pack_documents`
and writes them with `fm_assets.shards.writer.write_shard_set` (64 MB shards). Built sets are
cached under /tmp/fm_bench_loader/ (a set counts as built when its fm_manifest.json exists) and
rebuilt when missing.

Figures, each measured side by side and interleaved in this one run (medians, min–max):
1. samples/s and tokens/s at seq_len 2048: our per-sample path, our batch path (num_workers=0),
   upstream StreamingDataset (shuffle on/off), and two raw-memmap limits.
2. resume at 0%, 50%, 99% of a 1M-sample epoch (seq_len 32), one source and a 0.7/0.3 mixture,
   ours (make_dataset + load_state_dict + first batch) next to upstream (constructor +
   load_state_dict + first sample).
3. what one trainer process receives from make_loader(batch_size=8, num_workers=2), seq_len 2048,
   and what moving batches out of workers costs on its own.
4. /dev/shm entries (and /tmp lock files) left by ours and by upstream, each in child processes
   that exit normally or are SIGKILLed, and by upstream in this long-lived process.
5. make_loader at num_workers 0/1/2 against upstream StreamingDataset in a DataLoader with the
   same workers, all-in (our first-use sha256 counted), and our shared-memory hand-over alone;
   make_loader(num_workers=0) against the dataset's bare batch_stream(), and 2 workers against
   the faster of those two in-process paths.
6. the node cache on a SeaweedFS S3 server: cold against warm first epoch, pre-warm MB/s
   against a raw copy of the same files.
7. tokenizing in the loader against pre-tokenized shards of the same documents: samples/s,
   tokens/s and CPU per token, beside the tokenizer library's own rate.
Then where our time goes: block size and torch thread diagnostics, and cProfile of our paths.
Nothing here asserts a speed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.harness import RESULTS, RunStart, log, parser, rerun_command, write_report
from bench.loader import cache, diagnostics, feed, online, resume, shm, throughput, workers
from bench.loader.plan import FULL, QUICK
from bench.loader.sets import (
    RESUME_A,
    RESUME_B,
    THROUGHPUT,
    ensure_sets,
    page_in,
    set_row,
    write_flat_tokens,
)
from bench.loader.upstream import quiet_upstream, streaming_filelocks
from fm_loader import read_manifest

LIBRARIES = ("numpy", "torch", "mosaicml-streaming")


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.loader",
        __doc__.splitlines()[0],
        RESULTS / "loader.md",
        "fewer samples and repeats",
    )
    args = cli.parse_args(argv)
    plan = QUICK if args.quick else FULL
    run_start = RunStart.now(rerun_command(cli, argv))
    locks_at_start = streaming_filelocks()
    built = ensure_sets([THROUGHPUT, RESUME_A, RESUME_B])
    flat = write_flat_tokens(THROUGHPUT)
    quiet_upstream()
    import streaming  # noqa: F401  (10-25 s: paid here, outside every timed region)

    for spec in (THROUGHPUT, RESUME_A, RESUME_B):
        page_in([spec.directory / s.name for s in read_manifest(spec.directory).shards])
    page_in([flat])

    log("1. throughput")
    reads = throughput.measure(plan, flat)
    log("2. resume")
    resumed = resume.measure(plan)
    log("3. trainer feed")
    runs, transfers = feed.measure(plan)
    pickled = feed.pickle_check()
    log("4. /dev/shm")
    parent_shm = shm.in_this_process(locks_at_start)
    children_shm = shm.side_by_side()
    log("5. workers, ours and upstream")
    worker_runs, slot_transfers = workers.measure(plan)
    log("6. node cache on S3")
    epochs, copies = cache.measure(plan)
    log("7. tokenizing in the loader")
    online_runs, limits, texts, pretokenized = online.measure(plan)
    log("diagnostics and profiles")
    diag, profiles = diagnostics.measure(plan)

    stamp = run_start.finish(LIBRARIES)
    lines = [
        "# fm_loader vs upstream StreamingDataset vs a raw memmap read",
        "",
        f"{stamp.header()} {stamp.machine_line()} The machine is shared and noisy, so read the "
        "ratios measured side by side, not the absolute rates.",
        "",
        "## Data",
        "",
        "Real tokens: the visible text of the 53 HTML pages of the four shared WARCs "
        "(`cc-main-2020-34-sample`, `wget-sample-0000/0001`, `cc-main-2024-22-whirlwind`) "
        "tokenized with GPT-NeoX-20B: 106,747 tokens, median page ~1,000 tokens. That is far too "
        "little for stable timing, so **every set repeats those real pages under distinct doc "
        "ids** (sha256 of `<page id>:<copy>`; set B uses copies set A does not) until it has "
        "its samples, packed best-fit-decreasing (`fm_assets.shards.packing.pack_documents`) and "
        "written by `fm_assets.shards.writer.write_shard_set`: uncompressed MDS, 64 MB shards, "
        "uint16 tokens, the loader's three columns. Cached under /tmp/fm_bench_loader/, rebuilt "
        "when missing.",
        "",
        "| set | seq_len | samples | real tokens | packing eff. | shards | shard bytes | "
        "distinct doc ids | |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|",
        set_row(THROUGHPUT, built),
        set_row(RESUME_A, built),
        set_row(RESUME_B, built),
        "",
        f"The flat-file limit reads `{flat.name}` ({flat.stat().st_size / 1e6:,.0f} MB): the "
        "first set's input_ids, written once with `ndarray.tofile` in sample order.",
        "",
        *throughput.section(reads, plan),
        *resume.section(resumed, plan),
        *feed.section(runs, transfers, pickled),
        *shm.section(parent_shm, children_shm),
        *workers.section(worker_runs, slot_transfers, plan),
        *cache.section(epochs, copies),
        *online.section(online_runs, limits, texts, pretokenized),
        *diagnostics.section(profiles, diag, transfers, runs),
        "## Rerun",
        "",
        "```",
        "python -m bench.loader           # this report (~5-7 min; +3 min to build the sets the "
        "first time)",
        "python -m bench.loader --quick   # fewer samples and repeats",
        "rm -rf /tmp/fm_bench_loader      # rebuild the shard sets",
        "```",
    ]
    for name in streaming_filelocks() - locks_at_start:  # what upstream left in /tmp
        Path(tempfile.gettempdir(), name).unlink(missing_ok=True)
    write_report(args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
