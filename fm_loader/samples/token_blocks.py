"""Training tensors for a block of samples at once: the per-sample Python work, vectorised.

Label convention (next-token prediction, shifted inside the sample):
    labels[i] = input_ids[i + 1] when position i + 1 lies in the same segment as i, else -100.
The last token of every segment and every padding position therefore carry -100: no loss is ever
taken across a document boundary or on padding. `loss_mask = labels != -100`.
`position_ids` restart at 0 at every segment start and at the start of the padding tail.
Per sample, `cu_seqlens` holds the segment boundaries plus the end of the padding tail:
[0, l1, l1 + l2, ..., num_real_tokens, seq_len] (the last entry only when there is padding).
A batch flattens them over [batch * seq_len] for `flash_attn_varlen_func`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

IGNORE_INDEX = -100


@dataclass(frozen=True)
class RawBlock:
    """Decoded MDS columns of B samples: tokens [B, seq_len] and per-sample segment tables."""

    input_ids: npt.NDArray[Any]  # [B, seq_len], the shard's token dtype
    spans: list[npt.NDArray[np.int32]]  # per sample, flattened (start, length, doc_offset)
    doc_ids: list[list[str]]
    sample_index: npt.NDArray[np.int64]  # within its source
    source: npt.NDArray[np.int64]  # mixture source index


class Block:
    """Training tensors of a block; `sample(i)` is one sample, `batch()` all of them collated."""

    def __init__(self, raw: RawBlock, out: dict[str, npt.NDArray[Any]] | None = None) -> None:
        """`out`: [count, seq_len] arrays to build input_ids, labels, loss_mask and position_ids
        into (a worker's shared-memory slot), instead of new ones."""
        count, seq_len = raw.input_ids.shape
        self.raw, self.seq_len = raw, seq_len
        segments, lengths, starts, num_real = _segments(raw, seq_len)
        if out is None:
            ids = raw.input_ids.astype(np.int64, copy=False)
        else:
            ids = out["input_ids"]
            np.copyto(ids, raw.input_ids)

        # Every position belongs to one run: a document segment, or a sample's padding tail.
        # Work on the flattened block with one run table instead of [B, L] masks.
        padded = np.flatnonzero(num_real < seq_len)
        run_sample = np.concatenate([segments, padded])
        run_start = np.concatenate([starts, num_real[padded]])
        run_length = np.concatenate([lengths, seq_len - num_real[padded]])
        order = np.lexsort((run_start, run_sample))
        run_flat = (run_sample * seq_len + run_start)[order]
        run_length = run_length[order]
        is_pad = np.concatenate(
            [np.zeros(len(segments), dtype=bool), np.ones(len(padded), dtype=bool)]
        )[order]
        total = count * seq_len
        position_ids = np.subtract(
            _positions(total),
            np.repeat(run_flat, run_length),
            out=None if out is None else out["position_ids"].reshape(-1),
        )

        labels = np.empty(total, dtype=np.int64) if out is None else out["labels"].reshape(-1)
        flat_ids = ids.reshape(-1)
        labels[:-1] = flat_ids[1:]
        labels[run_flat + run_length - 1] = IGNORE_INDEX  # no loss across a boundary
        for start, length in zip(
            run_flat[is_pad].tolist(), run_length[is_pad].tolist(), strict=True
        ):
            labels[start : start + length] = IGNORE_INDEX  # padding predicts nothing

        # Flat boundaries over the batch: 0, then the end of every run.
        self.cu_seqlens = np.concatenate([[0], run_flat + run_length]).astype(np.int32)
        self._sample_starts = np.searchsorted(self.cu_seqlens, np.arange(count + 1) * seq_len)
        self.num_real = num_real
        # numpy, not torch: torch splits element-wise ops over intra-op threads above 32k
        # elements, which costs far more than it saves on a busy trainer host.
        labels = labels.reshape(count, seq_len)
        self.arrays = {
            "input_ids": ids,
            "labels": labels,
            "loss_mask": np.not_equal(
                labels, IGNORE_INDEX, out=None if out is None else out["loss_mask"]
            ),
            "position_ids": position_ids.reshape(count, seq_len),
        }
        self._rows: dict[str, tuple[torch.Tensor, ...]] | None = None

    def __len__(self) -> int:
        return len(self.raw.doc_ids)

    def sample(self, i: int) -> dict[str, Any]:
        if self._rows is None:  # one C call per column instead of one indexing per sample
            self._rows = {k: torch.from_numpy(v).unbind(0) for k, v in self.arrays.items()}
        rows = self._rows
        a, b = self._sample_starts[i], self._sample_starts[i + 1]
        cu = self.cu_seqlens[a : b + 1] - np.int32(i * self.seq_len)
        return {
            "input_ids": rows["input_ids"][i],
            "labels": rows["labels"][i],
            "loss_mask": rows["loss_mask"][i],
            "position_ids": rows["position_ids"][i],
            "cu_seqlens": torch.from_numpy(cu),
            "doc_ids": self.raw.doc_ids[i],
            "sample_index": int(self.raw.sample_index[i]),
            "num_tokens": int(self.num_real[i]),
            "source": int(self.raw.source[i]),
        }

    def batch(self) -> dict[str, Any]:
        """The block as one batch, in the layout `fm_loader.collate` produces."""
        return as_tensors(self.batch_arrays())

    def batch_arrays(self) -> dict[str, Any]:
        """`batch()` with numpy arrays: they cross process pipes far cheaper than tensors."""
        return {
            **self.arrays,
            "cu_seqlens": self.cu_seqlens,
            "max_seqlen": int(np.diff(self.cu_seqlens).max()),
            "doc_ids": self.raw.doc_ids,
            "sample_index": self.raw.sample_index.astype(np.int64),
            "num_tokens": self.num_real,
            "source": self.raw.source.astype(np.int64),
        }


def as_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """numpy arrays of a `batch_arrays()` dict as torch tensors (no copy)."""
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}


