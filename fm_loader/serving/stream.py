"""What both datasets share: one rank's share of a mixture's stream, the sets it reads, and
restoring a checkpoint.

`FmDataset` (shard sets: a stream of samples) and `OnlineDataset` (text sets tokenized in the
loader: a stream of documents cut into pack groups) both place positions of one global stream,
mixed by the quota schedule over exact weights (`fm_loader.order.mixture`) and ordered by each
source's `SourceOrder`, on ranks and workers. Both take their options once (`LoaderOptions`),
open one set per source and hold it (and the pin of its cache entry) until `close`, and refuse
a checkpoint whose pinned values differ from theirs. What a checkpoint records beyond the pins,
and what a sample holds, is each one's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import torch.utils.data

from fm_loader.format.mapped import MappedShards, VerifiedTable
from fm_loader.options import LoaderOptions
from fm_loader.order.mixture import MixtureSpec
from fm_loader.order.placement import placement_batch_size
from fm_loader.order.plan import SourceOrder
from fm_loader.order.state import StreamState
from fm_loader.samples.kind import Arrays, Batch, Field, Sample

if TYPE_CHECKING:
    from fm_loader.storage.cache import EntryPin
    from fm_loader.storage.fetch import CacheUse

SetT = TypeVar("SetT", bound=MappedShards)


class Resolved(Protocol):
    """What opening a source found (`fm_loader.sources.resolve.ResolvedSet`)."""

    @property
    def manifest_sha256(self) -> str: ...

    @property
    def pin(self) -> EntryPin | None: ...

    @property
    def cache_use(self) -> CacheUse | None: ...


class Tracker(Protocol):
    """The batches a loader handed to the trainer, as a checkpoint state."""

    def add(self, batch: Batch) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...


class StreamDataset(torch.utils.data.IterableDataset[Sample], Generic[SetT]):
    """One rank's share of a mixture's stream over open sets, one per source, in mixture order.

    Iterating yields the rest of the current epoch for this rank (for a DataLoader worker: its
    share of it), from the position set by `set_epoch` or `load_state_dict`.
    """

    def __init__(
        self,
        sets: list[SetT],
        resolved: Sequence[Resolved],
        spec: MixtureSpec,
        options: LoaderOptions,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.rank, self.world_size = options.placement()
        self.seed, self.shuffle_window = options.seed, options.shuffle_window
        self.batch_size, self.batch_size_chosen_by = placement_batch_size(options.batch_size)
        self._sets = sets
        self.content_hashes = tuple(r.manifest_sha256 for r in resolved)  # sha256 of manifests
        # Open cache entries stay pinned (never evicted) while this dataset lives.
        self._pins: list[EntryPin] = [r.pin for r in resolved if r.pin is not None]
        self.cache_uses: list[CacheUse] = [r.cache_use for r in resolved if r.cache_use is not None]
        sizes = self.stream_sizes(sets)
        self._weights = spec.integer_weights(sizes)
        self.epoch_length = spec.epoch_length(sizes)  # positions: samples, or documents
        self.set_epoch(options.epoch)

    # -- what each dataset defines ------------------------------------------------------------
    def stream_sizes(self, sets: list[SetT]) -> list[int]:
        """What the mixture counts of each source: its samples (a stream of batches: units)."""
        return [len(s) for s in sets]

    def finish_batch(self, batch: Batch) -> Batch:
        """A batch as the trainer gets it, once in the trainer's process (tensors)."""
        return batch

    def batches_left(self, batch_size: int) -> int:
        """Batches of `batch_size` left in the epoch for this rank."""
        return -(-len(self) // batch_size)

    @property
    def seq_len(self) -> int:
        raise NotImplementedError

    @property
    def tokenizer_hash(self) -> str:
        raise NotImplementedError

    def __len__(self) -> int:
        """Samples this rank serves from the current position to the end of the epoch."""
        raise NotImplementedError

    def slot_fields(self, batch_size: int) -> dict[str, Field]:
        """The arrays of one of its batches, at their largest (a worker's batch slot)."""
        raise NotImplementedError

    def worker_stream(self, worker: int, num_workers: int) -> Iterator[Sample]:
        """The samples worker `worker` of `num_workers` serves (what `__iter__` uses)."""
        raise NotImplementedError

    def batch_stream(
        self,
        worker: int = 0,
        num_workers: int = 1,
        *,
        arrays: bool = False,
        out: Callable[[int], Arrays] | None = None,
    ) -> Iterator[Batch]:
        """Collated batches of `batch_size` samples this rank and worker serve, built whole
        (numpy arrays with `arrays=True`); `out(count)`, called once per batch, gives the arrays
        of a batch slot to build it into (`slot_fields`)."""
        raise NotImplementedError

    def tracker(self) -> Tracker:
        """What `make_loader` records the batches it hands over with."""
        raise NotImplementedError

    def _restart_epoch(self) -> None:
        """Go back to the beginning of `self.epoch`."""
        raise NotImplementedError

    def _pinned(self) -> StreamState:
        """This dataset's state at the start of the epoch: its pins."""
        raise NotImplementedError

    def _parse(self, state: dict[str, Any]) -> StreamState:
        """A checkpoint's state dict, validated."""
        raise NotImplementedError

    def _resume(self, theirs: Any) -> None:
        """Continue from a checkpoint's state, whose pins match."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning (new shard and window permutations)."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        self.epoch = epoch
        self._restart_epoch()

    def __iter__(self) -> Iterator[Sample]:
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        return self.worker_stream(worker, num_workers)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a checkpointed state, with any world size and worker count.

        Refuses a state taken against another stream, naming every pinned value that differs
        (sources and their content, mixture, tokenizer, seq_len, seed, shuffle window, plan
        version, ...).
        """
        theirs = self._parse(state)
        self._pinned().refuse_unless_same_stream(theirs)
        self._resume(theirs)

    def stream_pins(self) -> dict[str, Any]:
        """The values every state of this stream pins (`fm_loader.order.state.STREAM_PINNED`,
        but for the plan version, which is the state's own)."""
        return {
            "sources": self.spec.keys,
            "content_hashes": self.content_hashes,
            "mixture_mode": self.spec.mode,
            "mixture_weights": self.spec.weights,
            "tokenizer_hash": self.tokenizer_hash,
            "seq_len": self.seq_len,
            "seed": self.seed,
            "shuffle_window": self.shuffle_window,
        }

    def _source_orders(self) -> list[SourceOrder]:
        """Each source's order this epoch (`fm_loader.order.plan`)."""
        return [
            SourceOrder(
                [s.samples for s in shards.shards],
                seed=self.seed,
                epoch=self.epoch,
                source=n,
                window=self.shuffle_window,
            )
            for n, shards in enumerate(self._sets)
        ]

    # -- the open sets --------------------------------------------------------------------------
    def take_fetch_latencies(self) -> list[float]:
        """Shard map+verify(+refetch) times recorded in this process since the last call."""
        out: list[float] = []
        for shards in self._sets:
            if shards.fetch_latencies:  # rarely: once per shard and process
                out += shards.fetch_latencies
                shards.fetch_latencies.clear()
        return out

    def take_refetched_bytes(self) -> int:
        """Bytes of cached shards fetched again in this process since the last call."""
        total = 0
        for shards in self._sets:
            if shards.refetched_bytes:
                total += shards.refetched_bytes
                shards.refetched_bytes = 0
        return total

    def verification_table(self) -> VerifiedTable:
        """A table in which this dataset's copies in worker processes share verified shards."""
        return VerifiedTable([len(s.shards) for s in self._sets])

    def share_verification(self, table: VerifiedTable) -> None:
        for source, shards in enumerate(self._sets):
            shards.verified = table.row(source)

    def close(self) -> None:
        """Unpin this dataset's cache entries (they may then be evicted) and unmap its shards."""
        for pin in self._pins:
            pin.close()
        for shards in self._sets:
            shards.close()
