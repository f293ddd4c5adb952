"""Fetching a set's files from the object store into a cache entry, each one verified.

Used by `fm_loader.storage.cache` (downloads, pre-warms, the refetch of a damaged shard) and by the
platform's checks (a fresh download of what was published).
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from fm_loader.format.manifest import INDEX_NAME, MANIFEST_NAME, ShardInfo
from fm_loader.storage.remote import filesystem_for
from fm_loader.storage.retry import with_retries

DOWNLOAD_THREADS = 8
_CHUNK = 8 << 20


@dataclass
class CacheUse:
    """What opening one set cost: bytes found warm, bytes fetched, seconds spent fetching."""

    warm_bytes: int = 0
    fetched_bytes: int = 0
    warmup_s: float = 0.0
    verified_bytes: int = 0  # hashed again by a pre-warm (already-warm shards)


def copy_remote_file(fs: pafs.FileSystem, path: str, dest: Path) -> tuple[str, int]:
    """Stream one file from `fs` to `dest`, durably; return its (sha256, size).

    A copy cut by a transient failure (reset, timeout, throttling) starts again from the first
    byte; one that keeps failing raises StorageUnavailable.
    """
    return with_retries(
        lambda: _copy_once(fs, path, dest), what=f"downloading {path}", must_exist=True
    )


def _copy_once(fs: pafs.FileSystem, path: str, dest: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    # compression=None: pyarrow would otherwise guess a codec from the file name.
    with fs.open_input_stream(path, compression=None) as src, open(dest, "wb") as out:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
        out.flush()
        # The file is trusted once renamed into place: its bytes must be on disk before that.
        os.fsync(out.fileno())
    return digest.hexdigest(), size


@dataclass(frozen=True)
class RemoteShards:
    """Where a cache entry came from, so its files can be fetched (again) (picklable)."""

    uri: str
    entry: Path
    s3_endpoint: str | None
    manifest_name: str = MANIFEST_NAME

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        fs, remote = filesystem_for(self.uri, self.s3_endpoint)
        return fs, remote.rstrip("/")

    def manifest_bytes(self, manifest_sha256: str) -> bytes:
        """The published manifest, which must hash to what the catalog pinned."""
        fs, remote = self._fs()
        path = f"{remote}/{self.manifest_name}"
        if fs.get_file_info(path).type != pafs.FileType.File:
            raise ValueError(
                f"{self.uri} is not a complete shard set: {self.manifest_name} is missing (the "
                "writer uploads it last); rebuild it with `fm shards build DATASET@vN "
                "--tokenizer PATH --seq-len N`"
            )
        data = read_remote(fs, path)
        digest = hashlib.sha256(data).hexdigest()
        if digest != manifest_sha256:
            raise ValueError(
                f"the manifest at {self.uri} has sha256 {digest}, but the catalog registered "
                f"{manifest_sha256}: the set changed after it was registered; rebuild it"
            )
        return data

    def fetch_index(self, entry: Path) -> None:
        if (entry / INDEX_NAME).is_file():
            return
        fs, remote = self._fs()
        tmp = entry / f".{INDEX_NAME}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            copy_remote_file(fs, f"{remote}/{INDEX_NAME}", tmp)
            tmp.replace(entry / INDEX_NAME)
        finally:
            tmp.unlink(missing_ok=True)

    def fetch_shards(self, shards: tuple[ShardInfo, ...], use: CacheUse, verify_all: bool) -> None:
        """Every shard into the entry, verified; present ones kept (re-hashed if `verify_all`)."""
        fs, remote = self._fs()
        counting = threading.Lock()

        def one(shard: ShardInfo) -> str | None:
            path = self.entry / shard.name
            if path.is_file() and path.stat().st_size == shard.bytes:
                good = not verify_all or file_sha256(path) == shard.sha256
                if good:
                    with counting:
                        use.warm_bytes += shard.bytes
                        use.verified_bytes += shard.bytes if verify_all else 0
                    return None
            part = CacheUse()
            problem = self._fetch(fs, f"{remote}/{shard.name}", shard, part)
            with counting:
                use.fetched_bytes += part.fetched_bytes
            return problem

        with ThreadPoolExecutor(max_workers=DOWNLOAD_THREADS) as pool:
            problems = [p for p in pool.map(one, shards) if p]
        if problems:
            raise ValueError(
                f"shard set {self.uri} is corrupt in the object store: {'; '.join(problems[:3])}; "
                "rebuild it with `fm shards build`"
            )

    def _fetch(self, fs: pafs.FileSystem, path: str, shard: ShardInfo, use: CacheUse) -> str | None:
        tmp = self.entry / f".{shard.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            sha, size = copy_remote_file(fs, path, tmp)
            use.fetched_bytes += size
            if sha != shard.sha256 or size != shard.bytes:
                return (
                    f"{shard.name}: sha256 {sha} ({size} bytes), expected {shard.sha256} "
                    f"({shard.bytes})"
                )
            tmp.replace(self.entry / shard.name)  # atomic: readers see no file or the whole one
            return None
        finally:
            tmp.unlink(missing_ok=True)

    def refetch(self, shard: ShardInfo) -> None:
        """Download one shard again over the cached copy; raise naming it if it is still bad."""
        fs, remote = self._fs()
        problem = self._fetch(fs, f"{remote}/{shard.name}", shard, CacheUse())
        if problem is not None:
            raise ValueError(
                f"shard {shard.name} of {self.uri} is corrupt in the object store too: {problem}; "
                "rebuild the shard set with `fm shards build`"
            )


def remote_manifest_sha256(uri: str, s3_endpoint: str | None, name: str = MANIFEST_NAME) -> str:
    """sha256 of the manifest published at `uri` now: the cache key of a set named by location."""
    fs, remote = filesystem_for(uri, s3_endpoint)
    path = f"{remote.rstrip('/')}/{name}"
    try:
        data = read_remote(fs, path)
    except (OSError, FileNotFoundError) as exc:
        raise ValueError(
            f"{uri} is not a complete shard set: cannot read {name} ({exc}); the "
            "writer uploads it last, so the set is missing or still being written"
        ) from exc
    return hashlib.sha256(data).hexdigest()


def read_remote(fs: pafs.FileSystem, path: str) -> bytes:
    def read() -> bytes:
        with fs.open_input_stream(path, compression=None) as f:
            data: bytes = f.read()
        return data

    return with_retries(read, what=f"reading {path}")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
