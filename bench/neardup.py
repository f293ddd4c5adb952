"""MinHash LSH near-dedup against the Clough & Stevenson corpus: Jaccard, containment, detections.

Reads `../shared/data/neardup/clough-stevenson/` in place: 95 short answers, each labelled against
one of five Wikipedia sources (`orig_task{a..e}.txt`) as `cut` (near copy), `light`, `heavy`
(revisions) or `non` (written independently). The five sources are indexed once
(`NearDupIndex.find_duplicates`, then `new_index_rows()`), and every answer is decided against a
fresh `NearDupIndex.from_rows` of those rows (so answers never dedup against each other). For
every (answer, its source) pair it reports the exact 5-gram shingle Jaccard, the containment of
the answer in the source, and whether the LSH + exact-Jaccard confirmation flagged it.

    python -m bench.neardup
    python -m bench.neardup --output /tmp/neardup.md

Two truths are scored. The detector's contract is "exact Jaccard ≥ threshold": against it,
precision is 1 by construction (every flag is confirmed by exact Jaccard), and recall measures
what LSH banding misses. The corpus labels are the other truth: most `cut` answers are excerpts
of a much longer source, so their Jaccard is low even though they are copies; containment shows
that. Near-duplicate (Jaccard) dedup is not meant to catch excerpts. `tests/test_minhash.py`
asserts the targets: every `cut` pair with J ≥ 0.8 flagged, no `non` pair flagged.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.harness import (
    CLOUGH_STEVENSON,
    RESULTS,
    RunStart,
    Stamp,
    parser,
    rerun_command,
    write_report,
)
from fm_assets.curation.minhash.index import NearDupIndex
from fm_assets.curation.minhash.shingles import shingle_sets
from fm_assets.curation.minhash.signatures import (
    MINHASH_VERSION,
    MinHashConfig,
    containment,
    jaccard,
)

CATEGORIES = ("cut", "light", "heavy", "non")


@dataclass(frozen=True)
class Pair:
    answer: str
    source: str
    category: str
    jaccard: float
    containment: float
    flagged: bool
    flagged_as: str | None  # the source the detector named, if any
    candidate_probability: float


def read_text(path: Path) -> tuple[str, bool]:
    """The file's text and whether it needed the cp1252 fallback (some answers are not UTF-8)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace"), True


def evaluate(config: MinHashConfig, corpus: Path = CLOUGH_STEVENSON) -> tuple[list[Pair], int]:
    """Every (answer, its source) pair scored, and how many files needed the cp1252 fallback."""
    with (corpus / "file_information.csv").open(newline="") as f:
        labels = [row for row in csv.DictReader(f) if row["Category"] in CATEGORIES]
    fallbacks = 0
    sources: dict[str, str] = {}
    for task in "abcde":
        sources[task], fell_back = read_text(corpus / f"orig_task{task}.txt")
        fallbacks += fell_back
    source_ids = [f"orig_task{task}.txt" for task in sources]
    index = NearDupIndex(config)
    kept = index.find_duplicates(source_ids, list(sources.values()))
    if any(d.is_duplicate for d in kept):
        raise ValueError("the five sources dedup against each other; check the corpus")
    rows = index.new_index_rows()
    source_sets = dict(
        zip(sources, shingle_sets(list(sources.values()), config.ngram), strict=True)
    )

    pairs = []
    for label in labels:
        text, fell_back = read_text(corpus / label["File"])
        fallbacks += fell_back
        (answer_set,) = shingle_sets([text], config.ngram)
        source_set = source_sets[label["Task"]]
        decision = NearDupIndex.from_rows(rows, config).find_duplicates([label["File"]], [text])[0]
        j = jaccard(answer_set, source_set)
        pairs.append(
            Pair(
                answer=label["File"],
                source=f"orig_task{label['Task']}.txt",
                category=label["Category"],
                jaccard=j,
                containment=containment(answer_set, source_set),
                flagged=decision.is_duplicate,
                flagged_as=decision.duplicate_of,
                candidate_probability=config.candidate_probability(j),
            )
        )
    return pairs, fallbacks


def _ratio(num: int, den: int) -> str:
    return f"{num / den:.2f} ({num}/{den})" if den else "n/a (0/0)"


