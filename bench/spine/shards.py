"""Section 3: MDS shard write. `build_shard_set`, the bare `write_shard_set` on the same packed
sequences and `ndarray.tofile` of the same token bytes (the disk limit), interleaved."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from bench.harness import MB, log, median, median_and_range
from bench.spine.tokenize_ab import TOKENIZE
from fm_assets.registries.tokenizers import TokenizerInfo, default_tokenizer
from fm_assets.settings import Settings
from fm_assets.shards.build import build_shard_set
from fm_assets.shards.packing import PackedSequence, pack_documents
from fm_assets.versions.dataset_version import create_version, require_version
from fm_assets.versions.reader import version_documents

SEQ_LEN = 2048


@dataclass(frozen=True)
class ShardRun:
    """One interleaved repeat of build_shard_set, bare write_shard_set and tofile."""

    build_s: float
    build_bytes: int
    write_s: float
    write_bytes: int
    tofile_s: float
    tofile_bytes: int
    fsync_s: float  # tofile, then fsync: the bytes reach the disk


@dataclass(frozen=True)
class PackedInput:
    """A version's packed sequences with their tokens, ready to hand to `write_shard_set`."""

    sequences: list[tuple[PackedSequence, np.ndarray]]
    padded: np.ndarray  # (samples, seq_len) uint16: the token bytes of the shard set
    vocab_size: int
    pad_token_id: int
    content_hash: str
    tokenizer_hash: str


def pack_version(settings: Settings, version_key: str, tokenizer: object) -> PackedInput:
    """Read a version's tokens and pack them as `build_shard_set` does (untimed setup)."""
    version = require_version(settings, version_key)
    info = default_tokenizer(settings)
    docs = version_documents(settings, version, TOKENIZE, ("doc_id", "tokens"))
    docs = docs.take(pc.sort_indices(docs, sort_keys=[("doc_id", "ascending")]))
    tokens = docs.column("tokens").combine_chunks()
    flat = tokens.values.to_numpy(zero_copy_only=False)
    offsets = tokens.offsets.to_numpy()
    doc_ids = docs.column("doc_id").to_pylist()
    row_of = {doc_id: i for i, doc_id in enumerate(doc_ids)}
    sequences = pack_documents(
        list(zip(doc_ids, np.diff(offsets).tolist(), strict=True)),
        SEQ_LEN,
        shuffle_seed=int(version.content_hash[:16], 16) ^ SEQ_LEN,
    )
    pad = tokenizer.token_to_id("<|padding|>")  # type: ignore[attr-defined]
    pad_token_id = 0 if pad is None else int(pad)
    padded = np.full((len(sequences), SEQ_LEN), pad_token_id, dtype=np.uint16)
    pairs: list[tuple[PackedSequence, np.ndarray]] = []
    for n, sequence in enumerate(sequences):
        starts = [offsets[row_of[s.doc_id]] + s.doc_offset for s in sequence.segments]
        ids = np.concatenate(
            [flat[a : a + s.length] for a, s in zip(starts, sequence.segments, strict=True)]
        )
        padded[n, : ids.size] = ids
        pairs.append((sequence, ids))
    return PackedInput(
        pairs, padded, info.vocab_size, pad_token_id, version.content_hash, info.tokenizer_hash
    )


def time_write_shard_set(packed: PackedInput, out_dir: Path) -> tuple[float, int]:
    """Seconds and shard bytes of one bare `write_shard_set` over pre-packed sequences."""
    from fm_assets.shards.writer import ShardSetHeader, write_shard_set

    header = ShardSetHeader(
        shard_set_key=f"bench-raw/{out_dir.name}",
        source_version="bench@v1",
        version_content_hash=packed.content_hash,
        tokenizer_hash=packed.tokenizer_hash,
    )
    started = time.perf_counter()
    manifest = write_shard_set(
        packed.sequences,
        str(out_dir),
        seq_len=SEQ_LEN,
        vocab_size=packed.vocab_size,
        pad_token_id=packed.pad_token_id,
        header=header,
    )
    return time.perf_counter() - started, sum(s.bytes for s in manifest.shards)


