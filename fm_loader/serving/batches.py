"""`BatchDataset`: one rank's share of a stream placed a batch at a time, for image-text pairs.

Every batch is one unit of one source (`fm_loader.order.units`): a pair set's batches each hold
images of one aspect bucket, a token set's batches (a mixture may combine both) `batch_size` of
its packed samples. The mixture, each source's order and the placement are those of a stream of
samples, applied to units: rank r serves units G0 + r + k*W, worker w of n the rank's k-th
unit when k % n == w. So the contract holds unit by unit: over an epoch every unit, hence every
sample, is served exactly once across all ranks, also when the world size or the worker count
changes mid-epoch; the mixture holds per step to within one batch; a checkpoint is a unit
position (`fm_loader.order.batch_state`) and resuming costs O(units of one window). Each batch
says which kind it is (`kind`: "image_text" or "tokens").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from fm_loader.format.manifest import ShardSetManifest
from fm_loader.format.mapped import MappedShards
from fm_loader.format.pair_set import PairSetManifest
from fm_loader.options import LoaderOptions
from fm_loader.order.batch_state import BATCH_PLAN_VERSION, BATCH_STATE_FORMAT_VERSION, BatchState
from fm_loader.order.mixture import MixtureSpec, ScheduleCursor
from fm_loader.order.placement import rank_positions, worker_serves
from fm_loader.order.units import SourceUnits
from fm_loader.samples.image_text import ImageTextSamples, with_images
from fm_loader.samples.kind import Arrays, Batch, Field, Sample, SampleKind, sample_kind
from fm_loader.serving.stream import StreamDataset
from fm_loader.sources.resolve import ResolvedSet

_UNITS_PER_STEP = 1 << 12  # global unit positions scheduled at a time


class BatchDataset(StreamDataset[MappedShards]):
    """A mixture of pair sets (and token sets) served a batch of one source at a time."""

    def __init__(
        self,
        resolved: Sequence[ResolvedSet[ShardSetManifest]],
        spec: MixtureSpec,
        options: LoaderOptions,
    ) -> None:
        if options.batch_size is None:
            raise ValueError(
                "a mixture with image-text sources is served a batch at a time (each batch's "
                "images share one aspect bucket): pass batch_size= to make_dataset"
            )
        tokenizers = {r.manifest.tokenizer_hash for r in resolved}
        if len(tokenizers) > 1:
            raise ValueError(
                f"mixture sources were tokenized with {len(tokenizers)} tokenizers; mix sets "
                "built with one (pass tokenizer= to pick them)"
            )
        self.manifests = [r.manifest for r in resolved]
        self.kinds: list[SampleKind] = []
        for manifest in self.manifests:
            kind = sample_kind(manifest)
            if isinstance(kind, ImageTextSamples):
                kind = dataclasses.replace(kind, image_size=options.image_size)
            self.kinds.append(kind)
        self._unit_size = options.batch_size
        sets = [
            k.open(r.directory, r.manifest, r.remote)
            for k, r in zip(self.kinds, resolved, strict=True)
        ]
        super().__init__(sets, resolved, spec, options)

    # -- what a stream of units is ------------------------------------------------------------
    def stream_sizes(self, sets: list[MappedShards]) -> list[int]:
        return [units.count for units in self._units_of(0)]

    def _units_of(self, epoch: int) -> list[SourceUnits]:
        units = []
        for source, manifest in enumerate(self.manifests):
            if isinstance(manifest, PairSetManifest):
                groups = [(b.first, b.samples) for b in manifest.buckets]
                shard_sizes = None
            else:
                groups = [(0, manifest.num_samples)]
                shard_sizes = [s.samples for s in manifest.shards]
            units.append(
                SourceUnits(
                    groups,
                    shard_sizes,
                    batch_size=self._unit_size,
                    seed=self.seed,
                    epoch=epoch,
                    source=source,
                    window=self.shuffle_window,
                )
            )
        return units

    @property
    def seq_len(self) -> int:
        return max(m.seq_len for m in self.manifests)

    @property
    def tokenizer_hash(self) -> str:
        return self.manifests[0].tokenizer_hash

    def __len__(self) -> int:
        """Batches this rank serves from the current position to the end of the epoch."""
        return len(rank_positions(self._start, self.epoch_length, self.rank, self.world_size))

    def batches_left(self, batch_size: int) -> int:
        return len(self)

    def slot_fields(self, batch_size: int) -> dict[str, Field]:
        """Every source kind's arrays, each name at the largest shape any kind gives it."""
        fields: dict[str, Field] = {}
        for kind in self.kinds:
            for name, field in kind.slot_fields(batch_size).items():
                known = fields.setdefault(name, field)
                if (known.dtype, len(known.max_shape)) != (field.dtype, len(field.max_shape)):
                    raise ValueError(
                        f"sources lay out {name!r} as {known.dtype}{list(known.max_shape)} and "
                        f"{field.dtype}{list(field.max_shape)}: they cannot share a batch slot"
                    )
                largest = zip(known.max_shape, field.max_shape, strict=True)
                fields[name] = Field(field.dtype, tuple(max(x, y) for x, y in largest))
        return fields

    def finish_batch(self, batch: Batch) -> Batch:
        return with_images(batch) if batch.get("kind") == "image_text" else batch

    def _restart_epoch(self) -> None:
        self._units = self._units_of(self.epoch)
        self._restart(0, [0] * len(self._sets))

    def _restart(self, position: int, counts: Sequence[int]) -> None:
        self._start, self._start_counts = position, list(counts)
        self._yielded = 0
        self._state_cursor = ScheduleCursor(self._weights, position, counts)

    # -- iteration ------------------------------------------------------------------------
    def worker_stream(self, worker: int, num_workers: int) -> Iterator[Sample]:
        """The samples of this rank's and worker's batches, batch after batch."""
        for source, unit in self._assigned(worker, num_workers):
            block = self._read(source, unit, None)
            for i in range(len(block)):
                sample = block.sample(i)
                sample["kind"] = self.kinds[source].name
                yield sample
            self._yielded += 1

    def batch_stream(
        self,
        worker: int = 0,
        num_workers: int = 1,
        *,
        arrays: bool = False,
        out: Callable[[int], Arrays] | None = None,
    ) -> Iterator[Batch]:
        """This rank's and worker's batches, one unit each, built whole."""
        for source, unit in self._assigned(worker, num_workers):
            # A pair set's batch is built straight into the worker's slot; a token set's (in a
            # mixture, whose slot is laid out for both kinds) is built apart and copied in.
            into = (
                out
                if out is not None and isinstance(self.kinds[source], ImageTextSamples)
                else None
            )
            block = self._read(source, unit, into)
            batch = block.batch_arrays() if arrays else block.batch()
            batch["kind"] = self.kinds[source].name
            yield batch if arrays else self.finish_batch(batch)

    def _read(self, source: int, unit: int, out: Callable[[int], Arrays] | None) -> Any:
        ids = self._units[source].samples(unit)
        sources = np.full(len(ids), source, dtype=np.intp)
        return self.kinds[source].read(
            self._sets, sources, ids, None if out is None else out(len(ids))
        )

    def _assigned(self, worker: int, num_workers: int) -> Iterator[tuple[int, int]]:
        """(source, unit) of each unit this rank and worker serve, in stream order."""
        cursor = ScheduleCursor(self._weights, self._start, self._start_counts)
        position = self._start
        while position < self.epoch_length:
            n = min(_UNITS_PER_STEP, self.epoch_length - position)
            sources, running = cursor.take(n)
            first = (self.rank - (position - self._start)) % self.world_size
            offsets = np.arange(first, n, self.world_size)
            k = (position + offsets - self._start - self.rank) // self.world_size
            offsets = offsets[worker_serves(k, 1, worker, num_workers)]
            position += n
            chosen = sources[offsets].astype(np.intp)
            units = np.empty(offsets.size, dtype=np.int64)
            for s, source_units in enumerate(self._units):
                mine = chosen == s
                if mine.any():
                    units[mine] = source_units.unit_ids(running[offsets][mine])
            yield from zip(chosen.tolist(), units.tolist(), strict=True)

    # -- checkpointing --------------------------------------------------------------------
    def tracker(self) -> BatchCounter:
        return BatchCounter(self)

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """The global unit position as a plain dict (`fm_loader.order.batch_state.BatchState`).

        `consumed_batches`: batches this rank's trainer consumed since the last restart (left
        out, iterating this object directly: the batches whose samples it yielded)."""
        consumed = self._yielded if consumed_batches is None else consumed_batches
        if not 0 <= consumed <= len(self):
            raise ValueError(
                f"consumed_batches={consumed} is outside this rank's 0..{len(self)} batches left"
            )
        position = min(self.epoch_length, self._start + consumed * self.world_size)
        cursor = self._state_cursor
        if cursor.position > position:
            cursor = self._state_cursor = ScheduleCursor(
                self._weights, self._start, self._start_counts
            )
        cursor.take(position - cursor.position)
        return self._state(position, cursor.counts).to_dict()

    def _pinned(self) -> BatchState:
        return self._state(0, [0] * len(self._sets))

    def _parse(self, state: dict[str, Any]) -> BatchState:
        return BatchState.from_dict(state)

    def _resume(self, theirs: BatchState) -> None:
        if theirs.position > self.epoch_length:
            raise ValueError(
                f"loader state is at unit {theirs.position}, past this epoch's "
                f"{self.epoch_length} units"
            )
        self.epoch = theirs.epoch
        self._units = self._units_of(self.epoch)
        self._restart(theirs.position, theirs.source_counts)

    def _state(self, position: int, counts: Sequence[int]) -> BatchState:
        pins = self.stream_pins()
        return BatchState(
            format_version=BATCH_STATE_FORMAT_VERSION,
            kind="batches",
            plan_version=BATCH_PLAN_VERSION,
            schema_fingerprints=tuple(m.schema_fingerprint for m in self.manifests),
            batch_size=self._unit_size,
            epoch=self.epoch,
            position=position,
            source_counts=tuple(counts),
            **pins,
        )


class BatchCounter:
    """The batches a loader handed over: ranks advance in lockstep, a batch at a time."""

    def __init__(self, dataset: BatchDataset) -> None:
        self.dataset = dataset
        self.consumed = 0

    def add(self, batch: Batch) -> None:
        self.consumed += 1

    def state_dict(self) -> dict[str, Any]:
        return self.dataset.state_dict(consumed_batches=self.consumed)


def bucket_runs(buckets: npt.NDArray[np.int64]) -> int:
    """How many runs of one bucket a sequence of bucket indices holds (1 for a homogeneous
    batch)."""
    return int(1 + np.count_nonzero(np.diff(buckets))) if len(buckets) else 0
