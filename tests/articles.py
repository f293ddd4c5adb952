"""Article bodies of the shared extraction benchmark, and near-copies of them, for tests that
need real prose (near dedup, curation)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from fm_assets.settings import Settings
from tests.paths import ARTICLE_GROUND_TRUTH

Records = list[tuple[str, str]]


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


def articles_policy(min_words: int = 40) -> str:
    """A policy (TOML) for source `articles`: English, Gopher rules with `min_words`, no
    classifier: near dedup sees every long English article."""
    return f"""
[datasets.articles]
allowed_languages = ["en"]
min_language_score = 0.5
quality_rule_sets = ["gopher_v1"]
[datasets.articles.quality_thresholds]
gopher_min_words = {min_words}
[datasets.articles.classifier]
sha256 = "none"
"""


def land_articles(settings: Settings, directory: Path, name: str, records: Records) -> str:
    """Land (key, text) `records` as `<directory>/<name>.jsonl` from source `articles`; return
    the batch id."""
    from fm_assets.commands import operations

    path = directory / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in records))
    manifest, _ = operations.land(settings, [path], source="articles", license="MIT")
    return manifest.batch_id
