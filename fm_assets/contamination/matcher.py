"""Find registered eval items inside documents, and cut them out.

`ContaminationMatcher` loads the registry rows of any number of benchmarks (`registry.py`) and
matches documents in batches. Three rules, each giving a `Match` with the item and where it is:

- `ngram`: the document holds at least `threshold` of the item's distinct n-grams. Every
  n-gram hash of a batch of documents is looked up at once (a bitmap, then `np.searchsorted`
  in one sorted uint64 array) and the hits are counted per (document, item) with numpy: no
  Python loop over documents or n-grams.
- `short`: the short-item rule (see `registry.py`): an anchor (question) verbatim, followed by an
  answer verbatim within `ANSWER_WINDOW` words.
- `exact`: the document's whole normalised text is the item's.

`redact` removes the matched passages from a document (the stage drops matched documents by
default; redaction is its alternative).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.contamination.normalize import (
    U64,
    NgramHasher,
    batch_word_hashes,
    word_hashes,
    word_spans,
)
from fm_assets.contamination.registry import (
    ANSWER_WINDOW,
    CONTAMINATION_RULES_VERSION,
    ITEMS_SCHEMA,
    NGRAM_SIZE,
    REGISTRY_SCHEMA,
    ROLES,
    BenchmarkRegistry,
    from_stored,
)

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


class _Lookup:
    """Sorted distinct hashes, the registry items holding each (CSR), and a bitmap in front.

    Most queried hashes (a document's n-grams) are in no eval item. A bitmap of ~32 bits per
    registered hash, indexed by a hash's top bits, turns ~97% of them away with one memory read;
    only the rest go through a binary search of the sorted array.
    """

    def __init__(self, hashes: U64, items: I64) -> None:
        order = np.argsort(hashes, kind="stable")
        ordered = hashes[order]
        distinct, starts, counts = np.unique(ordered, return_index=True, return_counts=True)
        self.hashes: U64 = distinct
        self.starts: I64 = starts.astype(np.int64)
        self.counts: I64 = counts.astype(np.int64)
        self.items: I64 = items[order]  # grouped by hash
        self._bits = int(min(31, max(12, np.ceil(np.log2(max(1, 32 * len(distinct)))))))
        self._shift = np.uint64(64 - self._bits)
        self._bitmap = np.zeros(1 << (self._bits - 3), dtype=np.uint8)
        slots = distinct >> self._shift
        np.bitwise_or.at(
            self._bitmap,
            (slots >> np.uint64(3)).astype(np.int64),
            np.left_shift(np.uint8(1), (slots & np.uint64(7)).astype(np.uint8)),
        )

    def find(self, queries: U64) -> tuple[I64, I64]:
        """(query index, hash index) of each query that is a registered hash."""
        if len(self.hashes) == 0 or len(queries) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        slots = queries >> self._shift
        maybe = (self._bitmap[slots >> np.uint64(3)] >> (slots & np.uint64(7)).astype(np.uint8)) & 1
        candidates = np.flatnonzero(maybe)
        where = np.searchsorted(self.hashes, queries[candidates])
        np.minimum(where, len(self.hashes) - 1, out=where)
        hit = self.hashes[where] == queries[candidates]
        return candidates[hit].astype(np.int64), where[hit].astype(np.int64)

    def expand(self, hash_index: I64) -> tuple[I64, I64]:
        """(position in hash_index, item) for every item of every found hash."""
        counts = self.counts[hash_index]
        owner = np.repeat(np.arange(len(hash_index), dtype=np.int64), counts)
        first = np.repeat(self.starts[hash_index] - np.cumsum(counts) + counts, counts)
        return owner, self.items[first + np.arange(len(owner), dtype=np.int64)]


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
        _check_columns("items", items, ITEMS_SCHEMA)
        _check_columns("ngrams", ngrams, REGISTRY_SCHEMA)
        versions = set(items.column("rules_version").to_pylist())
        if versions - {CONTAMINATION_RULES_VERSION}:
            raise ValueError(
                f"registry rows were built under contamination rules {sorted(versions)}, this "
                f"matcher applies version {CONTAMINATION_RULES_VERSION}; rebuild the registry "
                "(`fm registry add <benchmark>` for each benchmark)"
            )
        sizes = set(items.column("ngram_size").to_pylist())
        if len(sizes) > 1:
            raise ValueError(f"registry mixes n-gram sizes {sorted(sizes)}; rebuild it with one")
        self.threshold = threshold
        self.batch_size = batch_size
        self.ngram_size = int(sizes.pop()) if sizes else NGRAM_SIZE
        self.item_count = items.num_rows
        self._benchmarks: list[str] = items.column("benchmark").to_pylist()
        self._item_ids = np.asarray(items.column("item_id").to_numpy(), dtype=np.int64)
        self._ngram_counts = np.asarray(items.column("ngram_count").to_numpy(), dtype=np.int64)
        item_index = _item_index(items, ngrams)
        roles = _codes(ngrams.column("role"), list(ROLES))
        hashes = from_stored(ngrams.column("ngram_hash"))
        lengths = np.asarray(ngrams.column("length").to_numpy(), dtype=np.int64)

        is_ngram = roles == ROLES.index("ngram")
        if np.any(lengths[is_ngram] != self.ngram_size):
            raise ValueError(f"n-gram rows of another size than {self.ngram_size} in registry")
        found = np.bincount(item_index[is_ngram], minlength=self.item_count)
        if np.any(found != self._ngram_counts):
            bad = int(np.flatnonzero(found != self._ngram_counts)[0])
            raise ValueError(
                f"registry item {self._describe(bad)} lists {self._ngram_counts[bad]} n-grams but "
                f"has {found[bad]} n-gram rows; rebuild its benchmark's registry"
            )
        self._ngrams = _Lookup(hashes[is_ngram], item_index[is_ngram])

        is_anchor = roles == ROLES.index("anchor")
        is_head = roles == ROLES.index("anchor_head")
        self._anchors = _Lookup(hashes[is_anchor], item_index[is_anchor])
        self._anchor_lengths = sorted({int(k) for k in lengths[is_anchor]})
        self._heads = _Lookup(hashes[is_head], item_index[is_head])
        self._head_length = int(lengths[is_head][0]) if is_head.any() else 0
        is_answer = roles == ROLES.index("answer")
        order = np.argsort(item_index[is_answer], kind="stable")
        self._answer_items = item_index[is_answer][order]
        self._answer_hashes = hashes[is_answer][order]
        self._answer_lengths = lengths[is_answer][order]

        exact = from_stored(items.column("exact_hash"))
        nonempty = np.asarray(items.column("word_count").to_numpy()) > 0
        self._exact = _Lookup(exact[nonempty], np.flatnonzero(nonempty).astype(np.int64))

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

    def _describe(self, index: int) -> str:
        return f"{self._benchmarks[index]}:{int(self._item_ids[index])}"

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

        # ngram rule: every n-gram of the batch looked up at once, hits counted per item.
        n = self.ngram_size
        starts = positions[positions + n <= doc_end]
        query, hit = self._ngrams.find(hasher.at(starts, n))
        if len(query):
            owner, item = self._ngrams.expand(hit)
            where = starts[query[owner]]
            doc = doc_of_word[where]
            self._count_ngrams(doc, item, hit[owner], where - offsets[doc], found)

        # short rule: anchors' first words, then whole anchors there, then answers after them.
        if self._head_length:
            k = self._head_length
            starts = positions[positions + k <= doc_end]
            candidates = starts[self._heads.find(hasher.at(starts, k))[0]]
            unmasked: dict[int, NgramHasher] = {}
            for k in self._anchor_lengths:
                at = candidates[candidates + k <= doc_end[candidates]]
                query, hit = self._anchors.find(hasher.at(at, k))
                if not len(query):
                    continue
                owner, item = self._anchors.expand(hit)
                for word, i in zip(at[query[owner]].tolist(), item.tolist(), strict=True):
                    d = int(doc_of_word[word])
                    if d not in unmasked:
                        unmasked[d] = NgramHasher(word_hashes(texts[d], mask_numbers=False))
                    self._check_answers(unmasked[d], word - int(offsets[d]), k, i, found[d])

        # exact rule: the whole document's word sequence.
        nonempty = np.flatnonzero(lengths > 0)
        query, hit = self._exact.find(hasher.at(offsets[:-1][nonempty], lengths[nonempty]))
        if len(query):
            owner, item = self._exact.expand(hit)
            for d, i in zip(nonempty[query[owner]].tolist(), item.tolist(), strict=True):
                found[d][i] = _Found("exact", 1.0, [(0, int(lengths[d]))])

        return [self._matches(text, doc) for text, doc in zip(texts, found, strict=True)]

    def _count_ngrams(
        self, doc: I64, item: I64, hash_index: I64, word: I64, found: list[dict[int, _Found]]
    ) -> None:
        """Record the (document, item) pairs holding at least `threshold` of the item's n-grams."""
        pair = doc * self.item_count + item
        # Distinct n-grams per (document, item): a passage repeated in a document counts once.
        distinct = np.unique(pair * len(self._ngrams.hashes) + hash_index)
        pairs, counts = np.unique(distinct // len(self._ngrams.hashes), return_counts=True)
        fractions = counts / self._ngram_counts[pairs % self.item_count]
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
        first = anchor + k
        lo, hi = np.searchsorted(self._answer_items, [item, item + 1])
        end = first if lo == hi else -1  # an item with nothing but its anchor matches on it
        for answer, length in zip(
            self._answer_hashes[lo:hi].tolist(), self._answer_lengths[lo:hi].tolist(), strict=True
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
        out = []
        for item, hit in sorted(doc.items()):
            passages = tuple((int(spans[a, 0]), int(spans[b - 1, 1])) for a, b in hit.runs)
            out.append(
                Match(
                    benchmark=self._benchmarks[item],
                    item_id=int(self._item_ids[item]),
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


def _check_columns(name: str, table: pa.Table, schema: pa.Schema) -> None:
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"{name} table lacks columns {missing}; expected {schema.names}")


def _codes(column: pa.ChunkedArray, names: list[str]) -> I64:
    """Index in `names` of each value of a string column; ValueError for any other value."""
    encoded = pc.dictionary_encode(column).combine_chunks()
    dictionary = encoded.dictionary.to_pylist()
    unknown = sorted(set(dictionary) - set(names))
    if unknown:
        raise ValueError(f"unknown values {unknown} in registry column; expected {names}")
    mapping = np.array([names.index(v) for v in dictionary], dtype=np.int64)
    return mapping[np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]


def _item_index(items: pa.Table, ngrams: pa.Table) -> I64:
    """Row of `items` for each row of `ngrams`, by (benchmark, item_id)."""
    names = sorted(set(items.column("benchmark").to_pylist()))
    row_names = set(pc.unique(ngrams.column("benchmark")).to_pylist())
    if row_names - set(names):
        raise ValueError(
            f"registry rows for benchmarks {sorted(row_names - set(names))} but no items"
        )

    def keys(table: pa.Table) -> I64:
        codes = _codes(table.column("benchmark"), names)
        return (codes << 40) + np.asarray(table.column("item_id").to_numpy(), dtype=np.int64)

    item_keys = keys(items)
    order = np.argsort(item_keys, kind="stable")
    if np.any(np.diff(item_keys[order]) == 0):
        raise ValueError("registry lists an item twice; rebuild it")
    row_keys = keys(ngrams)
    where = np.minimum(np.searchsorted(item_keys[order], row_keys), max(len(order) - 1, 0))
    if len(row_keys) and np.any(item_keys[order][where] != row_keys):
        raise ValueError("registry rows for items the items table does not list; rebuild it")
    return order[where].astype(np.int64)
