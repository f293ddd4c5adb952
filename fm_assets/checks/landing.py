"""Checks on a landing batch: every file of the manifest is present with its size and hash."""

from __future__ import annotations

import functools
import hashlib

from fm_assets.checks.outcome import CheckOutcome
from fm_assets.settings import Settings
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import ObjectStore, open_object_store
from fm_assets.storage.purge.landing_files import landed_state
from fm_loader.storage.retry import with_retries


def _digest(store: ObjectStore, key: str) -> tuple[str, int]:
    """sha256 and size of an object, read whole (a retry starts it again)."""
    digest = hashlib.sha256()
    size = 0
    with store.open_input(key) as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def files_match_manifest(settings: Settings, batch_id: str) -> CheckOutcome:
    store = open_object_store(settings)
    manifest = read_manifest(store, batch_id)
    # A purge deletes landed files or blanks records in them, and records what it left.
    purged = landed_state(store, batch_id)
    problems = []
    for landed in manifest.files:
        expected = purged.get(landed.key, (landed.sha256, landed.size))
        if expected is None:
            continue
        if not store.exists(landed.key):
            problems.append(f"{landed.name}: missing")
            continue
        sha256, size = with_retries(
            functools.partial(_digest, store, landed.key),
            what=f"reading {store.uri(landed.key)}",
            must_exist=True,  # the manifest lists it, and it was just found
        )
        if (sha256, size) != expected:
            said = "what a purge left" if landed.key in purged else "the manifest"
            problems.append(f"{landed.name}: content differs from {said}")
    return CheckOutcome(
        "files_match_manifest",
        not problems,
        "; ".join(problems)
        or f"{len(manifest.files)} files, {manifest.total_bytes:,} bytes intact",
        {"files": len(manifest.files), "bytes": manifest.total_bytes},
    )
