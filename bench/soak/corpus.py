"""The soak's documents: every one unique, built from the article benchmark's real sentences.

The 181 articles' bodies (`ground-truth.json`, read in place) give ~6,000 distinct sentences.
Document i of batch b is a seeded draw of `SENTENCES_PER_DOCUMENT` of them under a header line
naming the series, the batch and the index: no two documents share bytes (exact dedup keeps
each), and two documents share about 12 × 12 / 6,000 ≈ 0.02 sentences on average, far below
what near dedup calls a copy, so every document reaches the end of the pipeline and the
indexes and tables grow by the whole batch.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

from bench.harness import ARTICLE_TRUTH

SENTENCES_PER_DOCUMENT = 12
MIN_WORDS = 8  # shorter pieces (bylines, captions) would repeat across documents
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentence_pool(truth: Path = ARTICLE_TRUTH) -> list[str]:
    """The distinct sentences of at least `MIN_WORDS` words of every article body, in a fixed
    order."""
    articles = json.loads(truth.read_text(encoding="utf-8"))
    seen: dict[str, None] = {}
    for key in sorted(articles):
        for paragraph in articles[key]["articleBody"].split("\n"):
            for sentence in _SENTENCE_END.split(paragraph):
                sentence = sentence.strip()
                if len(sentence.split()) >= MIN_WORDS:
                    seen.setdefault(sentence, None)
    if len(seen) < 10 * SENTENCES_PER_DOCUMENT:
        raise RuntimeError(f"{truth} gave {len(seen)} sentences: is the shared data complete?")
    return list(seen)


def document(pool: Sequence[str], series: str, batch: int, index: int) -> str:
    """Document `index` of batch `batch` of `series`: a header line naming all three, then a
    seeded draw of sentences, one paragraph of three sentences at a time."""
    rng = random.Random(f"{series}/{batch}/{index}")
    picked = rng.sample(range(len(pool)), SENTENCES_PER_DOCUMENT)
    paragraphs = [" ".join(pool[i] for i in picked[at : at + 3]) for at in range(0, len(picked), 3)]
    return "\n".join([f"Soak document {series}-{batch}-{index}", *paragraphs])


def write_batch(pool: Sequence[str], series: str, batch: int, documents: int, out: Path) -> Path:
    """Batch `batch` of `series` as one JSONL file of `documents` documents."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for index in range(documents):
            record = {
                "id": f"soak-{series}-{batch}-{index}",
                "text": document(pool, series, batch, index),
                "url": f"https://soak.invalid/{series}/{batch}/{index}",
                "lang": "en",
            }
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return out
