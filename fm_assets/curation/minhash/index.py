"""The near-duplicate index: band hash -> kept document, confirmed by exact Jaccard; and the
persisted `neardup_index` table it loads from and appends to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.curation.minhash.shingles import U64
from fm_assets.curation.minhash.signatures import BatchSketch, MinHashConfig, jaccard, sketch
from fm_assets.storage.tables import TableSpec, declare

I64 = npt.NDArray[np.int64]

# Persisted near-duplicate index: one row per (kept document, band), and one per kept document
# holding its shingle set. Hashes are uint64 bits stored as int64 (Iceberg has no unsigned
# types); view them back with `.view(np.uint64)`.
NEARDUP_INDEX_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        # 0 .. bands-1: a band hash row. Below 0: the document's shingle-set row, in "band"
        # -1 - bucket (`shingle_set_band`), so a reader of band rows never reads it.
        pa.field("band", pa.int32(), nullable=False),
        pa.field("band_hash", pa.int64(), nullable=False),  # band index mixed in; 0 on a set row
        # The document's sorted, unique shingle hashes: on its shingle-set row (older platform
        # versions put them on its band-0 row), null otherwise, so scans that only need the
        # band lookup can skip the column.
        pa.field("shingle_hashes", pa.list_(pa.int64()), nullable=True),
        pa.field("index_config", pa.string(), nullable=False),  # MinHashConfig.index_config
    ]
)

# Set on a `neardup_index` table whose kept documents' shingle sets are its own rows of negative
# band. Tables this version creates carry it; an older one gets it when the separate
# `neardup_shingles` table of the versions before has been moved in
# (`execution.near_dedup.migration`).
SHINGLE_SETS_PROPERTY = "fm.shingle-sets"
SHINGLE_SETS_IN_INDEX = "index-rows"


def shingle_set_band(bucket: int) -> int:
    """The `band` of a shingle-set row of a document of `bucket` (`bucket` >= 0)."""
    return -1 - bucket


# The near-duplicate index of one data namespace: band hashes and shingle sets of every kept
# document of every batch landed into it (each namespace keeps its own, like every table naming
# documents). Unpartitioned, so that the small files of many batches can be compacted into
# one (`execution.near_dedup.compaction`): each file is sorted by band (shingle-set rows
# first, by bucket and document id), and a scan for one band, or for the shingle sets of
# some buckets, skips the files (and row groups) whose band statistics exclude it. Files of
# older platform versions sit under the (batch_id, band) spec until compaction rewrites them;
# their band-0 rows may carry the document's shingle set.
declare(
    TableSpec(
        "neardup_index",
        pa.schema([pa.field("batch_id", pa.string(), nullable=False), *NEARDUP_INDEX_SCHEMA]),
        (),
        per_namespace=True,
        properties=((SHINGLE_SETS_PROPERTY, SHINGLE_SETS_IN_INDEX),),
    ),
)


# doc_ids -> their shingle hashes (any order, uint64 or their int64 bits), for documents whose
# index rows were loaded without the `shingle_hashes` column.
ShinglesLookup = Callable[[Sequence[str]], Sequence[npt.ArrayLike]]


@dataclass(frozen=True)
class DupDecision:
    """`duplicate_of` is the kept document with the highest exact Jaccard ≥ threshold, else
    None; `jaccard` is that best candidate's exact Jaccard (0.0 without candidates)."""

    doc_id: str
    duplicate_of: str | None
    jaccard: float
    num_shingles: int

    @property
    def is_duplicate(self) -> bool:
        return self.duplicate_of is not None


