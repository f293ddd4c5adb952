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

    .venv/bin/python bench/eval_contamination.py            # full run (~2-4 min on 2 cores)
    .venv/bin/python bench/eval_contamination.py --quick    # 300 items per benchmark

The tests (`tests/test_contamination.py`) import this module and assert the targets on a sample.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fm_assets.contamination.eval_items import EvalItem, EvalSet, read_eval_set
from fm_assets.contamination.matcher import DEFAULT_THRESHOLD, ContaminationMatcher, Match, redact
from fm_assets.contamination.normalize import words
from fm_assets.contamination.registry import NGRAM_SIZE, BenchmarkRegistry, build_registry

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "results" / "contamination_eval.md"

BENCHMARKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gsm8k": ("evalsets/gsm8k-test.jsonl", ("question", "answer")),
    "humaneval": ("evalsets/humaneval.jsonl.gz", ("prompt", "canonical_solution")),
    "nq_open": ("evalsets/nq-open-dev.jsonl", ("question", "answer")),
}
NGRAM_SIZES = (8, 13)
THRESHOLDS = (0.2, 0.3, 0.4, 0.5, 0.7)
HOST_MIN_CHARS = 2000
SEED = 20_261_122

TARGETS = {"verbatim": 0.99, "renumbered": 0.95, "light_edits": 0.95}
FP_LIMIT = 0.001  # share of clean documents


# --- documents --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    """A real, clean document: where it comes from and its text."""

    source: str
    name: str
    text: str


def warc_documents() -> list[Document]:
    """Main text of every HTML response in the shared WARC files (warcio + trafilatura)."""
    import trafilatura
    from warcio.archiveiterator import ArchiveIterator

    from fm_assets.stages.decoding import decode_bytes

    docs = []
    for path in sorted((SHARED_DATA / "warc").glob("*.warc.gz")):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type != "response" or record.http_headers is None:
                    continue
                if "html" not in (record.http_headers.get_header("Content-Type") or ""):
                    continue
                url = record.rec_headers.get_header("WARC-Target-URI") or ""
                html, _ = decode_bytes(record.content_stream().read(), None)
                text = trafilatura.extract(html or "", url=url, include_tables=True)
                if text and text.strip():
                    docs.append(Document(f"warc/{path.name}", url, text))
    return docs


def article_documents() -> list[Document]:
    """`articleBody` of the 181 pages of the article-extraction benchmark."""
    path = SHARED_DATA / "extraction" / "article-extraction-benchmark" / "ground-truth.json"
    truth = json.loads(path.read_text(encoding="utf-8"))
    return [Document("articles", key, row["articleBody"]) for key, row in sorted(truth.items())]


def other_documents() -> list[Document]:
    """Clough-Stevenson answers and sources, and Presidio's synthetic sentences."""
    clough = SHARED_DATA / "neardup" / "clough-stevenson"
    docs = [
        Document("clough-stevenson", p.name, p.read_text(encoding="utf-8", errors="replace"))
        for p in sorted(clough.glob("*.txt"))
    ]
    presidio = json.loads((SHARED_DATA / "pii" / "presidio-synth-v2.json").read_text("utf-8"))
    docs += [Document("presidio", str(i), row["full_text"]) for i, row in enumerate(presidio)]
    return docs


def clean_documents() -> list[Document]:
    """Every clean shared document."""
    return warc_documents() + article_documents() + other_documents()


# --- eval sets and variants -------------------------------------------------------------------


def load_eval_sets() -> dict[str, EvalSet]:
    """The shared eval sets, by benchmark name."""
    return {
        name: read_eval_set(SHARED_DATA / rel, fields) for name, (rel, fields) in BENCHMARKS.items()
    }


def build_registries(eval_sets: dict[str, EvalSet], ngram_size: int) -> list[BenchmarkRegistry]:
    return [build_registry(name, s, ngram_size=ngram_size) for name, s in eval_sets.items()]


