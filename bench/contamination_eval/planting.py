"""Eval items and the ways they show up in documents (variants), planted in clean hosts."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.contamination_eval.documents import Document
from bench.harness import EVALSETS
from fm_assets.contamination.eval_items import EvalItem, EvalSet, read_eval_set
from fm_assets.contamination.normalize import words
from fm_assets.contamination.registry import BenchmarkRegistry, build_registry

BENCHMARKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gsm8k": ("gsm8k-test.jsonl", ("question", "answer")),
    "humaneval": ("humaneval.jsonl.gz", ("prompt", "canonical_solution")),
    "nq_open": ("nq-open-dev.jsonl", ("question", "answer")),
}
HOST_MIN_CHARS = 2000
SEED = 20_261_122


def load_eval_sets() -> dict[str, EvalSet]:
    """The shared eval sets, by benchmark name."""
    return {
        name: read_eval_set(EVALSETS / file, fields) for name, (file, fields) in BENCHMARKS.items()
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


def question(item: EvalItem) -> str:
    return "\n".join(item.values[0])


def _qa(item: EvalItem, rng: random.Random, template: str) -> str | None:
    answers = item.values[1] if len(item.values) > 1 else ()
    if not answers:
        return None
    return template.format(q=question(item), a=rng.choice(answers))


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
            return f"Q: {question(item)}?\nA: {answer}"
    return None


LONG = ("gsm8k", "humaneval")
VARIANTS = (
    Variant("verbatim", ("gsm8k", "humaneval", "nq_open"), lambda i, r, s: i.text, True, 0.99),
    Variant("renumbered", LONG, lambda i, r, s: renumbered(i.text, r), True, 0.95),
    Variant("light_edits", LONG, lambda i, r, s: light_edits(i.text, r), True, 0.95),
    Variant(
        "renumbered+edits", LONG, lambda i, r, s: light_edits(renumbered(i.text, r), r), True, None
    ),
    Variant("first_field_only", LONG, lambda i, r, s: question(i), True, None),
    Variant("qa_labelled", ("nq_open",), lambda i, r, s: _qa(i, r, "Q: {q}?\nA: {a}"), True, None),
    Variant(
        "qa_sentence",
        ("nq_open",),
        lambda i, r, s: _qa(i, r, "Someone asked “{q}?” on the forum. It is {a}, of course."),
        True,
        None,
    ),
    Variant("question_only", ("nq_open",), lambda i, r, s: question(i) + "?", False, None),
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
