"""A node-local cache of remote (`s3://`) sets, keyed by the sha256 of their manifest.

    <cache dir>/<manifest sha256>/                  one set
        fm_cache_entry.json                         where it comes from, its shards and bytes
        index.json, shard.NNNNN.mds, ...            each appears only once it matched its sha256
        .shard.NNNNN.mds.tmp-<pid>-<random>         a shard being downloaded (never read)
        fm_manifest.json                            written last: the set is complete

A set is downloaded by one process at a time (an exclusive flock on its entry directory; see
`fm_loader.storage.cache_dir` for the locks, the quota and eviction); every other trainer or
pre-warm of the same set waits for it and then reads the same copy. Each shard is written under a
hidden temporary name and renamed into place only after its sha256 and size matched the manifest, so
no partial file is ever visible, and a download cut short keeps the shards it finished: the next one
fetches only what is missing. The entry's name is the hash of the manifest the catalog pinned, and a
rebuilt set has a new manifest, so a stale copy is never served. Shards are read in place and
re-verified when a process first maps them, as local sets are. A copy of a set a purge rewrote
is deleted at the set's next open (`fm_loader.storage.cache_purge`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fm_loader.format.manifest import INDEX_NAME, SHARD_SETS
from fm_loader.format.set_format import SetFormat
from fm_loader.storage.cache_dir import (
    ENTRY_INFO_NAME,
    default_cache_dir,
    locked,
    make_room,
)
from fm_loader.storage.cache_purge import refuse_purged
from fm_loader.storage.cache_usage import record_stored
from fm_loader.storage.fetch import CacheUse, RemoteShards, file_sha256
from fm_loader.storage.retry import StorageUnavailable

__all__ = ["default_cache_dir"]


def is_remote(location: str) -> bool:
    """True for locations the cache serves (`s3://`); local paths and file:// are read in place."""
    return location.startswith("s3://")


class EntryPin:
    """A shared flock on an open entry: eviction skips the set while this process holds it.

    Released by `close()`, when the object is collected, or by the kernel if the process dies.
    Not carried to spawned workers (their parent holds it for them).
    """

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        self.close()

    def __getstate__(self) -> dict[str, object]:
        return {"_fd": None}


@dataclass
class CachedSet:
    """A complete local copy of a remote set, pinned while this object is open."""

    directory: Path
    pin: EntryPin
    use: CacheUse = field(default_factory=CacheUse)


