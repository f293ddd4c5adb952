"""Find registered eval items inside documents, and cut them out.

`ContaminationMatcher` matches batches of documents against the registry's lookups
(`registry_rows.py`) by the n-gram, short-item and exact rules of docs/contamination.md;
`redact` removes the matched passages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fm_assets.contamination.normalize import (
    NgramHasher,
    batch_word_hashes,
    word_hashes,
    word_spans,
)
from fm_assets.contamination.registry import (
    ANSWER_WINDOW,
    ITEMS_SCHEMA,
    REGISTRY_SCHEMA,
    BenchmarkRegistry,
)
from fm_assets.contamination.registry_rows import read_registry_rows

I64 = npt.NDArray[np.int64]

# 30% of an item's distinct n-grams: bench/results/contamination_eval.md has the measurement.
DEFAULT_THRESHOLD = 0.3


@dataclass(frozen=True)
class _Found:
    """One item found in one document, before its word ranges become character spans."""

    rule: str
    fraction: float
    runs: list[tuple[int, int]]  # word ranges [first, end) of the document


@dataclass(frozen=True)
class Match:
    """One eval item found in one document."""

    benchmark: str
    item_id: int
    fraction: float  # share of the item's distinct n-grams in the document; 1.0 for short/exact
    span: tuple[int, int]  # characters [start, end) of the document, first to last matched word
    rule: str  # "ngram", "short" or "exact"
    passages: tuple[tuple[int, int], ...] = field(default=())  # the matched runs inside `span`


class ContaminationMatcher:
    """Matches documents against the registry rows of every registered benchmark."""

    def __init__(
        self,
        items: pa.Table,
        ngrams: pa.Table,
        *,
        threshold: float = DEFAULT_THRESHOLD,
        batch_size: int = 512,
    ) -> None:
        """`items` (ITEMS_SCHEMA) and `ngrams` (REGISTRY_SCHEMA) rows of all benchmarks."""
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self._registry = read_registry_rows(items, ngrams)
        self.threshold = threshold
        self.batch_size = batch_size
        self.ngram_size = self._registry.ngram_size
        self.item_count = self._registry.item_count

    @classmethod
    def from_registries(
        cls,
        registries: Iterable[BenchmarkRegistry],
        *,
        threshold: float = DEFAULT_THRESHOLD,
        batch_size: int = 512,
    ) -> ContaminationMatcher:
        """A matcher over the rows of several `build_registry` results."""
        registries = list(registries)
        names = [r.benchmark for r in registries]
        if len(set(names)) != len(names):
            raise ValueError(f"benchmarks registered twice: {sorted(names)}")
        items = (
            pa.concat_tables([r.items for r in registries])
            if registries
            else ITEMS_SCHEMA.empty_table()
        )
        ngrams = (
            pa.concat_tables([r.ngrams for r in registries])
            if registries
            else REGISTRY_SCHEMA.empty_table()
        )
        return cls(items, ngrams, threshold=threshold, batch_size=batch_size)

    def match(self, texts: Sequence[str]) -> list[list[Match]]:
        """The eval items found in each document, in document order."""
        results: list[list[Match]] = []
        for start in range(0, len(texts), self.batch_size):
            results.extend(self._match_batch(texts[start : start + self.batch_size]))
        return results

    def _match_batch(self, texts: Sequence[str]) -> list[list[Match]]:
        # The whole batch as one word sequence; windows never cross a document's end.
        all_words, lengths = batch_word_hashes(texts)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        hasher = NgramHasher(all_words)
        doc_of_word = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
        doc_end = offsets[1:][doc_of_word]
        positions = np.arange(len(doc_of_word), dtype=np.int64)
        found: list[dict[int, _Found]] = [{} for _ in texts]
        registry = self._registry

        # ngram rule: every n-gram of the batch looked up at once, hits counted per item.
        n = self.ngram_size
        starts = positions[positions + n <= doc_end]
        query, hit = registry.ngrams.find(hasher.at(starts, n))
        if len(query):
            owner, item = registry.ngrams.expand(hit)
            where = starts[query[owner]]
            doc = doc_of_word[where]
            self._count_ngrams(doc, item, hit[owner], where - offsets[doc], found)

        # short rule: anchors' first words, then whole anchors there, then answers after them.
        if registry.head_length:
            k = registry.head_length
            starts = positions[positions + k <= doc_end]
            candidates = starts[registry.heads.find(hasher.at(starts, k))[0]]
            unmasked: dict[int, NgramHasher] = {}
            for k in registry.anchor_lengths:
                at = candidates[candidates + k <= doc_end[candidates]]
                query, hit = registry.anchors.find(hasher.at(at, k))
                if not len(query):
                    continue
                owner, item = registry.anchors.expand(hit)
                for word, i in zip(at[query[owner]].tolist(), item.tolist(), strict=True):
                    d = int(doc_of_word[word])
                    if d not in unmasked:
                        unmasked[d] = NgramHasher(word_hashes(texts[d], mask_numbers=False))
                    self._check_answers(unmasked[d], word - int(offsets[d]), k, i, found[d])

        # exact rule: the whole document's word sequence.
        nonempty = np.flatnonzero(lengths > 0)
        query, hit = registry.exact.find(hasher.at(offsets[:-1][nonempty], lengths[nonempty]))
        if len(query):
            owner, item = registry.exact.expand(hit)
            for d, i in zip(nonempty[query[owner]].tolist(), item.tolist(), strict=True):
                found[d][i] = _Found("exact", 1.0, [(0, int(lengths[d]))])

        return [self._matches(text, doc) for text, doc in zip(texts, found, strict=True)]

    def _count_ngrams(
        self, doc: I64, item: I64, hash_index: I64, word: I64, found: list[dict[int, _Found]]
    ) -> None:
        """Record the (document, item) pairs holding at least `threshold` of the item's n-grams."""
        registry = self._registry
        pair = doc * self.item_count + item
        # Distinct n-grams per (document, item): a passage repeated in a document counts once.
        distinct = np.unique(pair * len(registry.ngrams.hashes) + hash_index)
        pairs, counts = np.unique(distinct // len(registry.ngrams.hashes), return_counts=True)
        fractions = counts / registry.ngram_counts[pairs % self.item_count]
        matched = pairs[fractions >= self.threshold]
        if len(matched) == 0:
            return
        keep = np.isin(pair, matched)
        order = np.lexsort((word[keep], pair[keep]))
        kept_pairs, kept_words = pair[keep][order], word[keep][order]
        bounds = np.flatnonzero(np.diff(kept_pairs)) + 1
        fraction_of = dict(zip(pairs.tolist(), fractions.tolist(), strict=True))
        firsts = kept_pairs[np.concatenate(([0], bounds))].tolist()
        for group, group_words in zip(firsts, np.split(kept_words, bounds), strict=True):
            d, i = divmod(group, self.item_count)
            runs = _runs(np.unique(group_words), self.ngram_size)
            found[d][i] = _Found("ngram", min(1.0, fraction_of[group]), runs)

    def _check_answers(
        self, unmasked: NgramHasher, anchor: int, k: int, item: int, found: dict[int, _Found]
    ) -> None:
        """Record a short-rule match when an answer of `item` starts soon after its anchor."""
        if item in found:
            return  # the n-gram rule already found it
        registry = self._registry
        first = anchor + k
        lo, hi = np.searchsorted(registry.answer_items, [item, item + 1])
        end = first if lo == hi else -1  # an item with nothing but its anchor matches on it
        for answer, length in zip(
            registry.answer_hashes[lo:hi].tolist(),
            registry.answer_lengths[lo:hi].tolist(),
            strict=True,
        ):
            last = min(first + ANSWER_WINDOW, unmasked.size - length)
            if last < first:
                continue
            starts = np.arange(first, last + 1, dtype=np.int64)
            at = np.flatnonzero(unmasked.at(starts, length) == np.uint64(answer))
            if len(at):
                end = int(starts[at[0]]) + length
                break
        if end >= 0:
            found[item] = _Found("short", 1.0, [(anchor, end)])

    def _matches(self, text: str, doc: dict[int, _Found]) -> list[Match]:
        if not doc:
            return []
        spans = word_spans(text)
        registry = self._registry
        out = []
        for item, hit in sorted(doc.items()):
            passages = tuple((int(spans[a, 0]), int(spans[b - 1, 1])) for a, b in hit.runs)
            out.append(
                Match(
                    benchmark=registry.benchmarks[item],
                    item_id=int(registry.item_ids[item]),
                    fraction=hit.fraction,
                    span=(passages[0][0], passages[-1][1]),
                    rule=hit.rule,
                    passages=passages,
                )
            )
        return out


def redact(text: str, matches: Iterable[Match], replacement: str = "") -> str:
    """`text` with every matched passage replaced by `replacement` (overlaps merged)."""
    cuts = sorted(p for m in matches for p in (m.passages or (m.span,)))
    pieces: list[str] = []
    done = 0
    for start, end in cuts:
        if end <= done:
            continue
        if start > done:
            pieces.append(text[done:start])
            pieces.append(replacement)
        elif not pieces:
            pieces.append(replacement)
        done = max(done, end)
    pieces.append(text[done:])
    return "".join(pieces)


def _runs(words: I64, n: int) -> list[tuple[int, int]]:
    """Word ranges [first, last + n) covered by matched n-grams starting at sorted `words`.

    Starts closer than 2n are one passage: an edited word breaks the n n-grams over it, so the
    matched n-grams on either side of one edit are n + 1 words apart.
    """
    breaks = np.flatnonzero(np.diff(words) > 2 * n) + 1
    firsts = np.concatenate(([0], breaks))
    lasts = np.concatenate((breaks - 1, [len(words) - 1]))
    return [(int(words[a]), int(words[b]) + n) for a, b in zip(firsts, lasts, strict=True)]
