"""The shard sets the loader benchmark reads: real WARC pages, tokenized and repeated under
distinct doc ids, packed and written as MDS shards, cached under /tmp/fm_bench_loader/."""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.harness import NEOX_TOKENIZER, WARC_DIR
from fm_assets.shards.packing import pack_documents
from fm_assets.shards.writer import ShardSetHeader, sequence_tokens, write_shard_set
from fm_loader import read_manifest

# In this order: the order the pages are tokenized and packed in, so the built sets stay the same.
WARCS = [
    WARC_DIR / name
    for name in (
        "cc-main-2020-34-sample.warc.gz",
        "wget-sample-0000.warc.gz",
        "wget-sample-0001.warc.gz",
        "cc-main-2024-22-whirlwind.warc.gz",
    )
]
CACHE = Path("/tmp/fm_bench_loader")
BUILD_VERSION = "v1"  # bump when the way sets are built changes: new cache directories
Docs = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class SetSpec:
    """A cached shard set: at least `samples` samples of `seq_len`, from copies `first_copy`..."""

    name: str
    seq_len: int
    samples: int
    first_copy: int  # sets built from disjoint copy ranges share no doc id

    @property
    def directory(self) -> Path:
        return CACHE / f"{self.name}-s{self.seq_len}-n{self.samples}-{BUILD_VERSION}"


THROUGHPUT = SetSpec("warc-neox", 2048, 32_768, 0)
RESUME_A = SetSpec("warc-neox-a", 32, 1_000_000, 0)
RESUME_B = SetSpec("warc-neox-b", 32, 300_000, 1_000_000)


def real_documents() -> tuple[Docs, dict[str, Any]]:
    """Token ids of every WARC page's visible text, keyed by the page's sha256."""
    from tokenizers import Tokenizer

    from tests.shard_sets import warc_texts

    texts: dict[str, str] = {}
    for warc in WARCS:
        texts.update(warc_texts(warc))
    tokenizer = Tokenizer.from_file(str(NEOX_TOKENIZER))
    encoded = tokenizer.encode_batch(list(texts.values()))
    docs = {d: np.asarray(e.ids, dtype=np.int32) for d, e in zip(texts, encoded, strict=True)}
    info = {
        "vocab": tokenizer.get_vocab_size(),
        "pad": tokenizer.token_to_id("<|padding|>"),
        "tokenizer_hash": hashlib.sha256(NEOX_TOKENIZER.read_bytes()).hexdigest(),
    }
    return docs, info


def build_set(spec: SetSpec, base: Docs, info: dict[str, Any]) -> float:
    """Write `spec`'s shard set into the cache; returns the seconds it took."""
    started = time.perf_counter()
    total = sum(len(t) for t in base.values())
    copies = math.ceil(spec.samples * spec.seq_len / total)
    while True:
        docs = {
            hashlib.sha256(f"{d}:{k}".encode()).hexdigest(): tokens
            for k in range(spec.first_copy, spec.first_copy + copies)
            for d, tokens in base.items()
        }
        seqs = pack_documents([(d, len(t)) for d, t in docs.items()], spec.seq_len, shuffle_seed=0)
        if len(seqs) >= spec.samples:
            break
        copies += max(1, copies // 20)  # packing left room: a few more copies
    version = f"bench-{spec.name}@v1"
    header = ShardSetHeader(
        shard_set_key=f"{version}/{info['tokenizer_hash'][:12]}-s{spec.seq_len}",
        source_version=version,
        version_content_hash=hashlib.sha256(version.encode()).hexdigest(),
        tokenizer_hash=info["tokenizer_hash"],
    )
    # Write beside the final directory and rename: a killed build never looks complete.
    partial = spec.directory.with_name(spec.directory.name + f".partial-{os.getpid()}")
    write_shard_set(
        ((s, sequence_tokens(s, docs)) for s in seqs),
        str(partial),
        seq_len=spec.seq_len,
        vocab_size=info["vocab"],
        pad_token_id=info["pad"],
        header=header,
    )
    partial.rename(spec.directory)
    return time.perf_counter() - started


def ensure_sets(specs: list[SetSpec]) -> dict[str, float]:
    """Build the specs missing from the cache; {name: build seconds} of those built now."""
    missing = [s for s in specs if not (s.directory / "fm_manifest.json").exists()]
    built: dict[str, float] = {}
    if not missing:
        return built
    base, info = real_documents()
    CACHE.mkdir(parents=True, exist_ok=True)
    for spec in missing:
        print(f"building {spec.directory} ...", flush=True)
        built[spec.name] = build_set(spec, base, info)
    return built


def write_flat_tokens(spec: SetSpec) -> Path:
    """The set's input_ids, [samples, seq_len] uint16 in sample order, written once with tofile."""
    path = spec.directory / "input_ids.flat.u16"
    if path.exists():
        return path
    manifest = read_manifest(spec.directory)
    partial = path.with_name(path.name + f".partial-{os.getpid()}")
    with open(partial, "wb") as out:
        for shard in manifest.shards:
            for tokens in shard_token_rows(spec.directory / shard.name, spec.seq_len, 2):
                tokens.tofile(out)
    partial.rename(path)
    return path


def shard_token_rows(path: Path, seq_len: int, itemsize: int) -> Iterator[npt.NDArray[Any]]:
    """Each sample's input_ids, in order, as a view of one np.memmap of the MDS shard file.

    MDS joint shard: uint32 sample count, count + 1 uint32 sample end offsets, samples; the
    fixed-size input_ids column is the last one, so its bytes end each sample.
    """
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    count = int(mapped[:4].view(np.uint32)[0])
    ends = mapped[8 : 8 + 4 * count].view(np.uint32).tolist()
    width = seq_len * itemsize
    for end in ends:
        yield mapped[end - width : end].view(np.uint16)


def page_in(paths: list[Path]) -> None:
    """Read files once so every path below reads from the page cache, none from disk."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 << 20):
                pass


def set_row(spec: SetSpec, built: dict[str, float]) -> str:
    m = read_manifest(spec.directory)
    size = sum(s.bytes for s in m.shards)
    how = f"built in this run, {built[spec.name]:.0f} s" if spec.name in built else "cached"
    return (
        f"| `{spec.directory.name}` | {m.seq_len} | {m.num_samples:,} | {m.num_tokens:,} | "
        f"{m.packing_efficiency:.3f} | {len(m.shards)} | {size / 1e6:,.0f} MB | "
        f"{m.num_documents:,} | {how} |"
    )
