"""A node-local cache of remote (`s3://`) shard sets, keyed by the sha256 of their manifest.

    <cache dir>/<manifest sha256>/            a complete copy: index.json, shards, fm_manifest.json
    <cache dir>/.<manifest sha256>.tmp-<pid>-*  a download in progress, renamed into place when done
    <cache dir>/.<manifest sha256>.lock       one download of a set at a time (the node's ranks)

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
from pathlib import Path

import pyarrow.fs as pafs

from fm_loader.manifest import INDEX_NAME, MANIFEST_NAME, ShardSetManifest
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
    """Stream one file from `fs` to `dest`, durably; return its (sha256, size)."""
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
        _check_entry(entry, manifest_sha256, uri)
        return entry
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root / f".{manifest_sha256}.lock"):
        if entry.is_dir():  # another rank finished the download while we waited
            _check_entry(entry, manifest_sha256, uri)
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


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def _download(uri: str, manifest_sha256: str, tmp: Path, s3_endpoint: str | None) -> None:
    """Copy the set into `tmp`, verifying every shard; the manifest is written last."""
    # Imported here, not at module level: `import fm_loader` stays free of platform modules.
    from fm_assets.storage.objectstore import filesystem_for

    fs, remote = filesystem_for(uri, s3_endpoint)
    remote = remote.rstrip("/")
    manifest_path = f"{remote}/{MANIFEST_NAME}"
    if fs.get_file_info(manifest_path).type != pafs.FileType.File:
        raise ValueError(
            f"{uri} is not a complete shard set: {MANIFEST_NAME} is missing (the writer uploads "
            "it last); rebuild it with `fm shards build DATASET@vN --tokenizer PATH --seq-len N`"
        )
    with fs.open_input_stream(manifest_path, compression=None) as f:
        data: bytes = f.read()
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


def _check_entry(entry: Path, manifest_sha256: str, uri: str) -> None:
    """Cheap checks of an existing entry (the manifest's hash, every file at its size).

    Shard contents are verified by sha256 when the loader first maps them, as for local sets.
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
    manifest = ShardSetManifest.from_json(data.decode("utf-8"))
    wrong = [
        shard.name
        for shard in manifest.shards
        if not (entry / shard.name).is_file() or (entry / shard.name).stat().st_size != shard.bytes
    ]
    if not (entry / INDEX_NAME).is_file():
        wrong.append(INDEX_NAME)
    if wrong:
        raise ValueError(
            f"cache entry {entry} is damaged: {', '.join(wrong[:5])} missing or truncated; {fix}"
        )
