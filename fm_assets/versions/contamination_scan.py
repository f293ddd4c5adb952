"""Scan a dataset version against the contamination registry as it stands now."""

from __future__ import annotations

import datetime as dt
from typing import Any

from fm_assets.contamination.store import load_matcher
from fm_assets.settings import Settings
from fm_assets.versions.dataset_version import DatasetVersion, version_documents

_CHUNK = 256


def scan_version(settings: Settings, version: DatasetVersion, ref: str) -> list[dict[str, Any]]:
    """CONTAMINATION_FLAGS rows: every (document, item) match among the version's documents."""
    docs = version_documents(settings, version, "tokenized_documents", ("doc_id", "text"))
    matcher = load_matcher(settings, ref)
    doc_ids, texts = docs.column("doc_id").to_pylist(), docs.column("text").to_pylist()
    now = dt.datetime.now(dt.UTC)
    rows = []
    for start in range(0, len(texts), _CHUNK):
        found = matcher.match(texts[start : start + _CHUNK])
        for offset, matches in enumerate(found):
            for m in matches:
                rows.append(
                    {
                        "version_key": version.version_key,
                        "doc_id": doc_ids[start + offset],
                        "benchmark": m.benchmark,
                        "item_id": m.item_id,
                        "fraction": m.fraction,
                        "registry": ref,
                        "scanned_at": now,
                    }
                )
    return rows
