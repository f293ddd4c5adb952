"""The views of one text that every rule set reads (words, lines, duplicate lines), computed
once per text, and the helpers the rule sets share: column names, ratios, duplicate counts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

import numpy as np
import numpy.typing as npt

# Every score but gopher_v1__word_count reads at most this many characters of a text.
MAX_SCORED_CHARS: Final = 1_000_000

Score: TypeAlias = float | int


def column_name(rule_set: str, name: str) -> str:
    """A score column's name: `<rule set>__<score>`, e.g. `gopher_v1__word_count`."""
    return f"{rule_set}__{name}"


@dataclass(frozen=True)
class ParsedText:
    """The views of one text every rule set reads, computed once."""

    text: str  # the first MAX_SCORED_CHARS characters
    word_count: int  # words of the whole text
    words: list[str]
    lines: list[str]
    line_lengths: npt.NDArray[np.int64]
    line_chars: int
    dup_lines: int
    dup_line_chars: int

    @classmethod
    def parse(cls, text: str) -> ParsedText:
        word_count = None
        if len(text) > MAX_SCORED_CHARS:
            word_count = len(text.split())
            text = text[:MAX_SCORED_CHARS]
        words = text.split()
        lines = [stripped for line in text.split("\n") if (stripped := line.strip())]
        line_lengths = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
        line_chars = int(line_lengths.sum())
        dup_lines, dup_line_chars = duplicates(lines, line_chars)
        return cls(
            text=text,
            word_count=len(words) if word_count is None else word_count,
            words=words,
            lines=lines,
            line_lengths=line_lengths,
            line_chars=line_chars,
            dup_lines=dup_lines,
            dup_line_chars=dup_line_chars,
        )

    def line_fraction(self, predicate: Callable[[str], bool]) -> float:
        # list.count, not sum(): sum() of bools takes its slow generic path.
        return ratio(list(map(predicate, self.lines)).count(True), len(self.lines))


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, and 0.0 for a zero denominator."""
    return numerator / denominator if denominator else 0.0


def duplicates(items: list[str], total_chars: int) -> tuple[int, int]:
    """(count, characters) of the items identical to an earlier item."""
    first_occurrences = dict.fromkeys(items)
    return len(items) - len(first_occurrences), total_chars - sum(map(len, first_occurrences))
