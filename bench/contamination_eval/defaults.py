"""Sections 2-5, with the default n and threshold: recall per benchmark and variant, the
short-item rule, the clean documents flagged and redaction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from bench.contamination_eval.documents import Document
from bench.contamination_eval.planting import VARIANTS, Planted
from bench.contamination_eval.scoring import FP_LIMIT, Tally, is_duplicate_of, pct
from fm_assets.contamination.eval_items import EvalSet
from fm_assets.contamination.matcher import DEFAULT_THRESHOLD, ContaminationMatcher, Match, redact
from fm_assets.contamination.normalize import words
from fm_assets.contamination.registry import NGRAM_SIZE, BenchmarkRegistry


def defaults_section(
    eval_sets: dict[str, EvalSet],
    registries: Sequence[BenchmarkRegistry],
    planted: Sequence[Planted],
    results: Sequence[list[Match]],
    tallies: dict[tuple[str, str], Tally],
) -> list[str]:
    lines = [
        f"## 2. Defaults: n = {NGRAM_SIZE}, threshold = {DEFAULT_THRESHOLD:g}",
        "",
        "Registry: "
        + "; ".join(
            f"{r.benchmark}: {r.item_count:,} items, {r.ngrams.num_rows:,} rows, "
            f"{sum(1 for c in r.items.column('anchor_words').to_pylist() if c):,} under the "
            f"short-item rule, {len(r.empty_item_ids)} empty, "
            f"{len(r.unmatchable_item_ids)} unmatchable"
            for r in registries
        )
        + ".",
        "",
        "| benchmark | variant | must match | docs | planted item found | target | met | rules "
        "(ngram/short/exact) | other items matched |",
        "|---|---|---|--:|--:|--:|---|---|--:|",
    ]
    for variant in VARIANTS:
        for benchmark in variant.benchmarks:
            tally = tallies.get((benchmark, variant.name))
            if tally is None:
                continue
            rules = tally.by_rule or Counter()
            value = tally.recall if variant.expected else 1 - tally.recall
            shown = pct(tally.recall)
            target = variant.target if variant.expected else None
            met = "" if target is None else ("yes" if value >= target else "**no**")
            must = "yes" if variant.expected else "no, by the short rule"
            lines.append(
                f"| {benchmark} | {variant.name} | {must} | "
                f"{tally.docs:,} | {shown} | {pct(target) if target else ''} | {met} | "
                f"{rules['ngram']}/{rules['short']}/{rules['exact']} | {tally.others} |"
            )
    # Other items matched: show why (eval sets contain near-duplicate items).
    extra = []
    for doc, matches in zip(planted, results, strict=True):
        for m in matches:
            if (m.benchmark, m.item_id) != (doc.benchmark, doc.item_id):
                extra.append((doc, m))
    dup = sum(is_duplicate_of(eval_sets, m, d.benchmark, d.item_id) for d, m in extra)
    lines += [
        "",
        f"Other items matched in planted documents: {len(extra)}, of which {dup} have the same "
        "normalised question/prompt as the planted item (duplicates inside the eval set). "
        "Examples:",
        "",
    ]
    for doc, m in extra[:8]:
        snippet = doc.text[m.span[0] : m.span[1]].replace("\n", " ")[:160]
        lines.append(
            f"- planted {doc.benchmark}:{doc.item_id} ({doc.variant}) also matched "
            f"{m.benchmark}:{m.item_id} by {m.rule} (fraction {m.fraction:.2f}): “{snippet}”"
        )
    lines.append("")
    return lines


def short_rule_section(
    eval_sets: dict[str, EvalSet],
    planted: Sequence[Planted],
    results: Sequence[list[Match]],
    clean_results: Sequence[list[Match]],
    clean: Sequence[Document],
) -> list[str]:
    tp = fp = fn = 0
    fp_examples: list[str] = []
    for doc, matches in zip(planted, results, strict=True):
        for m in matches:
            if m.rule != "short":
                continue
            right = (m.benchmark, m.item_id) == (doc.benchmark, doc.item_id) and doc.expected
            same = is_duplicate_of(eval_sets, m, doc.benchmark, doc.item_id) and doc.expected
            if right or same:
                tp += 1
            else:
                fp += 1
                passage = doc.text[m.span[0] : m.span[1]].replace("\n", " ")[:200]
                fp_examples.append(
                    f"- {doc.variant} {doc.benchmark}:{doc.item_id} matched "
                    f"{m.benchmark}:{m.item_id}: “{passage}”"
                )
        mine = any((m.benchmark, m.item_id) == (doc.benchmark, doc.item_id) for m in matches)
        if doc.benchmark == "nq_open" and doc.expected and not mine:
            fn += 1
    clean_short = sum(1 for r in clean_results for m in r if m.rule == "short")
    fp += clean_short
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    return [
        "## 3. The short-item rule",
        "",
        f"Items whose anchor (first non-empty field: NQ-open's question) has fewer than 2n = "
        f"{2 * NGRAM_SIZE} words have few n-grams of their own (none below {NGRAM_SIZE} words: "
        "half of NQ-open), and a page that sets question and answer on separate labelled lines, "
        "or gives one of many answer aliases, keeps none of the n-grams spanning both. Besides "
        "the n-gram rule, such an item matches a document that holds its anchor verbatim (all "
        "its normalised words in a row) followed within 16 words by one of its other values "
        "(an answer alias) verbatim, digits included (“2017” must be 2017, not any number). An "
        "item registered with a single field matches on its anchor alone; answers of one "
        "character (“S”, “3”, “A+”) are not registered, and an item left with no answer (NQ "
        "answers such as “---”) gets no short rule; anchors need 3 words that "
        "are not numbers, and an anchor shared by more than 10 items is template. Precision counts "
        "every short-rule match in the planted documents (correct when it names the planted "
        "item, or an item with the same question, in a variant that must match) and in the "
        f"{len(clean):,} clean documents; recall counts NQ-open documents that must match.",
        "",
        "| short-rule matches correct | wrong (planted docs) | wrong (clean docs) | "
        "must-match NQ docs missed | precision | recall |",
        "|--:|--:|--:|--:|--:|--:|",
        f"| {tp:,} | {fp - clean_short} | {clean_short} | {fn} | {pct(precision)} | "
        f"{pct(recall)} |",
        "",
        *(
            ["Wrong matches (the passage from anchor to answer):", "", *fp_examples[:10], ""]
            if fp_examples
            else []
        ),
    ]


def clean_section(
    clean: Sequence[Document], clean_results: Sequence[list[Match]], eval_sets: dict[str, EvalSet]
) -> list[str]:
    flagged = [(d, r) for d, r in zip(clean, clean_results, strict=True) if r]
    share = len(flagged) / len(clean)
    lines = [
        "## 4. Clean documents",
        "",
        f"{len(flagged)} of {len(clean):,} clean documents flagged ({pct(share)}; limit "
        f"{pct(FP_LIMIT)}): {'met' if share <= FP_LIMIT else '**not met**'}.",
        "",
    ]
    for doc, matches in flagged:
        for m in matches:
            passage = doc.text[m.span[0] : m.span[1]].replace("\n", " ")[:300]
            item = eval_sets[m.benchmark].items[m.item_id].text.replace("\n", " / ")[:200]
            lines.append(
                f"- {doc.source} {doc.name}: {m.benchmark}:{m.item_id} by {m.rule} "
                f"(fraction {m.fraction:.2f}). Document: “{passage}”. Item: “{item}”"
            )
    lines.append("")
    return lines


def redaction_section(
    matcher: ContaminationMatcher,
    planted: Sequence[Planted],
    results: Sequence[list[Match]],
    hosts: Sequence[Document],
) -> list[str]:
    redacted_docs: list[str] = []
    kept_host: list[float] = []
    for doc, matches in zip(planted, results, strict=True):
        if not matches or not doc.expected:
            continue
        text = redact(doc.text, matches)
        redacted_docs.append(text)
        host_words = words(hosts[doc.host].text)
        kept = Counter(words(text))
        kept_host.append(
            sum(min(c, kept[w]) for w, c in Counter(host_words).items()) / max(1, len(host_words))
        )
    again = matcher.match(redacted_docs)
    still = sum(bool(r) for r in again)
    kept_host.sort()
    median = kept_host[len(kept_host) // 2] if kept_host else float("nan")
    worst = kept_host[0] if kept_host else float("nan")
    return [
        "## 5. Redaction",
        "",
        f"`redact(text, matches)` on the {len(redacted_docs):,} planted documents that matched: "
        f"{still} still match anything afterwards; the host's own words kept: median "
        f"{pct(median)}, worst {pct(worst)} (a passage is cut from its first to its last "
        "matched word, so host words inside a planted item's span go with it).",
        "",
    ]
