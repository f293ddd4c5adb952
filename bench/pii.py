"""PII rules: per-kind precision, recall and F1 in-sample and held out, plus throughput.

In-sample: `../shared/data/pii/presidio-synth-v2.json`, read in place (1,500 synthetic sentences
with gold spans; the rules were written with it open). Held out: 1,500 sentences generated fresh
by `bench/pii_heldout.py` (Faker values in templates written for the evaluation); throughput
and 5 MB lines by `bench/pii_throughput.py`. Runs `fm_assets.curation.pii.redaction.find_pii` on
every text and writes a Markdown report to `bench/results/pii.md`:

    python -m bench.pii
    python -m bench.pii --quick --output /tmp/pii.md   # one timing repeat

Matching rule: a predicted span is a true positive when it shares at least one character with a
gold span of the same kind; a gold span is found when at least one predicted span of its kind
shares a character with it. Precision = true-positive predictions / predictions; recall = found
gold spans / gold spans. Gold labels of other kinds (PERSON, US_SSN, IBAN_CODE, ...) are not
scored, but a prediction that lands on one is a false positive. Exact-boundary matches are
reported alongside. Nothing here asserts a speed; `tests/test_pii.py` asserts the quality targets
with the same scoring code.
"""

from __future__ import annotations

import gzip
import ipaddress
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import (
    EVALSETS,
    PRESIDIO,
    REPO,
    RESULTS,
    RunStart,
    Stamp,
    parser,
    rerun_command,
    write_report,
)
from bench.pii_throughput import stress_rows, throughput_section, throughput_timings
from fm_assets.curation.pii.addresses import NON_PUBLIC_NETWORKS
from fm_assets.curation.pii.redaction import (
    CREDIT_CARD,
    EMAIL,
    IP_ADDRESS,
    PHONE,
    PII_KINDS,
    PII_RULES_VERSION,
    Redaction,
    find_pii,
)

# presidio entity_type -> our kind; the other labels in the file are not scored.
GOLD_KINDS = {
    "EMAIL_ADDRESS": EMAIL,
    "PHONE_NUMBER": PHONE,
    "IP_ADDRESS": IP_ADDRESS,
    "CREDIT_CARD": CREDIT_CARD,
}
# kind -> (minimum recall, minimum precision): the targets tests/test_pii.py asserts.
TARGETS = {
    EMAIL: (0.95, 0.9),
    IP_ADDRESS: (0.95, 0.9),
    CREDIT_CARD: (0.95, 0.9),
    PHONE: (0.85, 0.9),
}
# The held-out floors tests/test_pii.py asserts: the targets, except phone recall, which held
# out measures 0.82 (pii_v1 misses Brazilian and other national formats, see the report); its
# floor is a regression gate at that level, not a target met.
HELD_OUT_FLOORS = {**TARGETS, PHONE: (0.8, 0.9)}


@dataclass(frozen=True)
class GoldSpan:
    """One labelled span; `label` is presidio's entity_type, `kind` ours (or None: unscored)."""

    label: str
    kind: str | None
    start: int
    end: int
    value: str


@dataclass(frozen=True)
class Document:
    text: str
    gold: tuple[GoldSpan, ...]


