"""Pre-warming a node's cache before a run starts, and what it did.

    reports = prewarm("web@v3", cache_dir="/nvme/fm_cache")   # every shard set of web@v3
    reports = prewarm("web@v3/9ad33b4b39a9-s2048")             # one shard set

Every shard and the manifest of each set land in the cache verified: a shard fetched now is
hashed as it streams in; one already there is hashed again (a copy damaged on disk is fetched
anew). Afterwards `make_dataset(..., cache_dir=...)` serves whole epochs from the cache without
reading a shard from the object store. Safe beside running trainers and other pre-warms: they
share the cache's locks (`fm_loader.storage.cache_dir`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from fm_loader.settings import CatalogLocation, load_loader_settings
from fm_loader.sources.catalog import Location, shard_set_locations
from fm_loader.sources.resolve import tokenizer_file_hash
from fm_loader.storage.cache import is_remote, open_cached
from fm_loader.storage.cache_dir import default_cache_dir


@dataclass(frozen=True)
class WarmReport:
    """One set pre-warmed: how much was already there, fetched and verified, and how fast."""

    shard_set_key: str
    uri: str
    manifest_sha256: str
    entry: Path | None  # None: a local set, read in place and never cached
    bytes_total: int
    warm_bytes: int  # already in the cache (hashed again)
    fetched_bytes: int  # downloaded now
    seconds: float

    @property
    def hit_rate(self) -> float:
        """Share of the set's bytes that were already warm."""
        return self.warm_bytes / self.bytes_total if self.bytes_total else 1.0

    @property
    def mb_per_s(self) -> float:
        """Bytes made warm and verified (fetched or re-hashed) per second, in MB."""
        return self.bytes_total / self.seconds / 1e6 if self.seconds > 0 else 0.0


def prewarm(
    source: str,
    *,
    cache_dir: str | Path | None = None,
    settings: CatalogLocation | None = None,
    seq_len: int | None = None,
    tokenizer: str | Path | None = None,
) -> list[WarmReport]:
    """Download and verify every shard set `source` names into the node's cache.

    `source`: a version key (each of its shard sets, narrowed by `seq_len` / `tokenizer`), a
    shard-set key (`web@v3/<tokenizer hash[:12]>-s<seq_len>`) or an `s3://` URI. Local sets
    are read in place: reported, nothing copied. Raises ValueError naming the set when it is bad
    in the store, and CacheFull when the cache's quota cannot make room.
    """
    settings = settings or load_loader_settings()
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    tokenizer_hash = tokenizer_file_hash(tokenizer) if tokenizer is not None else None
    locations = shard_set_locations(
        source, seq_len=seq_len, tokenizer_hash=tokenizer_hash, settings=settings
    )
    return [warm(location, root, settings.s3_endpoint) for location in locations]


def warm(location: Location, root: Path, s3_endpoint: str | None) -> WarmReport:
    """Pre-warm one located set into the cache at `root`."""
    if not is_remote(location.uri):
        return WarmReport(
            location.shard_set_key, location.uri, location.manifest_sha256, None, 0, 0, 0, 0.0
        )
    started = time.perf_counter()
    cached = open_cached(
        location.uri,
        location.manifest_sha256,
        cache_dir=root,
        s3_endpoint=s3_endpoint,
        verify_all=True,
    )
    seconds = time.perf_counter() - started
    cached.pin.close()
    use = cached.use
    return WarmReport(
        shard_set_key=location.shard_set_key,
        uri=location.uri,
        manifest_sha256=location.manifest_sha256,
        entry=cached.directory,
        bytes_total=use.warm_bytes + use.fetched_bytes,
        warm_bytes=use.warm_bytes,
        fetched_bytes=use.fetched_bytes,
        seconds=seconds,
    )
