"""Scan a dataset version against the contamination registry as it stands now, and record what
it flags (in `contamination_flags` of each data namespace holding a flagged document)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

from fm_assets.contamination.store import load_matcher
from fm_assets.settings import Settings
from fm_assets.storage import catalog, schemas
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.reader import version_text_documents

_CHUNK = 256


def scan_version(settings: Settings, version: DatasetVersion, ref: str) -> list[dict[str, Any]]:
    """CONTAMINATION_FLAGS rows, each with the document's `namespace`: every (document, item)
    match among the version's documents."""
    docs = version_text_documents(settings, version, ("doc_id", "text", "namespace"))
    matcher = load_matcher(settings, ref)
    doc_ids, texts = docs.column("doc_id").to_pylist(), docs.column("text").to_pylist()
    namespaces = docs.column("namespace").to_pylist()
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
                        "namespace": namespaces[start + offset],
                    }
                )
    return rows


def record_flags(
    settings: Settings, version: DatasetVersion, rows: list[dict[str, Any]], ref: str
) -> None:
    """Replace the version's `contamination_flags` rows in every namespace it holds."""
    for namespace in version.namespaces:
        mine = [
            {k: v for k, v in r.items() if k != "namespace"}
            for r in rows
            if r["namespace"] == namespace
        ]
        catalog.replace_rows(
            settings,
            "contamination_flags",
            pa.Table.from_pylist(mine, schema=schemas.CONTAMINATION_FLAGS),
            catalog.where_equal("version_key", version.version_key),
            {"fm.version": version.version_key, "fm.registry": ref},
            namespace=namespace,
        )
