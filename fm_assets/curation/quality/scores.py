"""Every rule set's score columns for each text: `score_texts` returns the columns the quality
stage stores; deciding from them is `thresholds.py`'s job, so thresholds change without rescoring.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from fm_assets.curation.quality.c4 import C4, C4_COLUMNS, c4_scores
from fm_assets.curation.quality.fineweb import FINEWEB, FINEWEB_COLUMNS, fineweb_scores
from fm_assets.curation.quality.gopher import GOPHER, GOPHER_COLUMNS, gopher_scores
from fm_assets.curation.quality.script import SCRIPT, SCRIPT_COLUMNS, script_scores
from fm_assets.curation.quality.text import ParsedText, Score, column_name

# Moves with any change in the scores of any rule set (a new rule-set version included).
# v2: the script-aware rule set script_v1 joined.
RULES_VERSION: Final = "quality_rules_v2"
RULE_SETS: Final = (GOPHER, C4, FINEWEB, SCRIPT)

SCORE_COLUMNS: Final[dict[str, pa.DataType]] = {
    column_name(rule_set, name): dtype
    for rule_set, columns in (
        (GOPHER, GOPHER_COLUMNS),
        (C4, C4_COLUMNS),
        (FINEWEB, FINEWEB_COLUMNS),
        (SCRIPT, SCRIPT_COLUMNS),
    )
    for name, dtype in columns
}


def score_texts(texts: list[str]) -> dict[str, list[Score]]:
    """Every column of `SCORE_COLUMNS` for each text: `{column: [value per text]}` in input order.

    Never raises on text content: empty, one-word, 5 MB single-line, binary-junk and
    mixed-script texts all get well-defined scores (docs/curation.md defines each column).
    """
    columns: dict[str, list[Score]] = {name: [] for name in SCORE_COLUMNS}
    for text in texts:
        for name, value in score_text(text).items():
            columns[name].append(value)
    return columns


def score_text(text: str) -> dict[str, Score]:
    """Every column of `SCORE_COLUMNS` for one text."""
    parsed = ParsedText.parse(text)
    scores: dict[str, Score] = {}
    scores.update(gopher_scores(parsed))
    scores.update(c4_scores(parsed))
    scores.update(fineweb_scores(parsed))
    scores.update(script_scores(parsed))
    return scores
