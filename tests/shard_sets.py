"""Shard sets for tests: synthetic ones, and real ones tokenized from the shared WARCs.

Registered as a pytest plugin (conftest.py): the `web` and `code` fixtures build one real shard set
each per test module, shaped by the module's `set_shape` fixture (override it in the module).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from fm_assets.shards.packing import PackedSequence, pack_documents
from fm_assets.shards.writer import ShardSetHeader, sequence_tokens
from fm_assets.shards.writer import write_shard_set as _write
from fm_loader import read_manifest
from tests.paths import NEOX_TOKENIZER, WGET_WARC, WGET_WARC_2

VOCAB, PAD = 1000, 0
Docs = dict[str, npt.NDArray[Any]]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Built:
    """A shard set written for a test, plus what went into it."""

    def __init__(self, directory: Path, docs: Docs, seqs: list[PackedSequence], pad: int) -> None:
        self.directory, self.docs, self.seqs, self.pad = directory, docs, seqs, pad
        self.manifest = read_manifest(directory)

    @property
    def num_samples(self) -> int:
        return self.manifest.num_samples

    def expected_ids(self, index: int) -> npt.NDArray[np.int64]:
        seq = self.seqs[index]
        out = np.full(self.manifest.seq_len, self.pad, dtype=np.int64)
        out[: seq.num_tokens] = sequence_tokens(seq, self.docs)
        return out


def build(
    directory: Path,
    docs: Docs,
    seq_len: int,
    *,
    version: str = "synth@v1",
    tokenizer_hash: str = "a" * 64,
    vocab: int = VOCAB,
    pad: int = PAD,
    shuffle_seed: int | None = 0,
    size_limit_bytes: int = 64 << 20,
) -> Built:
    seqs = pack_documents(
        [(d, len(t)) for d, t in docs.items()], seq_len, shuffle_seed=shuffle_seed
    )
    header = ShardSetHeader(
        shard_set_key=f"{version}/{tokenizer_hash[:12]}-s{seq_len}",
        source_version=version,
        version_content_hash=sha(version),
        tokenizer_hash=tokenizer_hash,
    )
    _write(
        [(s, sequence_tokens(s, docs)) for s in seqs],
        str(directory),
        seq_len=seq_len,
        vocab_size=vocab,
        pad_token_id=pad,
        header=header,
        size_limit_bytes=size_limit_bytes,
    )
    return Built(directory, docs, seqs, pad)


def synthetic_docs(n: int, seed: int = 0, max_len: int = 200) -> Docs:
    rng = np.random.default_rng(seed)
    return {
        sha(f"doc{seed}-{i}"): rng.integers(1, VOCAB, k).astype(np.int32)
        for i, k in enumerate(rng.integers(1, max_len, n))
    }


def warc_texts(path: Path) -> dict[str, str]:
    """Visible text of each HTML response in a WARC, keyed by the sha256 of the raw payload."""
    from warcio.archiveiterator import ArchiveIterator

    texts: dict[str, str] = {}
    with open(path, "rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type == "response":
                raw = record.content_stream().read()
                page = re.sub(
                    r"(?is)<(script|style)\b.*?</\1>", " ", raw.decode("utf-8", "replace")
                )
                text = re.sub(r"\s+", " ", re.sub(r"(?s)<[^>]+>", " ", page)).strip()
                if text:
                    texts[hashlib.sha256(raw).hexdigest()] = text
    return texts


def build_from_warc(
    directory: Path, warc: Path, seq_len: int, *, version: str, size_limit_bytes: int = 64 << 20
) -> Built:
    """A real shard set: a shared WARC's pages tokenized with GPT-NeoX-20B, packed, written."""
    from tokenizers import Tokenizer

    texts = warc_texts(warc)
    tokenizer = Tokenizer.from_file(str(NEOX_TOKENIZER))
    encoded = tokenizer.encode_batch(list(texts.values()))
    docs = {d: np.asarray(e.ids) for d, e in zip(texts, encoded, strict=True)}
    return build(
        directory,
        docs,
        seq_len,
        version=version,
        tokenizer_hash=hashlib.sha256(NEOX_TOKENIZER.read_bytes()).hexdigest(),
        vocab=tokenizer.get_vocab_size(),
        pad=tokenizer.token_to_id("<|padding|>"),
        size_limit_bytes=size_limit_bytes,
    )


@dataclass(frozen=True)
class SetShape:
    """How a test module wants its `web` and `code` shard sets cut."""

    seq_len: int
    shard_bytes: int = 64 << 20


@pytest.fixture(scope="module")
def set_shape() -> SetShape:
    return SetShape(seq_len=64, shard_bytes=64 << 10)


def _warc_set(factory: pytest.TempPathFactory, name: str, warc: Path, shape: SetShape) -> Built:
    return build_from_warc(
        factory.mktemp(name) / "set",
        warc,
        shape.seq_len,
        version=f"{name}@v1",
        size_limit_bytes=shape.shard_bytes,
    )


@pytest.fixture(scope="module")
def web(set_shape: SetShape, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """wget-sample-0000's pages as the shard set `web@v1`."""
    return _warc_set(tmp_path_factory, "web", WGET_WARC, set_shape)


@pytest.fixture(scope="module")
def code(set_shape: SetShape, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """wget-sample-0001's pages as the shard set `code@v1`: a second source for mixtures."""
    return _warc_set(tmp_path_factory, "code", WGET_WARC_2, set_shape)
