"""Language-aware rule sets: each document is judged by the rules of its language family,
chosen from the language the language stage detected.

- `english`: the published Gopher, C4 and FineWeb rules as they are.
- `spaced` (every other language, written with spaces between words): the same, without the
  English stop-word rule, and with C4's sentence rule replaced by the script-aware one
  (`script_min_sentences`: sentence ends of any script, e.g. `»`-closed French quotes, `।`).
- `cjk` (zh, ja, wuu, yue: no spaces between words): lengths, `#`/ellipsis ratios and the list
  ratio counted in units (one character per ideograph or kana) instead of words, the bounds
  scaled by `CJK_CHARACTERS_PER_WORD`; no mean-word-length or stop-word rule; the script-aware
  sentence rule. The character-level rules (duplicate lines and paragraphs, n-grams, bullets,
  line punctuation, short lines) apply as they are.

Starting point: the dataset's thresholds (published defaults plus its overrides); a policy can
then override single thresholds per family. Where each number comes from: docs/curation.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Final

import pyarrow as pa

from fm_assets.curation.quality.c4 import C4
from fm_assets.curation.quality.fineweb import FINEWEB
from fm_assets.curation.quality.gopher import GOPHER
from fm_assets.curation.quality.script import SCRIPT
from fm_assets.curation.quality.thresholds import QualityThresholds, decide_batch

# Moves whenever a family's membership or its derivation from the base thresholds changes.
LANGUAGE_RULES_VERSION: Final = "language_rules_v1"

ENGLISH: Final = "english"
SPACED: Final = "spaced"
CJK: Final = "cjk"
FAMILIES: Final = (ENGLISH, SPACED, CJK)

# lid.176 labels of languages written without spaces between words that the unit count
# fits: Chinese (and Wu, Cantonese) and Japanese. Korean separates words by spaces.
CJK_LANGUAGES: Final = frozenset({"zh", "ja", "wuu", "yue"})

# Words of segmented Chinese text average about 1.5 characters: a bound of N words becomes
# 1.5 N units, a bound per word becomes one per 1.5 units.
CJK_CHARACTERS_PER_WORD: Final = 1.5


def language_family(language: str) -> str:
    """The family whose rules judge a document detected as `language` (a lid.176 label)."""
    if language == "en":
        return ENGLISH
    return CJK if language in CJK_LANGUAGES else SPACED


def family_thresholds(base: QualityThresholds, family: str) -> QualityThresholds:
    """The thresholds that judge `family`, derived from the dataset's `base` thresholds.

    A script-aware rule is on exactly when the rule it stands in for is on in `base` (its
    threshold set and its rule set chosen), so turning a rule off turns it off everywhere.
    """
    if family == ENGLISH:
        return base
    if family not in FAMILIES:
        raise ValueError(f"unknown language family {family!r}; families: {FAMILIES}")
    sets = base.rule_sets

    def carried(rule_set: str, value: float | None, scale: float = 1.0) -> float | None:
        return None if value is None or rule_set not in sets else round(value * scale, 6)

    sentences = carried(C4, base.c4_min_kept_sentences)
    if family == SPACED:
        return dataclasses.replace(
            base,
            rule_sets=sets | {SCRIPT},
            gopher_min_stop_words=None,
            c4_min_kept_sentences=None,
            script_min_kept_sentences=sentences,
        )
    per_word = CJK_CHARACTERS_PER_WORD
    return dataclasses.replace(
        base,
        rule_sets=sets | {SCRIPT},
        script_min_units=carried(GOPHER, base.gopher_min_words, per_word),
        script_max_units=carried(GOPHER, base.gopher_max_words, per_word),
        script_max_hash_to_unit_ratio=carried(
            GOPHER, base.gopher_max_hash_to_word_ratio, 1 / per_word
        ),
        script_max_ellipsis_to_unit_ratio=carried(
            GOPHER, base.gopher_max_ellipsis_to_word_ratio, 1 / per_word
        ),
        script_min_kept_sentences=sentences,
        script_max_list_ratio=carried(FINEWEB, base.fineweb_max_list_ratio, 1 / per_word),
        gopher_min_words=None,
        gopher_max_words=None,
        gopher_min_mean_word_length=None,
        gopher_max_mean_word_length=None,
        gopher_max_hash_to_word_ratio=None,
        gopher_max_ellipsis_to_word_ratio=None,
        gopher_min_stop_words=None,
        c4_min_kept_sentences=None,
        fineweb_max_list_ratio=None,
    )


def rules_by_family(
    base: QualityThresholds, overrides: Mapping[str, Mapping[str, float | None]] | None = None
) -> dict[str, QualityThresholds]:
    """Every family's thresholds: derived from `base`, then the family's own overrides."""
    overrides = overrides or {}
    unknown = sorted(set(overrides) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown language families {unknown}; families: {list(FAMILIES)}")
    return {
        family: dataclasses.replace(
            family_thresholds(base, family),
            **dict(overrides.get(family, {})),  # type: ignore[arg-type]
        )
        for family in FAMILIES
    }


def decide_by_family(
    scores: pa.Table, languages: Sequence[str], rules: Mapping[str, QualityThresholds]
) -> list[tuple[str, str | None]]:
    """(family, reason code or None to keep) per row of `scores`, each row judged by the rules
    of its language's family (`decide_batch` on each family's rows)."""
    if len(languages) != scores.num_rows:
        raise ValueError(f"{len(languages)} languages for {scores.num_rows} rows of scores")
    families = [language_family(language) for language in languages]
    reasons: list[str | None] = [None] * scores.num_rows
    for family in sorted(set(families)):
        rows = [i for i, f in enumerate(families) if f == family]
        decided = decide_batch(scores.take(rows), rules[family])
        for row, reason in zip(rows, decided, strict=True):
            reasons[row] = reason
    return list(zip(families, reasons, strict=True))
