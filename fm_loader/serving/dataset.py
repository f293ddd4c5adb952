"""`FmDataset`: one rank's deterministic share of the global sample stream of shard sets."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fm_loader.format.manifest import ShardSetManifest
from fm_loader.format.mapped import MappedShards
from fm_loader.options import LoaderOptions
from fm_loader.order.mixture import MixtureSpec, ScheduleCursor
from fm_loader.order.placement import rank_positions, worker_serves
from fm_loader.order.state import PLAN_VERSION, STATE_FORMAT_VERSION, LoaderState
from fm_loader.samples.kind import Arrays, Batch, Built, Field, Sample, sample_kind
from fm_loader.serving.stream import StreamDataset
from fm_loader.sources.provenance import RunRegistry, check_run_id
from fm_loader.sources.resolve import ResolvedSet, check_same_layout, location_of

_SAMPLES_PER_BLOCK = 128  # samples built together when iterating sample by sample
_POSITIONS_PER_STEP = 1 << 14  # global positions scheduled at a time


class FmDataset(StreamDataset[MappedShards]):
    """One rank's deterministic share of the global sample stream of a mixture of shard sets.

    Each `__iter__` replays from the current position, in the parent process and in DataLoader
    workers alike; the stream is a pure function of the sources, the mixture, seed, epoch and
    shuffle window, and placement a pure function of (rank, world_size, worker, batch_size).
    What a sample holds is the sets' kind (`fm_loader.samples`). See docs/loader.md.
    """

    def __init__(
        self,
        resolved: Sequence[ResolvedSet[ShardSetManifest]],
        spec: MixtureSpec,
        options: LoaderOptions,
    ) -> None:
        check_same_layout(resolved)
        self.kind = sample_kind(resolved[0].manifest)
        self.manifests = [r.manifest for r in resolved]
        self._run: RunRegistry | None = None  # set by `record_run` on rank 0
        self._locations = [location_of(r) for r in resolved]
        sets = [self.kind.open(r.directory, r.manifest, r.remote) for r in resolved]
        super().__init__(sets, resolved, spec, options)

    @property
    def manifest(self) -> ShardSetManifest:
        """The first source's manifest (all sources share seq_len, tokenizer and schema)."""
        return self.manifests[0]

    @property
    def seq_len(self) -> int:
        return self.manifest.seq_len

    @property
    def tokenizer_hash(self) -> str:
        return self.manifest.tokenizer_hash

    def __len__(self) -> int:
        """Samples this rank serves from the current position to the end of the epoch."""
        return len(rank_positions(self._start, self.epoch_length, self.rank, self.world_size))

    def slot_fields(self, batch_size: int) -> dict[str, Field]:
        return self.kind.slot_fields(batch_size)

    def _restart_epoch(self) -> None:
        self._restart(0, [0] * len(self._sets))

    def _restart(self, position: int, counts: Sequence[int]) -> None:
        self._start, self._start_counts = position, list(counts)
        self._yielded = 0
        self._state_cursor = ScheduleCursor(self._weights, position, counts)

    # -- iteration ------------------------------------------------------------------------
    def worker_stream(self, worker: int, num_workers: int) -> Iterator[Sample]:
        self._yielded = 0
        for sources, ids in self._groups(worker, num_workers, _SAMPLES_PER_BLOCK):
            block = self.kind.read(self._sets, sources, ids)
            for i in range(len(block)):
                sample = block.sample(i)
                self._yielded += 1  # before the yield: the consumer holds it once next() returns
                yield sample

    def batch_stream(
        self,
        worker: int = 0,
        num_workers: int = 1,
        *,
        arrays: bool = False,
        out: Callable[[int], Arrays] | None = None,
    ) -> Iterator[Batch]:
        """Collated batches of `batch_size` samples this rank and worker serve, built whole
        (as numpy arrays with `arrays=True`). `out(count)`, called once per batch, gives the
        arrays of a batch slot to build the batch into (see `slot_fields`)."""
        for sources, ids in self._groups(worker, num_workers, self.batch_size):
            block: Built = self.kind.read(
                self._sets, sources, ids, None if out is None else out(len(ids))
            )
            yield block.batch_arrays() if arrays else block.batch()

    def _groups(
        self, worker: int, num_workers: int, size: int
    ) -> Iterator[tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]]:
        """The assigned (source, id) stream cut into consecutive groups of `size` (last short)."""
        pending_s: list[npt.NDArray[np.intp]] = []
        pending_i: list[npt.NDArray[np.int64]] = []
        held = 0
        for sources, ids in self._assigned(worker, num_workers):
            pending_s.append(sources)
            pending_i.append(ids)
            held += len(ids)
            if held < size:
                continue
            all_s, all_i = np.concatenate(pending_s), np.concatenate(pending_i)
            cut = held - held % size
            for a in range(0, cut, size):
                yield all_s[a : a + size], all_i[a : a + size]
            pending_s, pending_i, held = [all_s[cut:]], [all_i[cut:]], held - cut
        if held:
            yield np.concatenate(pending_s), np.concatenate(pending_i)

    def _assigned(
        self, worker: int, num_workers: int
    ) -> Iterator[tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]]:
        """(source, sample id) arrays, chunk by chunk, of what this rank and worker serve."""
        orders = self._source_orders()
        cursor = ScheduleCursor(self._weights, self._start, self._start_counts)
        position = self._start
        while position < self.epoch_length:
            n = min(_POSITIONS_PER_STEP, self.epoch_length - position)
            sources, running = cursor.take(n)
            # This rank's positions in [position, position + n): t = start + rank + k * W.
            first = (self.rank - (position - self._start)) % self.world_size
            offsets = np.arange(first, n, self.world_size)
            k = (position + offsets - self._start - self.rank) // self.world_size
            offsets = offsets[worker_serves(k, self.batch_size, worker, num_workers)]
            position += n
            if offsets.size == 0:
                continue
            chosen = sources[offsets].astype(np.intp)
            ids = np.empty(offsets.size, dtype=np.int64)
            for s, order in enumerate(orders):
                mine = chosen == s
                if mine.any():
                    ids[mine] = order.sample_ids(running[offsets][mine])
            yield chosen, ids

    # -- checkpointing --------------------------------------------------------------------
    def tracker(self) -> SampleCounter:
        """What `make_loader` uses to count the samples it hands over."""
        return SampleCounter(self)

    def state_dict(self, consumed_samples: int | None = None) -> dict[str, Any]:
        """The global stream position as a plain dict (see `fm_loader.order.state.LoaderState`).

        `consumed_samples`: samples this rank's trainer consumed since the last `set_epoch` /
        `load_state_dict`. Leave it out when iterating this object directly (it counts what it
        yielded); pass it when DataLoader workers iterate copies (or use `make_loader`, which
        counts for you). Ranks advance in lockstep, so the position is start + consumed * W.
        """
        consumed = self._yielded if consumed_samples is None else consumed_samples
        if not 0 <= consumed <= len(self):
            raise ValueError(
                f"consumed_samples={consumed} is outside this rank's 0..{len(self)} samples "
                "left in the epoch since the last restart"
            )
        position = min(self.epoch_length, self._start + consumed * self.world_size)
        cursor = self._state_cursor
        if cursor.position > position:  # asked for an earlier point: walk again from the start
            cursor = self._state_cursor = ScheduleCursor(
                self._weights, self._start, self._start_counts
            )
        cursor.take(position - cursor.position)
        if self._run is not None:
            self._run.record(self.world_size, self.seed, self.epoch, position, cursor.counts)
        return self._state(position, cursor.counts).to_dict()

    def record_run(self, run_id: str) -> None:
        """Name the training run reading this dataset: rank 0 records it beside every shard set
        now, and the position consumed at every `state_dict()` (checkpoint) after."""
        if self.rank != 0:
            return  # one writer per run: every rank knows the same global position
        self._run = RunRegistry(
            check_run_id(run_id),
            list(zip(self.manifests, self.content_hashes, strict=True)),
            self._locations,
            self.spec.keys,
        )
        self._run.record(self.world_size, self.seed, self.epoch, self._start, self._start_counts)

    def _pinned(self) -> LoaderState:
        return self._state(0, [0] * len(self._sets))

    def _parse(self, state: dict[str, Any]) -> LoaderState:
        return LoaderState.from_dict(state)

    def _resume(self, theirs: LoaderState) -> None:
        if theirs.position > self.epoch_length:
            raise ValueError(
                f"loader state is at position {theirs.position}, past this epoch's "
                f"{self.epoch_length} samples"
            )
        self.epoch = theirs.epoch
        self._restart(theirs.position, theirs.source_counts)

    def _state(self, position: int, counts: Sequence[int]) -> LoaderState:
        return LoaderState(
            format_version=STATE_FORMAT_VERSION,
            plan_version=PLAN_VERSION,
            schema_fingerprint=self.manifest.schema_fingerprint,
            epoch=self.epoch,
            position=position,
            source_counts=tuple(counts),
            **self.stream_pins(),
        )


class SampleCounter:
    """The samples a loader handed over: ranks advance in lockstep, so a count says it all."""

    def __init__(self, dataset: FmDataset) -> None:
        self.dataset = dataset
        self.consumed = 0

    def add(self, batch: Batch) -> None:
        self.consumed += len(batch["sample_index"])

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict(consumed_samples=self.consumed)