def time_tofile(array: np.ndarray, path: Path, inner: int, *, fsync: bool) -> float:
    """Median seconds of `inner` `ndarray.tofile` calls, optionally each followed by fsync."""
    samples = []
    for _ in range(inner):
        started = time.perf_counter()
        with path.open("wb") as f:
            array.tofile(f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        samples.append(time.perf_counter() - started)
        path.unlink()
    return median(samples)


def shard_runs(
    settings: Settings,
    batch_id: str,
    info: TokenizerInfo,
    packed: PackedInput,
    scratch: Path,
    repeats: int,
    tofile_inner: int,
) -> list[ShardRun]:
    """Per repeat, interleaved: `build_shard_set` on a new version key over `batch_id`, the bare
    `write_shard_set` on `packed`, `tofile` without and with `fsync` of its token bytes.

    The first version, `bench@v1`, must exist already (it is what `packed` was read from).
    """
    runs = []
    for repeat in range(repeats):
        version_key = f"bench@v{repeat + 1}"
        if repeat:
            # Same batch, new version key: build_shard_set writes a new set instead of skipping.
            create_version(settings, version_key, [batch_id], run_id=None)
        started = time.perf_counter()
        built = build_shard_set(settings, version_key, info, SEQ_LEN)
        build_s = time.perf_counter() - started
        if not built.created:
            raise RuntimeError(f"{version_key}: build_shard_set skipped; nothing was measured")
        write_s, written = time_write_shard_set(packed, scratch / f"raw-shards-{repeat}")
        target = scratch / "tofile.bin"
        tofile_s = time_tofile(packed.padded, target, tofile_inner, fsync=False)
        fsync_s = time_tofile(packed.padded, target, tofile_inner, fsync=True)
        runs.append(
            ShardRun(
                build_s=build_s,
                build_bytes=sum(s.bytes for s in built.manifest.shards),
                write_s=write_s,
                write_bytes=written,
                tofile_s=tofile_s,
                tofile_bytes=packed.padded.nbytes,
                fsync_s=fsync_s,
            )
        )
        log(
            f"shards repeat {repeat + 1}: build_shard_set {build_s:.2f}s, "
            f"write_shard_set {write_s:.2f}s, tofile {tofile_s * 1e3:.1f}ms, "
            f"tofile+fsync {fsync_s * 1e3:.1f}ms"
        )
    return runs


def shard_section(
    runs: Sequence[ShardRun], samples: int, tokens: int, tofile_inner: int
) -> list[str]:
    """Section 3 of the report: each way of writing the same tokens, against the limit."""
    rows = [
        ("`build_shard_set` (version read, pack, write, register)", "build_s", "build_bytes"),
        ("`write_shard_set` alone (pre-packed sequences)", "write_s", "write_bytes"),
        ("`ndarray.tofile` of the same token bytes (page cache)", "tofile_s", "tofile_bytes"),
        ("`ndarray.tofile` + `fsync` (disk)", "fsync_s", "tofile_bytes"),
    ]
    lines = [
        "## 3. MDS shard write",
        "",
        f"One version over the first JSONL batch: {samples:,} samples of "
        f"{SEQ_LEN} tokens ({tokens:,} real tokens, uint16). Interleaved per repeat: "
        "`build_shard_set` on a new version key over the same batch, the bare `write_shard_set` "
        "on the same packed sequences, then `tofile` of the padded (samples × seq_len) uint16 "
        f"array without and with `fsync` (median of {tofile_inner} calls each). "
        "The writer fsyncs each shard (a published set survives a power cut), so "
        "`tofile` + `fsync` is the like-for-like limit. MB/s counts "
        "shard bytes (array bytes for `tofile`); ratios are per-repeat MB/s over the limit's "
        "MB/s, median.",
        "",
        "| what | seconds | MB written | MB/s | ÷ tofile | ÷ tofile+fsync |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for name, time_key, bytes_key in rows:
        seconds = [getattr(r, time_key) for r in runs]
        mb = getattr(runs[0], bytes_key) / MB

        def ratio(limit: str, time_key: str = time_key, bytes_key: str = bytes_key) -> float:
            return median(
                [
                    (getattr(r, bytes_key) / getattr(r, time_key))
                    / (r.tofile_bytes / getattr(r, limit))
                    for r in runs
                ]
            )

        lines.append(
            f"| {name} | {median_and_range(seconds, '.3f')} | {mb:.2f} "
            f"| {mb / median(seconds):,.1f} "
            f"| {ratio('tofile_s'):.3f} | {ratio('fsync_s'):.3f} |"
        )
    return [*lines, ""]
