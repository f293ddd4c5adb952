"""Heuristic quality scores (Gopher, C4, FineWeb) and the decision made from stored scores.

Scoring is separate from deciding, as in Dolma: `score_texts` turns texts into named score
columns, stored next to the documents; `decide` / `decide_batch` read only those stored scores
and a `QualityThresholds`, so thresholds change without rescoring.

    texts -> score_texts -> {column: [value per text]} -> (stored) -> decide_batch -> reason | None

Rule sets are versioned on their own (`gopher_v1`, `c4_v1`, `fineweb_v1`) and every column name
carries its set: `<rule set>__<score>`, e.g. `gopher_v1__word_count` (letters, digits and
underscores only: valid Arrow and Iceberg field names). A changed definition is a new rule-set
version, hence new columns, and `RULES_VERSION` moves with any change in this module's output.
The rules follow the published definitions (Rae et al. 2021, "Scaling Language Models", App. A;
Raffel et al. 2020, "Exploring the Limits of Transfer Learning", Sec. 2.2; Penedo et al. 2024,
"The FineWeb Datasets"); where a paper leaves a detail open, the choice made is stated below.

Terms used in the table:

- *words*: the text split on whitespace runs (`str.split()`), punctuation attached ("end." is
  one word of 4 characters). CJK text without spaces has few, long words: the Gopher rules
  assume a space-delimited language; use `QualityThresholds.rule_sets` to pick sets per dataset.
- *lines*: the text split on `\\n`, each stripped of surrounding whitespace, empty ones dropped.
- *paragraphs*: the text split on blank lines (`\\n`, optional whitespace, `\\n`), each stripped,
  empty ones dropped.
- a *duplicate* line or paragraph is one identical to an earlier one in the same document; the
  first occurrence is not a duplicate (a text repeated twice has a duplicate fraction of 0.5).
- *n-gram characters*: the characters of the n-gram's words, whitespace excluded; n-gram
  fractions divide by the characters of all words scored. Overlapping occurrences are merged
  before counting, so no character counts twice and a fraction never exceeds 1.
- bounded work: every score reads the first `MAX_SCORED_CHARS` characters (1,000,000) except
  `gopher_v1__word_count`, which counts the words of the whole text; the n-gram statistics
  read the first `MAX_NGRAM_WORDS` words (100,000: Gopher's own upper word limit, so under the
  default thresholds a text that long fails `gopher_max_words` anyway). A 5 MB document costs
  at most ~1.5 CPU seconds here (2.5 million one-word lines, the worst shape measured);
  ordinary 4 KB documents ~2.5 ms.
- a ratio or fraction with a zero denominator is 0.0.

Columns, named `<rule set>__<score>` (types: i = int64, f = float64):

gopher_v1__
  word_count (i)                   words
  mean_word_length (f)             characters per word, mean
  hash_to_word_ratio (f)           `#` characters / words
  ellipsis_to_word_ratio (f)       (non-overlapping `...` + `…`) / words
  bullet_line_fraction (f)         lines starting with one of `BULLETS` / lines
  ellipsis_line_fraction (f)       lines ending in `...` or `…` / lines
  alpha_word_fraction (f)          words holding at least one letter / words
  stop_word_count (i)              how many *distinct* `GOPHER_STOP_WORDS` occur as whole
                                   words, case-insensitive (0-8)
  dup_line_fraction (f)            duplicate lines / lines
  dup_line_char_fraction (f)       characters of duplicate lines / characters of lines
  dup_paragraph_fraction (f)       duplicate paragraphs / paragraphs
  dup_paragraph_char_fraction (f)  characters of duplicate paragraphs / of paragraphs
  top_{2,3,4}gram_char_fraction (f)
                                   characters covered by all occurrences of the most frequent
                                   word n-gram / characters of words; 0.0 when no n-gram
                                   occurs twice; ties go to the n-gram with more characters,
                                   then to the earliest
  dup_{5..10}gram_char_fraction (f)
                                   characters covered by every occurrence of a word n-gram
                                   after its first one / characters of words
c4_v1__
  terminal_punct_line_fraction (f) lines ending in one of `C4_TERMINAL_PUNCTUATION` / lines
  min_words_per_line (i)           fewest words on any line (0 without lines)
  lorem_ipsum_count (i)            occurrences of "lorem ipsum", case-insensitive
  curly_bracket_count (i)          `{` and `}` characters
  javascript_line_count (i)        lines containing "javascript", case-insensitive
  policy_line_count (i)            lines containing one of `POLICY_PHRASES`, case-insensitive
  kept_sentence_count (i)          sentences on the lines C4 keeps: lines ending in C4
                                   terminal punctuation, of at least 5 words, without
                                   "javascript" or a policy phrase. A kept line counts
                                   max(1, runs of `.!?` followed by optional closing quotes or
                                   brackets, then whitespace or the line end) sentences
fineweb_v1__
  line_punct_ratio (f)             lines ending in one of `TERMINAL_PUNCTUATION`
                                   (multilingual) / lines
  short_line_fraction (f)          lines of at most 30 characters / lines
  char_dup_ratio (f)               characters of duplicate lines / characters of lines
  list_ratio (f)                   `\\n` characters / words (lists, menus, tables: many short
                                   lines)

C4 removes lines (no terminal punctuation, under 5 words, "javascript", policy phrases) and then
pages with fewer than 3 sentences; here that page rule reads `c4_v1__kept_sentence_count`, and
the line rules are scores with no default threshold, since no paper drops a page for them.
The C4 bad-words list is not part of `c4_v1`.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa

RULES_VERSION: Final = "quality_rules_v1"

GOPHER: Final = "gopher_v1"
C4: Final = "c4_v1"
FINEWEB: Final = "fineweb_v1"
RULE_SETS: Final = (GOPHER, C4, FINEWEB)

MAX_SCORED_CHARS: Final = 1_000_000
MAX_NGRAM_WORDS: Final = 100_000

GOPHER_STOP_WORDS: Final = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
# Characters that open a bulleted line (after leading whitespace).
BULLETS: Final = tuple("•‣⁃◦▪▫●○■□►▸➢➤-*·")
# C4: "a period, exclamation mark, question mark, or end quotation mark".
C4_TERMINAL_PUNCTUATION: Final = (".", "!", "?", '"', "”")
# FineWeb's line rule for any language: C4's marks plus other scripts' full stops and quotes.
TERMINAL_PUNCTUATION: Final = (*C4_TERMINAL_PUNCTUATION, *"…。！？؟۔।॥։።’»」』")
POLICY_PHRASES: Final = (
    "terms of use",
    "terms of service",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
C4_MIN_WORDS_PER_KEPT_LINE: Final = 5
FINEWEB_SHORT_LINE_CHARS: Final = 30

Score: TypeAlias = float | int


def _column(rule_set: str, name: str) -> str:
    return f"{rule_set}__{name}"


_GOPHER_COLUMNS: Final = (
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
_C4_COLUMNS: Final = (
    ("terminal_punct_line_fraction", pa.float64()),
    ("min_words_per_line", pa.int64()),
    ("lorem_ipsum_count", pa.int64()),
    ("curly_bracket_count", pa.int64()),
    ("javascript_line_count", pa.int64()),
    ("policy_line_count", pa.int64()),
    ("kept_sentence_count", pa.int64()),
)
_FINEWEB_COLUMNS: Final = (
    ("line_punct_ratio", pa.float64()),
    ("short_line_fraction", pa.float64()),
    ("char_dup_ratio", pa.float64()),
    ("list_ratio", pa.float64()),
)

SCORE_COLUMNS: Final[dict[str, pa.DataType]] = {
    _column(rule_set, name): dtype
    for rule_set, columns in (
        (GOPHER, _GOPHER_COLUMNS),
        (C4, _C4_COLUMNS),
        (FINEWEB, _FINEWEB_COLUMNS),
    )
    for name, dtype in columns
}

_PARAGRAPH_BREAK: Final = re.compile(r"\n\s*\n")
# A whitespace-delimited word with no letter (a letter is `[^\W\d_]`: alphanumeric, not a
# digit, not "_"); one scan of the text instead of a regex call per word, 20x faster. The
# possessive `++` never backtracks, so a 1 MB word costs one pass.
_LETTERLESS_WORD: Final = re.compile(r"(?<!\S)(?:[^\s\w]|[\d_])++(?!\S)")
_STOP_WORD: Final = re.compile(
    r"\b(?:" + "|".join(sorted(GOPHER_STOP_WORDS)) + r")\b", re.IGNORECASE
)
_SENTENCE_END: Final = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")


# ---------------------------------------------------------------------------------------------
# Scoring


def score_texts(texts: list[str]) -> dict[str, list[Score]]:
    """Every column of `SCORE_COLUMNS` for each text: `{column: [value per text]}` in input order.

    Never raises on text content: empty, one-word, 5 MB single-line, binary-junk and
    mixed-script texts all get well-defined scores (see the module table).
    """
    columns: dict[str, list[Score]] = {name: [] for name in SCORE_COLUMNS}
    for text in texts:
        for name, value in score_text(text).items():
            columns[name].append(value)
    return columns


def score_text(text: str) -> dict[str, Score]:
    """Every column of `SCORE_COLUMNS` for one text."""
    parsed = _ParsedText.parse(text)
    scores: dict[str, Score] = {}
    scores.update(_gopher_scores(parsed))
    scores.update(_c4_scores(parsed))
    scores.update(_fineweb_scores(parsed))
    return scores


@dataclass(frozen=True)
class _ParsedText:
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
    def parse(cls, text: str) -> _ParsedText:
        word_count = None
        if len(text) > MAX_SCORED_CHARS:
            word_count = len(text.split())
            text = text[:MAX_SCORED_CHARS]
        words = text.split()
        lines = [stripped for line in text.split("\n") if (stripped := line.strip())]
        line_lengths = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines))
        line_chars = int(line_lengths.sum())
        dup_lines, dup_line_chars = _duplicates(lines, line_chars)
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
        return _ratio(list(map(predicate, self.lines)).count(True), len(self.lines))


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def _duplicates(items: list[str], total_chars: int) -> tuple[int, int]:
    """(count, characters) of the items identical to an earlier item."""
    first_occurrences = dict.fromkeys(items)
    return len(items) - len(first_occurrences), total_chars - sum(map(len, first_occurrences))


def _gopher_scores(parsed: _ParsedText) -> dict[str, Score]:
    text, words = parsed.text, parsed.words
    paragraphs = [p for part in _PARAGRAPH_BREAK.split(text) if (p := part.strip())]
    paragraph_chars = sum(map(len, paragraphs))
    dup_paragraphs, dup_paragraph_chars = _duplicates(paragraphs, paragraph_chars)
    stop_words: set[str] = set()
    for match in _STOP_WORD.finditer(text):
        stop_words.add(match.group().lower())
        if len(stop_words) == len(GOPHER_STOP_WORDS):
            break
    scores: dict[str, Score] = {
        "word_count": parsed.word_count,
        "mean_word_length": _ratio(sum(map(len, words)), len(words)),
        "hash_to_word_ratio": _ratio(text.count("#"), len(words)),
        "ellipsis_to_word_ratio": _ratio(text.count("...") + text.count("…"), len(words)),
        "bullet_line_fraction": parsed.line_fraction(operator.methodcaller("startswith", BULLETS)),
        "ellipsis_line_fraction": parsed.line_fraction(
            operator.methodcaller("endswith", ("...", "…"))
        ),
        "alpha_word_fraction": _ratio(len(words) - len(_LETTERLESS_WORD.findall(text)), len(words)),
        "stop_word_count": len(stop_words),
        "dup_line_fraction": _ratio(parsed.dup_lines, len(parsed.lines)),
        "dup_line_char_fraction": _ratio(parsed.dup_line_chars, parsed.line_chars),
        "dup_paragraph_fraction": _ratio(dup_paragraphs, len(paragraphs)),
        "dup_paragraph_char_fraction": _ratio(dup_paragraph_chars, paragraph_chars),
    }
    scores.update(_ngram_scores(words[:MAX_NGRAM_WORDS]))
    return {_column(GOPHER, name): value for name, value in scores.items()}


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


def _c4_scores(parsed: _ParsedText) -> dict[str, Score]:
    lines = parsed.lines
    lowered = parsed.text.lower()
    words_per_line = [len(line.split()) for line in lines]
    terminal = list(map(operator.methodcaller("endswith", C4_TERMINAL_PUNCTUATION), lines))
    # Look for the phrases line by line only when the text contains them at all.
    no_lines = [False] * len(lines)
    javascript = no_lines
    if "javascript" in lowered:
        javascript = ["javascript" in line.lower() for line in lines]
    policy = no_lines
    phrases = [phrase for phrase in POLICY_PHRASES if phrase in lowered]
    if phrases:
        policy = [any(phrase in line.lower() for phrase in phrases) for line in lines]
    kept_sentences = 0
    for i, line in enumerate(lines):
        if (
            terminal[i]
            and words_per_line[i] >= C4_MIN_WORDS_PER_KEPT_LINE
            and not javascript[i]
            and not policy[i]
        ):
            kept_sentences += max(1, len(_SENTENCE_END.findall(line)))
    scores: dict[str, Score] = {
        "terminal_punct_line_fraction": _ratio(terminal.count(True), len(lines)),
        "min_words_per_line": min(words_per_line, default=0),
        "lorem_ipsum_count": lowered.count("lorem ipsum"),
        "curly_bracket_count": parsed.text.count("{") + parsed.text.count("}"),
        "javascript_line_count": javascript.count(True),
        "policy_line_count": policy.count(True),
        "kept_sentence_count": kept_sentences,
    }
    return {_column(C4, name): value for name, value in scores.items()}


def _fineweb_scores(parsed: _ParsedText) -> dict[str, Score]:
    scores: dict[str, Score] = {
        "line_punct_ratio": parsed.line_fraction(
            operator.methodcaller("endswith", TERMINAL_PUNCTUATION)
        ),
        "short_line_fraction": _ratio(
            int(np.count_nonzero(parsed.line_lengths <= FINEWEB_SHORT_LINE_CHARS)),
            len(parsed.lines),
        ),
        "char_dup_ratio": _ratio(parsed.dup_line_chars, parsed.line_chars),
        "list_ratio": _ratio(parsed.text.count("\n"), len(parsed.words)),
    }
    return {_column(FINEWEB, name): value for name, value in scores.items()}


# ---------------------------------------------------------------------------------------------
# Deciding


@dataclass(frozen=True)
class QualityThresholds:
    """Bounds on stored scores; `None` turns a rule off. Defaults are the published values.

    Each field's rule, reason code and comparison are listed in `QUALITY_RULES`, in the order
    `decide` checks them. Comparisons follow the papers: Gopher and C4 keep a document at the
    bound (`min_` means score >= bound, `max_` score <= bound); FineWeb removes it at the bound
    (kept: line_punct_ratio > 0.12, short_line_fraction < 0.67, char_dup_ratio < 0.1), except
    list_ratio, kept <= 0.3. `rule_sets` turns whole sets on or off (the Gopher and C4 rules
    assume English-like text). Change a threshold with `dataclasses.replace`; no rescoring.
    """

    rule_sets: frozenset[str] = frozenset(RULE_SETS)
    # Gopher quality filter (Rae et al. 2021, A.1.1).
    gopher_min_words: float | None = 50
    gopher_max_words: float | None = 100_000
    gopher_min_mean_word_length: float | None = 3
    gopher_max_mean_word_length: float | None = 10
    gopher_max_hash_to_word_ratio: float | None = 0.1
    gopher_max_ellipsis_to_word_ratio: float | None = 0.1
    gopher_max_bullet_line_fraction: float | None = 0.9
    gopher_max_ellipsis_line_fraction: float | None = 0.3
    gopher_min_alpha_word_fraction: float | None = 0.8
    gopher_min_stop_words: float | None = 2
    # Gopher repetition filter (Rae et al. 2021, Table A1).
    gopher_max_dup_line_fraction: float | None = 0.3
    gopher_max_dup_paragraph_fraction: float | None = 0.3
    gopher_max_dup_line_char_fraction: float | None = 0.2
    gopher_max_dup_paragraph_char_fraction: float | None = 0.2
    gopher_max_top_2gram_char_fraction: float | None = 0.20
    gopher_max_top_3gram_char_fraction: float | None = 0.18
    gopher_max_top_4gram_char_fraction: float | None = 0.16
    gopher_max_dup_5gram_char_fraction: float | None = 0.15
    gopher_max_dup_6gram_char_fraction: float | None = 0.14
    gopher_max_dup_7gram_char_fraction: float | None = 0.13
    gopher_max_dup_8gram_char_fraction: float | None = 0.12
    gopher_max_dup_9gram_char_fraction: float | None = 0.11
    gopher_max_dup_10gram_char_fraction: float | None = 0.10
    # C4 (Raffel et al. 2020, 2.2): page rules on; its line rules are only scores.
    c4_max_lorem_ipsum: float | None = 0
    c4_max_curly_brackets: float | None = 0
    c4_min_kept_sentences: float | None = 3
    c4_min_terminal_punct_line_fraction: float | None = None
    c4_min_words_per_line: float | None = None
    c4_max_javascript_lines: float | None = None
    c4_max_policy_lines: float | None = None
    # FineWeb's custom filters (Penedo et al. 2024). The paper's duplicate-line character
    # threshold is 0.1 (datatrove's code defaults to 0.01); the list ratio is from its code.
    fineweb_min_line_punct_ratio: float | None = 0.12
    fineweb_max_short_line_fraction: float | None = 0.67
    fineweb_max_char_dup_ratio: float | None = 0.1
    fineweb_max_list_ratio: float | None = 0.3

    def __post_init__(self) -> None:
        unknown = sorted(set(self.rule_sets) - set(RULE_SETS))
        if not isinstance(self.rule_sets, frozenset) or unknown:
            raise ValueError(
                f"rule_sets must be a frozenset drawn from {RULE_SETS}, got {self.rule_sets!r}"
            )
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name == "rule_sets" or value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{field.name} must be a number or None, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{field.name} must be finite and >= 0, got {value}")
        for low, high in (
            ("gopher_min_words", "gopher_max_words"),
            ("gopher_min_mean_word_length", "gopher_max_mean_word_length"),
        ):
            low_value, high_value = getattr(self, low), getattr(self, high)
            if low_value is not None and high_value is not None and low_value > high_value:
                raise ValueError(f"{low}={low_value} exceeds {high}={high_value}")


@dataclass(frozen=True)
class QualityRule:
    """One decision: keep a document when `score <op> threshold`, else quarantine as `code`."""

    code: str
    column: str
    threshold: str  # the QualityThresholds field
    op: str  # ">=", "<=", ">" or "<": the comparison a kept document satisfies

    @property
    def rule_set(self) -> str:
        return self.column.split("__", 1)[0]


def _rules() -> tuple[QualityRule, ...]:
    # (reason code, column, threshold field, comparison a kept document satisfies), in the
    # order `decide` checks them: Gopher quality, Gopher repetition, C4, FineWeb.
    table: list[tuple[str, str, str, str]] = [
        ("gopher_min_words", "word_count", "gopher_min_words", ">="),
        ("gopher_max_words", "word_count", "gopher_max_words", "<="),
        ("gopher_min_mean_word_length", "mean_word_length", "gopher_min_mean_word_length", ">="),
        ("gopher_max_mean_word_length", "mean_word_length", "gopher_max_mean_word_length", "<="),
        ("gopher_hash_to_word_ratio", "hash_to_word_ratio", "gopher_max_hash_to_word_ratio", "<="),
        (
            "gopher_ellipsis_to_word_ratio",
            "ellipsis_to_word_ratio",
            "gopher_max_ellipsis_to_word_ratio",
            "<=",
        ),
        ("gopher_bullet_lines", "bullet_line_fraction", "gopher_max_bullet_line_fraction", "<="),
        (
            "gopher_ellipsis_lines",
            "ellipsis_line_fraction",
            "gopher_max_ellipsis_line_fraction",
            "<=",
        ),
        ("gopher_alpha_words", "alpha_word_fraction", "gopher_min_alpha_word_fraction", ">="),
        ("gopher_stop_words", "stop_word_count", "gopher_min_stop_words", ">="),
    ]
    for unit in ("line", "paragraph", "line_char", "paragraph_char"):
        score = f"dup_{unit}_fraction"
        table.append((f"gopher_{score}", score, f"gopher_max_{score}", "<="))
    for n in (2, 3, 4):
        score = f"top_{n}gram_char_fraction"
        table.append((f"gopher_top_{n}gram", score, f"gopher_max_{score}", "<="))
    for n in range(5, 11):
        score = f"dup_{n}gram_char_fraction"
        table.append((f"gopher_dup_{n}gram", score, f"gopher_max_{score}", "<="))
    rules = [
        QualityRule(code, _column(GOPHER, score), field, op) for code, score, field, op in table
    ]
    for rule_set, rows in (
        (
            C4,
            [
                ("c4_lorem_ipsum", "lorem_ipsum_count", "c4_max_lorem_ipsum", "<="),
                ("c4_curly_bracket", "curly_bracket_count", "c4_max_curly_brackets", "<="),
                ("c4_min_sentences", "kept_sentence_count", "c4_min_kept_sentences", ">="),
                (
                    "c4_terminal_punct_lines",
                    "terminal_punct_line_fraction",
                    "c4_min_terminal_punct_line_fraction",
                    ">=",
                ),
                ("c4_min_words_per_line", "min_words_per_line", "c4_min_words_per_line", ">="),
                ("c4_javascript_lines", "javascript_line_count", "c4_max_javascript_lines", "<="),
                ("c4_policy_lines", "policy_line_count", "c4_max_policy_lines", "<="),
            ],
        ),
        (
            FINEWEB,
            [
                (
                    "fineweb_line_punct_ratio",
                    "line_punct_ratio",
                    "fineweb_min_line_punct_ratio",
                    ">",
                ),
                (
                    "fineweb_short_lines",
                    "short_line_fraction",
                    "fineweb_max_short_line_fraction",
                    "<",
                ),
                ("fineweb_char_dup_ratio", "char_dup_ratio", "fineweb_max_char_dup_ratio", "<"),
                ("fineweb_list_ratio", "list_ratio", "fineweb_max_list_ratio", "<="),
            ],
        ),
    ):
        rules += [
            QualityRule(code, _column(rule_set, score), field, op)
            for code, score, field, op in rows
        ]
    return tuple(rules)


QUALITY_RULES: Final = _rules()
QUALITY_REASON_CODES: Final = tuple(rule.code for rule in QUALITY_RULES)

# Works on floats and, elementwise, on numpy arrays.
_KEEP: Final[dict[str, Callable[[Any, float], Any]]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}


def _active_rules(thresholds: QualityThresholds) -> list[tuple[QualityRule, float]]:
    active = []
    for rule in QUALITY_RULES:
        threshold = getattr(thresholds, rule.threshold)
        if threshold is not None and rule.rule_set in thresholds.rule_sets:
            active.append((rule, float(threshold)))
    return active


def _missing_column(column: str) -> ValueError:
    return ValueError(
        f"scores lack the column {column!r}; score the documents with "
        f"fm_assets.curation.quality_rules.score_texts ({RULES_VERSION}) before deciding"
    )


def decide(
    scores_row: Mapping[str, Score | None], thresholds: QualityThresholds | None = None
) -> str | None:
    """None to keep the document, else the reason code of the first rule it fails.

    Rules are checked in `QUALITY_RULES` order; a missing value (None or NaN) fails its rule.
    Only the stored scores are read, so a new `QualityThresholds` needs no rescoring.
    """
    for rule, threshold in _active_rules(thresholds or QualityThresholds()):
        if rule.column not in scores_row:
            raise _missing_column(rule.column)
        value = scores_row[rule.column]
        # NaN compares False, so a NaN score fails like a missing one.
        if value is None or not _KEEP[rule.op](float(value), threshold):
            return rule.code
    return None


ScoreColumn: TypeAlias = (
    Sequence[Score | None] | npt.NDArray[np.generic] | pa.Array | pa.ChunkedArray
)


def decide_batch(
    columns: Mapping[str, ScoreColumn] | pa.Table, thresholds: QualityThresholds | None = None
) -> list[str | None]:
    """`decide` for every row of column-wise scores (a `score_texts` result or an Arrow table),
    vectorised with numpy; the same answers as calling `decide` row by row."""
    active = _active_rules(thresholds or QualityThresholds())
    names = columns.column_names if isinstance(columns, pa.Table) else list(columns)
    reasons: list[str | None] = []
    undecided: npt.NDArray[np.bool_] | None = None
    for rule, threshold in active:
        if rule.column not in names:
            raise _missing_column(rule.column)
        values = _as_floats(columns[rule.column])
        if undecided is None:
            undecided = np.ones(len(values), dtype=bool)
            reasons = [None] * len(values)
        elif len(values) != len(undecided):
            raise ValueError(
                f"column {rule.column!r} has {len(values)} rows, others {len(undecided)}; "
                "pass columns of one batch"
            )
        with np.errstate(invalid="ignore"):
            failed = undecided & ~_KEEP[rule.op](values, threshold)  # NaN fails
        for row in np.flatnonzero(failed):
            reasons[row] = rule.code
        undecided &= ~failed
    if undecided is None:  # every rule is off: keep everything
        any_column = next(iter(names), None)
        return [None] * (0 if any_column is None else len(columns[any_column]))
    return reasons


def _as_floats(column: ScoreColumn) -> npt.NDArray[np.float64]:
    if isinstance(column, pa.Array | pa.ChunkedArray):
        column = column.to_numpy(zero_copy_only=False)
    # None (an Arrow null or a Python None) becomes NaN, which fails every rule.
    return np.asarray(column, dtype=np.float64)
