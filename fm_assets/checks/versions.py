"""Checks on a dataset version: its recorded counts hold at its Iceberg tags."""

from __future__ import annotations

import pyarrow.compute as pc

from fm_assets.checks.outcome import CheckOutcome
from fm_assets.settings import Settings
from fm_assets.storage.purge.records import version_purged
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.reader import version_documents


def version_counts_match(settings: Settings, version: DatasetVersion) -> CheckOutcome:
    """Recount the version's documents and tokens at its tags; compare with its record, less
    what purges removed from it (`version_purges`)."""
    docs = version_documents(settings, version, version.pipeline.final, ("doc_id", "num_tokens"))
    tokens = int(pc.sum(docs.column("num_tokens")).as_py() or 0)
    unique = len(set(docs.column("doc_id").to_pylist()))
    purged_docs, purged_tokens = version_purged(settings, version.version_key)
    expected = (version.num_documents - purged_docs, version.num_tokens - purged_tokens)
    passed = (docs.num_rows, tokens, unique) == (*expected, docs.num_rows)
    purged = f" less {purged_docs} purged ({purged_tokens} tokens)" if purged_docs else ""
    return CheckOutcome(
        "version_counts_match",
        passed,
        f"{docs.num_rows} documents ({unique} unique), {tokens} tokens; "
        f"recorded {version.num_documents} documents, {version.num_tokens} tokens{purged}",
        {"documents": docs.num_rows, "tokens": tokens},
    )
