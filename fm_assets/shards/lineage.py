"""Sample lineage: which documents, and which token spans of them, each packed sample holds.

`sample_documents` has one row per segment of every sample of every shard set, partitioned by
shard set, written when the set is built (in the same order as its samples), so "what is in sample
N" and "which samples hold document D" are catalog queries, never scans of shards. A row's
[token_start, token_end) is the span inside the sample; doc_offset the span's start inside the
document's own tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.shards.packing import PackedSequence
from fm_assets.storage import catalog
from fm_assets.storage.tables import TableSpec, declare

SAMPLE_DOCUMENTS = pa.schema(
    [
        pa.field("shard_set_key", pa.string(), nullable=False),
        pa.field("sample", pa.int64(), nullable=False),  # global sample index in the shard set
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("token_start", pa.int64(), nullable=False),  # span inside the sample
        pa.field("token_end", pa.int64(), nullable=False),
        pa.field("doc_offset", pa.int64(), nullable=False),  # span start inside the document
    ]
)
declare(TableSpec("sample_documents", SAMPLE_DOCUMENTS, ("shard_set_key",)))


def lineage_rows(shard_set_key: str, sequences: Sequence[PackedSequence]) -> pa.Table:
    """The `sample_documents` rows of `sequences`, sample i being sequences[i]."""
    counts = np.fromiter((len(s.segments) for s in sequences), np.int64, count=len(sequences))
    doc_ids = [seg.doc_id for s in sequences for seg in s.segments]
    lengths = np.fromiter((seg.length for s in sequences for seg in s.segments), np.int64)
    offsets = np.fromiter((seg.doc_offset for s in sequences for seg in s.segments), np.int64)
    samples = np.repeat(np.arange(len(sequences), dtype=np.int64), counts)
    # Segments are concatenated in order inside a sample: a start is the running length of the
    # sample's earlier segments.
    ends = np.cumsum(lengths)
    sample_first = np.repeat(np.cumsum(counts) - counts, counts)
    before = np.concatenate([[0], ends])[sample_first]
    token_end = ends - before
    return pa.table(
        {
            "shard_set_key": pa.array([shard_set_key] * len(doc_ids), pa.string()),
            "sample": samples,
            "doc_id": pa.array(doc_ids, pa.string()),
            "token_start": token_end - lengths,
            "token_end": token_end,
            "doc_offset": offsets,
        },
        schema=SAMPLE_DOCUMENTS,
    )


def record_lineage(
    settings: Settings, shard_set_key: str, sequences: Sequence[PackedSequence]
) -> None:
    """Replace the shard set's lineage rows (one commit: a rebuild never mixes two packings)."""
    write_lineage(settings, shard_set_key, lineage_rows(shard_set_key, sequences))


def write_lineage(settings: Settings, shard_set_key: str, rows: pa.Table) -> None:
    """Replace the shard set's lineage partition with `rows`."""
    catalog.replace_rows(
        settings, "sample_documents", rows, catalog.where_equal("shard_set_key", shard_set_key)
    )


def shard_set_lineage(settings: Settings, shard_set_key: str) -> pa.Table:
    """Every lineage row of a shard set (empty if it was built before lineage was recorded)."""
    return catalog.read_table(
        settings, "sample_documents", catalog.where_equal("shard_set_key", shard_set_key)
    )


def sample_segments(settings: Settings, shard_set_key: str, sample: int) -> list[dict[str, Any]]:
    """The segments of one sample, in order; raises saying why when there are none."""
    rows = catalog.read_table(
        settings,
        "sample_documents",
        catalog.where_all(
            catalog.where_equal("shard_set_key", shard_set_key),
            catalog.where_equal("sample", sample),
        ),
    ).to_pylist()
    if not rows:
        known = catalog.read_table(
            settings,
            "sample_documents",
            catalog.where_equal("shard_set_key", shard_set_key),
            columns=("sample",),
        )
        if known.num_rows == 0:
            raise ValueError(
                f"no lineage is recorded for shard set {shard_set_key}: it does not exist, or "
                f"was built before lineage was recorded; rebuild it with `fm shards build`"
            )
        last = int(np.max(known.column("sample").to_numpy()))
        raise ValueError(f"{shard_set_key} has samples 0..{last}; there is no sample {sample}")
    return sorted(rows, key=lambda r: int(r["token_start"]))


def samples_holding(settings: Settings, doc_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Every lineage row, in every shard set, of the given documents."""
    if not doc_ids:
        return []
    rows = catalog.read_table(
        settings, "sample_documents", catalog.where_in("doc_id", sorted(set(doc_ids)))
    ).to_pylist()
    return sorted(rows, key=lambda r: (r["shard_set_key"], r["sample"], r["token_start"]))