class NearDupIndex:
    """Band hash → kept document, plus each kept document's shingle set for confirmation.

    Load earlier batches with `from_rows`/`add_rows` (NEARDUP_INDEX_SCHEMA rows), run
    `find_duplicates` per batch, append `new_index_rows()` to the persistent table. A document
    id already in the index is kept again without new rows, so a retried batch is harmless.

    Memory: the band lookup costs 16 bytes per (document, band); shingle sets 8 bytes per word.
    To hold only the lookup, load rows without `shingle_hashes` and pass `shingles_of`: it is
    called once per batch with the candidates whose shingles are not in memory yet.
    """

    def __init__(
        self, config: MinHashConfig | None = None, shingles_of: ShinglesLookup | None = None
    ) -> None:
        self.config = config or MinHashConfig()
        self._shingles_of = shingles_of
        self._doc_ids: list[str] = []
        self._number: dict[str, int] = {}
        self._shingles: list[U64 | None] = []
        self._runs: list[tuple[U64, I64]] = []  # sorted band hashes, their document numbers
        self._new: list[tuple[int, U64]] = []  # kept here: (document number, band hashes)

    @classmethod
    def from_rows(
        cls,
        rows: pa.Table,
        config: MinHashConfig | None = None,
        shingles_of: ShinglesLookup | None = None,
    ) -> NearDupIndex:
        index = cls(config, shingles_of)
        index.add_rows(rows)
        return index

    def __len__(self) -> int:
        return len(self._doc_ids)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._number

    def add_rows(self, rows: pa.Table) -> None:
        """Index documents kept by earlier batches from NEARDUP_INDEX_SCHEMA rows."""
        missing = {"doc_id", "band", "band_hash"} - set(rows.column_names)
        if missing:
            raise ValueError(f"index rows lack columns {sorted(missing)}; see NEARDUP_INDEX_SCHEMA")
        if rows.num_rows == 0:
            return
        if "index_config" in rows.column_names:
            found = set(pc.unique(rows.column("index_config")).to_pylist())
            if found != {self.config.index_config}:
                raise ValueError(
                    f"index rows were built with {sorted(map(str, found))}, this index uses "
                    f"{self.config.index_config!r}; rebuild the near-dup index under this config"
                )
        bands = rows.column("band").to_numpy()
        if bands.max() >= self.config.bands:
            raise ValueError(f"index rows have bands outside 0..{self.config.bands - 1}")
        set_rows = bands < 0  # a document's shingle-set row: no band hash to look up
        if set_rows.any() and "shingle_hashes" not in rows.column_names:
            raise ValueError("shingle-set index rows (band < 0) lack their shingle_hashes")
        encoded = pc.dictionary_encode(rows.column("doc_id").combine_chunks())
        numbers = np.array([self._number_of(d) for d in encoded.dictionary.to_pylist()])
        docs = numbers[encoded.indices.to_numpy()].astype(np.int64)
        hashes = rows.column("band_hash").to_numpy().astype(np.int64).view(np.uint64)
        self._add_run(hashes[~set_rows], docs[~set_rows])
        if "shingle_hashes" in rows.column_names:
            lists = rows.column("shingle_hashes").combine_chunks()
            offsets = lists.offsets.to_numpy()
            values = lists.values.to_numpy()
            present = np.flatnonzero(lists.is_valid().to_numpy(zero_copy_only=False))
            for row in present.tolist():
                stored = values[offsets[row] : offsets[row + 1]]
                self._shingles[int(docs[row])] = _as_shingle_set(stored)

    def find_duplicates(self, doc_ids: Sequence[str], texts: Sequence[str]) -> list[DupDecision]:
        """Decide a batch in order; kept documents join the index (later ones dedup against
        them). Duplicate ids within the batch are rejected."""
        if len(doc_ids) != len(texts):
            raise ValueError(f"{len(doc_ids)} doc_ids but {len(texts)} texts")
        return self.decide(doc_ids, sketch(texts, self.config))

    def decide(self, doc_ids: Sequence[str], batch: BatchSketch) -> list[DupDecision]:
        """`find_duplicates` on a sketch made elsewhere (e.g. by parallel workers)."""
        shingles, bands = batch.shingles, batch.bands
        if not len(doc_ids) == len(shingles) == bands.shape[0]:
            raise ValueError(f"{len(doc_ids)} doc_ids for a sketch of {len(shingles)} texts")
        if bands.shape[1] != self.config.bands:
            raise ValueError(f"sketch has {bands.shape[1]} bands, the index {self.config.bands}")
        if len(set(doc_ids)) != len(doc_ids):
            raise ValueError("doc_ids repeat within the batch; run exact deduplication first")
        for doc_id in doc_ids:
            if not isinstance(doc_id, str):
                raise TypeError(f"doc_ids must be str, got {type(doc_id).__name__}")
        active = [i for i, s in enumerate(shingles) if s.size and doc_ids[i] not in self._number]
        earlier = self._earlier_candidates(bands, active)
        self._fetch_shingles(sorted({c for found in earlier.values() for c in found}))
        shared = self._shared_in_batch(bands, active)

        decisions: list[DupDecision] = []
        new_before = len(self._new)
        kept_here: dict[int, list[int]] = {}  # band hash shared in this batch -> kept numbers
        for i, (doc_id, own) in enumerate(zip(doc_ids, shingles, strict=True)):
            if own.size == 0 or doc_id in self._number:
                decisions.append(DupDecision(doc_id, None, 0.0, int(own.size)))
                continue
            candidates = set(earlier.get(i, ()))
            for h in shared.get(i, ()):
                candidates.update(kept_here.get(h, ()))
            best, best_j = -1, 0.0
            for c in sorted(candidates):
                j = jaccard(own, self._candidate_shingles(c))
                if j > best_j:
                    best, best_j = c, j
            if best >= 0 and best_j >= self.config.threshold:
                decisions.append(DupDecision(doc_id, self._doc_ids[best], best_j, int(own.size)))
                continue
            number = self._number_of(doc_id)
            self._shingles[number] = own
            self._new.append((number, bands[i]))
            for h in shared.get(i, ()):
                kept_here.setdefault(h, []).append(number)
            decisions.append(DupDecision(doc_id, None, best_j, int(own.size)))
        added = self._new[new_before:]
        if added:
            numbers = np.repeat(np.array([n for n, _ in added]), self.config.bands)
            self._add_run(np.concatenate([h for _, h in added]), numbers)
        return decisions

    def new_index_rows(self) -> pa.Table:
        """NEARDUP_INDEX_SCHEMA rows of every document `find_duplicates` kept in this index
        (rows loaded with `add_rows` are not repeated)."""
        count, bands = len(self._new), self.config.bands
        if count == 0:
            return NEARDUP_INDEX_SCHEMA.empty_table()
        sets = [self._candidate_shingles(n) for n, _ in self._new]
        lengths = np.zeros(count * bands, dtype=np.int64)
        lengths[0::bands] = [s.size for s in sets]
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        if offsets[-1] >= 2**31:
            raise ValueError("over 2**31 shingles in one index append; call per smaller batch")
        band = np.tile(np.arange(bands, dtype=np.int32), count)
        shingle_lists = pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)),
            pa.array(np.concatenate(sets).view(np.int64)),
            mask=pa.array(band != 0),
        )
        ids = [self._doc_ids[n] for n, _ in self._new]
        columns = [
            pa.array(np.repeat(np.array(ids, dtype=object), bands), pa.string()),
            pa.array(band),
            pa.array(np.concatenate([h for _, h in self._new]).view(np.int64)),
            shingle_lists,
            pa.array([self.config.index_config] * (count * bands), pa.string()),
        ]
        return pa.Table.from_arrays(columns, schema=NEARDUP_INDEX_SCHEMA)

    # -- internals

    def _number_of(self, doc_id: str) -> int:
        number = self._number.get(doc_id)
        if number is None:
            number = self._number[doc_id] = len(self._doc_ids)
            self._doc_ids.append(doc_id)
            self._shingles.append(None)
        return number

    def _add_run(self, hashes: U64, docs: I64) -> None:
        # Runs of geometrically shrinking size: O(log n) runs to search, each entry re-sorted
        # O(log n) times over the index's life, instead of re-sorting everything per batch.
        order = np.argsort(hashes, kind="stable")
        self._runs.append((hashes[order], docs[order]))
        while len(self._runs) > 1 and 2 * self._runs[-1][0].size >= self._runs[-2][0].size:
            (h1, d1), (h2, d2) = self._runs.pop(), self._runs.pop()
            merged = np.concatenate((h2, h1))
            order = np.argsort(merged, kind="stable")
            self._runs.append((merged[order], np.concatenate((d2, d1))[order]))

    def _earlier_candidates(self, bands: U64, active: list[int]) -> dict[int, set[int]]:
        """Batch position -> numbers of indexed documents sharing a band hash with it."""
        found: dict[int, set[int]] = {}
        if not active or not self._runs:
            return found
        query = bands[active].ravel()
        position = np.repeat(np.array(active), self.config.bands)
        for hashes, docs in self._runs:
            lo = np.searchsorted(hashes, query, side="left")
            hi = np.searchsorted(hashes, query, side="right")
            for q in np.flatnonzero(hi > lo).tolist():
                found.setdefault(int(position[q]), set()).update(docs[lo[q] : hi[q]].tolist())
        return found

    def _shared_in_batch(self, bands: U64, active: list[int]) -> dict[int, list[int]]:
        """Batch position -> its band hashes that another document of the batch also has."""
        if len(active) < 2:
            return {}
        values, counts = np.unique(bands[active].ravel(), return_counts=True)
        repeated = values[counts > 1]
        shared: dict[int, list[int]] = {}
        hit = np.isin(bands[active], repeated)
        for row in np.flatnonzero(hit.any(axis=1)).tolist():
            shared[active[row]] = bands[active[row]][hit[row]].tolist()
        return shared

    def _fetch_shingles(self, numbers: list[int]) -> None:
        missing = [n for n in numbers if self._shingles[n] is None]
        if not missing:
            return
        ids = [self._doc_ids[n] for n in missing]
        if self._shingles_of is None:
            raise ValueError(
                f"index rows for {ids[:3]} carry no shingle_hashes and no shingles_of lookup "
                "was given; load the shingle_hashes column or pass shingles_of"
            )
        fetched = self._shingles_of(ids)
        if len(fetched) != len(ids):
            raise ValueError(f"shingles_of returned {len(fetched)} sets for {len(ids)} doc_ids")
        for number, values in zip(missing, fetched, strict=True):
            self._shingles[number] = _as_shingle_set(np.asarray(values))

    def _candidate_shingles(self, number: int) -> U64:
        shingles = self._shingles[number]
        if shingles is None:
            raise RuntimeError(f"shingles of {self._doc_ids[number]} were not fetched")
        return shingles


def _as_shingle_set(values: npt.NDArray[np.generic]) -> U64:
    """Sorted unique uint64 from stored values (int64 bits or uint64)."""
    out = values.view(np.uint64) if values.dtype == np.int64 else values.astype(np.uint64)
    if out.size > 1 and not bool(np.all(out[1:] > out[:-1])):
        out = np.unique(out)
    return out
