"""A shard set rebuilt for a revocation's replacement version, rewriting only what must change.

Packing is kept: every sample keeps its place and the segments of documents that stay, so a shard
holding no revoked document is copied byte for byte, and only shards holding one are rewritten
(their samples lose the revoked segments and pad the rest; a sample left empty is dropped). The
new set has its own manifest, index.json and lineage; the report says how many bytes were
rewritten out of the set's total. A set built before lineage was recorded is rebuilt whole.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.execution.compute import Progress
from fm_assets.registries.tokenizers import find_tokenizer
from fm_assets.settings import Settings
from fm_assets.shards.build import (
    build_shard_set,
    register_shard_set,
    sequences_with_tokens,
    shard_set_key,
    shard_set_prefix,
    version_tokens,
)
from fm_assets.shards.lineage import (
    SAMPLE_DOCUMENTS,
    lineage_rows,
    shard_set_lineage,
    write_lineage,
)
from fm_assets.shards.packing import PackedSequence, Segment
from fm_assets.shards.writer import ShardSetHeader, write_shard_set
from fm_assets.storage.objectstore import ObjectStore, open_object_store
from fm_assets.versions.dataset_version import DatasetVersion, namespaces_of, require_version
from fm_loader.manifest import INDEX_NAME, MANIFEST_NAME, ShardInfo, ShardSetManifest
from fm_loader.provenance import NAMESPACES_NAME, namespaces_json


@dataclass(frozen=True)
class Rebuilt:
    """A replacement shard set and what building it cost."""

    shard_set_key: str
    bytes_rewritten: int
    bytes_total: int
    shards_rewritten: int
    shards_total: int


def rebuild_without(
    settings: Settings,
    old_row: dict[str, Any],
    replacement: DatasetVersion,
    revoked: set[str],
    progress: Progress = lambda message: None,
) -> Rebuilt:
    """Build `old_row`'s shard set for `replacement`, which lacks the `revoked` documents."""
    tokenizer = find_tokenizer(settings, str(old_row["tokenizer_hash"]))
    if tokenizer is None:
        raise ValueError(
            f"tokenizer {old_row['tokenizer_hash']} of {old_row['shard_set_key']} is not "
            "registered; register it with `fm tokenizer register PATH`, then run `fm revoke` again"
        )
    seq_len = int(old_row["seq_len"])
    config = str(old_row["shard_config"])
    old_version = require_version(settings, str(old_row["version_key"]))
    lineage = shard_set_lineage(settings, str(old_row["shard_set_key"]), old_version)
    if lineage.num_rows == 0:
        progress(f"{old_row['shard_set_key']} has no lineage: rebuilding it whole")
        built = build_shard_set(settings, replacement.version_key, tokenizer, seq_len)
        size = sum(s.bytes for s in built.manifest.shards)
        n = len(built.manifest.shards)
        return Rebuilt(built.manifest.shard_set_key, size, size, n, n)

    store = open_object_store(settings)
    old_prefix = store.key_of(str(old_row["uri"]))
    old = ShardSetManifest.from_json(store.read_bytes(f"{old_prefix}/{MANIFEST_NAME}").decode())
    old_index = json.loads(store.read_bytes(f"{old_prefix}/{INDEX_NAME}"))
    new_key = shard_set_key(replacement.version_key, config)
    namespaces = namespaces_of(settings, replacement)
    new_prefix = shard_set_prefix(replacement.version_key, config, namespaces)
    header = ShardSetHeader(
        shard_set_key=new_key,
        source_version=replacement.version_key,
        version_content_hash=replacement.content_hash,
        tokenizer_hash=old.tokenizer_hash,
        pipeline_version=old.pipeline_version,
    )
    lineage = lineage.take(
        pc.sort_indices(lineage, [("sample", "ascending"), ("token_start", "ascending")])
    )
    samples = lineage.column("sample").to_numpy()
    hit = pc.is_in(lineage.column("doc_id"), pa.array(sorted(revoked))).to_numpy(
        zero_copy_only=False
    )
    bounds = np.cumsum([0] + [s.samples for s in old.shards])
    affected = {int(i) for i in np.searchsorted(bounds, samples[hit], side="right") - 1}
    in_affected = np.isin(np.searchsorted(bounds, samples, side="right") - 1, list(affected))
    needed = sorted(set(lineage.column("doc_id").filter(pa.array(in_affected & ~hit)).to_pylist()))
    docs = version_tokens(settings, replacement, tokenizer, progress)
    docs = docs.filter(pc.is_in(docs.column("doc_id"), pa.array(needed, pa.string())))

    # Unpublish first, as a build does: a reader never pairs an old manifest with new shards.
    store.delete_file(f"{new_prefix}/{MANIFEST_NAME}")
    store.delete_dir(new_prefix)
    store.makedirs(new_prefix)
    infos: list[ShardInfo] = []
    entries: list[dict[str, Any]] = []
    parts: list[pa.Table] = []
    rewritten = 0
    with tempfile.TemporaryDirectory(prefix="fm-revision-") as staging:
        for i, shard in enumerate(old.shards):
            first, last = int(bounds[i]), int(bounds[i + 1])
            lo, hi = np.searchsorted(samples, [first, last])
            rows = lineage.slice(lo, hi - lo)
            base = sum(s.samples for s in infos)
            if i not in affected:
                store.fs.copy_file(
                    store.path(f"{old_prefix}/{shard.name}"),
                    store.path(f"{new_prefix}/{shard.name}"),
                )
                infos.append(shard)
                entries.append(old_index["shards"][i])
                shifted = pc.add(pc.subtract(rows.column("sample"), first), base)
                parts.append(
                    rows.set_column(
                        0, "shard_set_key", pa.array([new_key] * rows.num_rows)
                    ).set_column(1, "sample", shifted)
                )
                continue
            sequences = _without(rows, revoked)
            if not sequences:
                progress(f"{shard.name}: every sample held only revoked documents; dropped")
                continue
            info, entry = _rewrite_shard(
                store, sequences, docs, old, header, shard.name, Path(staging) / str(i), new_prefix
            )
            infos.append(info)
            entries.append(entry)
            rewritten += info.bytes
            new_rows = lineage_rows(new_key, sequences)
            parts.append(new_rows.set_column(1, "sample", pc.add(new_rows.column("sample"), base)))
    if not infos:
        raise ValueError(f"every sample of {old_row['shard_set_key']} held revoked documents")

    store.write_bytes_atomic(
        f"{new_prefix}/{INDEX_NAME}",
        json.dumps({**old_index, "shards": entries}, sort_keys=True).encode(),
    )
    new_lineage = pa.concat_tables([part.cast(SAMPLE_DOCUMENTS) for part in parts])
    num_samples = sum(s.samples for s in infos)
    num_tokens = sum(s.tokens for s in infos)
    manifest = dataclasses.replace(
        old,
        shard_set_key=new_key,
        source_version=replacement.version_key,
        version_content_hash=replacement.content_hash,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        num_samples=num_samples,
        num_tokens=num_tokens,
        num_documents=len(pc.unique(new_lineage.column("doc_id"))),
        packing_efficiency=num_tokens / (num_samples * seq_len),
        shards=tuple(infos),
    )
    store.write_bytes_atomic(
        f"{new_prefix}/{NAMESPACES_NAME}",
        namespaces_json(namespaces).encode(),
    )
    # The manifest last: its presence publishes the set.
    store.write_bytes_atomic(f"{new_prefix}/{MANIFEST_NAME}", manifest.to_json().encode())
    write_lineage(settings, new_key, new_lineage, replacement)
    register_shard_set(
        settings,
        store,
        new_key,
        new_prefix,
        replacement.version_key,
        old.tokenizer_hash,
        seq_len,
        manifest,
        None,
    )
    total = sum(s.bytes for s in infos)
    progress(
        f"{new_key}: rewrote {len(affected)} of {len(old.shards)} shards, "
        f"{rewritten} of {total} bytes"
    )
    return Rebuilt(new_key, rewritten, total, len(affected), len(old.shards))


