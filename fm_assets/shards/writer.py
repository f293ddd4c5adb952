"""Write packed, tokenized sequences as an MDS shard set plus the `fm_manifest.json` contract.

Layout of a shard set directory:

    shard.00000.mds ... shard.NNNNN.mds   MDS shards (`shards.mds`: MDSWriter's bytes)
    index.json                            MDS index (columns, per-shard sizes and sha256)
    fm_manifest.json                      our manifest, written last: present == complete

The MDS columns are the on-disk contract with `fm_loader` (see
`fm_loader.format.manifest.mds_columns`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fm_assets.settings import PIPELINE_VERSION
from fm_assets.shards.mds import MDSShardWriter, NDArrayEncoding
from fm_assets.shards.packing import PackedSequence
from fm_loader.format.manifest import (
    INDEX_NAME,
    MANIFEST_FORMAT_VERSION,
    MANIFEST_NAME,
    ShardInfo,
    ShardSetManifest,
    local_directory,
    mds_columns,
    schema_fingerprint,
)
from fm_loader.format.mds import defer_streaming_packages

_DOC_ID = re.compile(r"[0-9a-f]{64}")
_INT32_MAX = np.iinfo(np.int32).max


@dataclass(frozen=True)
class ShardSetHeader:
    """What the caller knows about a shard set before writing it."""

    shard_set_key: str  # "<version_key>/<tokenizer hash[:12]>-s<seq_len>"
    source_version: str  # dataset version key, e.g. "web@v1"
    version_content_hash: str
    tokenizer_hash: str  # sha256 of the tokenizer.json bytes
    pipeline_version: str = PIPELINE_VERSION


def token_dtype_for(vocab_size: int) -> str:
    """The smallest dtype for token ids: "uint16" up to 65,536 ids, else "uint32"."""
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    if vocab_size <= 1 << 16:
        return "uint16"
    if vocab_size <= 1 << 32:
        return "uint32"
    raise ValueError(f"vocab_size {vocab_size} does not fit uint32 token ids")


def sequence_tokens(
    sequence: PackedSequence, doc_tokens: Mapping[str, npt.NDArray[Any]]
) -> npt.NDArray[Any]:
    """Concatenate the token slices a packed sequence names, in segment order."""
    parts = [
        np.asarray(doc_tokens[s.doc_id][s.doc_offset : s.doc_offset + s.length])
        for s in sequence.segments
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class SampleEncoder:
    """Turns (sequence, tokens) into one MDS sample dict, validating against the contract."""

    def __init__(self, seq_len: int, vocab_size: int, pad_token_id: int, token_dtype: str) -> None:
        self.seq_len = seq_len
        self.vocab_size = vocab_size
        self.pad_token_id = pad_token_id
        self.dtype = np.dtype(token_dtype)
        self.columns = mds_columns(seq_len, token_dtype)
        self._input_ids = NDArrayEncoding(self.columns["input_ids"])
        self._doc_spans = NDArrayEncoding(self.columns["doc_spans"])

    def encode(
        self, number: int, sequence: PackedSequence, tokens: npt.NDArray[Any]
    ) -> dict[str, bytes]:
        segments = sequence.segments
        if not segments:
            raise ValueError(f"sequence {number} has no segments; the packer never emits one")
        spans: list[int] = []
        start = 0
        for segment in segments:
            if not _DOC_ID.fullmatch(segment.doc_id):
                raise ValueError(f"sequence {number}: doc id {segment.doc_id!r} is not 64-hex")
            if not 0 < segment.length <= _INT32_MAX - segment.doc_offset or segment.doc_offset < 0:
                raise ValueError(f"sequence {number}: segment {segment} is empty or out of range")
            spans += (start, segment.length, segment.doc_offset)
            start += segment.length
        tokens = np.asarray(tokens)
        n = start
        if tokens.ndim != 1 or tokens.shape[0] != n:
            raise ValueError(
                f"sequence {number}: tokens have shape {tokens.shape}, expected ({n},) to match "
                "its segments"
            )
        if n > self.seq_len:
            raise ValueError(
                f"sequence {number} holds {n} tokens, more than seq_len {self.seq_len}"
            )
        if not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"sequence {number}: token ids must be integers, got {tokens.dtype}")
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= self.vocab_size:
            raise ValueError(
                f"sequence {number}: token ids span [{low}, {high}], outside the vocabulary "
                f"[0, {self.vocab_size}); was it tokenized with this tokenizer?"
            )
        input_ids = np.full(self.seq_len, self.pad_token_id, dtype=self.dtype)
        input_ids[:n] = tokens
        return {
            "input_ids": self._input_ids.encode(input_ids),
            "doc_ids": "\n".join(s.doc_id for s in segments).encode("utf-8"),
            "doc_spans": self._doc_spans.encode(np.asarray(spans, dtype=np.int32)),
        }


def write_atomic(path: Path, text: str) -> None:
    # Readers treat the manifest's presence as "complete": never let them see a prefix.
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _shard_infos(
    shards: list[dict[str, Any]], tokens_per_sample: list[int]
) -> tuple[ShardInfo, ...]:
    """Per-shard name, checksum, size and counts from the MDS index's shard entries."""
    cumulative = np.concatenate([[0], np.cumsum(tokens_per_sample, dtype=np.int64)])
    infos = []
    first = 0
    for shard in shards:
        raw = shard["raw_data"]
        samples = int(shard["samples"])
        infos.append(
            ShardInfo(
                name=raw["basename"],
                # The writer hashes the exact bytes it writes: no shard is read back.
                sha256=raw["hashes"]["sha256"],
                bytes=int(raw["bytes"]),
                samples=samples,
                tokens=int(cumulative[first + samples] - cumulative[first]),
            )
        )
        first += samples
    return tuple(infos)


