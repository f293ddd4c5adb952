"""Tokenizing and packing documents in the loader: a tokenizer given at load time.

Each document is tokenized as the platform's tokenize stage does it (`add_special_tokens=False`,
the tokenizer's EOS appended when it has one; a document with no tokens is left out, as that
stage quarantines it), cut into pieces of at most seq_len tokens, and the pieces of one pack
group are packed best-fit-decreasing into samples: the same layout as a shard set's samples
(`doc_spans` triples of start, length and offset into the document), padding at the end.
Everything here is a pure function of the group's documents and the tokenizer's bytes.
"""

from __future__ import annotations

import bisect
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

# The names the platform's tokenize stage and shard writer look for (kept in step with them).
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")
PAD_CANDIDATES = ("<|padding|>", "<pad>", "[PAD]")
Segment = tuple[int, int, int]  # (document in the group, offset in the document, length)


@dataclass(frozen=True)
class OnlineTokenizer:
    """A tokenizer.json given at load time, identified by the sha256 of its bytes."""

    json: str = field(repr=False)
    tokenizer_hash: str
    eos_id: int | None
    pad_id: int
    vocab_size: int

    @classmethod
    def from_file(cls, path: str | Path) -> OnlineTokenizer:
        data = Path(path).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        tokenizer = _load(data.decode("utf-8"), digest)
        eos = _first_id(tokenizer, EOS_CANDIDATES)
        pad = _first_id(tokenizer, PAD_CANDIDATES)
        return cls(
            json=data.decode("utf-8"),
            tokenizer_hash=digest,
            eos_id=eos,
            pad_id=pad if pad is not None else (eos if eos is not None else 0),
            vocab_size=int(tokenizer.get_vocab_size()),
        )

    def encode(self, texts: list[str]) -> list[npt.NDArray[np.int64]]:
        """Token ids of each text, EOS appended; an empty array for a text with no tokens."""
        tokenizer = _load(self.json, self.tokenizer_hash)
        encodings = tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        out = []
        for encoding in encodings:
            ids = np.asarray(encoding.ids, dtype=np.int64)
            if ids.size and self.eos_id is not None:
                ids = np.append(ids, np.int64(self.eos_id))
            out.append(ids)
        return out


_TOKENIZERS: dict[str, Any] = {}  # per process: one parsed tokenizer per tokenizer.json


def _load(text: str, key: str) -> Any:
    tokenizer = _TOKENIZERS.get(key)
    if tokenizer is None:
        # A worker process is one of several: tokenizers' own thread pool would oversubscribe.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        from tokenizers import Tokenizer

        tokenizer = _TOKENIZERS[key] = Tokenizer.from_str(text)
    return tokenizer


def _first_id(tokenizer: Any, names: tuple[str, ...]) -> int | None:
    for name in names:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return int(token_id)
    return None


def pack(lengths: list[int], seq_len: int) -> list[list[Segment]]:
    """Best-fit-decreasing packing of documents of `lengths` tokens into samples of seq_len.

    A document longer than seq_len is cut into seq_len pieces (the last one shorter); pieces go,
    longest first (ties in document order), into the fullest sample they fit. Returns each
    sample's segments in the order they were placed.
    """
    pieces = [
        (min(seq_len, n - offset), doc, offset)
        for doc, n in enumerate(lengths)
        for offset in range(0, n, seq_len)
    ]
    pieces.sort(key=lambda p: (-p[0], p[1], p[2]))
    samples: list[list[Segment]] = []
    room: list[tuple[int, int]] = []  # (free tokens, sample), sorted
    for length, doc, offset in pieces:
        at = bisect.bisect_left(room, (length, -1))
        if at < len(room):
            free, sample = room.pop(at)
        else:
            free, sample = seq_len, len(samples)
            samples.append([])
        samples[sample].append((doc, offset, length))
        if free - length > 0:
            bisect.insort(room, (free - length, sample))
    return samples


def sample_arrays(
    segments: list[Segment], tokens: list[npt.NDArray[np.int64]], seq_len: int, pad_id: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """One packed sample's input_ids (padded) and its doc_spans triples."""
    ids = np.full(seq_len, pad_id, dtype=np.int64)
    spans = np.empty(3 * len(segments), dtype=np.int32)
    at = 0
    for k, (doc, offset, length) in enumerate(segments):
        ids[at : at + length] = tokens[doc][offset : offset + length]
        spans[3 * k : 3 * k + 3] = (at, length, offset)
        at += length
    return ids, spans