def report(stamp: Stamp, pairs: list[Pair], fallbacks: int, config: MinHashConfig) -> str:
    t = config.threshold
    lines = [
        "# Near-duplicate detection: Clough & Stevenson",
        "",
        f"{stamp.header()} {stamp.machine_line()}",
        "",
        f"Detector `{MINHASH_VERSION}`: {config.ngram}-word shingles, {config.bands} bands × "
        f"{config.rows} rows = {config.num_perm} permutations (seed {config.seed}), LSH "
        f"candidates confirmed by exact shingle Jaccard ≥ {t}; config hash "
        f"`{config.config_hash()}`. Index = the 5 sources (`orig_task*.txt`, loaded back from "
        f"their `new_index_rows()`), query = each of the {len(pairs)} answers on its own. "
        f"{fallbacks} files are not UTF-8 and were read as cp1252.",
        "",
        "J = exact Jaccard of the answer's and its source's shingle sets; C = containment "
        "|answer ∩ source| / |answer|; P(cand) = the LSH candidate probability "
        f"1 - (1 - J^{config.rows})^{config.bands} at that J.",
        "",
        "## Per category",
        "",
        "| category | pairs | J median | J max | J ≥ 0.8 | C median | C ≥ 0.8 | flagged "
        "| flagged as own source |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for category in CATEGORIES:
        group = [p for p in pairs if p.category == category]
        js = [p.jaccard for p in group]
        cs = [p.containment for p in group]
        lines.append(
            f"| {category} | {len(group)} | {statistics.median(js):.3f} | {max(js):.3f} "
            f"| {sum(j >= t for j in js)} | {statistics.median(cs):.3f} "
            f"| {sum(c >= 0.8 for c in cs)} | {sum(p.flagged for p in group)} "
            f"| {sum(p.flagged_as == p.source for p in group)} |"
        )
    lines += [
        "",
        "## Precision and recall",
        "",
        f"**Truth A, the detector's contract: pair has exact J ≥ {t}.** Precision = flagged "
        f"pairs with J ≥ {t} / flagged pairs; recall = flagged pairs with J ≥ {t} / pairs with "
        f"J ≥ {t}. **Truth B, the corpus labels: `cut`, `light` and `heavy` answers are derived "
        "from their source, `non` answers are not.** Precision = flagged derived / flagged; "
        "recall = flagged / derived pairs (for `non` there is nothing to recall: its flags are "
        "false positives).",
        "",
        "| category | flagged | A: precision | A: recall | B: precision | B: recall "
        "| B: false positives |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for category in (*CATEGORIES, "all"):
        group = [p for p in pairs if category in ("all", p.category)]
        flagged = [p for p in group if p.flagged]
        above = [p for p in group if p.jaccard >= t]
        derived = [p for p in group if p.category != "non"]
        false_pos = [p for p in flagged if p.category == "non"]
        lines.append(
            f"| {category} | {len(flagged)} "
            f"| {_ratio(sum(p.jaccard >= t for p in flagged), len(flagged))} "
            f"| {_ratio(sum(p.flagged for p in above), len(above))} "
            f"| {_ratio(len(flagged) - len(false_pos), len(flagged))} "
            f"| {_ratio(sum(p.flagged for p in derived), len(derived))} "
            f"| {len(false_pos)} |"
        )
    cut = [p for p in pairs if p.category == "cut"]
    cut_above = [p for p in cut if p.jaccard >= t]
    non_flagged = [p for p in pairs if p.category == "non" and p.flagged]
    met = all(p.flagged for p in cut_above) and not non_flagged
    lines += [
        "",
        f"**Targets: every `cut` pair with J ≥ {t} detected — "
        f"{sum(p.flagged for p in cut_above)}/{len(cut_above)}; no `non` pair flagged — "
        f"{len(non_flagged)} flagged. {'Met.' if met else 'NOT met.'}**",
        "",
        "## Reading it honestly",
        "",
        f"- Only {len(cut_above)} of {len(cut)} `cut` answers reach J ≥ {t}: most are excerpts "
        "of a source several times longer, so the union is dominated by the source's unused "
        f"shingles. {sum(p.containment >= 0.8 for p in cut)} of {len(cut)} `cut` answers have "
        "containment ≥ 0.8. Jaccard near-dedup (the right rule for web documents, where a copy "
        "is the whole page) is not an excerpt or plagiarism detector; a containment rule would "
        "need a different index (e.g. LSH Ensemble) and is out of scope here.",
        "- Precision against truth A is 1.0 by construction (every flag is an exact-Jaccard "
        "confirmation), so A's recall is the only figure LSH can lose: a pair at J = 0.8 is a "
        f"candidate with probability {config.candidate_probability(0.8):.3f}, at J = 0.9 "
        f"{config.candidate_probability(0.9):.4f}.",
        "- `non` answers share topic words with their source but almost no 5-word sequences "
        f"(max J {max(p.jaccard for p in pairs if p.category == 'non'):.3f}).",
        "",
        "## Every pair with J ≥ 0.3 or a flag",
        "",
        "| answer | category | J | C | P(cand) | flagged as |",
        "|---|---|--:|--:|--:|---|",
    ]
    for p in sorted(pairs, key=lambda p: -p.jaccard):
        if p.jaccard >= 0.3 or p.flagged:
            lines.append(
                f"| {p.answer} | {p.category} | {p.jaccard:.3f} | {p.containment:.3f} "
                f"| {p.candidate_probability:.3f} | {p.flagged_as or '—'} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.neardup",
        __doc__.splitlines()[0],
        RESULTS / "neardup.md",
        "the same run: the evaluation takes seconds",
    )
    args = cli.parse_args(argv)
    run_start = RunStart.now(rerun_command(cli, argv))
    config = MinHashConfig()
    pairs, fallbacks = evaluate(config)
    write_report(args.output, report(run_start.finish(("numpy",)), pairs, fallbacks, config))


if __name__ == "__main__":
    main()
