"""Shard sets: a dataset version packed into fixed-length sequences and written as MDS shards.

Partition key: (version, shard config); a shard config is `<tokenizer hash[:12]>-s<seq_len>`.
Documents are ordered by doc_id (a hash: deterministic and unrelated to ingestion order), packed
best-fit-decreasing, and the packed sequences are shuffled with a seed derived from the version's
content hash, so the same version and config always give byte-identical shards.

A set lives at `shards/<dataset>/v<N>/<config>/` in the object store, and `fm_manifest.json` is
always its last file: its presence publishes the set. On a local store the MDS writer writes there
directly; on S3 it writes a local staging directory whose files are then uploaded, the
manifest last.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.execution import pipeline
from fm_assets.execution.compute import Progress, ensure_ray, process_on_ray, ray_cpus, split_rows
from fm_assets.registries.tokenizers import TokenizerInfo
from fm_assets.settings import PIPELINE_VERSION, Settings
from fm_assets.shards.lineage import record_lineage
from fm_assets.shards.packing import PackedSequence, pack_documents, packing_efficiency
from fm_assets.shards.writer import ShardSetHeader, write_shard_set
from fm_assets.stages.tokenize import TokenizeStage, eos_token_id, load_tokenizer
from fm_assets.storage import catalog
from fm_assets.storage.landing import TEXT_MODALITY
from fm_assets.storage.objectstore import ObjectStore, open_object_store
from fm_assets.versions.dataset_version import (
    DatasetVersion,
    namespaces_of,
    parse_version_key,
    require_version,
)
from fm_assets.versions.reader import version_documents
from fm_assets.versions.revocation import replacement_of
from fm_loader.format.manifest import MANIFEST_NAME, ShardSetManifest, parse_manifest
from fm_loader.sources.provenance import NAMESPACES_NAME, namespaces_json

_CONFIG = re.compile(r"^(?P<tok>[0-9a-f]{12})-s(?P<seq>[1-9][0-9]*)$")
PAD_CANDIDATES = ("<|padding|>", "<pad>", "[PAD]")
UPLOAD_THREADS = 8  # parallel shard uploads: one S3 PUT stream is far below a link's bandwidth


@dataclass(frozen=True)
class ShardSetBuild:
    manifest: ShardSetManifest
    uri: str
    documents_tokens: int  # tokens of the version's documents under this tokenizer
    created: bool


def shard_set_prefix(version_key: str, config: str, namespaces: Sequence[str]) -> str:
    """Where a shard set lives inside the object store (its dataset card in `card/` below).

    Below the data namespaces its documents come from (`shards/cloud/web/v3/<config>`, or
    `shards/cloud.web-unverified/...` for a version holding both), so a bucket policy can let a
    trainer read exactly the namespaces it may (`deploy/iam/`).
    """
    dataset, number = parse_version_key(version_key)
    held = ".".join(sorted(namespaces)) or "none"
    return f"shards/{held}/{dataset}/v{number}/{config}"


def shard_config_key(tokenizer_hash: str, seq_len: int) -> str:
    if seq_len < 8:
        raise ValueError(f"--seq-len must be at least 8, got {seq_len}")
    return f"{tokenizer_hash[:12]}-s{seq_len}"


def parse_shard_config(key: str) -> tuple[str, int]:
    match = _CONFIG.match(key)
    if not match:
        raise ValueError(
            f"{key!r} is not a shard config; expected <tokenizer hash[:12]>-s<seq_len>"
        )
    return match["tok"], int(match["seq"])


def shard_set_key(version_key: str, config: str) -> str:
    return f"{version_key}/{config}"


def pad_token_id(tokenizer: object) -> int:

    for token in PAD_CANDIDATES:
        token_id = tokenizer.token_to_id(token)  # type: ignore[attr-defined]
        if token_id is not None:
            return int(token_id)
    eos = eos_token_id(tokenizer)
    return 0 if eos is None else eos


def version_tokens(
    settings: Settings, version: DatasetVersion, tokenizer: TokenizerInfo, progress: Progress
) -> pa.Table:
    """(doc_id, tokens) of the version under `tokenizer`: stored tokens, or tokenized now on Ray."""
    if tokenizer.tokenizer_hash == version.tokenizer_hash:
        return version_documents(settings, version, "tokenized_documents", ("doc_id", "tokens"))
    progress(f"tokenizing {version.version_key} with {tokenizer.name} (not its stored tokenizer)")
    normalized = version_documents(settings, version, pipeline.STAGE_NAMES[-2])
    stage = TokenizeStage(
        tokenizer_hash=tokenizer.tokenizer_hash,
        tokenizer_uri=tokenizer.uri,
        s3_endpoint=settings.s3_endpoint,
    )
    ensure_ray(settings)
    result = process_on_ray(stage, split_rows(normalized, ray_cpus()), progress)
    return result.kept.select(["doc_id", "tokens"])


def sequences_with_tokens(
    sequences: list[PackedSequence], docs: pa.Table
) -> Iterator[tuple[PackedSequence, np.ndarray[Any, Any]]]:
    """Each sequence with its tokens, sliced from `docs` (doc_id, tokens) as its segments name."""
    tokens = docs.column("tokens").combine_chunks()
    flat = tokens.values.to_numpy(zero_copy_only=False)
    offsets = tokens.offsets.to_numpy()
    row_of = {doc_id: i for i, doc_id in enumerate(docs.column("doc_id").to_pylist())}
    for sequence in sequences:
        parts = []
        for segment in sequence.segments:
            start = offsets[row_of[segment.doc_id]] + segment.doc_offset
            parts.append(flat[start : start + segment.length])
        yield sequence, np.concatenate(parts) if parts else np.empty(0, dtype=np.int32)


def read_shard_set_row(settings: Settings, key: str) -> dict[str, Any] | None:
    rows = catalog.read_table(
        settings, "shard_sets", row_filter=catalog.where_equal("shard_set_key", key)
    )
    rows_list = rows.to_pylist()
    return max(rows_list, key=lambda r: r["created_at"]) if rows_list else None


def refuse_revoked(settings: Settings, version_key: str) -> None:
    """ValueError naming the replacement when a version is revoked: no new set is built from it."""
    revoked = replacement_of(settings, version_key)
    if revoked is not None:
        instead = (
            f"build {revoked['replacement']} instead"
            if revoked["replacement"]
            else ("every document of it was revoked")
        )
        raise ValueError(
            f"{version_key} is revoked ({revoked['revocation_id']}): no new shard set is built "
            f"from it; {instead}"
        )


def build_shard_set(
    settings: Settings,
    version_key: str,
    tokenizer: TokenizerInfo,
    seq_len: int,
    *,
    run_id: str | None = None,
    progress: Progress = lambda message: None,
    shard_size_bytes: int = 64 << 20,
) -> ShardSetBuild:
    """Pack a version with `tokenizer` into `seq_len` sequences; write and register the shards
    (each shard file at most about `shard_size_bytes`)."""

    version = require_version(settings, version_key)
    refuse_revoked(settings, version_key)
    if version.modality != TEXT_MODALITY:
        # Its own layout: one pair per sample, by aspect bucket (imports this module).
        from fm_assets.shards.pairs import build_pair_set

        return build_pair_set(
            settings,
            version,
            tokenizer,
            seq_len,
            run_id=run_id,
            progress=progress,
            shard_size_bytes=shard_size_bytes,
        )
    config = shard_config_key(tokenizer.tokenizer_hash, seq_len)
    key = shard_set_key(version_key, config)
    store = open_object_store(settings)
    namespaces = namespaces_of(settings, version)
    existing = read_shard_set_row(settings, key)
    # A set built already stays where it was written (an older platform laid sets out otherwise).
    prefix = (
        store.key_of(str(existing["uri"]))
        if existing is not None
        else shard_set_prefix(version_key, config, namespaces)
    )
    manifest_key = f"{prefix}/{MANIFEST_NAME}"
    if existing is not None and store.exists(manifest_key):
        manifest = parse_manifest(store.read_bytes(manifest_key).decode("utf-8"))
        if manifest.version_content_hash == version.content_hash:
            progress(f"{key}: already built, nothing to do")
            docs_tokens = int(existing["num_tokens"])
            return ShardSetBuild(manifest, store.uri(prefix), docs_tokens, created=False)

    docs = version_tokens(settings, version, tokenizer, progress)
    docs = docs.take(pc.sort_indices(docs, sort_keys=[("doc_id", "ascending")]))
    lengths = pc.list_value_length(docs.column("tokens")).to_numpy(zero_copy_only=False)
    documents_tokens = int(lengths.sum())
    seed = int(version.content_hash[:16], 16) ^ seq_len
    progress(
        f"packing {docs.num_rows} documents ({documents_tokens} tokens) "
        f"into {seq_len}-token sequences"
    )
    sequences = pack_documents(
        list(zip(docs.column("doc_id").to_pylist(), lengths.tolist(), strict=True)),
        seq_len,
        shuffle_seed=seed,
    )
    progress(
        f"packed {len(sequences)} sequences, "
        f"efficiency {packing_efficiency(sequences, seq_len):.4f}"
    )
    tok = load_tokenizer(tokenizer.uri, tokenizer.tokenizer_hash, settings.s3_endpoint)
    header = ShardSetHeader(
        shard_set_key=key,
        source_version=version_key,
        version_content_hash=version.content_hash,
        tokenizer_hash=tokenizer.tokenizer_hash,
        pipeline_version=PIPELINE_VERSION,
    )

    def write(out_dir: str) -> ShardSetManifest:
        written = write_shard_set(
            sequences_with_tokens(sequences, docs),
            out_dir,
            seq_len=seq_len,
            vocab_size=tokenizer.vocab_size,
            pad_token_id=pad_token_id(tok),
            header=header,
            size_limit_bytes=shard_size_bytes,
        )
        # What make_dataset(namespaces=...) checks; on S3 it is uploaded before the manifest.
        (Path(out_dir) / NAMESPACES_NAME).write_text(namespaces_json(namespaces))
        return written

    manifest = write_and_publish(store, prefix, write, progress)
    # Before the set's row: a registered set always has its lineage.
    record_lineage(settings, key, sequences, version)
    register_shard_set(
        settings,
        store,
        key,
        prefix,
        version_key,
        tokenizer.tokenizer_hash,
        seq_len,
        manifest,
        run_id,
    )
    return ShardSetBuild(manifest, store.uri(prefix), documents_tokens, created=True)


def register_shard_set(
    settings: Settings,
    store: ObjectStore,
    key: str,
    prefix: str,
    version_key: str,
    tokenizer_hash: str,
    seq_len: int,
    manifest: ShardSetManifest,
    run_id: str | None,
) -> None:
    """Append the `shard_sets` row of the set published at `prefix`: what `make_dataset`
    resolves."""
    config = shard_config_key(tokenizer_hash, seq_len)
    manifest_key = f"{prefix}/{MANIFEST_NAME}"
    row = {
        "shard_set_key": key,
        "version_key": version_key,
        "shard_config": config,
        "tokenizer_hash": tokenizer_hash,
        "seq_len": seq_len,
        "uri": store.uri(prefix),
        # Hash what readers will fetch, not what we meant to publish.
        "manifest_sha256": hashlib.sha256(store.read_bytes(manifest_key)).hexdigest(),
        "num_samples": manifest.num_samples,
        "num_tokens": manifest.num_tokens,
        "run_id": run_id,
        "created_at": dt.datetime.now(dt.UTC),
    }
    catalog.append_rows(settings, "shard_sets", pa.Table.from_pylist([row]))


def write_and_publish(
    store: ObjectStore,
    prefix: str,
    write: Callable[[str], ShardSetManifest],
    progress: Progress,
) -> ShardSetManifest:
    """Run `write(directory)` so that the set appears at `prefix`, its manifest last."""
    # Unpublish first: a reader must never pair an old manifest with new shards. Then clear
    # what a failed or superseded build left, so the set holds exactly the new files.
    store.delete_file(f"{prefix}/{MANIFEST_NAME}")
    store.delete_dir(prefix)
    if store.is_local:
        # MDSWriter writes index.json at finish and the writer adds the manifest after it.
        return write(store.path(prefix))
    with tempfile.TemporaryDirectory(prefix="fm-shard-staging-") as staging:
        local = Path(staging) / "set"
        manifest = write(str(local))
        progress(f"uploading {len(manifest.shards)} shards to {store.uri(prefix)}")
        upload_shard_set(store, local, prefix)
    return manifest


def upload_shard_set(
    store: ObjectStore, local: Path, prefix: str, manifest_name: str = MANIFEST_NAME
) -> None:
    """Upload a complete local set to `prefix`: every file, then its manifest (`fm_manifest.json`
    of a shard set, `fm_text_manifest.json` of a text set).

    The manifest goes up only after every other object is confirmed at its full size, so its
    presence in the store means the set is complete (S3 has no directory rename).
    """
    manifest_file = local / manifest_name
    if not manifest_file.is_file():
        raise ValueError(f"{local} holds no {manifest_name}: refusing to upload a partial set")
    files = sorted(p for p in local.iterdir() if p.is_file() and p.name != manifest_name)
    with ThreadPoolExecutor(max_workers=UPLOAD_THREADS) as pool:
        # list(): re-raise the first failed upload here, before anything is published.
        list(pool.map(lambda p: store.upload_file(p, f"{prefix}/{p.name}"), files))
    for path in files:
        size = store.size(f"{prefix}/{path.name}")
        if size != path.stat().st_size:
            raise RuntimeError(
                f"upload of {path.name} to {store.uri(prefix)} left {size} bytes, expected "
                f"{path.stat().st_size}; the set stays unpublished: rerun `fm shards build`"
            )
    store.upload_file(manifest_file, f"{prefix}/{manifest_name}")
