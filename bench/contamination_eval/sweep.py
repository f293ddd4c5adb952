"""Section 1: recall per variant and clean documents flagged, for each n-gram size and threshold."""

from __future__ import annotations

from collections.abc import Sequence

from bench.contamination_eval.planting import VARIANTS, Planted, build_registries
from bench.contamination_eval.scoring import pct, score_planted
from fm_assets.contamination.eval_items import EvalSet
from fm_assets.contamination.matcher import DEFAULT_THRESHOLD, ContaminationMatcher
from fm_assets.contamination.registry import NGRAM_SIZE

NGRAM_SIZES = (8, 13)
THRESHOLDS = (0.2, 0.3, 0.4, 0.5, 0.7)

SWEEP_COLUMNS = (
    ("verbatim", ("gsm8k", "humaneval")),
    ("renumbered", ("gsm8k", "humaneval")),
    ("light_edits", ("gsm8k", "humaneval")),
    ("renumbered+edits", ("gsm8k", "humaneval")),
    ("first_field_only", ("gsm8k", "humaneval")),
    ("verbatim", ("nq_open",)),
    ("qa_labelled", ("nq_open",)),
    ("question_only", ("nq_open",)),
)


def sweep_section(
    eval_sets: dict[str, EvalSet], planted: Sequence[Planted], clean_texts: Sequence[str]
) -> list[str]:
    header = ["n", "registry rows", "clean docs sharing ≥ 1 n-gram (max share)", "threshold"]
    header += [f"{v} ({' / '.join(b)})" for v, b in SWEEP_COLUMNS] + ["clean flagged"]
    lines = [
        "## 1. Choosing n and the threshold",
        "",
        "Recall of the planted item (by any rule) per variant, for each n-gram size and "
        "threshold; `question_only` must *not* match under the short-item rule (what matches "
        "there are NQ questions of 13+ words, found by their own n-grams). The third column "
        "runs the matcher on the clean documents with a threshold of one n-gram: how many "
        "share any registered n-gram with an eval item, and the largest share of an item's "
        "n-grams any clean document holds.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "--:|" * len(header),
    ]
    texts = [p.text for p in planted]
    recall: dict[tuple[int, float, str, str], float] = {}
    clean_sharing: dict[int, int] = {}
    for n in NGRAM_SIZES:
        registries = build_registries(eval_sets, n)
        rows = sum(r.ngrams.num_rows for r in registries)
        probe = ContaminationMatcher.from_registries(registries, threshold=1e-9)
        shares = [
            max((m.fraction for m in r if m.rule == "ngram"), default=0.0)
            for r in probe.match(clean_texts)
        ]
        clean_sharing[n] = sum(x > 0 for x in shares)
        sharing = f"{clean_sharing[n]} ({max(shares):.3f})"
        for threshold in THRESHOLDS:
            matcher = ContaminationMatcher.from_registries(registries, threshold=threshold)
            tallies = score_planted(planted, matcher.match(texts))
            flagged = sum(bool(r) for r in matcher.match(clean_texts))
            cells = [str(n), f"{rows:,}", sharing, f"{threshold:g}"]
            cells += [
                " / ".join(pct(tallies[(b, v)].recall) for b in names) for v, names in SWEEP_COLUMNS
            ]
            cells.append(str(flagged))
            lines.append("| " + " | ".join(cells) + " |")
            print(" | ".join(cells), flush=True)
            recall.update({(n, threshold, *key): t.recall for key, t in tallies.items()})

    def r(n: int, t: float, benchmark: str, variant: str) -> str:
        return pct(recall[(n, t, benchmark, variant)])

    n, t, small = NGRAM_SIZE, DEFAULT_THRESHOLD, min(NGRAM_SIZES)
    targeted = [(b, v.name) for v in VARIANTS if v.target is not None for b in v.benchmarks]

    def worst(threshold: float) -> float:
        return min(recall[(n, threshold, b, v)] for b, v in targeted)

    lines += [
        "",
        f"**Choice: n = {n}, threshold = {t:g}.** With n = {small} an NQ-open question alone "
        f"already matches its item ({r(small, 0.5, 'nq_open', 'question_only')} of "
        "`question_only` at threshold 0.5): NQ questions have 8+ words, so their own 8-grams "
        f"are much of the item; and {clean_sharing[small]} clean document(s) share an "
        f"{small}-gram with the registry. With n = {n} no clean document shares a single "
        f"{n}-gram (so none comes near any threshold) and `question_only` falls to "
        f"{r(n, 0.5, 'nq_open', 'question_only')} at 0.5 ({r(n, t, 'nq_open', 'question_only')} "
        f"at {t:g}), the NQ questions of {n}+ words. Given n = {n}, the threshold only trades "
        f"recall: the worst targeted variant is found {pct(worst(t))} of the time at {t:g} "
        f"({pct(worst(0.5))} at 0.5), while partial copies — a GSM8K question or HumanEval "
        "prompt without its solution — are found "
        f"{r(n, t, 'gsm8k', 'first_field_only')} / {r(n, t, 'humaneval', 'first_field_only')} "
        f"of the time at {t:g} against {r(n, 0.5, 'gsm8k', 'first_field_only')} / "
        f"{r(n, 0.5, 'humaneval', 'first_field_only')} at 0.5. {t:g} keeps a margin over "
        "0.2 for items with few n-grams (one n-gram of a 4-n-gram item is 25%). The matcher "
        "reports each match's fraction, so a stage can demand more without re-matching.",
        "",
    ]
    return lines
