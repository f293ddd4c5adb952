"""Checks on a dataset version: its recorded counts hold at its Iceberg tags."""

from __future__ import annotations

import pyarrow.compute as pc

from fm_assets.checks.outcome import CheckOutcome
from fm_assets.settings import Settings
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.reader import version_documents


def version_counts_match(settings: Settings, version: DatasetVersion) -> CheckOutcome:
    """Recount the version's documents and tokens at its tags; compare with its record."""
    docs = version_documents(settings, version, version.pipeline.final, ("doc_id", "num_tokens"))
    tokens = int(pc.sum(docs.column("num_tokens")).as_py() or 0)
    unique = len(set(docs.column("doc_id").to_pylist()))
    passed = (docs.num_rows, tokens, unique) == (
        version.num_documents,
        version.num_tokens,
        docs.num_rows,
    )
    return CheckOutcome(
        "version_counts_match",
        passed,
        f"{docs.num_rows} documents ({unique} unique), {tokens} tokens; "
        f"recorded {version.num_documents} documents, {version.num_tokens} tokens",
        {"documents": docs.num_rows, "tokens": tokens},
    )
