"""The default web policy on labelled pages: what it keeps and drops, and by which rule.

Every page goes the way the pipeline takes it: extracted (trafilatura), normalised, language
from lid.176, scores, then `WEB_POLICY`'s decisions in order: language (English at >= 0.65), the
quality rules of the page's language family, the default classifier at P(hq) >= 0.03 (trained
here with the default recipe, the model `fm run` trains on first need). One run, every figure
from it, written to `bench/results/default_policy.md`:

1. Held out: the shared WARCs' pages, hand-labelled keep/drop before scoring
   (`bench/page_labels.py`); sites neither the rules nor the classifier were tuned on.
2. The extraction benchmark's English article pages: held-out sites (never trained on, but the
   classifier's threshold was chosen on them: `bench.quality_classifier`) and, labelled
   in-sample, the sites the classifier was trained on.

    python -m bench.default_policy
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from bench.harness import RESULTS, SHARED_DATA, RunStart, parser, rerun_command, write_report
from bench.page_labels import DROP, KEEP, UNSURE, labelled_pages
from bench.quality_classifier import extracted_pages, held_out_page_ids
from fm_assets.curation.classifier.recipe import default_training_data
from fm_assets.curation.classifier.scoring import load_classifier, score_texts
from fm_assets.curation.classifier.training import train_classifier
from fm_assets.curation.langid import identify_languages
from fm_assets.curation.policy import WEB_POLICY
from fm_assets.curation.quality.families import decide_by_family
from fm_assets.curation.quality.scores import score_texts as quality_scores

KEPT = "kept"


def decisions(texts: Sequence[str], model_path: Path) -> list[tuple[str, str]]:
    """(language, "kept" or the rule that drops it) per text, under the default web policy."""
    languages = identify_languages(list(texts))
    rules = WEB_POLICY.rules()
    families = decide_by_family(
        pa.table(quality_scores(list(texts))), [lang for lang, _ in languages], rules
    )
    classifier = score_texts(load_classifier(model_path), list(texts))
    out = []
    for (lang, confidence), (_, rule), p_hq in zip(languages, families, classifier, strict=True):
        if confidence < WEB_POLICY.min_language_score:
            out.append((lang, "language_low_confidence"))
        elif lang not in WEB_POLICY.allowed_languages:
            out.append((lang, "language_not_allowed"))
        elif rule is not None:
            out.append((lang, rule))
        elif p_hq < WEB_POLICY.min_classifier_score:
            out.append((lang, "quality_classifier"))
        else:
            out.append((lang, KEPT))
    return out


def _rules(outcomes: Sequence[str]) -> str:
    dropped = Counter(o for o in outcomes if o != KEPT)
    return ", ".join(f"{rule} {n}" for rule, n in dropped.most_common()) or "none"


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.default_policy",
        __doc__.split("\n\n")[0],
        RESULTS / "default_policy.md",
        "the same run (about a minute)",
    )
    args = cli.parse_args(argv)
    run_start = RunStart.now(rerun_command(cli, argv))
    with tempfile.TemporaryDirectory(prefix="fm-default-policy-") as tmp:
        positives, negatives, sources = default_training_data(SHARED_DATA)
        report = train_classifier(positives, negatives, Path(tmp), sources=sources)
        pages = labelled_pages()
        page_outcomes = decisions([p.text for p in pages], report.model_path)
        held = held_out_page_ids(report.config.holdout_fraction)
        everything = held_out_page_ids(1.0 - 1e-12)
        trained = everything - held
        held_outcomes = decisions(extracted_pages(held), report.model_path)
        trained_outcomes = decisions(extracted_pages(trained), report.model_path)

    stamp = run_start.finish()
    lines = [
        "# The default web policy on labelled pages",
        "",
        f"{stamp.header()} {stamp.machine_line()}",
        "",
        f"Policy: English at lid.176 >= {WEB_POLICY.min_language_score}; Gopher, C4 and FineWeb "
        "rules at their published thresholds, per language family; the default classifier "
        f"(`{report.model_sha256[:16]}…`, the default recipe) at P(hq) >= "
        f"{WEB_POLICY.min_classifier_score}. Decisions in that order; a page is counted under "
        "the first rule that drops it.",
        "",
        "## Held out: the shared WARCs' pages, hand-labelled before scoring",
        "",
        "| label | pages | kept | dropped, by rule |",
        "|---|---|---|---|",
    ]
    for label in (KEEP, DROP, UNSURE):
        outcomes = [o for p, (_, o) in zip(pages, page_outcomes, strict=True) if p.label == label]
        lines.append(f"| {label} | {len(outcomes)} | {outcomes.count(KEPT)} | {_rules(outcomes)} |")
    lines += [
        "",
        "`keep` pages in other languages than English are dropped by design (the default keeps",
        "English); `deploy/policies.multilingual.example.toml` keeps German, French, Japanese and",
        "Chinese (`tests/test_default_policy_e2e.py`).",
        "",
        "| page | label (why) | language | decision |",
        "|---|---|---|---|",
    ]
    for page, (lang, outcome) in sorted(
        zip(pages, page_outcomes, strict=True), key=lambda x: (x[0].label, x[0].url)
    ):
        lines.append(f"| {page.url[:80]} | {page.label} ({page.why}) | {lang} | {outcome} |")

    english = [
        (name, [o for lang, o in outcomes if lang == "en"])
        for name, outcomes in (
            ("held-out sites (not trained on; the threshold was chosen on them)", held_outcomes),
            ("training sites (**in-sample** for the classifier)", trained_outcomes),
        )
    ]
    lines += [
        "",
        "## The extraction benchmark's English article pages",
        "",
        "The extract stage's text of each page; every page is an article, so every drop is a",
        "loss. Pages lid.176 does not call English are left out.",
        "",
        "| pages | n | kept | dropped, by rule |",
        "|---|---|---|---|",
        *(
            f"| {name} | {len(outcomes)} | {outcomes.count(KEPT)} | {_rules(outcomes)} |"
            for name, outcomes in english
        ),
        "",
    ]
    write_report(args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
