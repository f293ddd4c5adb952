"""Train the default quality classifier recipe end to end and report it.

One run, every figure from that run, written to `bench/results/quality_classifier.md`:

1. Training data: documents and passages per class and split (holdout = whole sites).
2. Held-out passage accuracy, precision and recall of `hq` (the report `train_classifier` makes),
   plus whole-document figures on the held-out sites: accuracy at 0.5 and the share of
   (article, boilerplate) pairs in which the article scores higher (ROC AUC).
3. Determinism: a second training on the same inputs, given in reverse order.
4. The default web policy's threshold (0.03), derived from the held-out sites: the lowest
   score of their articles, as ground-truth bodies and as the extract stage's text of the page.
5. A test on pages of sites outside the benchmark: the shared WARCs' pages, extracted as the
   pipeline does and hand-labelled keep/drop before any score was seen (`bench/page_labels.py`).
6. Timings: building the data, training, scoring throughput.

The model files go to a temporary directory (or `--model-dir`); nothing is trained on the holdout
and no setting was chosen by looking at it.

    python -m bench.quality_classifier
"""

from __future__ import annotations

import gzip
import json
import math
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path

from bench.harness import (
    ARTICLE_BENCHMARK,
    ARTICLE_TRUTH,
    RESULTS,
    SHARED_DATA,
    RunStart,
    parser,
    rerun_command,
    write_report,
)
from bench.page_labels import DROP, KEEP, UNSURE, labelled_pages
from fm_assets.curation.classifier.recipe import default_training_data
from fm_assets.curation.classifier.scoring import QualityClassifier, load_classifier, score_texts
from fm_assets.curation.classifier.training import TrainingDocument, in_holdout, train_classifier
from fm_assets.curation.policy import DEFAULT_MIN_CLASSIFIER_SCORE


def roc_auc(positive: list[float], negative: list[float]) -> float:
    """Share of (positive, negative) pairs ranked correctly; ties count half."""
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return wins / (len(positive) * len(negative))


def held_out(docs: list[TrainingDocument], groups: set[str]) -> list[str]:
    return [d.text for d in docs if d.group in groups]


def extracted_pages(page_ids: set[str]) -> list[str]:
    """The extract stage's text (trafilatura, normalised) of the benchmark's pages `page_ids`."""
    from fm_assets.stages.extract import trafilatura_text
    from fm_assets.stages.normalize import normalize_text

    truth = json.loads(ARTICLE_TRUTH.read_text(encoding="utf-8"))
    texts = []
    for page_id in sorted(page_ids):
        html = gzip.decompress((ARTICLE_BENCHMARK / "html" / f"{page_id}.html.gz").read_bytes())
        text = trafilatura_text(html.decode("utf-8", "replace"), truth[page_id]["url"])
        texts.append(normalize_text(text or ""))
    return texts


def held_out_page_ids(fraction: float) -> set[str]:
    truth = json.loads(ARTICLE_TRUTH.read_text(encoding="utf-8"))
    return {
        page_id
        for page_id, entry in truth.items()
        if in_holdout(
            (urllib.parse.urlsplit(entry["url"]).hostname or page_id).removeprefix("www."),
            fraction,
        )
    }


