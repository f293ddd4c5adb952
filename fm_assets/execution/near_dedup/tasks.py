"""The Ray tasks of distributed near-deduplication; `execution.near_dedup.run` orchestrates them.

Positions: a document's place in the batch order is `slice << 32 | row`, so sorting positions
sorts the batch as the slices read it. A document is *active* when it has shingles; only active
documents are candidates, duplicates or index entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyiceberg.table import FileScanTask

from fm_assets.curation.minhash.signatures import MinHashConfig, jaccard, sketch
from fm_assets.execution.near_dedup.index_reads import (
    indexed_elsewhere,
    other_batches_rows,
    stored_shingles,
)
from fm_assets.execution.near_dedup.layout import distinct
from fm_assets.execution.planning import tables_by_part
from fm_assets.storage.data_files import TableHandle, read_files

SHINGLE_BUCKETS = 16
# A band hash shared by a huge cluster of a batch's documents would make quadratic pairs; each
# document is compared with the first this-many documents of its batch holding the same hash
# (its cluster's first, kept, document is among them).
MAX_IN_BATCH_PARTNERS = 1_000

BAND_ROWS = pa.schema(
    [
        pa.field("band_hash", pa.int64(), nullable=False),  # uint64 bits
        pa.field("pos", pa.int64(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
    ]
)
SHINGLES = pa.schema(
    [
        pa.field("pos", pa.int64(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("shingle_hashes", pa.list_(pa.int64()), nullable=False),
    ]
)
PAIRS = pa.schema(
    [
        pa.field("pos", pa.int64(), nullable=False),
        pa.field("partner_pos", pa.int64(), nullable=False),  # -1: a document of another batch
        pa.field("partner_doc", pa.string(), nullable=False),
        pa.field("partner_batch", pa.string(), nullable=False),
    ]
)
CONFIRMED = pa.schema([*PAIRS, pa.field("jaccard", pa.float64(), nullable=False)])
DUPLICATES = pa.schema(
    [
        pa.field("pos", pa.int64(), nullable=False),
        pa.field("duplicate_of", pa.string(), nullable=False),
        pa.field("batch", pa.string(), nullable=False),
        pa.field("jaccard", pa.float64(), nullable=False),
    ]
)


def shingle_bucket(doc_id: str) -> int:
    return int(doc_id[8:16], 16) % SHINGLE_BUCKETS


def sketch_slice(
    source: TableHandle, tasks: list[FileScanTask], slice_no: int, config: MinHashConfig
) -> tuple[Any, ...]:
    """(row count, one BAND_ROWS table per band, one SHINGLES table per bucket) of a slice."""
    return sketch_rows(read_files(source, tasks, ("doc_id", "text")), slice_no, config)


def sketch_rows(docs: pa.Table, slice_no: int, config: MinHashConfig) -> tuple[Any, ...]:
    """`sketch_slice` of a slice's rows already read (`doc_id` and `text` columns at least)."""
    made = sketch(docs.column("text").to_pylist(), config)
    doc_ids = docs.column("doc_id").to_pylist()
    active = [i for i, s in enumerate(made.shingles) if s.size]
    pos = np.array([(slice_no << 32) | i for i in active], dtype=np.int64)
    ids = pa.array([doc_ids[i] for i in active], pa.string())
    bands = made.bands[active].view(np.int64) if active else np.zeros((0, config.bands), np.int64)
    band_tables = [
        pa.table({"band_hash": bands[:, b], "pos": pos, "doc_id": ids}, schema=BAND_ROWS)
        for b in range(config.bands)
    ]
    buckets = np.array([shingle_bucket(doc_ids[i]) for i in active], dtype=np.int64)
    shingles = pa.table(
        {
            "pos": pos,
            "doc_id": ids,
            "shingle_hashes": pa.array(
                [made.shingles[i].view(np.int64) for i in active], pa.list_(pa.int64())
            ),
        },
        schema=SHINGLES,
    )
    bucket_tables = [shingles.filter(pa.array(buckets == k)) for k in range(SHINGLE_BUCKETS)]
    return (docs.num_rows, *band_tables, *bucket_tables)


