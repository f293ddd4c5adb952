"""Which rows a purge removes, as one mask over any table's rows.

A revocation names documents by one provenance column. By batch, source or licence it covers
whole landing batches (every row of those batches, in every table); by document or raw bytes it
covers each (batch, document) instance where the column matches. Tables that name no batch
(`sample_documents`, `contamination_flags`) lose the rows of documents whose kept copy (the row
in a final table) is purged: a copy of the same bytes kept from another, unrevoked batch stays,
as a revocation's replacement versions keep it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

_SEP = "\x1f"  # joins (batch, doc id) into one key: neither ever holds it


@dataclass
class PurgeScope:
    """What one data namespace loses in a purge."""

    namespace: str
    batches: set[str] = field(default_factory=set)  # every row of these batches
    pairs: set[tuple[str, str]] = field(default_factory=set)  # (batch_id, doc_id) instances
    documents: set[str] = field(default_factory=set)  # doc ids of purged kept documents

    @property
    def empty(self) -> bool:
        return not (self.batches or self.pairs or self.documents)

    def touched_batches(self) -> set[str]:
        """Every batch some row of which goes."""
        return self.batches | {batch for batch, _ in self.pairs}

    def doc_ids(self) -> set[str]:
        """Every document id the purge names (whole batches' are known only from their rows)."""
        return {doc_id for _, doc_id in self.pairs} | self.documents

    def merge(self, other: PurgeScope) -> None:
        self.batches |= other.batches
        self.pairs |= other.pairs
        self.documents |= other.documents


def pair_key(batch_id: str, doc_id: str) -> str:
    return f"{batch_id}{_SEP}{doc_id}"


def doomed_mask(rows: pa.Table, scope: PurgeScope) -> pa.Array:
    """Which of `rows` (any columns of any table) the purge removes."""
    names = set(rows.column_names)
    mask = pa.array([False] * rows.num_rows, pa.bool_())
    # Id columns are string in stage tables and large_string in some index files: one type.
    ids = {c: rows.column(c).cast(pa.string()) for c in ("batch_id", "doc_id") if c in names}
    if "batch_id" in names:
        batch = ids["batch_id"]
        if scope.batches:
            hit = pc.is_in(batch, pa.array(sorted(scope.batches), pa.string()))
            mask = pc.or_(mask, pc.fill_null(hit, False))
        if scope.pairs and "doc_id" in names:
            keys = pc.binary_join_element_wise(batch, ids["doc_id"], _SEP)
            wanted = pa.array(sorted(pair_key(b, d) for b, d in scope.pairs), pa.string())
            mask = pc.or_(mask, pc.fill_null(pc.is_in(keys, wanted), False))
    elif "doc_id" in names and scope.documents:
        hit = pc.is_in(ids["doc_id"], pa.array(sorted(scope.documents), pa.string()))
        mask = pc.or_(mask, pc.fill_null(hit, False))
    return mask


def columns_needed(names: list[str]) -> list[str]:
    """The columns `doomed_mask` reads of a table with columns `names`."""
    return [c for c in ("batch_id", "doc_id") if c in names]


def may_hold(names: list[str], scope: PurgeScope) -> bool:
    """Whether rows of a table with columns `names` can be purged at all."""
    if "batch_id" in names:
        return bool(scope.batches or (scope.pairs and "doc_id" in names))
    return "doc_id" in names and bool(scope.documents)
