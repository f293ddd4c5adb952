"""Gopher's quality and repetition scores (Rae et al. 2021, App. A), columns `gopher_v1__*`.

Definitions and thresholds: docs/curation.md (Quality rules).
"""

from __future__ import annotations

import operator
import re
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fm_assets.curation.quality.text import ParsedText, Score, column_name, duplicates, ratio

GOPHER: Final = "gopher_v1"

# The n-gram statistics read at most this many words (Gopher's own upper word limit).
MAX_NGRAM_WORDS: Final = 100_000

GOPHER_STOP_WORDS: Final = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
# Characters that open a bulleted line (after leading whitespace).
BULLETS: Final = tuple("•‣⁃◦▪▫●○■□►▸➢➤-*·")

GOPHER_COLUMNS: Final = (
    ("word_count", pa.int64()),
    ("mean_word_length", pa.float64()),
    ("hash_to_word_ratio", pa.float64()),
    ("ellipsis_to_word_ratio", pa.float64()),
    ("bullet_line_fraction", pa.float64()),
    ("ellipsis_line_fraction", pa.float64()),
    ("alpha_word_fraction", pa.float64()),
    ("stop_word_count", pa.int64()),
    ("dup_line_fraction", pa.float64()),
    ("dup_line_char_fraction", pa.float64()),
    ("dup_paragraph_fraction", pa.float64()),
    ("dup_paragraph_char_fraction", pa.float64()),
    *((f"top_{n}gram_char_fraction", pa.float64()) for n in (2, 3, 4)),
    *((f"dup_{n}gram_char_fraction", pa.float64()) for n in range(5, 11)),
)

_PARAGRAPH_BREAK: Final = re.compile(r"\n\s*\n")
# A whitespace-delimited word with no letter (a letter is `[^\W\d_]`: alphanumeric, not a
# digit, not "_"); one scan of the text instead of a regex call per word. The
# possessive `++` never backtracks, so a 1 MB word costs one pass.
_LETTERLESS_WORD: Final = re.compile(r"(?<!\S)(?:[^\s\w]|[\d_])++(?!\S)")
_STOP_WORD: Final = re.compile(
    r"\b(?:" + "|".join(sorted(GOPHER_STOP_WORDS)) + r")\b", re.IGNORECASE
)


def gopher_scores(parsed: ParsedText) -> dict[str, Score]:
    """The `gopher_v1__*` columns of one parsed text."""
    text, words = parsed.text, parsed.words
    paragraphs = [p for part in _PARAGRAPH_BREAK.split(text) if (p := part.strip())]
    paragraph_chars = sum(map(len, paragraphs))
    dup_paragraphs, dup_paragraph_chars = duplicates(paragraphs, paragraph_chars)
    stop_words: set[str] = set()
    for match in _STOP_WORD.finditer(text):
        stop_words.add(match.group().lower())
        if len(stop_words) == len(GOPHER_STOP_WORDS):
            break
    scores: dict[str, Score] = {
        "word_count": parsed.word_count,
        "mean_word_length": ratio(sum(map(len, words)), len(words)),
        "hash_to_word_ratio": ratio(text.count("#"), len(words)),
        "ellipsis_to_word_ratio": ratio(text.count("...") + text.count("…"), len(words)),
        "bullet_line_fraction": parsed.line_fraction(operator.methodcaller("startswith", BULLETS)),
        "ellipsis_line_fraction": parsed.line_fraction(
            operator.methodcaller("endswith", ("...", "…"))
        ),
        "alpha_word_fraction": ratio(len(words) - len(_LETTERLESS_WORD.findall(text)), len(words)),
        "stop_word_count": len(stop_words),
        "dup_line_fraction": ratio(parsed.dup_lines, len(parsed.lines)),
        "dup_line_char_fraction": ratio(parsed.dup_line_chars, parsed.line_chars),
        "dup_paragraph_fraction": ratio(dup_paragraphs, len(paragraphs)),
        "dup_paragraph_char_fraction": ratio(dup_paragraph_chars, paragraph_chars),
    }
    scores.update(_ngram_scores(words[:MAX_NGRAM_WORDS]))
    return {column_name(GOPHER, name): value for name, value in scores.items()}


def _ngram_scores(words: list[str]) -> dict[str, float]:
    """Top 2-4-gram and duplicate 5-10-gram character fractions (Gopher's repetition rules).

    Each n-gram gets an exact integer key: the (n-1)-gram's dense key combined with the next
    word's id, re-densified by `np.unique`, so n-grams are compared without hashing.
    """
    scores = {f"top_{n}gram_char_fraction": 0.0 for n in (2, 3, 4)}
    scores.update({f"dup_{n}gram_char_fraction": 0.0 for n in range(5, 11)})
    if len(words) < 2:
        return scores
    vocabulary = {word: i for i, word in enumerate(dict.fromkeys(words))}
    word_ids = np.fromiter(map(vocabulary.__getitem__, words), dtype=np.int64, count=len(words))
    lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    total_chars = int(lengths.sum())
    # Prefix sums of word lengths: characters of the n-gram starting at i = ends[i+n] - ends[i].
    ends = np.concatenate(([0], np.cumsum(lengths)))
    keys = word_ids
    for n in range(2, min(10, len(words)) + 1):
        # Keys stay below len(words) * len(vocabulary) <= MAX_NGRAM_WORDS**2: no int64 overflow.
        keys = keys[:-1] * len(vocabulary) + word_ids[n - 1 :]
        _, first, keys, counts = np.unique(
            keys, return_index=True, return_inverse=True, return_counts=True
        )
        top = counts.max()
        if top < 2:
            break  # no n-gram repeats, so no longer one does either: the rest stay 0.0
        if n <= 4:
            candidates = np.flatnonzero(counts == top)
            candidate_starts = first[candidates]
            candidate_chars = ends[candidate_starts + n] - ends[candidate_starts]
            best = candidates[np.lexsort((candidate_starts, -candidate_chars))[0]]
            starts = np.flatnonzero(keys == best)
            scores[f"top_{n}gram_char_fraction"] = _covered_chars(starts, n, lengths) / total_chars
        else:
            starts = np.flatnonzero(first[keys] != np.arange(len(keys)))
            scores[f"dup_{n}gram_char_fraction"] = _covered_chars(starts, n, lengths) / total_chars
    return scores


def _covered_chars(starts: npt.NDArray[np.intp], n: int, lengths: npt.NDArray[np.int64]) -> int:
    """Characters of the words covered by n-grams starting at `starts`, overlaps counted once."""
    if len(starts) == 0:
        return 0
    size = len(lengths) + 1
    depth = np.cumsum(np.bincount(starts, minlength=size) - np.bincount(starts + n, minlength=size))
    return int(lengths[depth[:-1] > 0].sum())
