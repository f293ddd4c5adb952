"""Scoring planted documents: was the planted item found, by which rule, and what else matched."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.contamination_eval.planting import Planted, question
from fm_assets.contamination.eval_items import EvalSet
from fm_assets.contamination.matcher import Match
from fm_assets.contamination.normalize import words

FP_LIMIT = 0.001  # share of clean documents


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
    first = " ".join(words(question(eval_sets[benchmark].items[item_id])))
    return " ".join(words(question(eval_sets[a.benchmark].items[a.item_id]))) == first


def pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.2f}%"
