"""The end-to-end report: headline throughput, what each pipeline kept, where the time went."""

from __future__ import annotations

from collections.abc import Sequence

from bench.end_to_end.corpus import Corpus
from bench.end_to_end.datatrove_side import DatatroveRun
from bench.end_to_end.fm_side import FmRun
from bench.harness import MB, Stamp, median, median_and_range, met


def _stage_rows(ours: Sequence[FmRun]) -> list[str]:
    names = [s.stage for s in ours[0].stages]
    rows = []
    for name in names:
        seconds = [next(s.seconds for s in run.stages if s.stage == name) for run in ours]
        kept = next(s.kept for s in ours[0].stages if s.stage == name)
        rows.append(f"| fm | `{name}` | {median_and_range(seconds)} | {kept:,} |")
    return rows


def _fixed_cost_rows(ours: Sequence[FmRun]) -> list[str]:
    def row(what: str, values: list[float]) -> str:
        return f"| {what} | {median_and_range(values)} |"

    stage_sums = [sum(s.seconds for s in run.stages) for run in ours]
    startup = [run.first_stage_at_s for run in ours]
    work = [total - run.ray_s for run, total in zip(ours, stage_sums, strict=True)]
    between = [
        run.run_s - run.first_stage_at_s - stage_sum - run.checks_s
        for run, stage_sum in zip(ours, stage_sums, strict=True)
    ]
    return [
        "| part | seconds |",
        "|---|--:|",
        row("`fm tokenizer register` (a new FM_HOME's setup)", [r.setup_s for r in ours]),
        row("`fm land` (copy, sha256, manifest)", [r.land_s for r in ours]),
        row("`fm run`: process start, imports, Dagster, up to the first stage", startup),
        row(
            "`fm run`: starting this FM_HOME's local Ray (in the first stage)",
            [r.ray_s for r in ours],
        ),
        row("`fm run`: the stages, as each reports itself, less Ray's start", work),
        row("`fm run`: between stages (checks, Dagster steps, bookkeeping)", between),
        row("`fm run`: after the last stage (its checks, exit)", [r.checks_s for r in ours]),
        row("**`fm run` in all**", [r.run_s for r in ours]),
        row("`fm version create` (beyond DataTrove's work)", [r.version_s for r in ours]),
        row("`fm shards build` (packing, MDS; beyond DataTrove's)", [r.shards_s for r in ours]),
    ]


