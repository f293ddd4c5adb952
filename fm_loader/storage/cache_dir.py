"""A node's cache directory shared by trainers and pre-warms: locks, quota, pins, LRU eviction.

    <cache dir>/fm_cache.json                 optional: {"quota_bytes": N, "pins": {sha: ...}}
    <cache dir>/<manifest sha256>/            one cached set (`fm_loader.storage.cache`)
    <cache dir>/.evicting-<sha256>-<random>/  a set being deleted (gone in a moment)

Every lock is an flock on a directory that exists anyway, never a lock file, and the kernel drops
it when its holder dies, so a crash leaves nothing to clean:

- an entry's directory: exclusive while a process downloads into it, shared while a dataset
  has it open (an open dataset pins its sets: eviction takes the exclusive lock without
  waiting and skips a set it cannot get);
- the cache directory itself: exclusive while quota is enforced (one evictor at a time) or
  `fm_cache.json` rewritten, shared while a downloader turns its exclusive entry lock into a
  shared one (flock's conversion is not atomic: the evictor must not slip in between).

The quota counts every entry at the larger of its size on disk and the size of the set it is
downloading, so two downloads starting at once cannot both claim the same free space. Eviction
removes whole sets, least recently used first (an entry's mtime is touched on every open), and
never a set that is pinned (`pin`) or open; an entry is renamed out of the way before it is
deleted, so no one ever opens a half-deleted set.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from fm_loader.storage.cache_usage import record_evicted

CONFIG_NAME = "fm_cache.json"
ENTRY_INFO_NAME = "fm_cache_entry.json"  # what an entry holds: written before any shard
_ENTRY = re.compile(r"^[0-9a-f]{64}$")


def default_cache_dir() -> Path:
    """`$FM_LOADER_CACHE_DIR`, else `~/.cache/fm_loader`: per node, outside any FM_HOME."""
    configured = os.environ.get("FM_LOADER_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "fm_loader"


@contextlib.contextmanager
def locked(directory: Path, mode: int) -> Iterator[int]:
    """Hold an flock (`fcntl.LOCK_SH` / `LOCK_EX`) on `directory` for the block."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, mode)
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def try_exclusive(directory: Path) -> int | None:
    """An exclusive flock on `directory` if nobody holds one; its descriptor, else None."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


# -- configuration: quota and pins ----------------------------------------------------------
@dataclass(frozen=True)
class CacheConfig:
    quota_bytes: int | None
    pins: dict[str, dict[str, str]]  # manifest sha256 -> {"key": ..., "by": ..., "since": ...}


def read_config(root: Path) -> CacheConfig:
    try:
        data = json.loads((root / CONFIG_NAME).read_text())
    except FileNotFoundError:
        return CacheConfig(None, {})
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"{root / CONFIG_NAME} is unreadable ({exc}); fix or delete it (it holds only the "
            "cache's quota and pins)"
        ) from exc
    quota = data.get("quota_bytes")
    return CacheConfig(int(quota) if quota is not None else None, dict(data.get("pins", {})))


def _write_config(root: Path, config: CacheConfig) -> None:
    """Replace fm_cache.json atomically (the caller holds the root's exclusive lock)."""
    tmp = root / f".{CONFIG_NAME}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    body = {"quota_bytes": config.quota_bytes, "pins": config.pins}
    try:
        tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
        tmp.replace(root / CONFIG_NAME)
    finally:
        tmp.unlink(missing_ok=True)


def set_quota(root: Path, quota_bytes: int | None) -> None:
    """Cap the cache at `quota_bytes` (None: no cap); enforced at the next download."""
    if quota_bytes is not None and quota_bytes <= 0:
        raise ValueError(f"a cache quota must be positive, got {quota_bytes}")
    root.mkdir(parents=True, exist_ok=True)
    with locked(root, fcntl.LOCK_EX):
        _write_config(root, CacheConfig(quota_bytes, read_config(root).pins))


def pin(root: Path, manifest_sha256: str, key: str, by: str) -> None:
    """Keep the set whose manifest hashes to `manifest_sha256` out of eviction until `unpin`."""
    root.mkdir(parents=True, exist_ok=True)
    with locked(root, fcntl.LOCK_EX):
        config = read_config(root)
        since = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        pins = {**config.pins, manifest_sha256: {"key": key, "by": by, "since": since}}
        _write_config(root, CacheConfig(config.quota_bytes, pins))


def unpin(root: Path, manifest_sha256: str) -> bool:
    """Release a pin; False when the set was not pinned."""
    if not root.is_dir():
        return False
    with locked(root, fcntl.LOCK_EX):
        config = read_config(root)
        if manifest_sha256 not in config.pins:
            return False
        pins = {k: v for k, v in config.pins.items() if k != manifest_sha256}
        _write_config(root, CacheConfig(config.quota_bytes, pins))
    return True


# -- entries and their sizes ----------------------------------------------------------------
def entry_dirs(root: Path) -> list[Path]:
    """Every entry of the cache (complete or not), by name."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _ENTRY.match(p.name))


def read_entry_info(entry: Path) -> dict[str, object]:
    """The entry's own description (uri, shard_set_key, bytes, shards); {} for an entry cached
    before entries described themselves."""
    try:
        info: dict[str, object] = json.loads((entry / ENTRY_INFO_NAME).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return info


def disk_bytes(directory: Path) -> int:
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for path in directory.iterdir():
            with contextlib.suppress(FileNotFoundError):
                total += path.stat().st_size
    return total


def _claimed_bytes(entry: Path) -> int:
    """What an entry holds or will hold once its download ends."""
    expected = read_entry_info(entry).get("bytes")
    return max(disk_bytes(entry), int(expected) if isinstance(expected, int) else 0)


def last_use(entry: Path) -> float:
    """When the entry was last opened (its mtime, touched on every open), as a POSIX time."""
    try:
        return entry.stat().st_mtime
    except FileNotFoundError:
        return 0.0


# -- quota ----------------------------------------------------------------------------------
class CacheFull(ValueError):
    """The quota cannot make room without evicting pinned or open sets."""


@dataclass(frozen=True)
class Eviction:
    manifest_sha256: str
    key: str
    bytes: int


def make_room(root: Path, keep: str) -> list[Eviction]:
    """Under the quota, evict least recently used sets until every entry (`keep`'s download
    counted at its full size) fits; never a pinned set, an open one, or `keep`.

    Raises CacheFull, naming what holds the space, when that is not enough.
    """
    evicted: list[Eviction] = []
    with locked(root, fcntl.LOCK_EX):
        config = read_config(root)
        if config.quota_bytes is None:
            return evicted
        entries = entry_dirs(root)
        sizes = {e.name: _claimed_bytes(e) for e in entries}
        leaving = sum(disk_bytes(p) for p in root.glob(".evicting-*"))
        used = sum(sizes.values()) + leaving
        held: list[str] = []
        for entry in sorted(entries, key=last_use):
            if used <= config.quota_bytes:
                break
            name = entry.name
            if name == keep or name in config.pins:
                held.append(f"{_label(entry)} ({'pinned' if name != keep else 'this set'})")
                continue
            fd = try_exclusive(entry)
            if fd is None:
                held.append(f"{_label(entry)} (open or downloading)")
                continue
            try:
                doomed = root / f".evicting-{name}-{uuid.uuid4().hex[:8]}"
                entry.rename(doomed)
            finally:
                os.close(fd)
            shutil.rmtree(doomed, ignore_errors=True)
            record_evicted(root, name)
            used -= sizes[name]
            evicted.append(Eviction(name, _label(entry), sizes[name]))
        if used > config.quota_bytes:
            raise CacheFull(
                f"cache {root} is over its quota of {config.quota_bytes:,} bytes "
                f"({used:,} bytes with {_label(root / keep)}) and nothing more can be evicted: "
                f"{'; '.join(held) or 'no other sets'}. Raise it (`fm cache quota`), unpin "
                "sets (`fm cache unpin`), or use another --cache-dir"
            )
    return evicted


def _label(entry: Path) -> str:
    key = read_entry_info(entry).get("shard_set_key")
    return f"{key} [{entry.name[:12]}]" if key else entry.name[:12]


# -- status ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class EntryStatus:
    """How warm one cached set is."""

    manifest_sha256: str
    shard_set_key: str
    uri: str
    complete: bool
    shards_present: int
    shards_total: int
    bytes_present: int
    bytes_total: int
    last_use: dt.datetime
    pinned_by: str | None
    in_use: bool  # open by a dataset, or downloading


def cache_status(root: Path) -> list[EntryStatus]:
    """Every set in the cache, most recently used first."""
    from fm_loader.format.manifest import MANIFEST_NAME, parse_manifest

    pins = read_config(root).pins if root.is_dir() else {}
    out = []
    for entry in entry_dirs(root):
        info = read_entry_info(entry)
        manifest_file = entry / str(info.get("manifest_name", MANIFEST_NAME))
        complete = manifest_file.is_file()
        listed = info.get("shard_names")
        shard_names = [str(s) for s in listed] if isinstance(listed, list) else []
        size = info.get("bytes")
        total = size if isinstance(size, int) else 0
        if not info and complete:  # cached before entries described themselves
            manifest = parse_manifest(manifest_file.read_text())
            info = {"shard_set_key": manifest.shard_set_key, "uri": ""}
            shard_names = [s.name for s in manifest.shards]
            total = sum(s.bytes for s in manifest.shards)
        present = [entry / n for n in shard_names if (entry / n).is_file()]
        fd = try_exclusive(entry)
        if fd is not None:
            os.close(fd)
        pinned = pins.get(entry.name)
        out.append(
            EntryStatus(
                manifest_sha256=entry.name,
                shard_set_key=str(info.get("shard_set_key", "")),
                uri=str(info.get("uri", "")),
                complete=complete,
                shards_present=len(present),
                shards_total=len(shard_names),
                bytes_present=sum(p.stat().st_size for p in present),
                bytes_total=total,
                last_use=dt.datetime.fromtimestamp(last_use(entry), dt.UTC),
                pinned_by=pinned.get("by") if pinned else None,
                in_use=fd is None,
            )
        )
    return sorted(out, key=lambda s: s.last_use, reverse=True)
