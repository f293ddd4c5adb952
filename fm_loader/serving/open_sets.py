"""The sets a dataset reads, and the bookkeeping of their shards that both datasets share.

`FmDataset` (shard sets) and `OnlineDataset` (text sets) each open one `MappedShards` per
source. What the loader asks of either beyond its samples is the same: the time each shard took
to map and verify (and refetch), the bytes of cached shards fetched again, one table in which
the dataset's copies in worker processes share what they verified, and closing it all, which
also releases the pins that keep the sources' cache entries from being evicted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from fm_loader.format.mapped import MappedShards, VerifiedTable
from fm_loader.order.plan import SourceOrder

if TYPE_CHECKING:
    from fm_loader.storage.cache import EntryPin
    from fm_loader.storage.fetch import CacheUse

SetT = TypeVar("SetT", bound=MappedShards)


class Resolved(Protocol):
    """What opening a source found (`ResolvedShardSet`, `ResolvedTextSet`)."""

    @property
    def manifest_sha256(self) -> str: ...

    @property
    def pin(self) -> EntryPin | None: ...

    @property
    def cache_use(self) -> CacheUse | None: ...


class OpenSets(Generic[SetT]):
    """A dataset's open sources, one set each, in mixture order (a base of both datasets)."""

    _sets: list[SetT]
    _pins: list[EntryPin]
    content_hashes: tuple[str, ...]  # per source: sha256 of its manifest
    cache_uses: list[CacheUse]  # per cached source: what opening its cache entry cost

    def _hold(self, sets: list[SetT], resolved: Sequence[Resolved]) -> None:
        """Keep `sets`, opened from `resolved` (same order), until `close`."""
        self._sets = sets
        self.content_hashes = tuple(r.manifest_sha256 for r in resolved)
        # Open cache entries stay pinned (never evicted) while this dataset lives.
        self._pins = [r.pin for r in resolved if r.pin is not None]
        self.cache_uses = [r.cache_use for r in resolved if r.cache_use is not None]

    def _source_orders(self, seed: int, epoch: int, window: int) -> list[SourceOrder]:
        """Each source's sample order this epoch (`fm_loader.order.plan`)."""
        return [
            SourceOrder(
                [s.samples for s in shards.shards],
                seed=seed,
                epoch=epoch,
                source=n,
                window=window,
            )
            for n, shards in enumerate(self._sets)
        ]

    def take_fetch_latencies(self) -> list[float]:
        """Shard map+verify(+refetch) times recorded in this process since the last call."""
        out: list[float] = []
        for shards in self._sets:
            out.extend(shards.fetch_latencies)
            shards.fetch_latencies.clear()
        return out

    def take_refetched_bytes(self) -> int:
        """Bytes of cached shards fetched again in this process since the last call."""
        total = sum(s.refetched_bytes for s in self._sets)
        for shards in self._sets:
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
