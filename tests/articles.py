"""Article bodies of the shared extraction benchmark, and near-copies of them, for tests that
need real prose (near dedup, curation)."""

from __future__ import annotations

import json
import random

from tests.paths import ARTICLE_GROUND_TRUTH


def long_articles(count: int) -> list[tuple[str, str]]:
    """(key, body) of the first `count` long (over 300 words), mostly-ASCII articles (English
    and a few other Latin-script languages), in key order."""
    truth = json.loads(ARTICLE_GROUND_TRUTH.read_text())
    bodies = [(key, v["articleBody"]) for key, v in sorted(truth.items())]
    return [
        (k, b)
        for k, b in bodies
        if len(b.split()) > 300 and sum(c.isascii() for c in b) / len(b) > 0.97
    ][:count]


def near_copy(text: str, seed: int) -> str:
    """`text` with one word in sixty changed (upper-cased and reversed): a near-duplicate."""
    words = text.split()
    rng = random.Random(seed)
    for i in rng.sample(range(len(words)), max(1, len(words) // 60)):
        words[i] = words[i].upper()[::-1]
    return " ".join(words)
