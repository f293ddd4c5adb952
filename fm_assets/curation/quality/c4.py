"""C4's page rules and line statistics (Raffel et al. 2020, Sec. 2.2), columns `c4_v1__*`.

Definitions and thresholds: docs/curation.md (Quality rules).
"""

from __future__ import annotations

import operator
import re
from typing import Final

import pyarrow as pa

from fm_assets.curation.quality.text import ParsedText, Score, column_name, ratio

C4: Final = "c4_v1"

# C4: "a period, exclamation mark, question mark, or end quotation mark".
C4_TERMINAL_PUNCTUATION: Final = (".", "!", "?", '"', "”")
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

C4_COLUMNS: Final = (
    ("terminal_punct_line_fraction", pa.float64()),
    ("min_words_per_line", pa.int64()),
    ("lorem_ipsum_count", pa.int64()),
    ("curly_bracket_count", pa.int64()),
    ("javascript_line_count", pa.int64()),
    ("policy_line_count", pa.int64()),
    ("kept_sentence_count", pa.int64()),
)

# A match starts only at the first mark of a run, and the run is taken whole (possessive): a
# long run of marks not followed by a space costs one pass, not one pass per mark.
_SENTENCE_END: Final = re.compile(r"(?<![.!?])[.!?]++[\"'”’)\]]*(?=\s|$)")


def c4_scores(parsed: ParsedText) -> dict[str, Score]:
    """The `c4_v1__*` columns of one parsed text."""
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
        "terminal_punct_line_fraction": ratio(terminal.count(True), len(lines)),
        "min_words_per_line": min(words_per_line, default=0),
        "lorem_ipsum_count": lowered.count("lorem ipsum"),
        "curly_bracket_count": parsed.text.count("{") + parsed.text.count("}"),
        "javascript_line_count": javascript.count(True),
        "policy_line_count": policy.count(True),
        "kept_sentence_count": kept_sentences,
    }
    return {column_name(C4, name): value for name, value in scores.items()}