def _without(rows: pa.Table, revoked: set[str]) -> list[PackedSequence]:
    """The samples of `rows` (lineage, sorted) less their revoked segments; empty ones dropped."""
    segments: dict[int, list[Segment]] = {}
    for sample, doc_id, start, end, offset in zip(
        rows.column("sample").to_pylist(),
        rows.column("doc_id").to_pylist(),
        rows.column("token_start").to_pylist(),
        rows.column("token_end").to_pylist(),
        rows.column("doc_offset").to_pylist(),
        strict=True,
    ):
        kept = segments.setdefault(sample, [])
        if doc_id not in revoked:
            kept.append(Segment(doc_id, offset, end - start))
    return [PackedSequence(tuple(s)) for _, s in sorted(segments.items()) if s]


def _rewrite_shard(
    store: ObjectStore,
    sequences: list[PackedSequence],
    docs: pa.Table,
    old: ShardSetManifest,
    header: ShardSetHeader,
    name: str,
    out: Path,
    new_prefix: str,
) -> tuple[ShardInfo, dict[str, Any]]:
    """Write `sequences` (tokens from `docs`) as one shard named `name` of the new set; return
    its ShardInfo and index.json entry."""
    written = write_shard_set(
        sequences_with_tokens(sequences, docs),
        str(out),
        seq_len=old.seq_len,
        vocab_size=old.vocab_size,
        pad_token_id=old.pad_token_id,
        header=header,
        # A shard loses samples here, never gains any: the original limit keeps it one shard.
        size_limit_bytes=max(64 << 20, old.shards[0].bytes + 1),
    )
    if len(written.shards) != 1:
        raise RuntimeError(f"rewriting {name} gave {len(written.shards)} shards, expected one")
    index = json.loads((out / INDEX_NAME).read_text())
    entry = index["shards"][0]
    entry["raw_data"]["basename"] = name
    store.upload_file(out / written.shards[0].name, f"{new_prefix}/{name}")
    return dataclasses.replace(written.shards[0], name=name), entry
