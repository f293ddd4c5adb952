"""What a kind of sample is to the loader, and which kind a set holds.

The order, placement, mixture and state of a stream never look inside a sample: they place
sample ids. What does depend on what a sample holds is one module per kind, chosen by the set's
manifest (`sample_kind`): how its sets are opened and a block of its samples read and built
into training arrays (in the worker process that serves the batch, so decoding runs there),
how a batch of them is laid out in a worker's shared-memory slot, and how samples are collated
for a plain DataLoader. Packed token sequences are `fm_loader.samples.tokens`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from fm_loader.format.mapped import MappedShards, Refetch

Sample = dict[str, Any]
Batch = dict[str, Any]
Arrays = dict[str, npt.NDArray[Any]]

# Kind name (what a manifest's `sample_kind` says) -> the module defining `KIND`.
KINDS = {"tokens": "fm_loader.samples.tokens", "image_text": "fm_loader.samples.image_text"}


@dataclass(frozen=True)
class Field:
    """One array of a batch: its dtype and the largest shape it can take."""

    dtype: str
    max_shape: tuple[int, ...]

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def max_bytes(self) -> int:
        return math.prod(self.max_shape) * self.itemsize


class Built(Protocol):
    """A block of samples built into training arrays."""

    def __len__(self) -> int: ...

    def sample(self, i: int) -> Sample:
        """Sample `i` as the dataset yields it, tensors included."""
        ...

    def batch_arrays(self) -> Batch:
        """The block as one batch, numpy arrays (they cross process boundaries cheaply)."""
        ...

    def batch(self) -> Batch:
        """`batch_arrays()` with torch tensors."""
        ...


class SampleKind(Protocol):
    """How one kind of sample is read, built, laid out in a batch slot and collated.

    Every batch carries `sample_index`, `source` and `num_tokens` ([B] int64) and `doc_ids` (a
    list per sample): the loader counts and checkpoints by them, whatever else a kind adds.
    """

    name: str

    def open(self, directory: Path, manifest: Any, remote: Refetch | None) -> MappedShards:
        """The set at `directory` (its manifest read), ready to read samples from."""
        ...

    def read(
        self,
        sets: Sequence[MappedShards],
        sources: npt.NDArray[np.intp],
        ids: npt.NDArray[np.int64],
        out: Arrays | None = None,
    ) -> Built:
        """Samples `ids[i]` of `sets[sources[i]]`, built; `out`: arrays of a batch slot to build
        the batch's arrays into (see `slot_fields`)."""
        ...

    def slot_fields(self, batch_size: int, extra: tuple[str, ...] = ()) -> dict[str, Field]:
        """The arrays of a batch of up to `batch_size` samples (plus int64 [B] columns
        `extra`), at their largest."""
        ...

    def collate(self, samples: Sequence[Sample]) -> Batch:
        """Samples as one batch, the layout `batch()` gives (for a plain torch DataLoader)."""
        ...


def sample_kind(manifest: Any) -> SampleKind:
    """The kind of sample the set of `manifest` holds, set up for its layout."""
    name = manifest.sample_kind
    module = KINDS.get(name)
    if module is None:
        raise ValueError(
            f"set {manifest.set_key} holds samples of kind {name!r}, which this loader does not "
            f"serve (it knows {sorted(KINDS)}); upgrade fm_loader"
        )
    kind: SampleKind = importlib.import_module(module).for_manifest(manifest)
    return kind