def share(scores: Sequence[float], threshold: float) -> str:
    kept = sum(s >= threshold for s in scores)
    return f"{kept}/{len(scores)}"


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.quality_classifier",
        __doc__.split("\n\n")[0],
        RESULTS / "quality_classifier.md",
        "the same run: one training has no smaller version",
    )
    cli.add_argument("--model-dir", type=Path, default=None)
    args = cli.parse_args(argv)
    run_start = RunStart.now(rerun_command(cli, argv))

    with tempfile.TemporaryDirectory(prefix="fm-quality-") as tmp:
        model_dir = args.model_dir or Path(tmp)
        start = time.perf_counter()
        positives, negatives, sources = default_training_data(SHARED_DATA)
        data_seconds = time.perf_counter() - start

        start = time.perf_counter()
        report = train_classifier(positives, negatives, model_dir / "a", sources=sources)
        train_seconds = time.perf_counter() - start
        again = train_classifier(positives[::-1], negatives[::-1], model_dir / "b")

        r = report
        classifier: QualityClassifier = load_classifier(r.model_path)
        model_mb = r.model_path.stat().st_size / 1e6
        all_groups = {d.group for d in positives}
        holdout_groups = {g for g in all_groups if in_holdout(g, r.config.holdout_fraction)}
        articles = held_out(positives, holdout_groups)
        boilerplate = held_out(negatives, holdout_groups)
        article_scores = score_texts(classifier, articles)
        boilerplate_scores = score_texts(classifier, boilerplate)
        doc_correct = sum(s >= 0.5 for s in article_scores) + sum(
            s < 0.5 for s in boilerplate_scores
        )

        every_text = [d.text for d in positives + negatives]
        start = time.perf_counter()
        score_texts(classifier, every_text)
        score_seconds = time.perf_counter() - start
        score_mb = sum(len(t.encode("utf-8")) for t in every_text) / 1e6

        held_ids = held_out_page_ids(r.config.holdout_fraction)
        extracted_scores = score_texts(classifier, extracted_pages(held_ids))
        lowest = min(min(article_scores), min(extracted_scores))
        derived = math.floor(lowest * 100) / 100

        pages = labelled_pages()
        page_scores = score_texts(classifier, [page.text for page in pages])
        by_label = {
            label: [sc for page, sc in zip(pages, page_scores, strict=True) if page.label == label]
            for label in (KEEP, DROP, UNSURE)
        }

    stamp = run_start.finish()
    lines = [
        "# Quality classifier: default recipe",
        "",
        f"{stamp.header()} {stamp.machine_line()} fastText {r.fasttext_version}.",
        "",
        f"- recipe `{r.recipe_version}`",
        f"- model `{r.model_sha256}.bin` ({model_mb:.1f} MB)",
        f"- config: {', '.join(f'{k}={v}' for k, v in r.to_dict()['config'].items())}",
        f"- inputs: positives sha256 `{r.positives_sha256[:16]}…`, "
        f"negatives sha256 `{r.negatives_sha256[:16]}…`",
        *(f"- source {k}: {v}" for k, v in r.sources),
        "",
        "## Data",
        "",
        "Positives are the benchmark's ground-truth article bodies; negatives are the block-level",
        "text of the same pages that is not in the article body (navigation, footers, related",
        "links, captions, comments, notices). Both are cut into ~"
        f"{r.config.passage_chars}-character passages.",
        f"The holdout is every page of {len(holdout_groups)} of the {len(all_groups)} sites",
        "(chosen by hashing the host), so no site's template is on both sides. The larger class",
        "is downsampled in the training split only.",
        "",
        "| | documents | train passages | holdout passages |",
        "|---|---|---|---|",
        f"| hq (article) | {r.n_positive_documents} | {r.n_train_pos} | {r.n_holdout_pos} |",
        f"| lq (boilerplate) | {r.n_negative_documents} | {r.n_train_neg} | {r.n_holdout_neg} |",
        "",
        f"Dropped by balancing: {r.n_dropped_by_balancing} training passages; duplicate "
        f"passages removed: {r.n_duplicate_passages}.",
        "",
        "## Held-out results",
        "",
        "| level | n (hq / lq) | accuracy | precision (hq) | recall (hq) | ROC AUC |",
        "|---|---|---|---|---|---|",
        f"| passages | {r.n_holdout_pos} / {r.n_holdout_neg} | {r.holdout_accuracy:.3f} "
        f"| {r.holdout_precision:.3f} | {r.holdout_recall:.3f} | |",
        f"| whole documents | {len(articles)} / {len(boilerplate)} "
        f"| {doc_correct / (len(articles) + len(boilerplate)):.3f} | | "
        f"| {roc_auc(article_scores, boilerplate_scores):.3f} |",
        "",
        "Decision threshold 0.5 on P(hq). The errors are mostly prose on the negative side",
        "(reader comments, related-article teasers, press-release boilerplate) and articles in",
        "languages with few training pages.",
        "",
        "## Determinism",
        "",
        f"Retrained on the same inputs in reverse order: model `{again.model_sha256[:16]}…` — "
        + ("**identical**." if again.model_sha256 == r.model_sha256 else "**different**."),
        "(thread=1; each training runs in a fresh interpreter with zeroed allocations, see the",
        "module's notes on fastText 0.9.3.)",
        "",
        "## The default web policy's threshold",
        "",
        "Chosen on the held-out sites above (never on the test pages below): the lowest P(hq) of",
        "their articles, both as ground-truth bodies and as the text the extract stage gets from",
        f"the page ({len(extracted_scores)} pages), rounded down to two decimals.",
        "",
        "| held-out sites' documents | n | lowest P(hq) | kept at "
        f"{DEFAULT_MIN_CLASSIFIER_SCORE} | kept at 0.5 |",
        "|---|---|---|---|---|",
        f"| article bodies | {len(article_scores)} | {min(article_scores):.3f} "
        f"| {share(article_scores, DEFAULT_MIN_CLASSIFIER_SCORE)} | {share(article_scores, 0.5)} |",
        f"| extracted pages | {len(extracted_scores)} | {min(extracted_scores):.3f} "
        f"| {share(extracted_scores, DEFAULT_MIN_CLASSIFIER_SCORE)} "
        f"| {share(extracted_scores, 0.5)} |",
        f"| boilerplate | {len(boilerplate_scores)} | {min(boilerplate_scores):.3f} "
        f"| {share(boilerplate_scores, DEFAULT_MIN_CLASSIFIER_SCORE)} "
        f"| {share(boilerplate_scores, 0.5)} |",
        "",
        f"Derived threshold: {derived:.2f}; the default web policy uses "
        f"{DEFAULT_MIN_CLASSIFIER_SCORE} ("
        + ("the same" if derived == DEFAULT_MIN_CLASSIFIER_SCORE else "**different**")
        + "). Low by design: the Gopher, C4 and FineWeb rules decide most pages, and the",
        "classifier removes what is mostly navigation without costing held-out articles.",
        "",
        "## Test: pages of sites the benchmark does not hold (hand-labelled)",
        "",
        f"The shared WARCs' {len(pages)} distinct HTML pages, read and extracted as the pipeline",
        "does (`bench/page_labels.py`), labelled keep (prose) or drop (navigation, listings,",
        "tables, spam, error pages) before any classifier score on them was computed; `unsure`",
        "pages are left out of the figures. Many languages: the classifier's training pages are",
        "mostly English, and the rules and language ID decide too",
        "(`bench/results/default_policy.md`).",
        "",
        f"| label | pages | median P(hq) | kept at {DEFAULT_MIN_CLASSIFIER_SCORE} | kept at 0.5 |",
        "|---|---|---|---|---|",
        *(
            f"| {label} | {len(scores)} | {sorted(scores)[len(scores) // 2]:.3f} "
            f"| {share(scores, DEFAULT_MIN_CLASSIFIER_SCORE)} | {share(scores, 0.5)} |"
            for label, scores in by_label.items()
            if scores
        ),
        "",
        f"ROC AUC keep vs drop: {roc_auc(by_label[KEEP], by_label[DROP]):.3f}.",
        "",
        "## Timings",
        "",
        f"- build the training data (181 pages: parse HTML, split lines): {data_seconds:.1f} s",
        f"- train (split, write, fastText in a subprocess, hash, holdout scoring): "
        f"{train_seconds:.1f} s",
        f"- score {len(every_text)} documents ({score_mb:.1f} MB, preprocess + predict, one "
        f"process): {score_seconds:.2f} s = {len(every_text) / score_seconds:,.0f} docs/s, "
        f"{score_mb / score_seconds:.1f} MB/s",
        "",
    ]
    write_report(args.output, "\n".join(lines))
    print(f"model sha256 {r.model_sha256}")
    print(
        f"holdout accuracy {r.holdout_accuracy:.3f} precision {r.holdout_precision:.3f} "
        f"recall {r.holdout_recall:.3f}"
    )


if __name__ == "__main__":
    main()
