"""Purged sets in a node's cache: what the platform's purge leaves beside a set, and deleting a
cached copy of what it purged.

When `fm purge` rewrites a published set without revoked documents, the set gets a new manifest,
and a node's cache keeps the old copy under the old manifest's sha256 (`fm_loader.storage.cache`),
bytes of the revoked documents included. So the purge writes, beside the set's manifest,

    fm_purged.json    {"format_version": 1, "purged": [{"manifest_sha256", "revocation_id",
                       "purged_at"}, ...]}: every manifest a purge replaced

and each open or pre-warm of the set (`open_cached`) reads it and deletes the cache's entries
named there first, as eviction does: renamed out of the way, then removed. An entry another
process has open (a trainer reading the old copy for an audit) is left until a later open finds
it closed. Opening a purged manifest itself is refused: its bytes are gone from the store.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from fm_loader.storage.cache_dir import entry_dirs, try_exclusive
from fm_loader.storage.remote import filesystem_for
from fm_loader.storage.retry import with_retries

PURGED_NAME = "fm_purged.json"
PURGED_FORMAT_VERSION = 1


@dataclass(frozen=True)
class PurgedManifest:
    """A manifest of a set that a purge replaced (its bytes held revoked documents)."""

    manifest_sha256: str
    revocation_id: str
    purged_at: str  # ISO 8601, UTC


@dataclass(frozen=True)
class PurgedManifests:
    """Every manifest of one set that purges replaced, oldest first."""

    format_version: int
    purged: tuple[PurgedManifest, ...]

    @property
    def digests(self) -> frozenset[str]:
        return frozenset(p.manifest_sha256 for p in self.purged)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PurgedManifests:
        obj: Any = json.loads(text)
        if not isinstance(obj, dict) or obj.get("format_version") != PURGED_FORMAT_VERSION:
            version = obj.get("format_version") if isinstance(obj, dict) else None
            raise ValueError(
                f"{PURGED_NAME} has format_version {version!r}; this loader reads version "
                f"{PURGED_FORMAT_VERSION}: upgrade fm_loader"
            )
        if set(obj) != {"format_version", "purged"} or not isinstance(obj["purged"], list):
            raise ValueError(
                f"{PURGED_NAME} fields are {sorted(obj)}: expected format_version and purged"
            )
        entries = []
        for item in obj["purged"]:
            if not isinstance(item, dict) or set(item) != {
                "manifest_sha256",
                "revocation_id",
                "purged_at",
            }:
                raise ValueError(f"{PURGED_NAME} entry {item!r:.120} is not a purged manifest")
            entries.append(PurgedManifest(**{k: str(v) for k, v in item.items()}))
        return cls(PURGED_FORMAT_VERSION, tuple(entries))


def read_purged(location: str, s3_endpoint: str | None = None) -> PurgedManifests | None:
    """What purges replaced of the set at `location` (a directory or URI), or None."""
    fs, path = filesystem_for(location, s3_endpoint)
    target = f"{path.rstrip('/')}/{PURGED_NAME}"

    def read() -> bytes | None:
        if fs.get_file_info(target).type == pafs.FileType.NotFound:
            return None
        with fs.open_input_stream(target, compression=None) as f:
            data: bytes = f.read()
        return data

    data = with_retries(read, what=f"reading {location}/{PURGED_NAME}")
    return None if data is None else PurgedManifests.from_json(data.decode("utf-8"))


def with_purged(record: PurgedManifests | None, entry: PurgedManifest) -> PurgedManifests:
    """`record` with `entry` added (once)."""
    known = record.purged if record is not None else ()
    if any(p.manifest_sha256 == entry.manifest_sha256 for p in known):
        return PurgedManifests(PURGED_FORMAT_VERSION, known)
    return PurgedManifests(PURGED_FORMAT_VERSION, (*known, entry))


def drop_purged_entries(root: Path, purged: Iterable[str]) -> list[str]:
    """Delete the cache entries under `root` named by `purged` (manifest sha256s) that no one
    has open; return the ones deleted."""
    doomed = set(purged)
    dropped = []
    for entry in entry_dirs(root):
        if entry.name not in doomed:
            continue
        fd = try_exclusive(entry)
        if fd is None:
            continue  # open for reading, or being downloaded: a later open deletes it
        try:
            gone = root / f".evicting-{entry.name}-{uuid.uuid4().hex[:8]}"
            with contextlib.suppress(FileNotFoundError):
                entry.rename(gone)
        finally:
            os.close(fd)
        shutil.rmtree(gone, ignore_errors=True)
        dropped.append(entry.name)
    return dropped


def refuse_purged(uri: str, manifest_sha256: str, root: Path, s3_endpoint: str | None) -> None:
    """Delete what `root` caches of the set at `uri` that purges replaced; raise if the
    manifest asked for is one of them."""
    record = read_purged(uri, s3_endpoint)
    if record is None:
        return
    drop_purged_entries(root, record.digests)
    if manifest_sha256 in record.digests:
        which = next(p for p in record.purged if p.manifest_sha256 == manifest_sha256)
        raise ValueError(
            f"the set at {uri} with manifest {manifest_sha256[:12]} was purged "
            f"({which.revocation_id}, {which.purged_at}): its bytes are gone; resolve the set "
            "again from the catalog to read what it holds now"
        )
