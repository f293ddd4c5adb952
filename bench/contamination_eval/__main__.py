"""Contamination matcher quality: eval items planted in real documents, and clean documents.

One run writes `bench/results/contamination_eval.md`:

1. Choice of the n-gram size and the threshold: recall of each planted variant and the clean
   documents flagged, for n in NGRAM_SIZES and every threshold in THRESHOLDS.
2. With the chosen defaults: recall per benchmark and variant, the short-item rule's recall and
   precision, every clean document flagged (with the passage), and a redaction check.

Eval sets: GSM8K test (question, answer), HumanEval (prompt, canonical_solution), NQ-open dev
(question, answer) from `../shared/data/evalsets`. Clean documents: the text trafilatura
extracts from every HTML page of the shared WARCs, the 181 article bodies of the extraction
benchmark, the Clough-Stevenson texts and the Presidio sentences. Hosts for planting: the clean
documents of at least HOST_MIN_CHARS characters. Every random choice comes from one seed.

    python -m bench.contamination_eval            # full run (~2-4 min on 2 cores)
    python -m bench.contamination_eval --quick    # 300 items per benchmark
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from bench.contamination_eval import defaults
from bench.contamination_eval.documents import clean_documents
from bench.contamination_eval.planting import (
    HOST_MIN_CHARS,
    SEED,
    build_registries,
    load_eval_sets,
    planted_documents,
)
from bench.contamination_eval.scoring import score_planted
from bench.contamination_eval.sweep import sweep_section
from bench.harness import RESULTS, RunStart, parser, rerun_command, write_report
from fm_assets.contamination.matcher import ContaminationMatcher
from fm_assets.contamination.registry import NGRAM_SIZE


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.contamination_eval",
        __doc__.splitlines()[0],
        RESULTS / "contamination_eval.md",
        "300 items per benchmark instead of every item",
    )
    args = cli.parse_args(argv)
    run_start = RunStart.now(rerun_command(cli, argv))
    eval_sets = load_eval_sets()
    clean = clean_documents()
    hosts = [d for d in clean if len(d.text) >= HOST_MIN_CHARS]
    per_benchmark = 300 if args.quick else None
    planted = planted_documents(eval_sets, hosts, per_benchmark=per_benchmark)
    clean_texts = [d.text for d in clean]

    sweep = sweep_section(eval_sets, planted, clean_texts)
    registries = build_registries(eval_sets, NGRAM_SIZE)
    matcher = ContaminationMatcher.from_registries(registries)
    results = matcher.match([p.text for p in planted])
    clean_results = matcher.match(clean_texts)
    tallies = score_planted(planted, results)
    at_defaults = [
        *defaults.defaults_section(eval_sets, registries, planted, results, tallies),
        *defaults.short_rule_section(eval_sets, planted, results, clean_results, clean),
        *defaults.clean_section(clean, clean_results, eval_sets),
        *defaults.redaction_section(matcher, planted, results, hosts),
    ]

    stamp = run_start.finish(("numpy", "pyarrow", "trafilatura"))
    lines = [
        "# Contamination matcher: recall on planted eval items, false positives on clean text",
        "",
        f"{stamp.header()} {stamp.machine_line()} Eval sets: "
        + ", ".join(
            f"{n} ({s.count:,} items, fields {', '.join(s.fields)})" for n, s in eval_sets.items()
        )
        + f". Clean documents: {len(clean):,} ("
        + ", ".join(f"{k} {v}" for k, v in Counter(d.source.split("/")[0] for d in clean).items())
        + f"); {len(hosts)} of them have ≥ {HOST_MIN_CHARS:,} characters and host the planted "
        f"items, each snippet inserted as its own paragraph at a random line break of a random "
        f"host (seed {SEED}). {len(planted):,} planted documents"
        + (f" ({per_benchmark} items per benchmark)" if per_benchmark else " (every item)")
        + ".",
        "",
        "Variants: **verbatim** = the item's fields joined with newlines; **renumbered** = every "
        "digit run replaced by a different random number (GSM-Hard style); **light_edits** = "
        "about a third of the whitespace gaps changed (space, newline, double space) and of the "
        "punctuation marks dropped (10%) or swapped (20%: . ! , ; ' \" ( [ $ USD ...); "
        "**renumbered+edits** = both; **first_field_only** = the question / prompt alone "
        "(reported, no target). NQ-open (short items): **verbatim** (question, newline, the "
        "answer aliases), **qa_labelled** (`Q: question?` newline `A: one alias`), "
        "**qa_sentence** (question quoted in a sentence, an alias in the next), and two "
        "negatives that must *not* match: **question_only** and **wrong_answer** (the question "
        "with another item's answer).",
        "",
        *sweep,
        *at_defaults,
    ]
    write_report(args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
