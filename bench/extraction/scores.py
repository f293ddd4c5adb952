"""Token-level precision, recall and F1 of extracted text against `articleBody`, per page and
over pages (macro and micro), and a paired bootstrap interval of a macro-F1 difference."""

from __future__ import annotations

import random
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

BOOTSTRAP_SAMPLES = 2000


@dataclass(frozen=True)
class Overlap:
    """Matched, extra and missed units of one page (tokens or shingles, counted with repeats)."""

    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        # An empty extraction (a quarantined page) scores 0, not "undefined".
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def f1(self) -> float:
        return _harmonic(self.precision, self.recall)


def _harmonic(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def _overlap(truth: Counter[Any], predicted: Counter[Any]) -> Overlap:
    tp = sum((truth & predicted).values())
    return Overlap(tp, sum(predicted.values()) - tp, sum(truth.values()) - tp)


def token_overlap(truth: str, predicted: str | None) -> Overlap:
    """Bag-of-tokens overlap, whitespace tokenisation, case kept."""
    return _overlap(Counter(truth.split()), Counter((predicted or "").split()))


_WORD = re.compile(r"\w+")


def shingle_overlap(truth: str, predicted: str | None, n: int = 4) -> Overlap:
    """Overlap of n-grams of `\\w+` tokens: the article-extraction benchmark's own unit."""

    def shingles(text: str) -> Counter[tuple[str, ...]]:
        words = _WORD.findall(text)
        if len(words) < n:  # a text shorter than one shingle is one short shingle
            return Counter([tuple(words)] if words else [])
        return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))

    return _overlap(shingles(truth), shingles(predicted or ""))


@dataclass(frozen=True)
class Scores:
    macro_precision: float
    macro_recall: float
    macro_f1: float  # harmonic mean of the macro precision and recall
    mean_page_f1: float  # mean of the per-page F1s: stricter on uneven pages
    micro_precision: float
    micro_recall: float
    micro_f1: float


def scores(overlaps: Sequence[Overlap]) -> Scores:
    precision = statistics.fmean(o.precision for o in overlaps)
    recall = statistics.fmean(o.recall for o in overlaps)
    tp = sum(o.tp for o in overlaps)
    micro = Overlap(tp, sum(o.fp for o in overlaps), sum(o.fn for o in overlaps))
    return Scores(
        macro_precision=precision,
        macro_recall=recall,
        macro_f1=_harmonic(precision, recall),
        mean_page_f1=statistics.fmean(o.f1 for o in overlaps),
        micro_precision=micro.precision,
        micro_recall=micro.recall,
        micro_f1=micro.f1,
    )


def macro_f1(overlaps: Sequence[Overlap]) -> float:
    return _harmonic(
        statistics.fmean(o.precision for o in overlaps),
        statistics.fmean(o.recall for o in overlaps),
    )


def bootstrap_difference(
    a: Sequence[Overlap], b: Sequence[Overlap], samples: int = BOOTSTRAP_SAMPLES
) -> tuple[float, float]:
    """95% interval of macro_f1(a) - macro_f1(b) over pages resampled together (paired)."""
    rng = random.Random(0)
    n = len(a)
    differences = []
    for _ in range(samples):
        picks = [rng.randrange(n) for _ in range(n)]
        differences.append(macro_f1([a[i] for i in picks]) - macro_f1([b[i] for i in picks]))
    differences.sort()
    return differences[int(0.025 * samples)], differences[int(0.975 * samples) - 1]
