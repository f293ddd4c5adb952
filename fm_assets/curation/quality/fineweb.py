"""FineWeb's custom filters (Penedo et al. 2024), columns `fineweb_v1__*`.

Definitions and thresholds: docs/curation.md (Quality rules).
"""

from __future__ import annotations

import operator
from typing import Final

import numpy as np
import pyarrow as pa

from fm_assets.curation.quality.c4 import C4_TERMINAL_PUNCTUATION
from fm_assets.curation.quality.text import ParsedText, Score, column_name, ratio

FINEWEB: Final = "fineweb_v1"

# FineWeb's line rule for any language: C4's marks plus other scripts' full stops and quotes.
TERMINAL_PUNCTUATION: Final = (*C4_TERMINAL_PUNCTUATION, *"…。！？؟۔।॥։።’»」』")
FINEWEB_SHORT_LINE_CHARS: Final = 30

FINEWEB_COLUMNS: Final = (
    ("line_punct_ratio", pa.float64()),
    ("short_line_fraction", pa.float64()),
    ("char_dup_ratio", pa.float64()),
    ("list_ratio", pa.float64()),
)


def fineweb_scores(parsed: ParsedText) -> dict[str, Score]:
    """The `fineweb_v1__*` columns of one parsed text."""
    scores: dict[str, Score] = {
        "line_punct_ratio": parsed.line_fraction(
            operator.methodcaller("endswith", TERMINAL_PUNCTUATION)
        ),
        "short_line_fraction": ratio(
            int(np.count_nonzero(parsed.line_lengths <= FINEWEB_SHORT_LINE_CHARS)),
            len(parsed.lines),
        ),
        "char_dup_ratio": ratio(parsed.dup_line_chars, parsed.line_chars),
        "list_ratio": ratio(parsed.text.count("\n"), len(parsed.words)),
    }
    return {column_name(FINEWEB, name): value for name, value in scores.items()}
