"""`make_dataset`: the trainer's one entry point, and the iterable dataset it returns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch.utils.data

from fm_assets.settings import Settings
from fm_loader.manifest import ShardSetManifest
from fm_loader.plan import epoch_order, rank_span, resolve_world, worker_positions
from fm_loader.resolve import (
    ResolvedShardSet,
    check_compatible,
    resolve_shard_set,
    tokenizer_file_hash,
)
from fm_loader.samples import build_sample
from fm_loader.shards import ShardSet
from fm_loader.state import STATE_FORMAT_VERSION, LoaderState

Sample = dict[str, Any]


class ShardSetDataset(torch.utils.data.IterableDataset[Sample]):
    """One rank's deterministic stream of training samples from one shard set.

    Iterating yields the rest of the current epoch for this rank, from the position set by
    `set_epoch` (0) or `load_state_dict`. Each call to `__iter__` replays from that position, in
    the parent process and in DataLoader workers alike; the order is a pure function of
    (seed, epoch, rank, world_size, worker).
    """

    def __init__(
        self,
        resolved: ResolvedShardSet,
        *,
        rank: int,
        world_size: int,
        seed: int,
        epoch: int,
    ) -> None:
        super().__init__()
        if seed < 0 or epoch < 0:
            raise ValueError(f"seed and epoch must be non-negative, got seed={seed}, epoch={epoch}")
        self.source = resolved.source
        self.manifest_sha256 = resolved.manifest_sha256
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.epoch = epoch
        self._shards = ShardSet(
            resolved.directory, resolved.manifest, cached_from=resolved.cached_from
        )
        self._start = 0  # position in this rank's block where iteration (re)starts
        self._yielded = 0  # samples yielded since that position, in this process

    @property
    def manifest(self) -> ShardSetManifest:
        return self._shards.manifest

    def __len__(self) -> int:
        """Samples this rank serves per epoch (ranks differ by at most one)."""
        start, stop = rank_span(len(self._shards), self.rank, self.world_size)
        return stop - start

    def set_epoch(self, epoch: int) -> None:
        """Start epoch `epoch` from its beginning (a new permutation of all samples)."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        self.epoch, self._start, self._yielded = epoch, 0, 0

    def __iter__(self) -> Iterator[Sample]:
        self._yielded = 0
        order = epoch_order(len(self._shards), self.seed, self.epoch)
        start, stop = rank_span(len(self._shards), self.rank, self.world_size)
        info = torch.utils.data.get_worker_info()
        worker_id, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
        seq_len = self.manifest.seq_len
        for position in worker_positions(start + self._start, stop, worker_id, num_workers):
            index = int(order[position])
            raw = self._shards.raw_sample(index)
            try:
                sample = build_sample(raw, seq_len, index)
            except ValueError as exc:
                raise ValueError(f"{self._shards.where(index)}: {exc}") from exc
            self._yielded += 1
            yield sample

    def state_dict(self) -> dict[str, Any]:
        """{format version, source, manifest hash, seed, epoch, placement, samples consumed}.

        `samples_consumed` counts the samples this object yielded. DataLoader workers iterate
        copies, so with num_workers > 0 the parent's count does not move: pass the trainer's own
        count (steps x batch size, at a step count divisible by num_workers) to `load_state_dict`
        instead. Worker-aware, elastic resume is the full loader contract's job.
        """
        return LoaderState(
            format_version=STATE_FORMAT_VERSION,
            source=self.source,
            manifest_sha256=self.manifest_sha256,
            seed=self.seed,
            epoch=self.epoch,
            rank=self.rank,
            world_size=self.world_size,
            samples_consumed=self._start + self._yielded,
        ).to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a checkpointed position; refuse a state taken against anything else."""
        theirs = LoaderState.from_dict(state)
        ours = LoaderState.from_dict(self.state_dict())
        problems = ours.mismatches(theirs)
        if problems:
            raise ValueError(
                "loader state does not match this dataset: "
                + "; ".join(problems)
                + ". Resume with the same shard set, seed and placement as the checkpoint "
                "(elastic resharding comes with the full loader contract)"
            )
        if theirs.samples_consumed > len(self):
            raise ValueError(
                f"loader state has consumed {theirs.samples_consumed} samples, more than this "
                f"rank's {len(self)} per epoch"
            )
        self.epoch, self._start, self._yielded = theirs.epoch, theirs.samples_consumed, 0


def make_dataset(
    source: str,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    seed: int = 0,
    epoch: int = 0,
    seq_len: int | None = None,
    tokenizer: str | None = None,
    expected_tokenizer_hash: str | None = None,
    expected_schema_fingerprint: str | None = None,
    settings: Settings | None = None,
    cache_dir: str | Path | None = None,
) -> ShardSetDataset:
    """Open a shard set for training and check it before the first step.

    `source` is a dataset version key ("web@v1", resolved through the `shard_sets` catalog
    table) or a shard-set directory / file:// URI. `seq_len` and `tokenizer` (a tokenizer.json
    path) choose among a version's shard sets and must match the one served. A version published
    on S3 (reached at `settings.s3_endpoint`, credentials from the standard AWS variables) is
    downloaded once per node into `cache_dir` (default `~/.cache/fm_loader`), in a directory
    named by its manifest's sha256, and read from there.

    Raises ValueError, saying what to do, on an unknown or ambiguous version, a tokenizer or
    schema mismatch, an unknown manifest format, or a remote set that fails its checksums.
    """
    rank, world_size = resolve_world(rank, world_size)
    tokenizer_hash = tokenizer_file_hash(tokenizer) if tokenizer is not None else None
    resolved = resolve_shard_set(
        source,
        seq_len=seq_len,
        tokenizer_hash=tokenizer_hash or expected_tokenizer_hash,
        settings=settings,
        cache_dir=Path(cache_dir) if cache_dir is not None else None,
    )
    check_compatible(
        resolved.manifest,
        seq_len=seq_len,
        tokenizer_hash=tokenizer_hash,
        expected_tokenizer_hash=expected_tokenizer_hash,
        expected_schema_fingerprint=expected_schema_fingerprint,
    )
    return ShardSetDataset(resolved, rank=rank, world_size=world_size, seed=seed, epoch=epoch)
