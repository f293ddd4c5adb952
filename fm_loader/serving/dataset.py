"""`make_dataset`: the trainer's one entry point, and the iterable dataset it returns."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch.utils.data

from fm_loader.format.manifest import ShardSetManifest
from fm_loader.format.shard_set import ShardSet
from fm_loader.order.mixture import MixtureSpec, ScheduleCursor
from fm_loader.order.plan import placement_batch_size, rank_positions, worker_serves
from fm_loader.order.state import PLAN_VERSION, STATE_FORMAT_VERSION, LoaderState
from fm_loader.samples.tokens import Block, BlockError, RawBlock
from fm_loader.serving.open_sets import OpenSets
from fm_loader.sources.provenance import RunRegistry, check_run_id
from fm_loader.sources.resolve import ResolvedShardSet, check_same_layout, location_of

Sample = dict[str, Any]
Batch = dict[str, Any]
_SAMPLES_PER_BLOCK = 128  # samples built together when iterating sample by sample
DEFAULT_SHUFFLE_WINDOW = 1 << 16  # samples: spans several 64 MB shards at seq_len 2048
_POSITIONS_PER_STEP = 1 << 14  # global positions scheduled at a time


class FmDataset(torch.utils.data.IterableDataset[Sample], OpenSets[ShardSet]):
    """One rank's deterministic share of the global sample stream of a mixture of shard sets.

    Iterating yields the rest of the current epoch for this rank, from the position set by
    `set_epoch` or `load_state_dict`. Each `__iter__` replays from that position, in the parent
    process and in DataLoader workers alike; the stream is a pure function of the sources, the
    mixture, seed, epoch and shuffle window, and placement a pure function of (rank, world_size,
    worker, batch_size). See docs/loader.md.
    """

    def __init__(
        self,
        resolved: Sequence[ResolvedShardSet],
        spec: MixtureSpec,
        *,
        rank: int,
        world_size: int,
        seed: int = 0,
        epoch: int = 0,
        shuffle_window: int = DEFAULT_SHUFFLE_WINDOW,
        batch_size: int | None = None,
    ) -> None:
        super().__init__()
        chosen_badly = batch_size is not None and batch_size < 1
        if seed < 0 or epoch < 0 or shuffle_window < 1 or chosen_badly:
            raise ValueError(
                "seed and epoch must be non-negative and shuffle_window and batch_size positive, "
                f"got seed={seed}, epoch={epoch}, shuffle_window={shuffle_window}, "
                f"batch_size={batch_size}"
            )
        check_same_layout(resolved)
        self.spec = spec
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.shuffle_window = shuffle_window
        self.batch_size, self.batch_size_chosen_by = placement_batch_size(batch_size)
        self._run: RunRegistry | None = None  # set by `record_run` on rank 0
        self._locations = [location_of(r) for r in resolved]
        self._hold([ShardSet(r.directory, r.manifest, remote=r.remote) for r in resolved], resolved)
        sizes = [len(s) for s in self._sets]
        self._weights = spec.integer_weights(sizes)
        self.epoch_length = spec.epoch_length(sizes)
        self.set_epoch(epoch)

    @property
    def manifest(self) -> ShardSetManifest:
        """The first source's manifest (all sources share seq_len, tokenizer and schema)."""
        return self._sets[0].manifest

    @property
    def seq_len(self) -> int:
        return self.manifest.seq_len

    @property
    def manifests(self) -> list[ShardSetManifest]:
        return [s.manifest for s in self._sets]

    def __len__(self) -> int:
        """Samples this rank serves from the current position to the end of the epoch."""
        return len(rank_positions(self._start, self.epoch_length, self.rank, self.world_size))

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning (new shard and window permutations)."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        self.epoch = epoch
        self._restart(0, [0] * len(self._sets))

    def _restart(self, position: int, counts: Sequence[int]) -> None:
        self._start, self._start_counts = position, list(counts)
        self._yielded = 0
        self._state_cursor = ScheduleCursor(self._weights, position, counts)

    # -- iteration ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Sample]:
        info = torch.utils.data.get_worker_info()
        worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        return self.worker_stream(worker, num_workers)

    def worker_stream(self, worker: int, num_workers: int) -> Iterator[Sample]:
        """The samples DataLoader worker `worker` of `num_workers` serves (what `__iter__` uses)."""
        self._yielded = 0
        for sources, ids in self._groups(worker, num_workers, _SAMPLES_PER_BLOCK):
            block = self._block(sources, ids)
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
        out: Callable[[int], dict[str, npt.NDArray[Any]]] | None = None,
    ) -> Iterator[Batch]:
        """Collated batches of `batch_size` samples this rank and worker serve, built whole
        (as numpy arrays with `arrays=True`). `out(count)`, called once per batch, gives the
        [count, seq_len] arrays to build the batch's tensors into (see `Block`)."""
        for sources, ids in self._groups(worker, num_workers, self.batch_size):
            block = self._block(sources, ids, None if out is None else out(len(ids)))
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

    def _block(
        self,
        sources: npt.NDArray[np.intp],
        ids: npt.NDArray[np.int64],
        out: dict[str, npt.NDArray[Any]] | None = None,
    ) -> Block:
        seq_len = self.manifest.seq_len
        tokens = np.empty((len(ids), seq_len), dtype=self.manifest.token_dtype)
        spans: list[npt.NDArray[np.int32]] = [np.empty(0, np.int32)] * len(ids)
        doc_ids: list[list[str]] = [[]] * len(ids)
        for s, shards in enumerate(self._sets):
            rows = np.flatnonzero(sources == s)
            if rows.size == 0:
                continue
            t, sp, d = shards.read_raw(ids[rows])
            tokens[rows] = t
            for row, one_spans, one_ids in zip(rows.tolist(), sp, d, strict=True):
                spans[row], doc_ids[row] = one_spans, one_ids
        raw = RawBlock(tokens, spans, doc_ids, ids.astype(np.int64), sources.astype(np.int64))
        try:
            return Block(raw, out)
        except BlockError as exc:
            source, index = int(sources[exc.position]), int(ids[exc.position])
            raise ValueError(f"{self._sets[source].where(index)}: {exc}") from exc

    def _assigned(
        self, worker: int, num_workers: int
    ) -> Iterator[tuple[npt.NDArray[np.intp], npt.NDArray[np.int64]]]:
        """(source, sample id) arrays, chunk by chunk, of what this rank and worker serve."""
        orders = self._source_orders(self.seed, self.epoch, self.shuffle_window)
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
            [
                (s.manifest, digest)
                for s, digest in zip(self._sets, self.content_hashes, strict=True)
            ],
            self._locations,
            self.spec.keys,
        )
        self._run.record(self.world_size, self.seed, self.epoch, self._start, self._start_counts)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a checkpointed global position, with any world size and worker count.

        Refuses a state taken against another stream: different sources or content, mixture,
        tokenizer, schema, seq_len, seed, shuffle window or plan version.
        """
        theirs = LoaderState.from_dict(state)
        problems = self._state(0, [0] * len(self._sets)).mismatches(theirs)
        if problems:
            raise ValueError(
                "loader state does not match this dataset: "
                + "; ".join(problems)
                + ". Resume with the same sources, mixture, seed and shuffle_window as the "
                "checkpoint, or start a fresh epoch with set_epoch()"
            )
        if theirs.position > self.epoch_length:
            raise ValueError(
                f"loader state is at position {theirs.position}, past this epoch's "
                f"{self.epoch_length} samples"
            )
        self.epoch = theirs.epoch
        self._restart(theirs.position, theirs.source_counts)

    def _state(self, position: int, counts: Sequence[int]) -> LoaderState:
        manifest = self.manifest
        return LoaderState(
            format_version=STATE_FORMAT_VERSION,
            plan_version=PLAN_VERSION,
            sources=self.spec.keys,
            content_hashes=self.content_hashes,
            mixture_mode=self.spec.mode,
            mixture_weights=self.spec.weights,
            tokenizer_hash=manifest.tokenizer_hash,
            schema_fingerprint=manifest.schema_fingerprint,
            seq_len=manifest.seq_len,
            seed=self.seed,
            shuffle_window=self.shuffle_window,
            epoch=self.epoch,
            position=position,
            source_counts=tuple(counts),
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
