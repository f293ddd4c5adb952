"""Sample lineage: which documents, and which token spans of them, each packed sample holds.

`sample_documents` has one row per segment of every sample of every shard set, partitioned by
shard set, written when the set is built (in the same order as its samples), so "what is in sample
N" and "which samples hold document D" are catalog queries, never scans of shards. A row's
[token_start, token_end) is the span inside the sample; doc_offset the span's start inside the
document's own tokens.

A row names a document, so it lives with the document: in `sample_documents` of the document's
data namespace. A shard set over several namespaces has rows in each; its readers read every
namespace its version holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import BooleanExpression

from fm_assets.settings import Settings
from fm_assets.shards.packing import PackedSequence
from fm_assets.storage import catalog
from fm_assets.storage.tables import TableSpec, declare
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.reader import version_documents

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
declare(TableSpec("sample_documents", SAMPLE_DOCUMENTS, ("shard_set_key",), per_namespace=True))


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
    settings: Settings,
    shard_set_key: str,
    sequences: Sequence[PackedSequence],
    version: DatasetVersion,
) -> None:
    """Replace the shard set's lineage rows (one commit per namespace: a rebuild never mixes two
    packings in one namespace, and a rebuild of the same version packs the same way)."""
    write_lineage(settings, shard_set_key, lineage_rows(shard_set_key, sequences), version)


def write_lineage(
    settings: Settings, shard_set_key: str, rows: pa.Table, version: DatasetVersion
) -> None:
    """Replace the shard set's lineage partition with `rows`, each in the `sample_documents` of
    its document's data namespace (among those `version` holds)."""
    namespaces = version.namespaces
    if len(namespaces) == 1:
        parts = {namespaces[0]: rows}
    else:
        held = version_documents(settings, version, version.pipeline.final, ("doc_id", "namespace"))
        owner = dict(
            zip(
                held.column("doc_id").to_pylist(), held.column("namespace").to_pylist(), strict=True
            )
        )
        stray = sorted(set(rows.column("doc_id").to_pylist()) - set(owner))
        if stray:
            raise ValueError(
                f"shard set {shard_set_key} holds {len(stray)} documents {version.version_key} "
                f"does not (first {stray[0]}); rebuild it with `fm shards build`"
            )
        of_row = pa.array([owner[d] for d in rows.column("doc_id").to_pylist()], pa.string())
        parts = {ns: rows.filter(pc.equal(of_row, ns)) for ns in namespaces}
    for namespace, part in parts.items():
        catalog.replace_rows(
            settings,
            "sample_documents",
            part,
            catalog.where_equal("shard_set_key", shard_set_key),
            namespace=namespace,
        )


def _read_lineage(
    settings: Settings,
    version: DatasetVersion,
    where: BooleanExpression,
    columns: tuple[str, ...] | None = None,
) -> pa.Table:
    return catalog.read_namespaces(
        settings, "sample_documents", list(version.namespaces), where, columns
    )


def shard_set_lineage(settings: Settings, shard_set_key: str, version: DatasetVersion) -> pa.Table:
    """Every lineage row of a shard set of `version` (empty if it was built before lineage was
    recorded)."""
    return _read_lineage(settings, version, catalog.where_equal("shard_set_key", shard_set_key))


def sample_segments(
    settings: Settings, shard_set_key: str, sample: int, version: DatasetVersion
) -> list[dict[str, Any]]:
    """The segments of one sample of a shard set of `version`, in order; raises saying why when
    there are none."""
    rows = _read_lineage(
        settings,
        version,
        catalog.where_all(
            catalog.where_equal("shard_set_key", shard_set_key),
            catalog.where_equal("sample", sample),
        ),
    ).to_pylist()
    if not rows:
        known = _read_lineage(
            settings, version, catalog.where_equal("shard_set_key", shard_set_key), ("sample",)
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
    """Every lineage row, in every shard set of every data namespace, of the given documents."""
    if not doc_ids:
        return []
    rows = catalog.read_namespaces(
        settings,
        "sample_documents",
        catalog.data_namespaces(settings),
        catalog.where_in("doc_id", sorted(set(doc_ids))),
    ).to_pylist()
    return sorted(rows, key=lambda r: (r["shard_set_key"], r["sample"], r["token_start"]))
