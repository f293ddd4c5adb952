"""A node-local cache of remote (`s3://`) shard sets, keyed by the sha256 of their manifest.

    <cache dir>/<manifest sha256>/            a complete copy: index.json, shards, fm_manifest.json
    <cache dir>/.<manifest sha256>.tmp-<pid>-*  a download in progress, renamed into place when done

Downloads are serialised per node by an flock on the cache directory itself, so no lock file is
ever created or left behind; a crashed download leaves only its tmp directory, which the next
download of that set removes.

An entry appears only by renaming a fully downloaded directory whose every shard matched the
manifest's sha256 and size, so a partial copy is never read. Its name is the hash of the manifest
the catalog pinned, and a rebuilt set has a new manifest, so a stale copy is never served. The
shards are read in place from the entry and re-verified on first use, as local sets are.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from fm_loader.manifest import INDEX_NAME, MANIFEST_NAME, ShardInfo, ShardSetManifest
from fm_loader.remote import filesystem_for
from fm_loader.retry import with_retries
from fm_loader.shards import REBUILD_HINT

DOWNLOAD_THREADS = 8
_CHUNK = 8 << 20


def default_cache_dir() -> Path:
    """`~/.cache/fm_loader`: per user and per node, outside any FM_HOME."""
    return Path.home() / ".cache" / "fm_loader"


def is_remote(location: str) -> bool:
    """True for locations the cache serves (`s3://`); local paths and file:// are read in place."""
    return location.startswith("s3://")


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
        # The entry is trusted once renamed: its bytes must be on disk before that.
        os.fsync(out.fileno())
    return digest.hexdigest(), size


