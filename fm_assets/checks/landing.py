"""Checks on a landing batch: every file of the manifest is present with its size and hash."""

from __future__ import annotations

import hashlib

from fm_assets.checks.outcome import CheckOutcome
from fm_assets.settings import Settings
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import open_object_store


def files_match_manifest(settings: Settings, batch_id: str) -> CheckOutcome:
    store = open_object_store(settings)
    manifest = read_manifest(store, batch_id)
    problems = []
    for landed in manifest.files:
        if not store.exists(landed.key):
            problems.append(f"{landed.name}: missing")
            continue
        digest = hashlib.sha256()
        size = 0
        with store.open_input(landed.key) as f:
            while chunk := f.read(8 << 20):
                digest.update(chunk)
                size += len(chunk)
        if size != landed.size or digest.hexdigest() != landed.sha256:
            problems.append(f"{landed.name}: content differs from the manifest")
    return CheckOutcome(
        "files_match_manifest",
        not problems,
        "; ".join(problems)
        or f"{len(manifest.files)} files, {manifest.total_bytes:,} bytes intact",
        {"files": len(manifest.files), "bytes": manifest.total_bytes},
    )
