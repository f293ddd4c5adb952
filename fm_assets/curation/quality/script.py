"""Script-aware length, symbol, sentence and list scores (columns `script_v1__*`): the scores
that stay meaningful for languages written without spaces between words (Chinese, Japanese).

A *unit* is one CJK ideograph or kana character, or one whitespace-delimited run of any other
characters: for English it is a word, for Chinese a character. Which languages are judged by
these scores instead of Gopher's word-based ones is `families.py`'s decision.

Definitions and thresholds: docs/curation.md (Language families).
"""

from __future__ import annotations

import re
from typing import Final

import pyarrow as pa

from fm_assets.curation.quality.c4 import C4_MIN_WORDS_PER_KEPT_LINE, POLICY_PHRASES
from fm_assets.curation.quality.text import ParsedText, Score, column_name, ratio

SCRIPT: Final = "script_v1"

# Han ideographs (unified, extensions A-G, compatibility), hiragana, katakana (with the
# phonetic extensions and halfwidth forms). Hangul is not here: Korean separates words by spaces.
_CJK_RANGES: Final = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0003134f"
)
CJK_CHARACTER: Final = re.compile(f"[{_CJK_RANGES}]")

# Sentence ends of the scripts lid.176 labels most often: Latin/Cyrillic/Greek `.!?`, the CJK
# full stops and marks (full- and halfwidth), Arabic, Urdu, Devanagari, Armenian, Ethiopic.
# The ellipsis is not one: a line ending in it is usually a cut teaser.
_SPACED_ENDS: Final = ".!?؟۔।॥։።"
_CJK_ENDS: Final = "。！？．｡"
# Closing quotes and brackets that may follow a sentence end, French ones after a space.
_CLOSING_MARKS: Final = "\"'”’»」』）)]］】"
_CLOSERS: Final = f"(?:[ \u00a0\u202f]?[{re.escape(_CLOSING_MARKS)}])*"
_LINE_END: Final = re.compile(f"[{re.escape(_SPACED_ENDS + _CJK_ENDS)}]{_CLOSERS}$")
# A spaced-script end counts only before whitespace or the line end ("3.14", "e.g" do not);
# a CJK end counts wherever it is, since CJK sentences follow each other without spaces.
# Matches start at the first mark of a run and take it whole: linear in the line's length.
_SPACED_RUN: Final = f"(?<![{re.escape(_SPACED_ENDS)}])[{re.escape(_SPACED_ENDS)}]++"
_CJK_RUN: Final = f"(?<![{re.escape(_CJK_ENDS)}])[{re.escape(_CJK_ENDS)}]++"
_SENTENCE_END: Final = re.compile(f"{_SPACED_RUN}{_CLOSERS}(?=\\s|$)|{_CJK_RUN}{_CLOSERS}")
_ELLIPSIS: Final = re.compile(r"\.\.\.|…")

SCRIPT_COLUMNS: Final = (
    ("unit_count", pa.int64()),
    ("hash_to_unit_ratio", pa.float64()),
    ("ellipsis_to_unit_ratio", pa.float64()),
    ("kept_sentence_count", pa.int64()),
    ("list_ratio", pa.float64()),
)


def count_units(text: str) -> int:
    """CJK ideographs and kana, plus whitespace-delimited runs of the other characters."""
    cjk = len(CJK_CHARACTER.findall(text))
    if not cjk:
        return len(text.split())
    return cjk + len(CJK_CHARACTER.sub(" ", text).split())


def script_scores(parsed: ParsedText) -> dict[str, Score]:
    """The `script_v1__*` columns of one parsed text."""
    text = parsed.text
    units = count_units(text)
    lowered = text.lower()
    phrases = [phrase for phrase in POLICY_PHRASES if phrase in lowered]
    scripted = "javascript" in lowered
    kept_sentences = 0
    for line in parsed.lines:
        if not _LINE_END.search(line) or count_units(line) < C4_MIN_WORDS_PER_KEPT_LINE:
            continue
        lowered_line = line.lower()
        if scripted and "javascript" in lowered_line:
            continue
        if any(phrase in lowered_line for phrase in phrases):
            continue
        kept_sentences += max(1, len(_SENTENCE_END.findall(line)))
    scores: dict[str, Score] = {
        "unit_count": units,
        "hash_to_unit_ratio": ratio(text.count("#"), units),
        "ellipsis_to_unit_ratio": ratio(len(_ELLIPSIS.findall(text)), units),
        "kept_sentence_count": kept_sentences,
        "list_ratio": ratio(text.count("\n"), units),
    }
    return {column_name(SCRIPT, name): value for name, value in scores.items()}
