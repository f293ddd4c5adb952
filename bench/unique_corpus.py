"""WARC replicas whose visible text differs from replica to replica, so near dedup keeps them all.

`bench.end_to_end.corpus` makes replicas that differ only in a comment and a URL: every replica
extracts to the same text and near dedup keeps one copy, so a batch of k replicas gives the
later stages no more input than one. Here replica r (r ≥ 1) also swaps the words of its pages'
text: every run of four letters or more, in any script (outside tags, scripts, styles,
comments and entities), becomes another run of the same length from the same page, through a
permutation of the page's own vocabulary seeded by r and the length. The pages keep their
markup, sizes, short function words, scripts, languages and sentence shapes (a page's words
all stay its own, so language ID and the quality rules judge it much as the original); but
nearly every word 5-gram differs between two replicas, so MinHash finds no copies across them
and the kept documents grow with the replicas. Replica 0 is the pages as they are. Bytes that
are not UTF-8 stay as they are.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path

from bench.end_to_end.corpus import Corpus, sources, write_warc

# Markup left alone: scripts, styles, comments and tags (the text between them is swapped).
_MARKUP = re.compile(
    r"(<script\b.*?</script\s*>|<style\b.*?</style\s*>|<!--.*?-->|<[^>]*>)", re.I | re.S
)
# A word to swap: letters of any script, not part of an entity (`&nbsp;`) or of a longer word.
_WORD = re.compile(r"(?<![&#\w])[^\W\d_]{4,}(?![\w;])")
# The Gopher stop words of four letters and a few other function words: the quality rules count
# them, so they stay as they are.
_KEEP = frozenset(("that", "have", "with", "this", "from", "they", "will", "there", "their"))


def _text(body: bytes) -> str:
    return body.decode("utf-8", errors="surrogateescape")  # round-trips every byte


def vocabulary(body: bytes) -> dict[int, list[str]]:
    """The swappable words of a page's text, by length, sorted."""
    words: set[str] = set()
    for i, part in enumerate(_MARKUP.split(_text(body))):
        if i % 2 == 0:  # text between markup
            words.update(w for w in _WORD.findall(part) if w.lower() not in _KEEP)
    by_length: dict[int, list[str]] = {}
    for word in sorted(words):
        by_length.setdefault(len(word), []).append(word)
    return by_length


def word_map(by_length: dict[int, list[str]], replica: int) -> dict[str, str]:
    """Replica `replica`'s permutation of the vocabulary, within each word length."""
    mapping: dict[str, str] = {}
    for length, words in by_length.items():
        shuffled = list(words)
        random.Random(replica * 1_009 + length).shuffle(shuffled)
        mapping.update(zip(words, shuffled, strict=True))
    return mapping


def swap_words(body: bytes, replica: int) -> bytes:
    """`body` with every swappable word of its text swapped as replica `replica` does."""
    if not replica:
        return body
    mapping = word_map(vocabulary(body), replica)
    parts = _MARKUP.split(_text(body))
    for i in range(0, len(parts), 2):
        parts[i] = _WORD.sub(lambda m: mapping.get(m.group(0), m.group(0)), parts[i])
    return "".join(parts).encode("utf-8", errors="surrogateescape")


def build(directory: Path, replicas: int) -> Corpus:
    """Write `replicas` replicas of every source into `directory`, each with its own words."""
    directory.mkdir(parents=True, exist_ok=True)
    pages = sources()
    files: list[Path] = []
    documents = html_bytes = 0
    for replica in range(replicas):
        for name, source_pages in pages.items():
            path = directory / f"replica-{replica:03d}-{name}.warc.gz"
            swapped = [replace(p, body=swap_words(p.body, replica)) for p in source_pages]
            html_bytes += write_warc(path, swapped, replica)
            documents += len(source_pages)
            files.append(path)
    return Corpus(files, replicas, documents, sum(p.stat().st_size for p in files), html_bytes)