def band_candidates(
    bands: Sequence[int],
    others: TableHandle,
    other_files: Sequence[FileScanTask],
    batch_id: str,
    routes: int,
    check_indexed: bool,
    *tables: pa.Table,
) -> tuple[Any, ...]:
    """Candidate pairs of a group of bands (`tables`: each band's slice tables in turn, band by
    band; `other_files`: the index's files, of which only the row groups holding the batch's
    band hashes are read): (preexisting positions, then pairs routed by the slice of `pos`),
    the bands' answers merged. The task that `check_indexed` also looks up which of the
    batch's documents another batch indexed already (one task does, for all bands)."""
    earlier = other_batches_rows(others, other_files, bands, batch_id, tables)
    indexed = (
        indexed_elsewhere(
            others, other_files, distinct(list(tables), "doc_id", pa.string()), batch_id
        )
        if check_indexed
        else set()
    )
    return candidates_among(bands, earlier, indexed, batch_id, routes, *tables)


def candidates_among(
    bands: Sequence[int],
    earlier: pa.Table,
    indexed: set[str],
    batch_id: str,
    routes: int,
    *tables: pa.Table,
) -> tuple[Any, ...]:
    """`band_candidates` given other batches' rows sharing the bands' hashes
    (`other_batches_rows`) and the batch's documents other batches indexed (`indexed`)."""
    band_of_row = earlier.column("band").to_numpy()
    found = [
        _one_band_candidates(
            band,
            earlier.filter(pa.array(band_of_row == band)),
            indexed,
            batch_id,
            routes,
            *band_tables,
        )
        for band, band_tables in tables_by_part(bands, tables)
    ]
    preexisting = pa.concat_arrays([f[0] for f in found]) if found else pa.array([], pa.int64())
    routed = [
        pa.concat_tables([f[1 + r] for f in found]) if found else PAIRS.empty_table()
        for r in range(routes)
    ]
    return (preexisting, *routed)


def _one_band_candidates(
    band: int,
    earlier: pa.Table,
    indexed: set[str],
    batch_id: str,
    routes: int,
    *tables: pa.Table,
) -> tuple[Any, ...]:
    """Candidate pairs sharing one band's hash (`earlier`: other batches' rows of the band
    sharing one of its hashes): (this batch's preexisting positions, then pairs routed by the
    slice of `pos`). A document whose id another batch already indexed (`indexed`) is
    *preexisting*: kept as it is, without new index rows."""
    batch = pa.concat_tables(tables) if tables else BAND_ROWS.empty_table()
    ids = batch.column("doc_id").to_pylist()
    preexisting = sorted(
        {p for p, d in zip(batch.column("pos").to_pylist(), ids, strict=True) if d in indexed}
    )
    pairs: list[dict[str, object]] = []
    by_hash: dict[int, list[tuple[str, str]]] = {}
    for doc, h, b in zip(
        *(earlier.column(c).to_pylist() for c in ("doc_id", "band_hash", "batch_id")), strict=True
    ):
        by_hash.setdefault(h, []).append((doc, b))
    in_batch: dict[int, list[tuple[int, str]]] = {}  # the first MAX_IN_BATCH_PARTNERS per hash
    rows = batch.sort_by("pos")
    for h, pos, doc in zip(
        *(rows.column(c).to_pylist() for c in ("band_hash", "pos", "doc_id")), strict=True
    ):
        for other_doc, other_batch in by_hash.get(h, ()):
            if other_doc != doc:
                pairs.append(
                    {
                        "pos": pos,
                        "partner_pos": -1,
                        "partner_doc": other_doc,
                        "partner_batch": other_batch,
                    }
                )
        for other_pos, other_doc in in_batch.get(h, ()):
            pairs.append(
                {
                    "pos": pos,
                    "partner_pos": other_pos,
                    "partner_doc": other_doc,
                    "partner_batch": batch_id,
                }
            )
        earlier_here = in_batch.setdefault(h, [])
        if len(earlier_here) < MAX_IN_BATCH_PARTNERS:
            earlier_here.append((pos, doc))
    table = pa.Table.from_pylist(pairs, schema=PAIRS)
    route = (table.column("pos").to_numpy() >> 32) % routes
    routed = [table.filter(pa.array(route == r)) for r in range(routes)]
    return (pa.array(preexisting, pa.int64()), *routed)


