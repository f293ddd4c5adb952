"""The registry rows of all benchmarks read back into the hash lookups the matcher searches.

Reading checks the rows: built under this CONTAMINATION_RULES_VERSION, one n-gram size, every
item listed once and with all its n-gram rows. docs/contamination.md describes the tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.contamination.normalize import U64
from fm_assets.contamination.registry import (
    CONTAMINATION_RULES_VERSION,
    ITEMS_SCHEMA,
    NGRAM_SIZE,
    REGISTRY_SCHEMA,
    ROLES,
    from_stored,
)

I64 = npt.NDArray[np.int64]


class HashLookup:
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


@dataclass(frozen=True)
class RegistryLookups:
    """Every registered item, by its row in the items table, and the hashes each rule looks up.

    Items are named by row index everywhere below; `benchmarks` and `item_ids` turn a row back
    into the (benchmark, item_id) a match reports.
    """

    ngram_size: int
    benchmarks: tuple[str, ...]  # per item row
    item_ids: I64  # per item row
    ngram_counts: I64  # per item row: its distinct registered n-grams
    ngrams: HashLookup  # ngram rule
    anchors: HashLookup  # short rule: whole anchors ...
    anchor_lengths: tuple[int, ...]  # ... of these word counts, ascending
    heads: HashLookup  # ... looked up first by their first `head_length` words
    head_length: int  # 0: no item has the short rule
    answer_items: I64  # short rule: the answers, sorted by item row
    answer_hashes: U64
    answer_lengths: I64
    exact: HashLookup  # exact rule: whole non-empty items

    @property
    def item_count(self) -> int:
        """Number of registered items, empty ones included."""
        return len(self.item_ids)


def read_registry_rows(items: pa.Table, ngrams: pa.Table) -> RegistryLookups:
    """The lookups over `items` (ITEMS_SCHEMA) and `ngrams` (REGISTRY_SCHEMA) rows of all
    benchmarks; ValueError, saying how to rebuild, for rows this code cannot match with."""
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
    ngram_size = int(sizes.pop()) if sizes else NGRAM_SIZE
    benchmarks = tuple(items.column("benchmark").to_pylist())
    item_ids = np.asarray(items.column("item_id").to_numpy(), dtype=np.int64)
    ngram_counts = np.asarray(items.column("ngram_count").to_numpy(), dtype=np.int64)
    item_index = _item_index(items, ngrams)
    roles = _codes(ngrams.column("role"), list(ROLES))
    hashes = from_stored(ngrams.column("ngram_hash"))
    lengths = np.asarray(ngrams.column("length").to_numpy(), dtype=np.int64)

    is_ngram = roles == ROLES.index("ngram")
    if np.any(lengths[is_ngram] != ngram_size):
        raise ValueError(f"n-gram rows of another size than {ngram_size} in registry")
    found = np.bincount(item_index[is_ngram], minlength=items.num_rows)
    if np.any(found != ngram_counts):
        bad = int(np.flatnonzero(found != ngram_counts)[0])
        raise ValueError(
            f"registry item {benchmarks[bad]}:{int(item_ids[bad])} lists {ngram_counts[bad]} "
            f"n-grams but has {found[bad]} n-gram rows; rebuild its benchmark's registry"
        )

    is_anchor = roles == ROLES.index("anchor")
    is_head = roles == ROLES.index("anchor_head")
    is_answer = roles == ROLES.index("answer")
    order = np.argsort(item_index[is_answer], kind="stable")
    exact = from_stored(items.column("exact_hash"))
    nonempty = np.asarray(items.column("word_count").to_numpy()) > 0
    return RegistryLookups(
        ngram_size=ngram_size,
        benchmarks=benchmarks,
        item_ids=item_ids,
        ngram_counts=ngram_counts,
        ngrams=HashLookup(hashes[is_ngram], item_index[is_ngram]),
        anchors=HashLookup(hashes[is_anchor], item_index[is_anchor]),
        anchor_lengths=tuple(sorted({int(k) for k in lengths[is_anchor]})),
        heads=HashLookup(hashes[is_head], item_index[is_head]),
        head_length=int(lengths[is_head][0]) if is_head.any() else 0,
        answer_items=item_index[is_answer][order],
        answer_hashes=hashes[is_answer][order],
        answer_lengths=lengths[is_answer][order],
        exact=HashLookup(exact[nonempty], np.flatnonzero(nonempty).astype(np.int64)),
    )


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
