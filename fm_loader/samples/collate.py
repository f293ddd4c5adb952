"""Batch samples for packed-sequence training (flash-attn varlen style boundaries)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

_STACKED = ("input_ids", "labels", "loss_mask", "position_ids")


def collate(batch: Sequence[dict[str, Any]]) -> dict[str, Any]:
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