def open_cached(
    uri: str,
    manifest_sha256: str,
    *,
    cache_dir: Path | None,
    s3_endpoint: str | None,
    set_format: SetFormat[Any] = SHARD_SETS,
    verify_all: bool = False,
) -> CachedSet:
    """The entry of the set at `uri` whose manifest hashes to `manifest_sha256`, complete and
    pinned (shared lock held) for as long as the result is open.

    Downloads what is missing first (once per node: concurrent callers wait and reuse it),
    making room under the cache's quota. `verify_all` (pre-warm): re-hash the shards already
    there too, fetching any that fail. Raises ValueError, saying what to do, when the published
    set does not match the pinned manifest or a shard its checksum, and CacheFull when the quota
    cannot make room. First, the cache's copies of what a purge replaced of this set are
    deleted (`fm_loader.storage.cache_purge`), and a purged manifest is refused.
    """
    root = cache_dir if cache_dir is not None else default_cache_dir()
    if root.is_dir():
        refuse_purged(uri, manifest_sha256, root, s3_endpoint)
    entry = root / manifest_sha256
    remote = RemoteShards(uri, entry, s3_endpoint, set_format.manifest_name)
    use = CacheUse()
    opening = _Opening(entry, manifest_sha256, remote, set_format, use, verify_all)
    while True:
        root.mkdir(parents=True, exist_ok=True)
        entry.mkdir(exist_ok=True)
        fd = os.open(entry, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            if _still_there(fd, entry) and _complete(entry, set_format):
                # Shared lock only: other trainers keep reading while a pre-warm re-verifies.
                _check_entry(opening)
                _touch(entry)
                return CachedSet(entry, EntryPin(fd), use)
            fcntl.flock(fd, fcntl.LOCK_EX)  # to download (flock converts: re-check after)
            if not _still_there(fd, entry) or _complete(entry, set_format):
                os.close(fd)  # evicted, or completed by another process, while we waited
                continue
            _fill(opening)
            with locked(root, fcntl.LOCK_SH):  # no eviction while the lock is converted
                fcntl.flock(fd, fcntl.LOCK_SH)
            _touch(entry)
            return CachedSet(entry, EntryPin(fd), use)
        except BaseException:
            os.close(fd)
            raise


def cached_shard_set(
    uri: str, manifest_sha256: str, *, cache_dir: Path | None, s3_endpoint: str | None
) -> Path:
    """The local directory of the shard set at `uri` (see `open_cached`), not kept pinned."""
    cached = open_cached(uri, manifest_sha256, cache_dir=cache_dir, s3_endpoint=s3_endpoint)
    cached.pin.close()
    return cached.directory


def _touch(entry: Path) -> None:
    """Record a use of the entry (its mtime orders LRU eviction); a cache this user may only
    read (pre-warmed by another account) is served all the same."""
    with contextlib.suppress(OSError):
        os.utime(entry)


def _still_there(fd: int, entry: Path) -> bool:
    """The directory we locked is still the entry (not renamed away by an eviction)."""
    try:
        return os.fstat(fd).st_ino == entry.stat().st_ino
    except FileNotFoundError:
        return False


def _complete(entry: Path, set_format: SetFormat[Any]) -> bool:
    return (entry / set_format.manifest_name).is_file()


@dataclass(frozen=True)
class _Opening:
    """One `open_cached` call: its entry, the manifest the entry must hold, where the set is
    published, what kind of set it is, what the call cost so far and whether to re-hash all."""

    entry: Path
    manifest_sha256: str
    remote: RemoteShards
    set_format: SetFormat[Any]
    use: CacheUse
    verify_all: bool


def _fill(opening: _Opening) -> None:
    """Holding the entry's exclusive lock: fetch every missing (or, with `verify_all`, bad)
    file, the manifest last. A set that is bad in the store leaves no entry behind."""
    entry, remote, use = opening.entry, opening.remote, opening.use
    set_format = opening.set_format
    for stale in entry.glob(".*.tmp-*"):  # left by a download that died
        stale.unlink(missing_ok=True)
    started = time.perf_counter()
    try:
        data = remote.manifest_bytes(opening.manifest_sha256)
        manifest = set_format.parse(data)
        shards = manifest.shards
        size = sum(s.bytes for s in shards)
        info = {
            "uri": remote.uri,
            "manifest_sha256": opening.manifest_sha256,
            "manifest_name": set_format.manifest_name,
            "shard_set_key": manifest.set_key,
            "shard_names": [s.name for s in shards],
            "bytes": size,
        }
        if not (entry / ENTRY_INFO_NAME).is_file():
            _write_atomic(entry / ENTRY_INFO_NAME, json.dumps(info, indent=1).encode())
        make_room(entry.parent, keep=entry.name)  # counts this set at its full size
        remote.fetch_index(entry)
        remote.fetch_shards(shards, use, opening.verify_all)
        _write_atomic(entry / set_format.manifest_name, data)
        # Complete from here: its byte-hours count (`cache_usage`, for cost attribution).
        record_stored(entry.parent, entry.name, manifest.set_key, remote.uri, size)
    except StorageUnavailable:
        raise  # transient: the shards fetched so far stay for the next attempt
    except BaseException:
        if not _complete(entry, set_format):  # nothing of a bad or refused set stays
            _discard(entry)
        raise
    finally:
        use.warmup_s += time.perf_counter() - started


def _discard(entry: Path) -> None:
    doomed = entry.with_name(f".evicting-{entry.name}-{uuid.uuid4().hex[:8]}")
    with contextlib.suppress(FileNotFoundError):
        entry.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _check_entry(opening: _Opening) -> None:
    """Checks of a complete entry: the manifest's hash, every file at its size (and with
    `verify_all` its sha256), counted in `use`.

    A missing, truncated (or failing) shard is fetched again once, atomically (then it must match
    its sha256); otherwise shard contents are verified when the loader first maps them, as for
    local sets.
    """
    entry, remote, use = opening.entry, opening.remote, opening.use
    set_format = opening.set_format
    verify_all = opening.verify_all
    fix = f"delete {entry} and the next make_dataset downloads {remote.uri} again"
    try:
        data = (entry / set_format.manifest_name).read_bytes()
    except OSError as exc:
        raise ValueError(f"cache entry {entry} has no readable manifest ({exc}); {fix}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != opening.manifest_sha256:
        raise ValueError(
            f"cache entry {entry} holds a manifest with sha256 {digest}, not its name; {fix}"
        )
    if not (entry / INDEX_NAME).is_file():
        raise ValueError(f"cache entry {entry} has no {INDEX_NAME}; {fix}")
    started = time.perf_counter()
    for shard in set_format.parse(data).shards:
        path = entry / shard.name
        good = path.is_file() and path.stat().st_size == shard.bytes
        if good and verify_all:
            good = file_sha256(path) == shard.sha256
            use.verified_bytes += shard.bytes if good else 0
        if good:
            use.warm_bytes += shard.bytes
        else:
            remote.refetch(shard)
            use.fetched_bytes += shard.bytes
    if use.fetched_bytes or verify_all:
        use.warmup_s += time.perf_counter() - started