def render(
    corpus: Corpus,
    ours: Sequence[FmRun],
    theirs: Sequence[DatatroveRun],
    stamp: Stamp,
    limits: dict[str, float],
    cpus: int,
    datatrove_versions: str,
    machine_cpus: int,
) -> str:
    docs, gz_mb = corpus.documents, corpus.bytes_gz / MB
    our_s = [r.headline_s for r in ours]
    their_s = [r.seconds for r in theirs]
    ratios = [t / o for o, t in zip(our_s, their_s, strict=True)]
    ratio = median(ratios)
    lines = [
        "# End to end: fm against DataTrove",
        "",
        stamp.header(),
        "",
        f"{stamp.machine_line()} DataTrove side venv: {datatrove_versions}.",
        "",
        "## Method",
        "",
        f"Input: {corpus.replicas} unique replicas of every HTML page of the four shared WARCs "
        f"and the 181 article-benchmark pages: {len(corpus.files)} `.warc.gz` files, {docs:,} "
        f"documents, {gz_mb:.1f} MB gzipped ({corpus.bytes_html / MB:.1f} MB of HTML). Replica "
        "r appends `<!-- replica r -->` to each page and `?replica=r` to its URL, so no two "
        "records are byte-identical (our landing zone and raw stage collapse exact copies) while "
        "every replica extracts to the same text: both pipelines must find the copies with "
        "MinHash. Both get "
        f"{cpus} CPUs (`FM_RAY_NUM_CPUS={cpus}`; DataTrove `LocalPipelineExecutor(workers={cpus})`,"
        " one task per WARC as FineWeb ran it) on a machine of "
        f"{machine_cpus} CPUs, and run one after the other, alternating which goes first, "
        f"{len(ours)} round(s); figures are medians (min–max).",
        "",
        "- **DataTrove** (`bench/end_to_end/datatrove_pipeline.py`): WarcReader → Trafilatura "
        f"(favour_precision, timeout {limits['extract_timeout_s']:g} s) → LanguageFilter (en, "
        f"{limits['min_language_score']}) → GopherRepetitionFilter → GopherQualityFilter "
        f"(min words {limits['gopher_min_words']:g}) → C4QualityFilter (no terminal-punctuation "
        f"line filter as in FineWeb; min sentences {limits['c4_min_kept_sentences']:g}; line "
        "removal off, as our C4 line rules only score) → FineWebQualityFilter (char-dup ratio "
        f"{limits['fineweb_max_char_dup_ratio']}) → JsonlWriter; MinHash signatures, buckets, "
        f"clusters, filter ({limits['shingle_words']:g}-word shingles, "
        f"{limits['bands']:g}×{limits['rows_per_band']:g}); DocumentTokenizer (GPT-NeoX-20B, EOS "
        "per document). Its language model is `lid.176.ftz`, the file our language stage loads "
        "(DataTrove would download `lid.176.bin`, out of reach here).",
        "- **fm**: a fresh FM_HOME with a policy file of the same thresholds "
        "(`fm_side.policy_text`), then `fm tokenizer register`, `fm land` (all files, one batch) "
        "and `fm run` (every stage through `tokenized_documents`, every blocking check), each a "
        "new process, Ray started by the first command that needs it. Our pipeline also "
        "normalizes, redacts PII and decontaminates (an empty registry): work DataTrove's does "
        "not do. Its MinHash confirms LSH candidates by exact Jaccard ≥ 0.8; DataTrove keeps "
        "any band match.",
        "",
        "Headline: seconds from nothing to tokenized documents, all-in (interpreter start-up, "
        "imports, Ray start-up, our checks and commits). docs/s = input documents ÷ seconds; "
        "MB/s = gzipped WARC bytes ÷ seconds. **Ratio** = DataTrove seconds ÷ fm seconds in "
        "the same round (above 1: fm is faster), median over rounds.",
        "",
        "## Throughput",
        "",
        "| pipeline | seconds | docs/s | MB/s (gz) |",
        "|---|--:|--:|--:|",
        f"| fm (`tokenizer register` + `land` + `run`) | {median_and_range(our_s, '.1f')} | "
        f"{docs / median(our_s):.1f} | {gz_mb / median(our_s):.2f} |",
        f"| DataTrove 0.10.1 | {median_and_range(their_s, '.1f')} | "
        f"{docs / median(their_s):.1f} | {gz_mb / median(their_s):.2f} |",
        f"| **ratio (fm docs/s ÷ DataTrove docs/s)** | {median_and_range(ratios)} | | |",
        "",
        f"Goal ≥ 1.0×: {met(ratio >= 1.0)} ({ratio:.2f}×). Per round (fm s / DataTrove s): "
        + ", ".join(f"{o:.1f} / {t:.1f}" for o, t in zip(our_s, their_s, strict=True))
        + ".",
        "",
        "## What each kept",
        "",
        "| pipeline | documents in | after language + quality | after MinHash | tokens |",
        "|---|--:|--:|--:|--:|",
        f"| fm | {ours[0].documents_in:,} | {ours[0].kept_after_quality:,} | "
        f"{ours[0].kept_after_neardup:,} | {ours[0].tokens:,} |",
        f"| DataTrove | {docs:,} | {theirs[0].kept_after_quality:,} | "
        f"{theirs[0].kept_after_neardup:,} | {theirs[0].tokens:,} |",
        "",
        "Our raw stage also quarantines exact copies inside the batch (the shared WARCs hold "
        "one); fm's tokens leave out the EOS that DataTrove's count includes (one per document).",
        "",
        "## Where the time goes",
        "",
        "| pipeline | step | seconds | documents out |",
        "|---|---|--:|--:|",
        *[
            f"| DataTrove | {name} | {median_and_range([r.steps[name] for r in theirs])} | |"
            for name in theirs[0].steps
        ],
        *_stage_rows(ours),
        "",
        "Our fixed cost: each `fm` command and `fm run`'s parts, split at the moments its "
        "progress lines reached the benchmark (a stage's own seconds are those it reports: "
        "`run_stage` from its lookups to its last commit).",
        "",
        *_fixed_cost_rows(ours),
    ]
    return "\n".join(lines)