def cached_shard_set(
    uri: str, manifest_sha256: str, *, cache_dir: Path | None, s3_endpoint: str | None
) -> Path:
    """The local directory of the shard set at `uri` whose manifest hashes to `manifest_sha256`.

    Downloads it on first use (once per node: concurrent callers wait on a lock and reuse the
    result). Raises ValueError, saying what to do, when the published set does not match the
    pinned manifest or a shard its checksum, and when an existing entry is damaged.
    """
    root = cache_dir if cache_dir is not None else default_cache_dir()
    entry = root / manifest_sha256
    if entry.is_dir():
        _check_entry(entry, manifest_sha256, uri, RemoteShards(uri, entry, s3_endpoint))
        return entry
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root):
        if entry.is_dir():  # another rank finished the download while we waited
            _check_entry(entry, manifest_sha256, uri, RemoteShards(uri, entry, s3_endpoint))
            return entry
        # Holding the lock, any temporary directory of this set is a crashed download.
        for stale in root.glob(f".{manifest_sha256}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = root / f".{manifest_sha256}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            _download(uri, manifest_sha256, tmp, s3_endpoint)
            tmp.rename(entry)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return entry


def remote_manifest_sha256(uri: str, s3_endpoint: str | None) -> str:
    """sha256 of the manifest published at `uri` now: the cache key of a set named by location."""
    fs, remote = filesystem_for(uri, s3_endpoint)
    path = f"{remote.rstrip('/')}/{MANIFEST_NAME}"
    try:
        data = _read_remote(fs, path)
    except (OSError, FileNotFoundError) as exc:
        raise ValueError(
            f"{uri} is not a complete shard set: cannot read {MANIFEST_NAME} ({exc}); the "
            "writer uploads it last, so the set is missing or still being written"
        ) from exc
    return hashlib.sha256(data).hexdigest()


def _read_remote(fs: pafs.FileSystem, path: str) -> bytes:
    def read() -> bytes:
        with fs.open_input_stream(path, compression=None) as f:
            data: bytes = f.read()
        return data

    return with_retries(read, what=f"reading {path}")


@contextlib.contextmanager
def _exclusive(directory: Path) -> Iterator[None]:
    """Hold an exclusive flock on `directory` (released on exit, or by the kernel on a crash)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@dataclass(frozen=True)
class RemoteShards:
    """Where a cache entry came from, so a damaged shard can be fetched again (picklable)."""

    uri: str
    entry: Path
    s3_endpoint: str | None

    def refetch(self, shard: ShardInfo) -> None:
        """Download one shard again over the cached copy; raise naming it if it is still bad."""
        fs, remote = filesystem_for(self.uri, self.s3_endpoint)
        tmp = self.entry / f".{shard.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            sha, size = copy_remote_file(fs, f"{remote.rstrip('/')}/{shard.name}", tmp)
            if sha != shard.sha256 or size != shard.bytes:
                raise ValueError(
                    f"shard {shard.name} of {self.uri} is corrupt in the object store too: sha256 "
                    f"{sha} ({size} bytes), expected {shard.sha256} ({shard.bytes}); rebuild the "
                    "shard set with `fm shards build`"
                )
            tmp.replace(self.entry / shard.name)  # atomic: readers see the old or the new file
        finally:
            tmp.unlink(missing_ok=True)


def _download(uri: str, manifest_sha256: str, tmp: Path, s3_endpoint: str | None) -> None:
    """Copy the set into `tmp`, verifying every shard; the manifest is written last."""
    fs, remote = filesystem_for(uri, s3_endpoint)
    remote = remote.rstrip("/")
    manifest_path = f"{remote}/{MANIFEST_NAME}"
    if fs.get_file_info(manifest_path).type != pafs.FileType.File:
        raise ValueError(
            f"{uri} is not a complete shard set: {MANIFEST_NAME} is missing (the writer uploads "
            "it last); rebuild it with `fm shards build DATASET@vN --tokenizer PATH --seq-len N`"
        )
    data = _read_remote(fs, manifest_path)
    digest = hashlib.sha256(data).hexdigest()
    manifest = ShardSetManifest.from_json(data.decode("utf-8"))
    rebuild = REBUILD_HINT.format(version=manifest.source_version, seq_len=manifest.seq_len)
    if digest != manifest_sha256:
        raise ValueError(
            f"the manifest at {uri} has sha256 {digest}, but the catalog registered "
            f"{manifest_sha256}: the shard set changed after it was registered; {rebuild}"
        )
    tmp.mkdir(parents=True)
    copy_remote_file(fs, f"{remote}/{INDEX_NAME}", tmp / INDEX_NAME)

    def fetch(index: int) -> str | None:
        shard = manifest.shards[index]
        sha, size = copy_remote_file(fs, f"{remote}/{shard.name}", tmp / shard.name)
        if sha == shard.sha256 and size == shard.bytes:
            return None
        return f"{shard.name}: sha256 {sha} ({size} bytes), expected {shard.sha256} ({shard.bytes})"

    with ThreadPoolExecutor(max_workers=DOWNLOAD_THREADS) as pool:
        problems = [p for p in pool.map(fetch, range(len(manifest.shards))) if p]
    if problems:
        raise ValueError(
            f"shard set {uri} is corrupt in the object store: {'; '.join(problems[:3])}; {rebuild}"
        )
    (tmp / MANIFEST_NAME).write_bytes(data)


def _check_entry(entry: Path, manifest_sha256: str, uri: str, remote: RemoteShards) -> None:
    """Cheap checks of an existing entry (the manifest's hash, every file at its size).

    A missing or truncated shard is fetched again once (then it must match its sha256);
    shard contents are verified by sha256 when the loader first maps them, as for local sets.
    """
    fix = f"delete {entry} and the next make_dataset downloads {uri} again"
    try:
        data = (entry / MANIFEST_NAME).read_bytes()
    except OSError as exc:
        raise ValueError(f"cache entry {entry} has no readable manifest ({exc}); {fix}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != manifest_sha256:
        raise ValueError(
            f"cache entry {entry} holds a manifest with sha256 {digest}, not its name; {fix}"
        )
    if not (entry / INDEX_NAME).is_file():
        raise ValueError(f"cache entry {entry} has no {INDEX_NAME}; {fix}")
    manifest = ShardSetManifest.from_json(data.decode("utf-8"))
    for shard in manifest.shards:
        path = entry / shard.name
        if not path.is_file() or path.stat().st_size != shard.bytes:
            remote.refetch(shard)
