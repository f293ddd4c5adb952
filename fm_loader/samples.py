"""One stored MDS sample -> the training sample a trainer consumes (see `fm_loader.blocks`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fm_loader.blocks import IGNORE_INDEX, Block, RawBlock

__all__ = ["IGNORE_INDEX", "build_sample"]


def build_sample(raw: dict[str, Any], seq_len: int, sample_index: int) -> dict[str, Any]:
    """Training tensors from a decoded MDS sample {input_ids, doc_ids, doc_spans}.

    Raises ValueError on a malformed sample; the caller adds which shard it came from.
    """
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