def write_shard_set(
    sequences: Iterable[tuple[PackedSequence, npt.NDArray[Any]]],
    out_dir: str | tuple[str, str],
    *,
    seq_len: int,
    vocab_size: int,
    pad_token_id: int,
    header: ShardSetHeader,
    size_limit_bytes: int = 64 << 20,
) -> ShardSetManifest:
    """Write `sequences` as MDS shards into `out_dir` and finish with `fm_manifest.json`.

    Each item is a packed sequence and its real token ids (1-D, length `seq.num_tokens`, already
    concatenated in segment order). `out_dir` is a local directory that must be empty or absent,
    or a (local, remote) pair, in which case shards and manifest are also uploaded and the local
    copy is kept. On error no index.json or manifest is written, so a partial directory
    is never mistaken for a shard set.
    """
    token_dtype = token_dtype_for(vocab_size)
    if not 0 <= pad_token_id < vocab_size:
        raise ValueError(f"pad_token_id {pad_token_id} is outside the vocabulary [0, {vocab_size})")
    local = local_directory(out_dir[0] if isinstance(out_dir, tuple) else out_dir)
    if local.exists() and any(local.iterdir()):
        raise FileExistsError(f"{local} is not empty: a shard set is written into a new directory")
    encoder = SampleEncoder(seq_len, vocab_size, pad_token_id, token_dtype)
    # Uncompressed shards are part of the contract: the loader memory-maps and slices them in
    # place, and token ids barely compress anyway.
    writer = MDSShardWriter(local, encoder.columns, size_limit_bytes)
    tokens_per_sample: list[int] = []
    doc_ids: set[str] = set()
    for number, (sequence, tokens) in enumerate(sequences):
        writer.write(encoder.encode(number, sequence, tokens))
        tokens_per_sample.append(sequence.num_tokens)
        doc_ids.update(s.doc_id for s in sequence.segments)
    if not tokens_per_sample:
        raise ValueError("no sequences to write: a shard set needs at least one sample")
    shards = writer.finish()  # index.json only now: a failed write leaves no index

    num_samples = len(tokens_per_sample)
    num_tokens = int(sum(tokens_per_sample))
    manifest = ShardSetManifest(
        format_version=MANIFEST_FORMAT_VERSION,
        shard_set_key=header.shard_set_key,
        source_version=header.source_version,
        version_content_hash=header.version_content_hash,
        tokenizer_hash=header.tokenizer_hash,
        vocab_size=vocab_size,
        token_dtype=token_dtype,
        pad_token_id=pad_token_id,
        seq_len=seq_len,
        schema_fingerprint=schema_fingerprint(seq_len, token_dtype),
        pipeline_version=header.pipeline_version,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        num_samples=num_samples,
        num_tokens=num_tokens,
        num_documents=len(doc_ids),
        packing_efficiency=num_tokens / (num_samples * seq_len),
        shards=_shard_infos(shards, tokens_per_sample),
    )
    write_atomic(local / MANIFEST_NAME, manifest.to_json())
    if isinstance(out_dir, tuple):
        _upload(local, out_dir[1], [*(info.name for info in manifest.shards), INDEX_NAME])
    return manifest


def _upload(local: Path, remote: str, names: list[str]) -> None:
    """Copy a finished set to `remote` with mosaicml-streaming's uploader (any URI it serves),
    shards and index first and the manifest last, so the remote copy is complete when it has
    one. (The platform's own builds upload through its object store: `shards.build`.)"""
    defer_streaming_packages()
    from streaming.base.storage.upload import CloudUploader

    uploader = CloudUploader.get((str(local), remote), keep_local=True, exist_ok=True)
    for name in [*names, MANIFEST_NAME]:
        uploader.upload_file(name)


def manifest_sha256(out_dir: str | Path) -> str:
    """sha256 of the manifest file bytes: what the `shard_sets` catalog row pins."""
    return hashlib.sha256((local_directory(out_dir) / MANIFEST_NAME).read_bytes()).hexdigest()
