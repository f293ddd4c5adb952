"""A dataset version's curated text, tokenized and packed in the loader with a given tokenizer.

    dataset = make_dataset("chat@v2", tokenizer="experiment.json", seq_len=4096,
                           tokenize_online=True)

The plan is the shard sets' plan with documents in place of samples (`fm_loader.order.mixture`,
`fm_loader.order.plan`): one epoch is a global stream of documents, mixed per position by the quota
method and shuffled in windows. The stream is cut into pack groups of `docs_per_pack` consecutive
positions; a group is the unit placed on ranks and workers, tokenized and packed
(best-fit-decreasing, `fm_loader.samples.packing`) by the worker that serves it, so no process
tokenizes anything twice. Groups not yet consumed are dealt round-robin to ranks (rank r takes the
r-th, (r+W)-th, ... of them) and a rank's groups round-robin to its workers.

A sample is identified by (pack_group, pack_index); every sample carries both and its group's
sample count (`pack_size`), and the state records which groups were consumed
(`fm_loader.order.pack_state`), so a checkpoint taken anywhere, with any world size or worker
count, resumes without serving a sample twice or skipping one. Samples have the same layout as
a shard set's (`input_ids`, `labels`, `loss_mask`, `position_ids`, `cu_seqlens`, `doc_ids`);
`source` is the source of a sample's first document (a packed sample may mix sources), and
`sample_index` is `pack_group * 2**20 + pack_index`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from fm_loader.format.text_set import TextSetManifest, TextShards
from fm_loader.options import LoaderOptions
from fm_loader.order.mixture import MixtureSpec, ScheduleCursor
from fm_loader.order.pack_state import (
    ONLINE_FORMAT_VERSION,
    ONLINE_PLAN_VERSION,
    ONLINE_STATE_KIND,
    Consumption,
    OnlineState,
    merge_states,
    with_consumption,
)
from fm_loader.samples.kind import Arrays, Batch, Field, Sample
from fm_loader.samples.packing import OnlineTokenizer, pack, sample_arrays
from fm_loader.samples.token_blocks import Block, RawBlock
from fm_loader.samples.tokens import TokenSamples
from fm_loader.serving.stream import StreamDataset
from fm_loader.sources.resolve import ResolvedSet

_INDEX_BITS = 20


@dataclass(frozen=True)
class _Packed:
    group: int
    index: int
    size: int  # samples of the group
    input_ids: npt.NDArray[np.int64]
    spans: npt.NDArray[np.int32]
    doc_ids: list[str]
    source: int


class OnlineDataset(StreamDataset[TextShards]):
    """One rank's share of a mixture of text sets, tokenized and packed as it is read."""

    extra_columns = ("pack_group", "pack_index", "pack_size")

    def __init__(
        self,
        texts: Sequence[ResolvedSet[TextSetManifest]],
        spec: MixtureSpec,
        tokenizer: OnlineTokenizer,
        options: LoaderOptions,
    ) -> None:
        if options.seq_len is None:
            raise ValueError("a dataset tokenized in the loader needs seq_len=N to pack into")
        self.tokenizer = tokenizer
        self._seq_len = options.seq_len
        self.kind = TokenSamples(options.seq_len)
        self.docs_per_pack = options.docs_per_pack
        sets = [TextShards(t.directory, t.manifest, remote=t.remote) for t in texts]
        super().__init__(sets, texts, spec, options)  # the stream's positions are documents
        self.num_groups = -(-self.epoch_length // self.docs_per_pack)

    @property
    def seq_len(self) -> int:
        return self._seq_len

    @property
    def tokenizer_hash(self) -> str:
        return self.tokenizer.tokenizer_hash

    def __len__(self) -> int:
        raise TypeError(
            "a dataset tokenized in the loader does not know its number of samples before it "
            "has tokenized them; count batches as they come"
        )

    def slot_fields(self, batch_size: int) -> dict[str, Field]:
        return self.kind.slot_fields(batch_size, self.extra_columns)

    def _restart_epoch(self) -> None:
        self._start = Consumption()  # what was consumed before this (re)start
        self._yielded = Consumption()  # in-process iteration since

    # -- placement and packing ---------------------------------------------------------------
    def _my_groups(self, worker: int, num_workers: int) -> Iterator[int]:
        """This rank's and worker's share of the groups not consumed yet, in ascending order."""
        dealt = mine = 0
        for group in range(self._start.frontier, self.num_groups):
            if group in self._start.done:
                continue
            if dealt % self.world_size == self.rank:
                if mine % num_workers == worker:
                    yield group
                mine += 1
            dealt += 1

    def _packed(self, worker: int, num_workers: int) -> Iterator[_Packed | int]:
        """This worker's samples, group by group (a bare group number: it packed into none)."""
        orders = self._source_orders()
        cursor = ScheduleCursor(self._weights)
        for group in self._my_groups(worker, num_workers):
            start = group * self.docs_per_pack
            cursor.take(start - cursor.position)  # walk past the groups of others
            sources, running = cursor.take(min(self.docs_per_pack, self.epoch_length - start))
            ids = np.empty(len(sources), dtype=np.int64)
            for s, order in enumerate(orders):
                mine = sources == s
                if mine.any():
                    ids[mine] = order.sample_ids(running[mine])
            samples = self._pack_group(group, sources, ids)
            if not samples:
                yield group
            yield from samples[self._start.consumed(group) :]

    def _pack_group(
        self, group: int, sources: npt.NDArray[np.uint8], ids: npt.NDArray[np.int64]
    ) -> list[_Packed]:
        doc_ids: list[str] = []
        texts: list[str] = []
        for s, index in zip(sources.tolist(), ids.tolist(), strict=True):
            one_id, one_text = self._sets[s].read_texts([index])
            doc_ids += one_id
            texts += one_text
        tokens = self.tokenizer.encode(texts)
        kept = [d for d, t in enumerate(tokens) if t.size]  # no tokens: nothing to serve
        bins = pack([tokens[d].size for d in kept], self.seq_len)
        if len(bins) >= 1 << _INDEX_BITS:
            raise ValueError(
                f"pack group {group} packs into {len(bins)} samples; lower docs_per_pack"
            )
        out = []
        for index, segments in enumerate(bins):
            segments = [(kept[d], offset, length) for d, offset, length in segments]
            input_ids, spans = sample_arrays(segments, tokens, self.seq_len, self.tokenizer.pad_id)
            out.append(
                _Packed(
                    group,
                    index,
                    len(bins),
                    input_ids,
                    spans,
                    [doc_ids[d] for d, _, _ in segments],
                    int(sources[segments[0][0]]),
                )
            )
        return out

    def _block(self, items: list[_Packed], out: Arrays | None = None) -> Block:
        raw = RawBlock(
            np.stack([p.input_ids for p in items]),
            [p.spans for p in items],
            [p.doc_ids for p in items],
            np.array([(p.group << _INDEX_BITS) + p.index for p in items], dtype=np.int64),
            np.array([p.source for p in items], dtype=np.int64),
        )
        return self.kind.build(raw, out)

    # -- iteration -----------------------------------------------------------------------------
    def batch_stream(
        self,
        worker: int = 0,
        num_workers: int = 1,
        *,
        arrays: bool = False,
        out: Callable[[int], Arrays] | None = None,
    ) -> Iterator[Batch]:
        """Collated batches of `batch_size` samples this rank and worker serve (numpy arrays with
        `arrays=True`), each with its samples' pack_group, pack_index and pack_size and the
        groups finished without a sample since the last batch (`empty_groups`)."""
        pending: list[_Packed] = []
        empty: list[int] = []
        items = self._packed(worker, num_workers)
        while True:
            item = next(items, None)
            if isinstance(item, int):
                empty.append(item)
                continue
            if item is not None:
                pending.append(item)
            if pending and (item is None or len(pending) == self.batch_size):
                block = self._block(pending, None if out is None else out(len(pending)))
                batch = block.batch_arrays() if arrays else block.batch()
                for name, values in zip(
                    self.extra_columns,
                    zip(*((p.group, p.index, p.size) for p in pending), strict=True),
                    strict=True,
                ):
                    array = np.asarray(values, dtype=np.int64)
                    batch[name] = array if arrays else torch.from_numpy(array)
                batch["empty_groups"] = empty
                pending, empty = [], []
                yield batch
            if item is None:
                return

    def worker_stream(self, worker: int, num_workers: int) -> Iterator[Sample]:
        self._yielded = Consumption()
        for batch in self.batch_stream(worker, num_workers, arrays=True):
            block_rows = len(batch["pack_group"])
            tensors = {
                k: torch.from_numpy(batch[k]) for k in ("input_ids", "labels", "position_ids")
            }
            mask = torch.from_numpy(batch["loss_mask"])
            cu = batch["cu_seqlens"]
            starts = np.searchsorted(cu, np.arange(block_rows + 1) * self.seq_len)
            for group in batch["empty_groups"]:
                self._yielded.finish(group)
            for i in range(block_rows):
                group, index, size = (int(batch[k][i]) for k in self.extra_columns)
                # Counted before the yield: the consumer holds it once next() returns.
                self._yielded.add(group, index, size)
                yield {
                    **{k: v[i] for k, v in tensors.items()},
                    "loss_mask": mask[i],
                    "cu_seqlens": torch.from_numpy(
                        cu[starts[i] : starts[i + 1] + 1] - i * self.seq_len
                    ),
                    "doc_ids": batch["doc_ids"][i],
                    "sample_index": int(batch["sample_index"][i]),
                    "num_tokens": int(batch["num_tokens"][i]),
                    "source": int(batch["source"][i]),
                    "pack_group": group,
                    "pack_index": index,
                    "pack_size": size,
                }

    # -- checkpointing -------------------------------------------------------------------------
    def tracker(self) -> PackTracker:
        """What `make_loader` uses to record the samples it hands over."""
        return PackTracker(self)

    def state_dict(self, consumed: Consumption | None = None) -> dict[str, Any]:
        """This rank's state: what was consumed before the last (re)start plus `consumed` (by
        default what iterating this object in-process yielded). A job's state is the union of
        its ranks' (`fm_loader.merge_states`)."""
        merged = self._start.copy()
        merged.merge(consumed if consumed is not None else self._yielded)
        return with_consumption(self._pinned(), merged).to_dict()

    def _pinned(self) -> OnlineState:
        return OnlineState(
            kind=ONLINE_STATE_KIND,
            format_version=ONLINE_FORMAT_VERSION,
            plan_version=ONLINE_PLAN_VERSION,
            docs_per_pack=self.docs_per_pack,
            epoch=self.epoch,
            frontier=0,
            done=(),
            partial=(),
            **self.stream_pins(),
        )

    def _parse(self, state: dict[str, Any]) -> OnlineState:
        return OnlineState.from_dict(state)

    def _resume(self, theirs: OnlineState) -> None:
        self.epoch = theirs.epoch
        self._start = theirs.consumption()
        self._yielded = Consumption()


class PackTracker:
    """The samples a loader handed over, by pack group; its state is the job's when every rank
    reports (gathered over torch.distributed when it is initialized)."""

    def __init__(self, dataset: OnlineDataset) -> None:
        self.dataset = dataset
        self.consumed = Consumption()

    def add(self, batch: Batch) -> None:
        for group in batch.pop("empty_groups"):
            self.consumed.finish(int(group))
        for group, index, size in zip(
            *(batch[k].tolist() for k in OnlineDataset.extra_columns), strict=True
        ):
            self.consumed.add(group, index, size)

    def state_dict(self) -> dict[str, Any]:
        mine = self.dataset.state_dict(self.consumed)
        import torch.distributed as dist

        if self.dataset.world_size > 1 and dist.is_available() and dist.is_initialized():
            states: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(states, mine)
            return merge_states(states)
        return mine
