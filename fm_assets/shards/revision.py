"""A shard set rebuilt for a revocation's replacement version, rewriting only what must change.

Packing is kept: every sample keeps its place and the segments of documents that stay, so a shard
holding no revoked document is copied byte for byte, and only shards holding one are rewritten
(their samples lose the revoked segments and pad the rest; a sample left empty is dropped). The
new set has its own manifest, index.json and lineage; `revision_cost` says how many bytes were
rewritten out of the set's total. A set built before lineage was recorded is rebuilt whole.

`build_version_shard_set` is what the `shard_set` asset builds with: a replacement version's set
is revised from its base's set of the same config, any other set packed afresh.
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
from fm_assets.registries.tokenizers import TokenizerInfo, find_tokenizer
from fm_assets.settings import Settings
from fm_assets.shards.build import (
    ShardSetBuild,
    build_shard_set,
    read_shard_set_row,
    refuse_revoked,
    register_shard_set,
    sequences_with_tokens,
    shard_config_key,
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
from fm_assets.versions.membership import revoked_exclusions
from fm_assets.versions.revocation import replaced_base
from fm_loader.format.manifest import (
    INDEX_NAME,
    MANIFEST_NAME,
    ShardInfo,
    ShardSetManifest,
    parse_manifest,
)
from fm_loader.sources.provenance import NAMESPACES_NAME, namespaces_json


@dataclass(frozen=True)
class RevisionCost:
    """What a replacement shard set rewrote of its base's: the rest was copied byte for byte."""

    bytes_rewritten: int
    bytes_total: int
    shards_rewritten: int  # base shards not copied unchanged (rewritten or dropped)
    shards_total: int  # the base's shards


def revision_cost(old: ShardSetManifest, new: ShardSetManifest) -> RevisionCost:
    """Compare a base set's manifest with its replacement's, shard by shard."""
    kept = {(s.name, s.sha256) for s in old.shards}
    rewritten = [s for s in new.shards if (s.name, s.sha256) not in kept]
    unchanged = {(s.name, s.sha256) for s in new.shards} & kept
    return RevisionCost(
        bytes_rewritten=sum(s.bytes for s in rewritten),
        bytes_total=sum(s.bytes for s in new.shards),
        shards_rewritten=len(old.shards) - len(unchanged),
        shards_total=len(old.shards),
    )


def build_version_shard_set(
    settings: Settings,
    version_key: str,
    tokenizer: TokenizerInfo,
    seq_len: int,
    *,
    run_id: str | None = None,
    progress: Progress = lambda message: None,
) -> ShardSetBuild:
    """The shard set of a version for a tokenizer and seq_len: revised from the set of the same
    config of the version it replaces (a revocation's replacement), else packed afresh; an
    existing set is found, not rebuilt."""
    version = require_version(settings, version_key)
    config = shard_config_key(tokenizer.tokenizer_hash, seq_len)
    # An image-text set is rebuilt whole from the replacement version: one pair per sample,
    # nothing packed to keep, and its shards are written in bucket order from the version.
    base = _revision_base(settings, version, config) if version.modality == "text" else None
    if base is None or read_shard_set_row(settings, shard_set_key(version_key, config)):
        # Also what refuses a revoked version, naming its replacement.
        return build_shard_set(
            settings, version_key, tokenizer, seq_len, run_id=run_id, progress=progress
        )
    refuse_revoked(settings, version_key)
    revoked = set(revoked_exclusions(settings, version_key, version.namespaces))
    return rebuild_without(settings, base, version, revoked, progress, run_id=run_id)


def _revision_base(
    settings: Settings, version: DatasetVersion, config: str
) -> dict[str, Any] | None:
    """The `shard_sets` row of `config` of the version `version` replaces, if any."""
    base = replaced_base(settings, version.version_key)
    if base is None:
        return None
    return read_shard_set_row(settings, shard_set_key(base.version_key, config))


def rebuild_without(
    settings: Settings,
    old_row: dict[str, Any],
    replacement: DatasetVersion,
    revoked: set[str],
    progress: Progress = lambda message: None,
    *,
    run_id: str | None = None,
) -> ShardSetBuild:
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
        return build_shard_set(
            settings, replacement.version_key, tokenizer, seq_len, run_id=run_id, progress=progress
        )

    store = open_object_store(settings)
    old_prefix = store.key_of(str(old_row["uri"]))
    old = parse_manifest(store.read_bytes(f"{old_prefix}/{MANIFEST_NAME}").decode())
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
    documents_tokens = int(pc.sum(pc.list_value_length(docs.column("tokens"))).as_py() or 0)
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
        run_id,
    )
    total = sum(s.bytes for s in infos)
    progress(
        f"{new_key}: rewrote {len(affected)} of {len(old.shards)} shards, "
        f"{rewritten} of {total} bytes"
    )
    return ShardSetBuild(manifest, store.uri(new_prefix), documents_tokens, created=True)


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
