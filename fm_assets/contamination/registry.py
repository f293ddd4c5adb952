"""Registry rows of one benchmark: the hashes the matcher needs to recognise each of its items.

`build_registry` turns an eval set into ITEMS_SCHEMA rows (one per item) and REGISTRY_SCHEMA rows
(one per hash: n-grams and the short-item rule's anchors and answers). docs/contamination.md
describes the rules, the thresholds below and the tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from fm_assets.contamination.eval_items import EvalItem, EvalSet
from fm_assets.contamination.normalize import (
    NUMBER_WORD_HASH,
    U64,
    NgramHasher,
    normalize_text,
    sequence_hash,
    word_hashes,
)
from fm_assets.storage.tables import TableSpec, declare

# Bump whenever the normalisation, the hashes or the rules change: registries built under another
# version do not match the same way, and the matcher refuses them.
CONTAMINATION_RULES_VERSION = "1"

# 13 words: see bench/results/contamination_eval.md for the measurement behind it.
NGRAM_SIZE = 13
# An n-gram or anchor needs this many words that are not numbers: "who is" or "8 + 8 ÷ 2 + 2 ="
# (all numbers once masked) says nothing about an eval item.
MIN_CONTENT_WORDS = 3
HEAD_WORDS = 3  # anchors are looked up by their first words first
# An n-gram in more items of one benchmark than this is template text (MMLU's moral scenarios
# share a 40-word preamble across 895 items): it says nothing about which item a document holds.
MAX_ITEMS_PER_NGRAM = 10
SHORT_ANCHOR_FACTOR = 2  # anchors of fewer than 2 * ngram_size words get the short-item rule
ANSWER_WINDOW = 16  # words after a short item's anchor in which its answer must start
MIN_ANSWER_CHARS = 2  # an answer "S", "3" or "A+" (-> "a") turns up after any question

ROLES = ("ngram", "anchor", "anchor_head", "answer")

ITEMS_SCHEMA = pa.schema(
    [
        pa.field("benchmark", pa.string(), nullable=False),
        pa.field("item_id", pa.int64(), nullable=False),  # row number in the eval-set file
        pa.field("word_count", pa.int32(), nullable=False),  # normalised words, all fields
        pa.field("ngram_count", pa.int32(), nullable=False),  # distinct n-grams; 0: none
        pa.field("anchor_words", pa.int32(), nullable=False),  # >0: under the short-item rule
        pa.field("exact_hash", pa.int64(), nullable=False),  # uint64 bits; 0 for an empty item
        pa.field("ngram_size", pa.int32(), nullable=False),
        pa.field("file_sha256", pa.string(), nullable=False),
        pa.field("rules_version", pa.string(), nullable=False),
    ]
)

REGISTRY_SCHEMA = pa.schema(
    [
        pa.field("benchmark", pa.string(), nullable=False),
        pa.field("item_id", pa.int64(), nullable=False),
        pa.field("role", pa.string(), nullable=False),  # one of ROLES
        pa.field("length", pa.int32(), nullable=False),  # words hashed (ngram_size for ngram)
        pa.field("ngram_hash", pa.int64(), nullable=False),  # uint64 bits
    ]
)


# Per registered eval item: exact hash and counts; per looked-up hash: its item and role.
declare(
    TableSpec("contamination_items", ITEMS_SCHEMA, ("benchmark",)),
    TableSpec("contamination_ngrams", REGISTRY_SCHEMA, ("benchmark",)),
)


@dataclass(frozen=True)
class BenchmarkRegistry:
    """The registry rows of one benchmark and what went into them."""

    benchmark: str
    items: pa.Table  # ITEMS_SCHEMA
    ngrams: pa.Table  # REGISTRY_SCHEMA
    empty_item_ids: tuple[int, ...]  # no text in any named field
    unmatchable_item_ids: tuple[int, ...]  # text, but neither n-grams nor a usable anchor
    template_ngrams: int  # n-grams left out for being in more than MAX_ITEMS_PER_NGRAM items

    @property
    def item_count(self) -> int:
        return self.items.num_rows


def to_stored(hashes: U64) -> npt.NDArray[np.int64]:
    """uint64 hashes as the int64 column values that hold the same bits."""
    return hashes.view(np.int64)


def from_stored(column: pa.ChunkedArray | pa.Array) -> U64:
    """A stored int64 (or uint64) hash column back as uint64 hashes."""
    values = np.asarray(column.to_numpy(zero_copy_only=False))
    if values.dtype not in (np.int64, np.uint64):
        raise ValueError(f"hash column has type {values.dtype}; expected int64 or uint64")
    return values.view(np.uint64)


def build_registry(
    benchmark: str, eval_set: EvalSet, *, ngram_size: int = NGRAM_SIZE
) -> BenchmarkRegistry:
    """Registry rows for every item of `eval_set`, under the name `benchmark`."""
    if not benchmark or benchmark.strip() != benchmark:
        raise ValueError(f"benchmark name {benchmark!r} must be non-empty, without outer spaces")
    if ngram_size < MIN_CONTENT_WORDS:
        raise ValueError(f"ngram_size {ngram_size} is below MIN_CONTENT_WORDS={MIN_CONTENT_WORDS}")
    hashed = [_hash_item(item, ngram_size) for item in eval_set.items]
    # Template n-grams: shared by many items of the benchmark, they name none of them.
    every = np.concatenate([h.ngrams for h in hashed]) if hashed else np.zeros(0, np.uint64)
    distinct, spread = np.unique(every, return_counts=True)
    template = distinct[spread > MAX_ITEMS_PER_NGRAM]
    # Likewise an anchor (question) many items share ("Which of the following is true?").
    every = np.concatenate([h.anchors[0] for h in hashed]) if hashed else np.zeros(0, np.uint64)
    distinct, spread = np.unique(every, return_counts=True)
    hashed = [h.without_anchors(distinct[spread > MAX_ITEMS_PER_NGRAM]) for h in hashed]

    columns: dict[str, list[npt.NDArray[Any]]] = {"item_id": [], "length": [], "hash": []}
    roles: list[str] = []
    role_counts: list[int] = []
    ngram_counts: list[int] = []
    unmatchable: list[int] = []
    for item, h in zip(eval_set.items, hashed, strict=True):
        ngrams = h.ngrams[~np.isin(h.ngrams, template)] if len(template) else h.ngrams
        ngram_counts.append(len(ngrams))
        ngram_lengths = np.full(len(ngrams), ngram_size, dtype=np.int32)
        for role, (hashes, lengths) in zip(
            ROLES, ((ngrams, ngram_lengths), h.anchors, h.heads, h.answers), strict=True
        ):
            if len(hashes):
                columns["item_id"].append(np.full(len(hashes), item.item_id, dtype=np.int64))
                columns["length"].append(lengths)
                columns["hash"].append(hashes)
                roles.append(role)
                role_counts.append(len(hashes))
        if not item.is_empty and not len(ngrams) and not len(h.anchors[0]):
            unmatchable.append(item.item_id)

    count = len(eval_set.items)
    items_table = pa.table(
        {
            "benchmark": pa.array([benchmark] * count, pa.string()),
            "item_id": pa.array([item.item_id for item in eval_set.items], pa.int64()),
            "word_count": pa.array([h.word_count for h in hashed], pa.int32()),
            "ngram_count": pa.array(ngram_counts, pa.int32()),
            "anchor_words": pa.array(
                [int(h.anchors[1].max()) if len(h.anchors[1]) else 0 for h in hashed], pa.int32()
            ),
            "exact_hash": to_stored(np.array([h.exact for h in hashed], dtype=np.uint64)),
            "ngram_size": pa.array([ngram_size] * count, pa.int32()),
            "file_sha256": pa.array([eval_set.sha256] * count, pa.string()),
            "rules_version": pa.array([CONTAMINATION_RULES_VERSION] * count, pa.string()),
        },
        schema=ITEMS_SCHEMA,
    )
    total = sum(role_counts)
    ngrams_table = pa.table(
        {
            "benchmark": pa.array([benchmark] * total, pa.string()),
            "item_id": _concat(columns["item_id"], np.int64),
            "role": pa.array(np.repeat(np.array(roles, dtype=object), role_counts), pa.string()),
            "length": _concat(columns["length"], np.int32),
            "ngram_hash": to_stored(_concat(columns["hash"], np.uint64)),
        },
        schema=REGISTRY_SCHEMA,
    )
    return BenchmarkRegistry(
        benchmark=benchmark,
        items=items_table,
        ngrams=ngrams_table,
        empty_item_ids=eval_set.empty_item_ids,
        unmatchable_item_ids=tuple(unmatchable),
        template_ngrams=len(template),
    )


_Hashed = tuple[U64, npt.NDArray[np.int32]]


@dataclass(frozen=True)
class _HashedItem:
    word_count: int
    exact: int
    ngrams: U64  # distinct, informative; template n-grams not removed yet
    anchors: _Hashed
    heads: _Hashed
    answers: _Hashed

    def without_anchors(self, template: U64) -> _HashedItem:
        """This item without the template anchors; with none left, no short-item rule."""
        keep = ~np.isin(self.anchors[0], template)
        if keep.all():
            return self
        if not keep.any():
            nothing: _Hashed = (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int32))
            return replace(self, anchors=nothing, heads=nothing, answers=nothing)
        return replace(self, anchors=(self.anchors[0][keep], self.anchors[1][keep]))


def _hash_item(item: EvalItem, ngram_size: int) -> _HashedItem:
    hashes = word_hashes(item.text)
    anchors, heads, answers = _short_rule_hashes(item, ngram_size)
    return _HashedItem(
        word_count=len(hashes),
        exact=sequence_hash(hashes),
        ngrams=_informative_ngrams(hashes, ngram_size),
        anchors=anchors,
        heads=heads,
        answers=answers,
    )


def _informative_ngrams(hashes: U64, ngram_size: int) -> U64:
    """Distinct n-gram hashes of the n-grams with at least MIN_CONTENT_WORDS non-numbers.

    An n-gram of numbers (or numbers and a word or two) would match any table of figures.
    """
    ngrams = NgramHasher(hashes).all(ngram_size)
    if len(ngrams) == 0:
        return ngrams
    content = np.concatenate(([0], np.cumsum(hashes != np.uint64(NUMBER_WORD_HASH))))
    per_ngram = content[ngram_size:] - content[: len(ngrams)]
    return np.unique(ngrams[per_ngram >= MIN_CONTENT_WORDS])


def _content_words(hashes: U64) -> int:
    return int(np.count_nonzero(hashes != np.uint64(NUMBER_WORD_HASH)))


def _short_rule_hashes(item: EvalItem, ngram_size: int) -> tuple[_Hashed, _Hashed, _Hashed]:
    """Anchor, anchor-head and answer hashes (with their lengths in words) of a short item."""
    nothing: _Hashed = (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int32))
    filled = [values for values in item.values if values]
    if not filled:
        return nothing, nothing, nothing
    anchor_words = [
        words
        for words in (word_hashes(value) for value in filled[0])
        if len(words) < SHORT_ANCHOR_FACTOR * ngram_size
        and _content_words(words) >= MIN_CONTENT_WORDS
    ]
    if not anchor_words:
        return nothing, nothing, nothing
    # Answers keep their digits: with numbers masked, "2017" would be any number at all.
    answers = _sequence_hashes(
        word_hashes(value, mask_numbers=False)
        for values in filled[1:]
        for value in values
        if len(normalize_text(value, mask_numbers=False)) >= MIN_ANSWER_CHARS
    )
    if not len(answers[0]) and len(item.values) > 1:
        return nothing, nothing, nothing  # answers named, none with a word ("---"): no rule
    anchors = _sequence_hashes(anchor_words)
    heads = _sequence_hashes(w[:HEAD_WORDS] for w in anchor_words)
    return anchors, heads, answers


def _sequence_hashes(sequences: Iterable[U64]) -> _Hashed:
    seen: dict[int, int] = {}
    for words in sequences:
        if len(words):
            seen.setdefault(sequence_hash(words), len(words))
    return (
        np.fromiter(seen.keys(), dtype=np.uint64, count=len(seen)),
        np.fromiter(seen.values(), dtype=np.int32, count=len(seen)),
    )


def _concat(parts: Sequence[npt.NDArray[Any]], dtype: type[np.generic]) -> npt.NDArray[Any]:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)
