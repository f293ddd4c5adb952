"""7. Tokenizing in the loader against pre-tokenized shards: the same documents, the same tokenizer,
one epoch each through make_loader; samples/s, real tokens/s and CPU per token, next to the
tokenizer library's own rate on the same texts."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.harness import NEOX_TOKENIZER, interleave, median, median_and_range, tree_cpu_seconds
from bench.loader.plan import Plan
from bench.loader.readers import BATCH, SEED
from bench.loader.sets import BUILD_VERSION, CACHE, WARCS
from fm_loader import make_dataset, make_loader, read_manifest
from fm_loader.format.text_set import TEXT_MANIFEST_NAME, read_text_manifest
from fm_loader.samples.packing import OnlineTokenizer

SEQ_LEN = 2048


@dataclass(frozen=True)
class Epoch:
    seconds: float
    cpu_s: float  # the whole process tree: trainer and workers
    samples: int
    tokens: int  # real tokens served


def sets_for(documents: int) -> tuple[Path, Path]:
    """(text set, pre-tokenized shard set) of the same `documents` documents, cached."""
    texts = CACHE / f"texts-n{documents}-{BUILD_VERSION}"
    shards = CACHE / f"pretokenized-n{documents}-s{SEQ_LEN}-{BUILD_VERSION}"
    if (texts / TEXT_MANIFEST_NAME).exists() and (shards / "fm_manifest.json").exists():
        return texts, shards
    import numpy as np

    from fm_assets.shards.packing import pack_documents
    from fm_assets.shards.text_export import write_text_set
    from fm_assets.shards.writer import ShardSetHeader, sequence_tokens, write_shard_set
    from tests.shard_sets import warc_texts

    pages: dict[str, str] = {}
    for warc in WARCS:
        pages.update(warc_texts(warc))
    base = sorted(pages.items())
    # Real pages repeated under distinct doc ids until there are `documents` of them.
    docs = sorted(
        (hashlib.sha256(f"{page}:{k // len(base)}".encode()).hexdigest(), text)
        for k, (page, text) in ((k, base[k % len(base)]) for k in range(documents))
    )
    CACHE.mkdir(parents=True, exist_ok=True)
    for target in (texts, shards):
        if target.exists():
            shutil.rmtree(target)
    write_text_set(iter(docs), texts, text_set_key="bench-text@v1", version_content_hash="0" * 64)
    tokenizer = OnlineTokenizer.from_file(NEOX_TOKENIZER)
    tokens = dict(zip((d for d, _ in docs), tokenizer.encode([t for _, t in docs]), strict=True))
    tokens = {d: t.astype(np.int32) for d, t in tokens.items() if t.size}
    sequences = pack_documents([(d, len(t)) for d, t in tokens.items()], SEQ_LEN, shuffle_seed=0)
    header = ShardSetHeader(
        shard_set_key=f"bench-text@v1/{tokenizer.tokenizer_hash[:12]}-s{SEQ_LEN}",
        source_version="bench-text@v1",
        version_content_hash="0" * 64,
        tokenizer_hash=tokenizer.tokenizer_hash,
    )
    write_shard_set(
        ((s, sequence_tokens(s, tokens)) for s in sequences),
        str(shards),
        seq_len=SEQ_LEN,
        vocab_size=tokenizer.vocab_size,
        pad_token_id=tokenizer.pad_id,
        header=header,
    )
    return texts, shards


def epoch(source: Path, workers: int, online: bool) -> Epoch:
    cpu = tree_cpu_seconds()
    started = time.perf_counter()
    options = (
        {"tokenizer": str(NEOX_TOKENIZER), "seq_len": SEQ_LEN, "tokenize_online": True}
        if online
        else {}
    )
    dataset = make_dataset(str(source), rank=0, world_size=1, seed=SEED, **options)
    samples = tokens = 0
    batches = iter(make_loader(dataset, batch_size=BATCH, num_workers=workers))
    for batch in batches:
        samples += len(batch["sample_index"])
        tokens += int(batch["num_tokens"].sum())
    seconds = time.perf_counter() - started
    return Epoch(seconds, tree_cpu_seconds() - cpu, samples, tokens)


def library_rate(texts: Path) -> tuple[float, int]:
    """(real tokens/s, tokens) of `encode_batch_fast` on every text in one thread: the limit."""
    from fm_loader.format.text_set import TextShards

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    manifest, _ = read_text_manifest(texts)
    shards = TextShards(texts, manifest)
    _, all_texts = shards.read_texts(list(range(manifest.num_documents)))
    tokenizer = OnlineTokenizer.from_file(NEOX_TOKENIZER)
    started = time.process_time()
    tokens = sum(t.size for t in tokenizer.encode(all_texts))
    return tokens / (time.process_time() - started), tokens


def measure(plan: Plan) -> tuple[dict[str, list[Epoch]], list[float], Path, Path]:
    texts, shards = sets_for(plan.online_documents)
    paths: dict[str, Callable[[], Epoch]] = {}
    for workers in (0, 2):
        paths[f"pre-tokenized shard set, num_workers={workers}"] = lambda w=workers: epoch(
            shards, w, False
        )
        paths[f"tokenized in the loader, num_workers={workers}"] = lambda w=workers: epoch(
            texts, w, True
        )
    runs = interleave(paths, plan.online_repeats)
    limits = [library_rate(texts)[0] for _ in range(plan.online_repeats)]
    return runs, limits, texts, shards


def section(
    runs: dict[str, list[Epoch]], limits: list[float], texts: Path, shards: Path
) -> list[str]:
    """Section 7 of the report."""
    text_manifest, _ = read_text_manifest(texts)
    shard_manifest = read_manifest(shards)
    repeats = len(next(iter(runs.values())))
    lines = [
        "## 7. Tokenizing in the loader against pre-tokenized shards",
        "",
        f"The same {text_manifest.num_documents:,} documents (the four WARCs' pages, repeated "
        f"under distinct doc ids; {text_manifest.num_bytes / 1e6:,.1f} MB of text) as a text "
        f"set read with `make_dataset(..., tokenizer=gpt-neox-20b.json, seq_len={SEQ_LEN}, "
        "tokenize_online=True)` (packed best-fit-decreasing per group of 64 documents in the "
        "workers), and as a shard set tokenized by the same tokenizer beforehand and packed "
        f"best-fit-decreasing over the whole set ({shard_manifest.num_samples:,} samples, "
        f"packing efficiency {shard_manifest.packing_efficiency:.3f}). One whole epoch through "
        f"`make_loader(batch_size={BATCH}, num_workers=W)`, all-in (opening the set included). "
        f"CPU: the whole process tree, trainer and workers. {repeats} repeats interleaved; "
        "medians (min–max). The library limit: `encode_batch_fast` on every text in one "
        "thread, in this process.",
        "",
        "| path | samples | samples/s | real tokens/s | CPU µs per real token |",
        "|---|--:|--:|--:|--:|",
    ]
    for name, epochs in runs.items():
        lines.append(
            f"| {name} | {epochs[0].samples:,} | "
            f"{median_and_range([e.samples / e.seconds for e in epochs], ',.0f')} | "
            f"{median([e.tokens / e.seconds for e in epochs]) / 1e6:.2f} M | "
            f"{median([e.cpu_s / e.tokens * 1e6 for e in epochs]):.2f} |"
        )
    limit = median(limits)
    lines.append(
        f"| library limit: `encode_batch_fast`, one thread | — | — | {limit / 1e6:.2f} M | "
        f"{1e6 / limit:.2f} |"
    )

    def rate(name: str) -> float:
        return median([e.tokens / e.seconds for e in runs[name]])

    def cpu(name: str) -> float:
        return median([e.cpu_s / e.tokens for e in runs[name]])

    online2 = "tokenized in the loader, num_workers=2"
    pre2 = "pre-tokenized shard set, num_workers=2"
    lines += [
        "",
        f"With 2 workers, tokenizing in the loader delivers {rate(online2) / rate(pre2):.2f}× "
        f"the pre-tokenized real tokens/s and costs {cpu(online2) / cpu(pre2):.1f}× its CPU per "
        f"token; its workers run at {rate(online2) / limit:.2f}× one thread of the bare "
        "tokenizer (two workers, each tokenizing, packing and building batches).",
        "",
    ]
    return lines