Int64s = npt.NDArray[np.int64]


@functools.lru_cache(maxsize=4)
def _positions(total: int) -> Int64s:
    """0 .. total-1, shared read-only across blocks of the same size."""
    positions = np.arange(total, dtype=np.int64)
    positions.flags.writeable = False
    return positions


def _segments(raw: RawBlock, seq_len: int) -> tuple[Int64s, Int64s, Int64s, Int64s]:
    """(sample of each segment, lengths, starts, real tokens per sample), validated.

    Raises ValueError naming the sample (by block position) when segments are not contiguous
    from position 0 within seq_len or ids and spans disagree; the caller adds the shard.
    """
    count = len(raw.spans)
    per_sample = np.array([s.size for s in raw.spans], dtype=np.int64)
    bad = (per_sample % 3 != 0) | (per_sample // 3 != [len(d) for d in raw.doc_ids])
    if raw.input_ids.shape != (count, seq_len) or bad.any():
        first = int(np.flatnonzero(bad)[0]) if bad.any() else 0
        raise BlockError(
            first,
            f"malformed sample (input_ids shape {raw.input_ids.shape[1:]}, "
            f"{int(per_sample[first])} span values, {len(raw.doc_ids[first])} doc ids); "
            "rebuild the shard set",
        )
    table = (
        np.concatenate(raw.spans).astype(np.int64).reshape(-1, 3)
        if count
        else np.empty((0, 3), np.int64)
    )
    starts, lengths = table[:, 0], table[:, 1]
    segments = np.repeat(np.arange(count), per_sample // 3)
    num_real = np.bincount(segments, weights=lengths, minlength=count).astype(np.int64)
    # Expected start of each segment: lengths summed over earlier segments of its sample.
    running = np.cumsum(lengths) - lengths
    first_of_sample = np.concatenate([[0], np.cumsum(per_sample // 3)[:-1]])
    expected = running - np.repeat(running[first_of_sample] if count else running, per_sample // 3)
    broken = (lengths <= 0) | (starts != expected)
    over = num_real > seq_len
    if broken.any() or over.any():
        sample = (
            int(segments[np.flatnonzero(broken)[0]])
            if broken.any()
            else int(np.flatnonzero(over)[0])
        )
        raise BlockError(
            sample,
            f"segments are not contiguous from position 0 within seq_len {seq_len} "
            f"(spans {raw.spans[sample].reshape(-1, 3).tolist()}); rebuild the shard set",
        )
    return segments, lengths, starts, num_real


class BlockError(ValueError):
    """A malformed sample; `position` is its index in the block."""

    def __init__(self, position: int, message: str) -> None:
        super().__init__(message)
        self.position = position