_PUNCT_SWAPS = {
    ".": "!",
    "!": ".",
    ",": ";",
    ";": ",",
    "?": ".",
    ":": " -",
    "'": '"',
    '"': "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "(": "[",
    ")": "]",
    "-": " - ",
    "$": "USD ",
}


def renumbered(text: str, rng: random.Random) -> str:
    """GSM-Hard style: every number replaced by a different one (often larger)."""

    def other(match: re.Match[str]) -> str:
        old = int(match.group())
        new = old
        while new == old:
            new = rng.randrange(2, 10 ** rng.randint(1, len(match.group()) + 3))
        return str(new)

    return re.sub(r"\d+", other, text)


def light_edits(text: str, rng: random.Random) -> str:
    """Whitespace and punctuation edits: about a third of the gaps and of the punctuation."""

    def punct(match: re.Match[str]) -> str:
        roll = rng.random()
        if roll < 0.1:
            return ""  # dropped
        if roll < 0.3:
            return _PUNCT_SWAPS.get(match.group(), match.group())
        return match.group()

    out = []
    for piece in re.split(r"(\s+)", text):
        if piece.isspace():
            roll = rng.random()
            out.append(
                " " if roll < 0.15 else "\n" if roll < 0.25 else "  " if roll < 0.35 else piece
            )
        else:
            out.append(re.sub(r"[^\w\s]", punct, piece))
    return "".join(out)


@dataclass(frozen=True)
class Variant:
    """A way an item shows up in a document; `expected` is whether that must match."""

    name: str
    benchmarks: tuple[str, ...]
    make: Callable[[EvalItem, random.Random, EvalSet], str | None]
    expected: bool
    target: float | None  # recall target, None: reported only


def _question(item: EvalItem) -> str:
    return "\n".join(item.values[0])


def _qa(item: EvalItem, rng: random.Random, template: str) -> str | None:
    answers = item.values[1] if len(item.values) > 1 else ()
    if not answers:
        return None
    return template.format(q=_question(item), a=rng.choice(answers))


def _wrong_answer(item: EvalItem, rng: random.Random, eval_set: EvalSet) -> str | None:
    """The question with another item's answer that holds none of this item's answers."""
    mine = [f" {' '.join(words(a, mask_numbers=False))} " for a in item.values[1]]
    for _ in range(20):
        other = rng.choice(eval_set.items)
        if not other.values[1]:
            continue
        answer = rng.choice(other.values[1])
        spaced = f" {' '.join(words(answer, mask_numbers=False))} "
        if spaced.strip() and not any(a in spaced for a in mine if a.strip()):
            return f"Q: {_question(item)}?\nA: {answer}"
    return None


LONG = ("gsm8k", "humaneval")
VARIANTS = (
    Variant("verbatim", ("gsm8k", "humaneval", "nq_open"), lambda i, r, s: i.text, True, 0.99),
    Variant("renumbered", LONG, lambda i, r, s: renumbered(i.text, r), True, 0.95),
    Variant("light_edits", LONG, lambda i, r, s: light_edits(i.text, r), True, 0.95),
    Variant(
        "renumbered+edits", LONG, lambda i, r, s: light_edits(renumbered(i.text, r), r), True, None
    ),
    Variant("first_field_only", LONG, lambda i, r, s: _question(i), True, None),
    Variant("qa_labelled", ("nq_open",), lambda i, r, s: _qa(i, r, "Q: {q}?\nA: {a}"), True, None),
    Variant(
        "qa_sentence",
        ("nq_open",),
        lambda i, r, s: _qa(i, r, "Someone asked “{q}?” on the forum. It is {a}, of course."),
        True,
        None,
    ),
    Variant("question_only", ("nq_open",), lambda i, r, s: _question(i) + "?", False, None),
    Variant("wrong_answer", ("nq_open",), _wrong_answer, False, None),
)


@dataclass(frozen=True)
class Planted:
    """One host document with one eval item (or a variant of it) inserted."""

    benchmark: str
    item_id: int
    variant: str
    expected: bool
    host: int  # index into the hosts
    start: int  # the inserted snippet's characters in `text`
    end: int
    text: str


def plant(host: str, snippet: str, rng: random.Random) -> tuple[str, int, int]:
    """`host` with `snippet` inserted as its own paragraph at a random line break."""
    breaks = [m.end() for m in re.finditer("\n", host)] or [len(host)]
    at = rng.choice(breaks)
    before = host[:at] if host[:at].endswith("\n") or at == 0 else host[:at] + "\n"
    text = before + snippet + "\n" + host[at:]
    return text, len(before), len(before) + len(snippet)


def planted_documents(
    eval_sets: dict[str, EvalSet],
    hosts: Sequence[Document],
    *,
    per_benchmark: int | None = None,
    seed: int = SEED,
    variants: Sequence[Variant] = VARIANTS,
) -> list[Planted]:
    """Each variant of each (sampled) item, planted in a random host."""
    rng = random.Random(seed)
    out = []
    for name, eval_set in eval_sets.items():
        items = [i for i in eval_set.items if not i.is_empty]
        if per_benchmark is not None and per_benchmark < len(items):
            items = rng.sample(items, per_benchmark)
        for variant in variants:
            if name not in variant.benchmarks:
                continue
            for item in items:
                snippet = variant.make(item, rng, eval_set)
                if snippet is None:
                    continue
                host = rng.randrange(len(hosts))
                text, start, end = plant(hosts[host].text, snippet, rng)
                out.append(
                    Planted(
                        name, item.item_id, variant.name, variant.expected, host, start, end, text
                    )
                )
    return out


# --- scoring ----------------------------------------------------------------------------------


@dataclass
class Tally:
    """Outcome counts of one (benchmark, variant) group."""

    docs: int = 0
    found: int = 0  # the planted item matched
    by_rule: Counter[str] | None = None
    others: int = 0  # matches of other items

    @property
    def recall(self) -> float:
        return self.found / self.docs if self.docs else float("nan")


def score_planted(
    planted: Sequence[Planted], results: Sequence[list[Match]]
) -> dict[tuple[str, str], Tally]:
    tallies: dict[tuple[str, str], Tally] = defaultdict(lambda: Tally(by_rule=Counter()))
    for doc, matches in zip(planted, results, strict=True):
        tally = tallies[(doc.benchmark, doc.variant)]
        tally.docs += 1
        mine = [m for m in matches if (m.benchmark, m.item_id) == (doc.benchmark, doc.item_id)]
        if mine:
            tally.found += 1
            assert tally.by_rule is not None
            tally.by_rule[mine[0].rule] += 1
        tally.others += len(matches) - len(mine)
    return dict(tallies)


def is_duplicate_of(eval_sets: dict[str, EvalSet], a: Match, benchmark: str, item_id: int) -> bool:
    """Whether match `a` is an item whose normalised first field equals the planted item's."""
    first = " ".join(words(_question(eval_sets[benchmark].items[item_id])))
    return " ".join(words(_question(eval_sets[a.benchmark].items[a.item_id]))) == first


# --- report -----------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.2f}%"


def run(quick: bool, output: Path) -> None:
    started = time.perf_counter()
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    eval_sets = load_eval_sets()
    clean = clean_documents()
    hosts = [d for d in clean if len(d.text) >= HOST_MIN_CHARS]
    per_benchmark = 300 if quick else None
    planted = planted_documents(eval_sets, hosts, per_benchmark=per_benchmark)
    clean_texts = [d.text for d in clean]
    lines = [
        "# Contamination matcher: recall on planted eval items, false positives on clean text",
        "",
        f"Written by `python bench/eval_contamination.py{' --quick' if quick else ''}` on {stamp}. "
        f"Eval sets: "
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
    ]

    lines += _sweep_section(eval_sets, planted, clean_texts)

    # 2. Defaults.
    registries = build_registries(eval_sets, NGRAM_SIZE)
    matcher = ContaminationMatcher.from_registries(registries)
    results = matcher.match([p.text for p in planted])
    clean_results = matcher.match(clean_texts)
    tallies = score_planted(planted, results)
    lines += _defaults_section(eval_sets, registries, planted, results, tallies)
    lines += _short_rule_section(eval_sets, planted, results, clean_results, clean)
    lines += _clean_section(clean, clean_results, eval_sets)
    lines += _redaction_section(matcher, planted, results, hosts)
    lines += ["", f"Whole run: {time.perf_counter() - started:.0f} s."]
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {output}")


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


def _sweep_section(
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
                " / ".join(_pct(tallies[(b, v)].recall) for b in names)
                for v, names in SWEEP_COLUMNS
            ]
            cells.append(str(flagged))
            lines.append("| " + " | ".join(cells) + " |")
            print(" | ".join(cells), flush=True)
            recall.update({(n, threshold, *key): t.recall for key, t in tallies.items()})

    def r(n: int, t: float, benchmark: str, variant: str) -> str:
        return _pct(recall[(n, t, benchmark, variant)])

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
        f"recall: the worst targeted variant is found {_pct(worst(t))} of the time at {t:g} "
        f"({_pct(worst(0.5))} at 0.5), while partial copies — a GSM8K question or HumanEval "
        "prompt without its solution — are found "
        f"{r(n, t, 'gsm8k', 'first_field_only')} / {r(n, t, 'humaneval', 'first_field_only')} "
        f"of the time at {t:g} against {r(n, 0.5, 'gsm8k', 'first_field_only')} / "
        f"{r(n, 0.5, 'humaneval', 'first_field_only')} at 0.5. {t:g} keeps a margin over "
        "0.2 for items with few n-grams (one n-gram of a 4-n-gram item is 25%). The matcher "
        "reports each match's fraction, so a stage can demand more without re-matching.",
        "",
    ]
    return lines


def _defaults_section(
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
            shown = _pct(tally.recall)
            target = variant.target if variant.expected else None
            met = "" if target is None else ("yes" if value >= target else "**no**")
            must = "yes" if variant.expected else "no, by the short rule"
            lines.append(
                f"| {benchmark} | {variant.name} | {must} | "
                f"{tally.docs:,} | {shown} | {_pct(target) if target else ''} | {met} | "
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


def _short_rule_section(
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
        f"| {tp:,} | {fp - clean_short} | {clean_short} | {fn} | {_pct(precision)} | "
        f"{_pct(recall)} |",
        "",
        *(
            ["Wrong matches (the passage from anchor to answer):", "", *fp_examples[:10], ""]
            if fp_examples
            else []
        ),
    ]


def _clean_section(
    clean: Sequence[Document], clean_results: Sequence[list[Match]], eval_sets: dict[str, EvalSet]
) -> list[str]:
    flagged = [(d, r) for d, r in zip(clean, clean_results, strict=True) if r]
    share = len(flagged) / len(clean)
    lines = [
        "## 4. Clean documents",
        "",
        f"{len(flagged)} of {len(clean):,} clean documents flagged ({_pct(share)}; limit "
        f"{_pct(FP_LIMIT)}): {'met' if share <= FP_LIMIT else '**not met**'}.",
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


def _redaction_section(
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
        f"{_pct(median)}, worst {_pct(worst)} (a passage is cut from its first to its last "
        "matched word, so host words inside a planted item's span go with it).",
        "",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="300 items per benchmark")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    run(args.quick, args.output)


if __name__ == "__main__":
    main()
