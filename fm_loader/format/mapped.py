"""Memory-mapped MDS shards of one set, each verified by sha256 the first time a process maps it.

The base of `ShardSet` (packed token samples) and `TextShards` (documents' text): index.json is
checked against the set's manifest at construction, and a shard of a cached set that fails its
checksum is fetched again once (its `Refetch`, `fm_loader.storage.fetch.RemoteShards`) before the
loader gives up.

A loader's worker processes share what they verified (`VerifiedTable`): the first process to
hash a shard records the file's identity (inode, size, mtime), and another one mapping the same
unchanged file skips the hash, so a shard is hashed once per loader, not once per worker and
epoch. A file replaced since (a refetch renames a new inode into place) is hashed again.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fm_loader.format.manifest import INDEX_NAME, ShardInfo

if TYPE_CHECKING:
    import torch


OFFSET_PAIR = struct.Struct("<II")  # MDS: consecutive uint32 sample offsets / column sizes


class Refetch(Protocol):
    """Where a cached set was downloaded from, able to download one of its shards again."""

    @property
    def uri(self) -> str: ...

    def refetch(self, shard: ShardInfo) -> None: ...


class VerifiedTable:
    """Per set and shard, the identity (inode, size, mtime ns) of a file some process of this
    loader hashed and found good; zeros when none did. Shared memory: workers inherit it."""

    def __init__(self, shard_counts: list[int]) -> None:
        # Imported here: the platform reads shards through this module (its checks, `fm verify`)
        # and must not pay torch's ~2 s import for it.
        import torch

        table = torch.zeros(len(shard_counts), max(shard_counts, default=1), 3, dtype=torch.int64)
        self.table: torch.Tensor = table.share_memory_()  # type: ignore[no-untyped-call]

    def row(self, source: int) -> torch.Tensor:
        return self.table[source]


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


class MappedShards:
    """The MDS shards of one set, mapped on first use and checked against their sha256."""

    def __init__(
        self,
        directory: Path,
        set_key: str,
        shards: tuple[ShardInfo, ...],
        columns: dict[str, str],
        *,
        rebuild_hint: str,
        remote: Refetch | None = None,
    ) -> None:
        """`remote`: where `directory` was downloaded from when it is a cache entry; a shard
        that fails its checksum is then fetched again once before the loader gives up."""
        self.directory, self.set_key, self.shards = directory, set_key, shards
        self.rebuild_hint = rebuild_hint
        # A damaged cached copy is fixed by downloading it again, not by rebuilding the set.
        self.corrupt_hint = (
            f"{directory} is a cached copy of {remote.uri}: delete it and the next "
            "make_dataset downloads it again"
            if remote is not None
            else rebuild_hint
        )
        index = self._read_index()
        self._check_index(index, columns)
        self.index_shards: list[dict[str, Any]] = index["shards"]
        self.bounds = np.cumsum([0] + [s.samples for s in shards])
        self.maps: dict[int, mmap.mmap] = {}
        self.remote = remote
        self.fetch_latencies: list[float] = []  # seconds to map + verify (+ refetch) each shard
        self.refetched_bytes = 0  # cached shards that failed their check and were fetched again
        self.verified: torch.Tensor | None = None  # this set's row of a loader's VerifiedTable

    def __len__(self) -> int:
        return int(self.bounds[-1])

    def __getstate__(self) -> dict[str, Any]:
        # Memory maps do not pickle (spawned workers): a worker re-maps and re-verifies.
        state = self.__dict__.copy()
        state["maps"] = {}
        return state

    def _read_index(self) -> dict[str, Any]:
        path = self.directory / INDEX_NAME
        try:
            index: dict[str, Any] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read MDS index {path}: {exc}; {self.corrupt_hint}") from exc
        return index

    def _check_index(self, index: dict[str, Any], columns: dict[str, str]) -> None:
        """index.json must describe exactly the manifest's shards, in the expected columns."""
        names, encodings = sorted(columns), [columns[c] for c in sorted(columns)]
        shards = index.get("shards", [])
        listed = [(s.name, s.samples, s.bytes) for s in self.shards]
        found = [(s["raw_data"]["basename"], s["samples"], s["raw_data"]["bytes"]) for s in shards]
        if listed != found:
            raise ValueError(
                f"{self.directory}: index.json lists shards {found}, the manifest {listed}; "
                f"the set is inconsistent, {self.corrupt_hint}"
            )
        for shard in shards:
            if shard["column_names"] != names or shard["column_encodings"] != encodings:
                raise ValueError(
                    f"{self.directory}/{shard['raw_data']['basename']}: columns "
                    f"{dict(zip(shard['column_names'], shard['column_encodings'], strict=False))} "
                    f"differ from the loader's schema {columns}; {self.rebuild_hint}"
                )
            if shard.get("compression") or shard.get("zip_data"):
                raise ValueError(
                    f"{self.directory}: shard {shard['raw_data']['basename']} is compressed; "
                    "sets are stored uncompressed so they can be memory-mapped; "
                    f"{self.rebuild_hint}"
                )

    def locate(self, index: int) -> tuple[int, int]:
        """(shard number, sample number inside the shard) of a global sample index."""
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range [0, {len(self)})")
        shard = int(np.searchsorted(self.bounds, index, side="right")) - 1
        return shard, index - int(self.bounds[shard])

    def where(self, index: int) -> str:
        shard, local = self.locate(index)
        return f"shard {self.shards[shard].name} sample {local}"

    def open_shard(self, shard: int) -> mmap.mmap:
        """Map a shard, verifying its sha256 against the manifest the first time it is used.

        A cached copy that fails is fetched again once; a local set's shard raises at once.
        """
        mapped = self.maps.get(shard)
        if mapped is not None:
            return mapped
        started = time.perf_counter()
        info = self.shards[shard]
        problem = None
        for attempt in range(2 if self.remote is not None else 1):
            if attempt:
                self.remote.refetch(info)  # type: ignore[union-attr]
                self.refetched_bytes += info.bytes
            mapped, problem = self._map_verified(shard)
            if mapped is not None:
                self.maps[shard] = mapped
                self.fetch_latencies.append(time.perf_counter() - started)
                return mapped
        raise ValueError(f"{problem}; {self.corrupt_hint}")

    def _map_verified(self, shard: int) -> tuple[mmap.mmap | None, str]:
        info = self.shards[shard]
        path = self.directory / info.name
        identity = _identity(path)
        try:
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as exc:
            return None, f"cannot open shard {path}: {exc}"
        known = self.verified
        if (
            known is not None
            and identity is not None
            and len(mapped) == info.bytes
            and tuple(known[shard].tolist()) == identity
            and _identity(path) == identity
        ):
            return mapped, ""  # hashed by another process of this loader, file unchanged since
        # Hash the mapped bytes themselves: what we verify is exactly what we serve.
        digest = hashlib.sha256(mapped).hexdigest()
        if digest != info.sha256 or len(mapped) != info.bytes:
            size = len(mapped)
            mapped.close()
            return None, (
                f"shard {info.name} of {self.set_key} failed its checksum: "
                f"expected sha256 {info.sha256} ({info.bytes} bytes), got {digest} "
                f"({size} bytes); the file is corrupt"
            )
        if known is not None and identity is not None and _identity(path) == identity:
            import torch  # `known` is a VerifiedTable row: torch is loaded already

            known[shard] = torch.tensor(identity, dtype=torch.int64)
        return mapped, ""

    def close(self) -> None:
        for mapped in self.maps.values():
            mapped.close()
        self.maps.clear()
