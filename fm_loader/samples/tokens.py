"""The sample kind of shard sets: packed token sequences (`input_ids`, `doc_ids`, `doc_spans`).

Read in place from the set's shards (`fm_loader.format.shard_set.ShardSet.read_raw`), built a
block at a time into `input_ids`, `labels`, `loss_mask`, `position_ids` and `cu_seqlens`
(`fm_loader.samples.token_blocks`, where the label convention is), laid out in a worker's slot
as [B, seq_len] arrays, and collated for a plain DataLoader in the same layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from fm_loader.format.manifest import ShardSetManifest
from fm_loader.format.mapped import MappedShards, Refetch
from fm_loader.format.shard_set import ShardSet
from fm_loader.samples.kind import Arrays, Batch, Field, Sample
from fm_loader.samples.token_blocks import Block, BlockError, RawBlock

_STACKED = ("input_ids", "labels", "loss_mask", "position_ids")


@dataclass(frozen=True)
class TokenSamples:
    """Packed token samples of `seq_len` tokens, stored as `token_dtype`."""

    seq_len: int
    token_dtype: str = "int64"
    name: str = "tokens"

    def open(self, directory: Path, manifest: Any, remote: Refetch | None) -> MappedShards:
        return ShardSet(directory, manifest, remote=remote)

    def read(
        self,
        sets: Sequence[MappedShards],
        sources: npt.NDArray[np.intp],
        ids: npt.NDArray[np.int64],
        out: Arrays | None = None,
    ) -> Block:
        """Samples `ids[i]` of `sets[sources[i]]` (each a `ShardSet`), built into a block."""
        tokens = np.empty((len(ids), self.seq_len), dtype=self.token_dtype)
        spans: list[npt.NDArray[np.int32]] = [np.empty(0, np.int32)] * len(ids)
        doc_ids: list[list[str]] = [[]] * len(ids)
        for s, shards in enumerate(sets):
            rows = np.flatnonzero(sources == s)
            if rows.size == 0:
                continue
            if not isinstance(shards, ShardSet):
                raise TypeError(f"source {s} is a {type(shards).__name__}, not a token shard set")
            t, sp, d = shards.read_raw(ids[rows])
            tokens[rows] = t
            for row, one_spans, one_ids in zip(rows.tolist(), sp, d, strict=True):
                spans[row], doc_ids[row] = one_spans, one_ids
        raw = RawBlock(tokens, spans, doc_ids, ids.astype(np.int64), sources.astype(np.int64))
        try:
            return self.build(raw, out)
        except BlockError as exc:
            source, index = int(sources[exc.position]), int(ids[exc.position])
            raise ValueError(f"{sets[source].where(index)}: {exc}") from exc

    def build(self, raw: RawBlock, out: Arrays | None = None) -> Block:
        """Training arrays of decoded samples (from shards, or packed in the loader)."""
        return Block(raw, out)

    def slot_fields(self, batch_size: int, extra: tuple[str, ...] = ()) -> dict[str, Field]:
        """cu_seqlens holds at most one boundary per position plus the leading 0."""
        rows = (batch_size, self.seq_len)
        fields = {
            "input_ids": Field("int64", rows),
            "labels": Field("int64", rows),
            "position_ids": Field("int64", rows),
            "loss_mask": Field("bool", rows),
            "cu_seqlens": Field("int32", (batch_size * self.seq_len + 1,)),
            "sample_index": Field("int64", (batch_size,)),
            "num_tokens": Field("int64", (batch_size,)),
            "source": Field("int64", (batch_size,)),
        }
        fields.update({name: Field("int64", (batch_size,)) for name in extra})
        return fields

    def collate(self, samples: Sequence[Sample]) -> Batch:
        return collate(samples)


def for_manifest(manifest: ShardSetManifest) -> TokenSamples:
    """The kind of a shard set's samples (`fm_loader.samples.kind.sample_kind`)."""
    return TokenSamples(manifest.seq_len, manifest.token_dtype)


def collate(batch: Sequence[Sample]) -> Batch:
    """Stack a list of samples into a batch.

    Tensors [seq_len] become [batch, seq_len]. Per-sample `cu_seqlens` are shifted by
    b * seq_len and joined into one flat int32 `cu_seqlens` over the flattened batch, with
    `max_seqlen` the longest segment (including padding tails), as `flash_attn_varlen_func`
    expects. `doc_ids` stays a list (one list of ids per sample); `sample_index` becomes an
    int64 tensor [batch], as do `num_tokens` (real tokens per sample) and `source` (the
    mixture source index) when present.
    """
    if not batch:
        raise ValueError("cannot collate an empty batch")
    out: dict[str, Any] = {key: torch.stack([s[key] for s in batch]) for key in _STACKED}
    seq_len = out["input_ids"].shape[1]
    pieces = [batch[0]["cu_seqlens"][:1]]
    for b, sample in enumerate(batch):
        # Each sample's boundaries run 0..seq_len; drop the leading 0 so boundaries are not
        # repeated where one sample ends and the next begins.
        pieces.append(sample["cu_seqlens"][1:] + b * seq_len)
    cu_seqlens = torch.cat(pieces).to(torch.int32)
    out["cu_seqlens"] = cu_seqlens
    out["max_seqlen"] = int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
    out["doc_ids"] = [list(s["doc_ids"]) for s in batch]
    for key in ("sample_index", "num_tokens", "source"):
        if key in batch[0]:
            out[key] = torch.tensor([s[key] for s in batch], dtype=torch.int64)
    return out


def build_sample(raw: dict[str, Any], seq_len: int, sample_index: int) -> Sample:
    """Training tensors from one decoded MDS sample {input_ids, doc_ids, doc_spans} (as
    `ShardSet.raw_sample` gives it). Raises ValueError on a malformed sample."""
    input_ids = np.asarray(raw["input_ids"])
    block = RawBlock(
        input_ids=input_ids.reshape(1, -1),
        spans=[np.asarray(raw["doc_spans"], dtype=np.int32)],
        doc_ids=[raw["doc_ids"].split("\n")],
        sample_index=np.array([sample_index], dtype=np.int64),
        source=np.zeros(1, dtype=np.int64),
    )
    if input_ids.shape != (seq_len,):
        raise ValueError(
            f"malformed sample (input_ids shape {input_ids.shape}); rebuild the shard set"
        )
    sample = Block(block).sample(0)
    del sample["source"]
    return sample
