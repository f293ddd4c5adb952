"""Scan a dataset version, or the shard set built from it, against the registry as it stands."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from fm_assets.checks.data_checks import CheckOutcome
from fm_assets.contamination.store import load_matcher, registry_ref
from fm_assets.settings import Settings
from fm_assets.versions import DatasetVersion, version_documents
from fm_loader.manifest import ShardSetManifest

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


def no_contaminated_samples(
    settings: Settings, directory: str, manifest: ShardSetManifest, version: DatasetVersion
) -> CheckOutcome:
    """The gate: no sample of the shard set holds a document matching the current registry."""
    from fm_loader.shards import ShardSet

    ref = registry_ref(settings)
    flagged = {row["doc_id"] for row in scan_version(settings, version, ref)}
    shard_set = ShardSet(Path(directory), manifest)
    bad_samples = 0
    try:
        for index in range(len(shard_set)):
            ids = shard_set.raw_sample(index)["doc_ids"].split("\n")
            bad_samples += bool(flagged.intersection(ids))
    finally:
        shard_set.close()
    benchmarks = load_matcher(settings, ref).item_count
    description = (
        f"0 of {manifest.num_samples} samples match the registry ({benchmarks} items)"
        if not bad_samples
        else f"{bad_samples} of {manifest.num_samples} samples hold {len(flagged)} documents "
        f"matching registered eval items; rerun the batches (`fm run --batch ID`: the "
        "decontamination stage now sees the registry), cut a new version and rebuild"
    )
    return CheckOutcome(
        "no_contaminated_samples",
        bad_samples == 0,
        description,
        {"contaminated_samples": bad_samples, "contaminated_documents": len(flagged)},
    )