@dataclass
class KindScore:
    """Counts for one kind under the overlap matching rule."""

    kind: str
    gold: int = 0
    gold_found: int = 0
    predicted: int = 0
    predicted_correct: int = 0
    exact: int = 0
    # False positives by the gold label they landed on ("none": on unlabelled text).
    false_positive_labels: Counter[str] = field(default_factory=Counter)
    # Gold spans missed, by shape (digits -> d, letters -> a): says which format, not the value.
    missed_shapes: Counter[str] = field(default_factory=Counter)

    @property
    def precision(self) -> float:
        return self.predicted_correct / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.gold_found / self.gold if self.gold else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def load_documents(path: Path = PRESIDIO) -> list[Document]:
    """The file's documents with their gold spans; fails if a span does not match its text."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the PII evaluation reads ../shared/data/pii next to the repo"
        )
    documents = []
    for index, record in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        text = record["full_text"]
        gold = []
        for span in record["spans"]:
            start, end, value = span["start_position"], span["end_position"], span["entity_value"]
            if text[start:end] != value:
                raise ValueError(f"{path} record {index}: span [{start}, {end}) is not its value")
            label = span["entity_type"]
            gold.append(GoldSpan(label, GOLD_KINDS.get(label), start, end, value))
        documents.append(Document(text, tuple(gold)))
    return documents


def text_megabytes(documents: Sequence[Document]) -> float:
    return sum(len(d.text.encode("utf-8")) for d in documents) / 1e6


def _overlaps(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    return a_start < b_end and b_start < a_end


def shape(value: str) -> str:
    """`value` with digits as `d` and letters as `a`: a format that does not reveal the value."""
    return re.sub(r"\d", "d", re.sub(r"[^\W\d_]", "a", value))


def score(
    documents: Sequence[Document],
    predictions: Sequence[Sequence[Redaction]],
    keep_gold: Callable[[GoldSpan], bool] = lambda span: True,
) -> dict[str, KindScore]:
    """Per-kind counts; gold spans for which `keep_gold` is false are left out of recall."""
    scores = {kind: KindScore(kind) for kind in PII_KINDS}
    for document, predicted in zip(documents, predictions, strict=True):
        for gold in document.gold:
            if gold.kind is None or not keep_gold(gold):
                continue
            kind_score = scores[gold.kind]
            kind_score.gold += 1
            hits = [
                p
                for p in predicted
                if p.kind == gold.kind and _overlaps(p.start, p.end, gold.start, gold.end)
            ]
            if hits:
                kind_score.gold_found += 1
            else:
                kind_score.missed_shapes[shape(gold.value)] += 1
        for p in predicted:
            kind_score = scores[p.kind]
            kind_score.predicted += 1
            touched = [g for g in document.gold if _overlaps(p.start, p.end, g.start, g.end)]
            if any(g.kind == p.kind for g in touched):
                kind_score.predicted_correct += 1
                if any(g.kind == p.kind and (g.start, g.end) == (p.start, p.end) for g in touched):
                    kind_score.exact += 1
            else:
                labels = sorted({g.label for g in touched}) or ["none"]
                kind_score.false_positive_labels["+".join(labels)] += 1
    return scores


def luhn_ok(number: str) -> bool:
    digits = [int(char) for char in number if char.isdigit()]
    total = 0
    for index, digit in enumerate(reversed(digits)):
        if index % 2:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def _digits(value: str) -> str:
    return "".join(char for char in value if char.isdigit())


def _maestro(value: str) -> bool:
    prefix = int(_digits(value)[:2])
    return prefix == 50 or 56 <= prefix <= 69


def is_public_ip(value: str) -> bool:
    """Whether a gold IP is outside `NON_PUBLIC_NETWORKS` (the networks pii_v1 keeps)."""
    address = ipaddress.ip_address(value)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not any(address in network for network in NON_PUBLIC_NETWORKS)


def pii_free_texts() -> dict[str, list[str]]:
    """Shared texts with no personal data: every redaction in them is a false positive."""
    texts: dict[str, list[str]] = {}
    gsm8k = EVALSETS / "gsm8k-test.jsonl"
    if gsm8k.is_file():
        rows = [json.loads(line) for line in gsm8k.read_text(encoding="utf-8").splitlines()]
        texts["GSM8K test (math word problems)"] = [f"{r['question']} {r['answer']}" for r in rows]
    humaneval = EVALSETS / "humaneval.jsonl.gz"
    if humaneval.is_file():
        with gzip.open(humaneval, "rt", encoding="utf-8") as lines:
            rows = [json.loads(line) for line in lines]
        texts["HumanEval (Python code)"] = [r["prompt"] + r["canonical_solution"] for r in rows]
    return texts


def false_positive_rows(texts: dict[str, list[str]]) -> list[tuple[str, int, int, str]]:
    """(corpus, texts, characters, redactions by kind and shape) for PII-free corpora."""
    rows = []
    for name, corpus in texts.items():
        hits: Counter[str] = Counter()
        for text in corpus:
            for r in find_pii(text):
                hits[f"{r.kind} `{shape(text[r.start : r.end])}`"] += 1
        listed = ", ".join(f"{k} × {v}" for k, v in hits.most_common()) or "none"
        rows.append((name, len(corpus), sum(len(t) for t in corpus), listed))
    return rows


def heldout_section(documents: Sequence[Document], scores: dict[str, KindScore]) -> list[str]:
    """The held-out set's table, next to the in-sample one above it."""
    from bench.pii_heldout import LOCALES, SEED, TEMPLATES

    labels = Counter(g.label for d in documents for g in d.gold)
    scored = [label for label in GOLD_KINDS if labels[label]]
    others = sorted(label for label in labels if label not in GOLD_KINDS)
    lines = [
        "## Held out: sentences generated fresh (`bench/pii_heldout.py`)",
        "",
        f"{len(documents):,} sentences from {len(TEMPLATES)} templates written for this "
        f"evaluation (tickets, logs, forms, chat, invoices), values from Faker "
        f"{_faker_version()} in {len(LOCALES)} locales ({', '.join(LOCALES)}), seed {SEED}. "
        "The rules were neither written nor tuned against it. Gold: "
        + ", ".join(f"{label} {labels[label]}" for label in scored)
        + "; distractors a prediction must not touch: "
        + ", ".join(f"{label} {labels[label]}" for label in others)
        + ". The same matching rule.",
        "",
        "| kind | gold | found | predicted | true pos. | exact | precision | recall | F1 "
        "| floor in tests (P / R) | met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for kind in (EMAIL, PHONE, IP_ADDRESS, CREDIT_CARD):
        s = scores[kind]
        min_recall, min_precision = HELD_OUT_FLOORS[kind]
        met = s.recall >= min_recall and s.precision >= min_precision
        lines.append(
            f"| {kind} | {s.gold} | {s.gold_found} | {s.predicted} | {s.predicted_correct} "
            f"| {s.exact} | {s.precision:.3f} | {s.recall:.3f} | {s.f1:.3f} "
            f"| ≥ {min_precision} / ≥ {min_recall} | {'yes' if met else '**no**'} |"
        )
    lines += ["", "Misses and false positives held out (shapes: digit → d, letter → a):", ""]
    for kind in (EMAIL, PHONE, IP_ADDRESS, CREDIT_CARD):
        s = scores[kind]
        missed = ", ".join(f"`{k}` × {v}" for k, v in s.missed_shapes.most_common(8)) or "none"
        wrong = ", ".join(f"{k} × {v}" for k, v in s.false_positive_labels.most_common()) or "none"
        lines.append(f"- **{kind}**: missed {missed}; false positives on {wrong}.")
    phone = scores[PHONE]
    lines += [
        "",
        f"Phone recall held out is {phone.recall:.3f}, below the {TARGETS[PHONE][0]} target the "
        "in-sample file meets: the misses are national formats that file does not hold "
        "(Brazilian `+55 dd dddd-dddd` and `dd dddd-dddd`, bare ten-digit numbers without a "
        "phone word, area codes in parentheses followed by one group). They are reported, not "
        "fixed here: a rule changed after reading them would make this set in-sample too.",
        "",
    ]
    return lines


def _faker_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("faker")


def render(
    stamp: Stamp,
    documents: Sequence[Document],
    scores: dict[str, KindScore],
    public_scores: dict[str, KindScore],
    pii_free: list[tuple[str, int, int, str]],
    data_path: Path,
    heldout: list[str],
    throughput: list[str],
) -> str:
    text_mb = text_megabytes(documents)
    labels = Counter(g.label for d in documents for g in d.gold)
    cards = [g for d in documents for g in d.gold if g.kind == CREDIT_CARD]
    card_lengths = Counter(sum(c.isdigit() for c in g.value) for g in cards)
    card_luhn_failures = sum(not luhn_ok(g.value) for g in cards)
    short_non_maestro = sum(len(_digits(g.value)) == 12 and not _maestro(g.value) for g in cards)
    ips = [g for d in documents for g in d.gold if g.kind == IP_ADDRESS]
    public_ips = sum(is_public_ip(g.value) for g in ips)
    ipv6 = sum(":" in g.value for g in ips)

    lines = [
        "# PII detection: in-sample (presidio-synth-v2) and held out (generated)",
        "",
        f"{stamp.header()} {stamp.machine_line()} Rules: `{PII_RULES_VERSION}` "
        "(`fm_assets/curation/pii/`).",
        "",
        f"Data: `{_shown(data_path)}` — {len(documents):,} synthetic sentences, "
        f"{text_mb:.2f} MB of text, {sum(labels.values()):,} gold spans of {len(labels)} labels, "
        f"of which {sum(labels[label] for label in GOLD_KINDS):,} are scored "
        f"({', '.join(f'{label} {labels[label]}' for label in GOLD_KINDS)}).",
        "",
        "**Matching rule.** A predicted span is a true positive when it shares at least one "
        "character with a gold span of the same kind; a gold span is found when at least one "
        "predicted span of its kind shares a character with it. Precision = true-positive "
        "predictions / predictions; recall = found gold spans / gold spans. A prediction on a "
        "gold span of another label (a US_SSN, an IBAN, a street address) or on unlabelled text "
        "is a false positive. *exact* counts true positives whose boundaries equal the gold "
        "span's.",
        "",
        "## In-sample: presidio-synth-v2",
        "",
        "**In-sample.** The rules were written with this file in view: two phone rules were "
        "tightened after reading its false positives (the US SSN shape `0dd-dd-dddd` and "
        "two-group numbers with a trunk 0 and fewer than ten digits are no longer phones on "
        "their own). Read these figures as a check on the formats the data holds; the held-out "
        "table below is the estimate, and the PII-free texts a second check on precision.",
        "",
        "| kind | gold | found | predicted | true pos. | exact | precision | recall | F1 "
        "| target (P / R) | met |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for kind in (EMAIL, PHONE, IP_ADDRESS, CREDIT_CARD):
        s = scores[kind]
        min_recall, min_precision = TARGETS[kind]
        met = s.recall >= min_recall and s.precision >= min_precision
        lines.append(
            f"| {kind} | {s.gold} | {s.gold_found} | {s.predicted} | {s.predicted_correct} "
            f"| {s.exact} | {s.precision:.3f} | {s.recall:.3f} | {s.f1:.3f} "
            f"| ≥ {min_precision} / ≥ {min_recall} | {'yes' if met else '**no**'} |"
        )
    ip_all, ip_public = scores[IP_ADDRESS], public_scores[IP_ADDRESS]
    lines += [
        "",
        "## What the gold data holds",
        "",
        f"- **IP addresses**: {len(ips)} gold ({ipv6} IPv6); {public_ips} are public (outside "
        "`NON_PUBLIC_NETWORKS`, which the rules keep). Recall over all gold IPs: "
        f"{ip_all.gold_found}/{ip_all.gold} = {ip_all.recall:.3f}; over public gold IPs only: "
        f"{ip_public.gold_found}/{ip_public.gold} = {ip_public.recall:.3f}"
        + (
            " (the same: the file has no private or loopback IPs)."
            if public_ips == len(ips)
            else "."
        )
        + " The kept private/loopback cases are covered by `tests/test_pii.py` instead.",
        f"- **Credit cards**: {len(cards)} gold; {card_luhn_failures} fail the Luhn check. "
        "Digit counts: "
        + ", ".join(f"{n} digits × {card_lengths[n]}" for n in sorted(card_lengths))
        + ". The 12-digit ones are Maestro-style numbers, shorter than the 13–19 digits of the "
        "brief; pii_v1 accepts 12 digits only for the Maestro prefixes 50 and 56–69 (a bare "
        "12-digit Luhn number is too common to call a card), so a 12-digit number with another "
        f"prefix stays a miss ({short_non_maestro} here) rather than widening the rule.",
        "",
        "## Misses and false positives (shapes: digit → d, letter → a)",
        "",
    ]
    for kind in (EMAIL, PHONE, IP_ADDRESS, CREDIT_CARD):
        s = scores[kind]
        missed = ", ".join(f"`{k}` × {v}" for k, v in s.missed_shapes.most_common()) or "none"
        wrong = ", ".join(f"{k} × {v}" for k, v in s.false_positive_labels.most_common()) or "none"
        lines.append(f"- **{kind}**: missed {missed}; false positives on {wrong}.")
    lines += ["", *heldout]
    lines += [
        "## Texts without personal data (every redaction is a false positive)",
        "",
        "| corpus (`../shared/data/evalsets`) | texts | characters | redactions |",
        "|---|---:|---:|---|",
    ]
    for name, count, characters, listed in pii_free:
        lines.append(f"| {name} | {count:,} | {characters:,} | {listed} |")
    lines += ["", *throughput]
    lines += [
        "",
        "The machine is shared (2 cores, other jobs running): absolute rates move from run to "
        "run, and CPU seconds are the steadier figure. Nothing here is asserted; "
        "`tests/test_pii.py` checks the quality targets (in-sample) and floors (held out) and "
        "that a 5 MB line completes.",
        "",
    ]
    return "\n".join(lines)


def _shown(path: Path) -> str:
    """`path` relative to the repository's parent (`../shared/...`) when it lies there."""
    try:
        return f"../{path.resolve().relative_to(REPO.parent)}"
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> None:
    cli = parser(
        "bench.pii", __doc__.splitlines()[0], RESULTS / "pii.md", "one timing repeat, not five"
    )
    cli.add_argument("--data", type=Path, default=PRESIDIO)
    cli.add_argument("--repeats", type=int, help="timing repeats (default 5, quick 1)")
    args = cli.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 5)
    run_start = RunStart.now(rerun_command(cli, argv))

    documents = load_documents(args.data)
    texts = [d.text for d in documents]
    predictions = [find_pii(text) for text in texts]
    scores = score(documents, predictions)
    public_scores = score(
        documents, predictions, keep_gold=lambda g: g.kind != IP_ADDRESS or is_public_ip(g.value)
    )
    timings = throughput_timings(texts, repeats)
    pii_free = false_positive_rows(pii_free_texts())
    stress = stress_rows()
    from bench.pii_heldout import generate

    heldout_documents = generate()
    heldout_scores = score(heldout_documents, [find_pii(d.text) for d in heldout_documents])
    report = render(
        run_start.finish(),
        documents,
        scores,
        public_scores,
        pii_free,
        args.data,
        heldout_section(heldout_documents, heldout_scores),
        throughput_section(timings, stress, len(texts), text_megabytes(documents)),
    )
    write_report(args.output, report)


if __name__ == "__main__":
    main()
