"""The driver-memory benchmark's unique replicas: each replica keeps its page's markup and word
shapes but swaps its words, so near dedup must not find two replicas to be copies."""

from __future__ import annotations

import gzip
import re

import numpy as np
import trafilatura

from bench.harness import ARTICLE_HTML_FILES
from bench.unique_corpus import swap_words
from fm_assets.curation.minhash.shingles import shingle_sets

PAGE = (
    b"<html><head><style>.title { color: black }</style>"
    b"<script>var message = 'hello world';</script></head><body>"
    b'<!-- navigation comment --><h1 class="headline">Morning market report</h1>'
    b"<p>Traders said that prices moved higher with steady volume&nbsp;today, "
    b"while analysts have warned about slower growth later this quarter.</p>"
    b"<p>Economists expected stronger numbers from exporters and smaller firms.</p>"
    b"</body></html>"
)
MARKUP = re.compile(rb"<script.*?</script>|<style.*?</style>|<!--.*?-->|<[^>]*>|&\w+;", re.S)


def test_a_replica_keeps_markup_and_word_shapes_and_swaps_words() -> None:
    swapped = swap_words(PAGE, 1)
    assert swap_words(PAGE, 0) == PAGE  # replica 0 is the page as it is
    assert swap_words(PAGE, 1) == swapped  # the same replica always reads the same
    assert MARKUP.findall(swapped) == MARKUP.findall(PAGE)  # tags, scripts, entities untouched
    before = MARKUP.sub(b" ", PAGE).split()
    after = MARKUP.sub(b" ", swapped).split()
    assert [len(w) for w in after] == [len(w) for w in before]
    long_words = [(a, b) for a, b in zip(before, after, strict=True) if len(a) >= 6]
    changed = sum(a != b for a, b in long_words)
    assert changed >= len(long_words) * 0.6, (before, after)
    for kept in (b"that", b"with", b"have"):  # the stop words the quality rules count
        assert before.count(kept) == after.count(kept)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    left, right = set(a.tolist()), set(b.tolist())
    return len(left & right) / len(left | right)


def test_replicas_of_an_article_are_not_near_duplicates() -> None:
    page = gzip.decompress(ARTICLE_HTML_FILES[0].read_bytes())
    texts = [
        trafilatura.extract(swap_words(page, replica).decode("utf-8", "surrogateescape")) or ""
        for replica in (0, 1, 2)
    ]
    assert all(len(text) > 500 for text in texts)
    original, first, second = shingle_sets(texts)
    # Near dedup flags pairs from a Jaccard of 0.8; unique replicas share almost no 5-gram.
    assert jaccard(original, first) < 0.2
    assert jaccard(first, second) < 0.2
