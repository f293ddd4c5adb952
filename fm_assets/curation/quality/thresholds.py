"""Deciding from stored scores: `QualityThresholds` with the published defaults, the rule table
`QUALITY_RULES` (reason code, column, comparison) and `decide` / `decide_batch`.

Where each default comes from: docs/curation.md (Quality rules).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fm_assets.curation.quality.c4 import C4
from fm_assets.curation.quality.fineweb import FINEWEB
from fm_assets.curation.quality.gopher import GOPHER
from fm_assets.curation.quality.scores import RULE_SETS, RULES_VERSION
from fm_assets.curation.quality.script import SCRIPT
from fm_assets.curation.quality.text import Score, column_name


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
    # Script-aware stand-ins (script_v1), off unless a language family turns them on
    # (families.py): lengths in units, sentences of any script, newlines per unit.
    script_min_units: float | None = None
    script_max_units: float | None = None
    script_max_hash_to_unit_ratio: float | None = None
    script_max_ellipsis_to_unit_ratio: float | None = None
    script_min_kept_sentences: float | None = None
    script_max_list_ratio: float | None = None

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
            ("script_min_units", "script_max_units"),
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
    # (rule set, reason code, score, threshold field, comparison a kept document satisfies), in
    # the order `decide` checks them: Gopher quality, Gopher repetition, C4, FineWeb. A
    # script_v1 rule sits where the rule it stands in for in a language family does.
    g, c, f, s = GOPHER, C4, FINEWEB, SCRIPT
    table: list[tuple[str, str, str, str, str]] = [
        (g, "gopher_min_words", "word_count", "gopher_min_words", ">="),
        (g, "gopher_max_words", "word_count", "gopher_max_words", "<="),
        (s, "script_min_units", "unit_count", "script_min_units", ">="),
        (s, "script_max_units", "unit_count", "script_max_units", "<="),
        (g, "gopher_min_mean_word_length", "mean_word_length", "gopher_min_mean_word_length", ">="),
        (g, "gopher_max_mean_word_length", "mean_word_length", "gopher_max_mean_word_length", "<="),
        (
            g,
            "gopher_hash_to_word_ratio",
            "hash_to_word_ratio",
            "gopher_max_hash_to_word_ratio",
            "<=",
        ),
        (
            s,
            "script_hash_to_unit_ratio",
            "hash_to_unit_ratio",
            "script_max_hash_to_unit_ratio",
            "<=",
        ),
        (
            g,
            "gopher_ellipsis_to_word_ratio",
            "ellipsis_to_word_ratio",
            "gopher_max_ellipsis_to_word_ratio",
            "<=",
        ),
        (
            s,
            "script_ellipsis_to_unit_ratio",
            "ellipsis_to_unit_ratio",
            "script_max_ellipsis_to_unit_ratio",
            "<=",
        ),
        (g, "gopher_bullet_lines", "bullet_line_fraction", "gopher_max_bullet_line_fraction", "<="),
        (
            g,
            "gopher_ellipsis_lines",
            "ellipsis_line_fraction",
            "gopher_max_ellipsis_line_fraction",
            "<=",
        ),
        (g, "gopher_alpha_words", "alpha_word_fraction", "gopher_min_alpha_word_fraction", ">="),
        (g, "gopher_stop_words", "stop_word_count", "gopher_min_stop_words", ">="),
    ]
    for unit in ("line", "paragraph", "line_char", "paragraph_char"):
        score = f"dup_{unit}_fraction"
        table.append((g, f"gopher_{score}", score, f"gopher_max_{score}", "<="))
    for n in (2, 3, 4):
        score = f"top_{n}gram_char_fraction"
        table.append((g, f"gopher_top_{n}gram", score, f"gopher_max_{score}", "<="))
    for n in range(5, 11):
        score = f"dup_{n}gram_char_fraction"
        table.append((g, f"gopher_dup_{n}gram", score, f"gopher_max_{score}", "<="))
    table += [
        (c, "c4_lorem_ipsum", "lorem_ipsum_count", "c4_max_lorem_ipsum", "<="),
        (c, "c4_curly_bracket", "curly_bracket_count", "c4_max_curly_brackets", "<="),
        (c, "c4_min_sentences", "kept_sentence_count", "c4_min_kept_sentences", ">="),
        (s, "script_min_sentences", "kept_sentence_count", "script_min_kept_sentences", ">="),
        (
            c,
            "c4_terminal_punct_lines",
            "terminal_punct_line_fraction",
            "c4_min_terminal_punct_line_fraction",
            ">=",
        ),
        (c, "c4_min_words_per_line", "min_words_per_line", "c4_min_words_per_line", ">="),
        (c, "c4_javascript_lines", "javascript_line_count", "c4_max_javascript_lines", "<="),
        (c, "c4_policy_lines", "policy_line_count", "c4_max_policy_lines", "<="),
        (f, "fineweb_line_punct_ratio", "line_punct_ratio", "fineweb_min_line_punct_ratio", ">"),
        (f, "fineweb_short_lines", "short_line_fraction", "fineweb_max_short_line_fraction", "<"),
        (f, "fineweb_char_dup_ratio", "char_dup_ratio", "fineweb_max_char_dup_ratio", "<"),
        (f, "fineweb_list_ratio", "list_ratio", "fineweb_max_list_ratio", "<="),
        (s, "script_list_ratio", "list_ratio", "script_max_list_ratio", "<="),
    ]
    return tuple(
        QualityRule(code, column_name(rule_set, score), field, op)
        for rule_set, code, score, field, op in table
    )


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


@dataclass(frozen=True)
class RuleCheck:
    """One active rule's verdict on one document: its score, its bound, whether it passes."""

    rule: QualityRule
    threshold: float
    value: Score | None
    passed: bool


def check_rules(
    scores_row: Mapping[str, Score | None], thresholds: QualityThresholds
) -> list[RuleCheck]:
    """Every active rule's verdict on one document, in `QUALITY_RULES` order: `decide` returns
    the code of the first that fails. A missing score (None or NaN) fails."""
    checks = []
    for rule, threshold in _active_rules(thresholds):
        if rule.column not in scores_row:
            raise _missing_column(rule.column)
        value = scores_row[rule.column]
        passed = value is not None and bool(_KEEP[rule.op](float(value), threshold))
        checks.append(RuleCheck(rule, threshold, value, passed))
    return checks


def _missing_column(column: str) -> ValueError:
    return ValueError(
        f"scores lack the column {column!r}; score the documents with "
        f"fm_assets.curation.quality.scores.score_texts ({RULES_VERSION}) before deciding"
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
