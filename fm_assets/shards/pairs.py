"""Image-text shard sets: an image-text version's pairs as MDS shards, one pair per sample,
grouped by aspect bucket (`fm_loader.format.pair_set` is the on-disk contract).

A pair's caption tokens are its version's (or, for another tokenizer, the caption tokenized
now), cut to `seq_len` tokens; its image is stored as the platform re-encoded it
(`decoded_pairs`: the resize policy ran once, before sharding). Pairs are ordered by aspect
bucket and shuffled inside each bucket with a seed from the version's content hash, so the same
version and config always give byte-identical shards. Each sample's lineage row names its pair,
so `fm lineage sample` leads from a sample to the tar member or Parquet row it was landed in.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.curation.images.aspect import ASPECT_BUCKETS, aspect_bucket
from fm_assets.execution.compute import Progress, ensure_ray, process_on_ray, ray_cpus, split_rows
from fm_assets.registries.tokenizers import TokenizerInfo
from fm_assets.settings import PIPELINE_VERSION, Settings
from fm_assets.shards.build import (
    ShardSetBuild,
    pad_token_id,
    read_shard_set_row,
    register_shard_set,
    shard_config_key,
    shard_set_key,
    shard_set_prefix,
    write_and_publish,
)
from fm_assets.shards.lineage import record_lineage
from fm_assets.shards.mds import MDSShardWriter, NDArrayEncoding
from fm_assets.shards.packing import PackedSequence, Segment
from fm_assets.shards.writer import token_dtype_for, write_atomic
from fm_assets.stages.image_text.captions import CaptionTokenizeStage
from fm_assets.stages.tokenize import load_tokenizer
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import DatasetVersion, namespaces_of
from fm_loader.format.manifest import MANIFEST_NAME, ShardInfo, ShardSetManifest
from fm_loader.format.pair_set import (
    PAIR_MANIFEST_FORMAT_VERSION,
    BucketInfo,
    PairSetManifest,
    pair_columns,
    pair_schema_fingerprint,
)
from fm_loader.sources.provenance import NAMESPACES_NAME, namespaces_json

PAIR_COLUMNS = ("doc_id", "tokens", "image", "width", "height", "image_format")


@dataclass(frozen=True)
class Pair:
    doc_id: str
    tokens: np.ndarray  # caption tokens, cut to seq_len
    image: bytes
    width: int
    height: int
    bucket: int


def version_pairs(
    settings: Settings, version: DatasetVersion, tokenizer: TokenizerInfo, progress: Progress
) -> pa.Table:
    """PAIR_COLUMNS of the version's pairs, caption tokens under `tokenizer` (the stored ones,
    or the captions tokenized now on Ray)."""
    from fm_assets.versions.reader import version_documents

    final = version.pipeline.final
    if tokenizer.tokenizer_hash == version.tokenizer_hash:
        return version_documents(settings, version, final, PAIR_COLUMNS)
    progress(f"tokenizing the captions of {version.version_key} with {tokenizer.name}")
    pairs = version_documents(settings, version, version.pipeline.text_table)
    stage = CaptionTokenizeStage(
        tokenizer_hash=tokenizer.tokenizer_hash,
        tokenizer_uri=tokenizer.uri,
        s3_endpoint=settings.s3_endpoint,
    )
    ensure_ray(settings)
    result = process_on_ray(stage, split_rows(pairs, ray_cpus()), progress)
    return result.kept.select(list(PAIR_COLUMNS))


def ordered_pairs(rows: pa.Table, seq_len: int, seed: int) -> list[Pair]:
    """The pairs by aspect bucket, shuffled inside each bucket by `seed` (doc ids sorted first:
    the order never depends on how the rows were read)."""
    rows = rows.take(pc.sort_indices(rows, sort_keys=[("doc_id", "ascending")]))
    tokens = rows.column("tokens").combine_chunks()
    flat = tokens.values.to_numpy(zero_copy_only=False)
    offsets = tokens.offsets.to_numpy()
    pairs: list[list[Pair]] = [[] for _ in ASPECT_BUCKETS]
    columns = zip(
        *(rows.column(c).to_pylist() for c in ("doc_id", "image", "width", "height")), strict=True
    )
    for row, (doc_id, image, width, height) in enumerate(columns):
        bucket = aspect_bucket(width, height).index
        start, end = int(offsets[row]), int(offsets[row + 1])
        cut = flat[start : min(end, start + seq_len)]
        pairs[bucket].append(Pair(doc_id, cut, image, width, height, bucket))
    ordered: list[Pair] = []
    for index, bucket_pairs in enumerate(pairs):
        random.Random(seed * 31 + index).shuffle(bucket_pairs)
        ordered += bucket_pairs
    return ordered


def write_pair_set(
    pairs: list[Pair],
    directory: Path,
    manifest_fields: dict[str, object],
    token_dtype: str,
    size_limit: int,
) -> PairSetManifest:
    """Write `pairs` as MDS shards into `directory`, then `fm_manifest.json` (written last)."""
    if not pairs:
        raise ValueError("no pairs to write: a shard set needs at least one sample")
    columns = pair_columns(token_dtype)
    writer = MDSShardWriter(directory, columns, size_limit)
    ids, geometry = NDArrayEncoding(columns["input_ids"]), NDArrayEncoding(columns["geometry"])
    dtype = np.dtype(token_dtype)
    tokens_per_sample = []
    for pair in pairs:
        writer.write(
            {
                "doc_id": pair.doc_id.encode("utf-8"),
                "geometry": geometry.encode(
                    np.array([pair.width, pair.height, pair.bucket], np.int32)
                ),
                "image": pair.image,
                "input_ids": ids.encode(pair.tokens.astype(dtype)),
            }
        )
        tokens_per_sample.append(len(pair.tokens))
    index_shards = writer.finish()
    cumulative = np.concatenate([[0], np.cumsum(tokens_per_sample, dtype=np.int64)])
    shards, first = [], 0
    for shard in index_shards:
        raw, samples = shard["raw_data"], int(shard["samples"])
        tokens = int(cumulative[first + samples] - cumulative[first])
        shards.append(
            ShardInfo(raw["basename"], raw["hashes"]["sha256"], int(raw["bytes"]), samples, tokens)
        )
        first += samples
    counts = np.bincount([p.bucket for p in pairs], minlength=len(ASPECT_BUCKETS))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    manifest = PairSetManifest(
        **manifest_fields,  # type: ignore[arg-type]
        num_samples=len(pairs),
        num_tokens=int(cumulative[-1]),
        num_documents=len(pairs),
        packing_efficiency=1.0,
        shards=tuple(shards),
        max_image_bytes=max(len(p.image) for p in pairs),
        buckets=tuple(
            BucketInfo(b.index, b.name, b.ratio, int(starts[b.index]), int(counts[b.index]))
            for b in ASPECT_BUCKETS
        ),
    )
    manifest.check_consistency()
    manifest.check_buckets()
    write_atomic(directory / MANIFEST_NAME, manifest.to_json())
    return manifest


def build_pair_set(
    settings: Settings,
    version: DatasetVersion,
    tokenizer: TokenizerInfo,
    seq_len: int,
    *,
    run_id: str | None = None,
    progress: Progress = lambda message: None,
    shard_size_bytes: int = 64 << 20,
) -> ShardSetBuild:
    """The image-text shard set of `version` for `tokenizer`, captions cut to `seq_len` tokens:
    written, published and registered (or found, when built already)."""
    config = shard_config_key(tokenizer.tokenizer_hash, seq_len)
    key = shard_set_key(version.version_key, config)
    store = open_object_store(settings)
    existing = read_shard_set_row(settings, key)
    prefix = (
        store.key_of(str(existing["uri"]))
        if existing is not None
        else shard_set_prefix(version.version_key, config, namespaces_of(settings, version))
    )
    if existing is not None and store.exists(f"{prefix}/{MANIFEST_NAME}"):
        built = PairSetManifest.from_json(store.read_bytes(f"{prefix}/{MANIFEST_NAME}").decode())
        if built.version_content_hash == version.content_hash:
            progress(f"{key}: already built, nothing to do")
            expected = int(existing["num_tokens"])  # checked when the set was built
            return ShardSetBuild(built, store.uri(prefix), expected, created=False)
    rows = version_pairs(settings, version, tokenizer, progress)
    formats = set(rows.column("image_format").to_pylist())
    if len(formats) > 1:
        raise ValueError(
            f"{version.version_key} holds images in {sorted(formats)}: its batches were decoded "
            "under different resize policies; rerun them under one (`fm run --batch ID`)"
        )
    # What the set must hold, from the version's rows (the check compares the shards to it).
    expected_tokens = int(
        pc.sum(pc.min_element_wise(pc.list_value_length(rows["tokens"]), seq_len)).as_py() or 0
    )
    pairs = ordered_pairs(rows, seq_len, int(version.content_hash[:16], 16) ^ seq_len)
    progress(f"writing {len(pairs)} image-text pairs in {len(ASPECT_BUCKETS)} aspect buckets")
    tok = load_tokenizer(tokenizer.uri, tokenizer.tokenizer_hash, settings.s3_endpoint)
    token_dtype = token_dtype_for(tokenizer.vocab_size)
    fields: dict[str, object] = {
        "format_version": PAIR_MANIFEST_FORMAT_VERSION,
        "shard_set_key": key,
        "source_version": version.version_key,
        "version_content_hash": version.content_hash,
        "tokenizer_hash": tokenizer.tokenizer_hash,
        "vocab_size": tokenizer.vocab_size,
        "token_dtype": token_dtype,
        "pad_token_id": pad_token_id(tok),
        "seq_len": seq_len,
        "schema_fingerprint": pair_schema_fingerprint(token_dtype),
        "pipeline_version": PIPELINE_VERSION,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "image_format": formats.pop() if formats else "jpeg",
        "max_side": _max_side(pairs),
    }
    namespaces = namespaces_of(settings, version)

    def write(out_dir: str) -> ShardSetManifest:
        written = write_pair_set(pairs, Path(out_dir), fields, token_dtype, shard_size_bytes)
        (Path(out_dir) / NAMESPACES_NAME).write_text(namespaces_json(namespaces))
        return written

    manifest = write_and_publish(store, prefix, write, progress)
    record_lineage(settings, key, list(_segments(pairs)), version)
    register_shard_set(
        settings,
        store,
        key,
        prefix,
        version.version_key,
        tokenizer.tokenizer_hash,
        seq_len,
        manifest,
        run_id,
    )
    return ShardSetBuild(manifest, store.uri(prefix), expected_tokens, created=True)


def _max_side(pairs: list[Pair]) -> int:
    return max((max(p.width, p.height) for p in pairs), default=0)


def _segments(pairs: list[Pair]) -> Iterator[PackedSequence]:
    """One segment per sample: the whole (cut) caption of its pair."""
    for pair in pairs:
        yield PackedSequence((Segment(pair.doc_id, 0, max(len(pair.tokens), 1)),))
