"""Turn one stored MDS sample into the training sample a trainer consumes.

Label convention (next-token prediction, shifted inside the sample):
    labels[i] = input_ids[i + 1] when position i + 1 lies in the same segment as i, else -100.
The last token of every segment and every padding position therefore carry -100: no loss is ever
taken across a document boundary or on padding. `loss_mask = labels != -100`.
`position_ids` restart at 0 at every segment start and at the start of the padding tail.
`cu_seqlens` holds the segment boundaries plus the end of the padding tail:
[0, l1, l1 + l2, ..., num_real_tokens, seq_len] (the last entry only when there is padding).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

IGNORE_INDEX = -100


def build_sample(raw: dict[str, Any], seq_len: int, sample_index: int) -> dict[str, Any]:
    """Training tensors from a decoded MDS sample {input_ids, doc_ids, doc_spans}.

    Raises ValueError on a malformed sample; the caller adds which shard it came from.
    """
    input_ids = np.asarray(raw["input_ids"]).astype(np.int64)
    spans = np.asarray(raw["doc_spans"], dtype=np.int64)
    doc_ids = raw["doc_ids"].split("\n")
    if input_ids.shape != (seq_len,) or spans.size % 3 or spans.size // 3 != len(doc_ids):
        raise ValueError(
            f"malformed sample (input_ids shape {input_ids.shape}, {spans.size} span "
            f"values, {len(doc_ids)} doc ids); rebuild the shard set"
        )
    spans = spans.reshape(-1, 3)
    starts, lengths = spans[:, 0], spans[:, 1]
    ends = np.cumsum(lengths)
    num_real = int(ends[-1]) if ends.size else 0
    if (lengths <= 0).any() or (starts != ends - lengths).any() or num_real > seq_len:
        raise ValueError(
            f"segments are not contiguous from position 0 within seq_len {seq_len} "
            f"(spans {spans.tolist()}); rebuild the shard set"
        )

    labels = np.full(seq_len, IGNORE_INDEX, dtype=np.int64)
    labels[: num_real - 1] = input_ids[1:num_real]
    labels[ends - 1] = IGNORE_INDEX  # last token of each segment predicts nothing

    position_ids = np.arange(seq_len, dtype=np.int64)
    position_ids[:num_real] -= np.repeat(starts, lengths)
    position_ids[num_real:] -= num_real

    boundaries = [0, *ends.tolist()]
    if num_real < seq_len:
        boundaries.append(seq_len)
    labels_t = torch.from_numpy(labels)
    return {
        "input_ids": torch.from_numpy(input_ids),
        "labels": labels_t,
        "loss_mask": labels_t != IGNORE_INDEX,
        "position_ids": torch.from_numpy(position_ids),
        "cu_seqlens": torch.tensor(boundaries, dtype=torch.int32),
        "doc_ids": doc_ids,
        "sample_index": sample_index,
        "num_tokens": num_real,
    }