def confirm_pairs(
    slice_no: int,
    config: MinHashConfig,
    shingle_refs: list[list[Any]],
    index: TableHandle,
    index_files: list[FileScanTask],
    *pair_tables: pa.Table,
) -> pa.Table:
    """The pairs of this slice's documents whose exact shingle Jaccard reaches the threshold.

    `shingle_refs[slice][bucket]` are the batch's shingle tables (object references, fetched
    only where a partner lives, or the tables themselves); other batches' shingle sets come
    from their rows in `index_files` (`stored_shingles`).
    """
    import ray

    pairs = pa.concat_tables(pair_tables) if pair_tables else PAIRS.empty_table()
    mine = (pairs.column("pos").to_numpy() >> 32) == slice_no
    pairs = pairs.filter(pa.array(mine)).group_by(PAIRS.names).aggregate([])  # one per pair
    if pairs.num_rows == 0:
        return CONFIRMED.empty_table()
    need: set[tuple[int, int]] = {(slice_no, k) for k in range(SHINGLE_BUCKETS)}
    for partner_pos, doc in zip(
        pairs.column("partner_pos").to_pylist(),
        pairs.column("partner_doc").to_pylist(),
        strict=True,
    ):
        if partner_pos >= 0:
            need.add((partner_pos >> 32, shingle_bucket(doc)))
    shingles_of_pos: dict[int, np.ndarray[Any, Any]] = {}
    for s, k in sorted(need):
        held = shingle_refs[s][k]  # a reference, or the table itself in a one-task run
        table = held if isinstance(held, pa.Table) else ray.get(held)
        for p, values in zip(
            table.column("pos").to_pylist(),
            table.column("shingle_hashes").to_numpy(zero_copy_only=False),
            strict=True,
        ):
            shingles_of_pos[p] = np.asarray(values, dtype=np.int64).view(np.uint64)
    outside = sorted(
        {
            d
            for d, p in zip(
                pairs.column("partner_doc").to_pylist(),
                pairs.column("partner_pos").to_pylist(),
                strict=True,
            )
            if p < 0
        }
    )
    shingles_of_doc = stored_shingles(index, index_files, outside)
    confirmed = []
    for row in pairs.to_pylist():
        own = shingles_of_pos[row["pos"]]
        other = (
            shingles_of_pos.get(row["partner_pos"])
            if row["partner_pos"] >= 0
            else shingles_of_doc.get(row["partner_doc"])
        )
        if other is None:
            raise RuntimeError(
                f"no shingles stored for near-dup candidate {row['partner_doc']}; rebuild the index"
            )
        j = jaccard(own, other)
        if j >= config.threshold:
            confirmed.append({**row, "jaccard": j})
    return pa.Table.from_pylist(confirmed, schema=CONFIRMED)


def resolve(preexisting: Sequence[pa.Array], *confirmed: pa.Table) -> tuple[pa.Table, int]:
    """Decide the batch in order: a document is a duplicate of its best confirmed partner that is
    kept (another batch's, or an earlier kept one of this batch). Ties: another batch's document
    first, then the lowest id or position."""
    skip = {p for array in preexisting for p in array.to_pylist()}
    pairs = pa.concat_tables(confirmed) if confirmed else CONFIRMED.empty_table()
    by_pos: dict[int, list[dict[str, Any]]] = {}
    for row in pairs.to_pylist():
        by_pos.setdefault(row["pos"], []).append(row)
    duplicates: dict[int, dict[str, Any]] = {}
    for pos in sorted(by_pos):
        if pos in skip:
            continue
        eligible = [
            r
            for r in by_pos[pos]
            if r["partner_pos"] < 0
            or (r["partner_pos"] not in duplicates and r["partner_pos"] not in skip)
        ]
        if not eligible:
            continue
        best = min(
            eligible,
            key=lambda r: (
                -r["jaccard"],
                r["partner_pos"] >= 0,
                r["partner_doc"],
                r["partner_pos"],
            ),
        )
        duplicates[pos] = {
            "pos": pos,
            "duplicate_of": best["partner_doc"],
            "batch": best["partner_batch"],
            "jaccard": best["jaccard"],
        }
    table = pa.Table.from_pylist(list(duplicates.values()), schema=DUPLICATES)
    return table, table.num_rows
