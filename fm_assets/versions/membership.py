"""What a dataset version holds beyond its batches and snapshots: the documents it leaves out and
the data namespaces of its documents.

A version cut by a revocation shares its base's tagged snapshots and lists the documents it
leaves out in `version_exclusions`; `version_namespaces` records the namespaces (`fm land
--namespace`) of the documents a version holds, which the namespace policy checked when it was cut.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from fm_assets.execution import pipeline
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.revocations import RevocationRecord, revoked_mask
from fm_assets.storage.tables import TableSpec, declare

# Documents a version leaves out of the snapshots it tags (a revocation's replacement version).
VERSION_EXCLUSIONS = pa.schema(
    [
        pa.field("version_key", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("revocation_id", pa.string(), nullable=False),
    ]
)
# The data namespaces of a version's batches (`fm land --namespace`): what a trainer may read.
VERSION_NAMESPACES = pa.schema(
    [
        pa.field("version_key", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
    ]
)
declare(
    TableSpec("version_exclusions", VERSION_EXCLUSIONS, ("version_key",)),
    TableSpec("version_namespaces", VERSION_NAMESPACES, ("version_key",)),
)


def batch_namespaces(settings: Settings, batches: Iterable[str]) -> list[str]:
    """The data namespaces of the batches' final documents (as landed), sorted."""
    rows = catalog.read_table(
        settings,
        pipeline.STAGE_NAMES[-1],
        catalog.where_in("batch_id", sorted(set(batches))),
        columns=("namespace",),
    )
    return sorted(set(rows.column("namespace").to_pylist()))


def record_namespaces(settings: Settings, version_key: str, namespaces: list[str]) -> None:
    """Record the namespaces a version holds (before its row: readers trust the row)."""
    rows = pa.table({"version_key": [version_key] * len(namespaces), "namespace": namespaces})
    catalog.replace_rows(
        settings, "version_namespaces", rows, catalog.where_equal("version_key", version_key)
    )


def version_namespaces(settings: Settings, version_key: str) -> list[str]:
    """The namespaces a version holds, sorted ([] for a version cut before they were recorded)."""
    rows = catalog.read_table(
        settings, "version_namespaces", catalog.where_equal("version_key", version_key)
    )
    return sorted(set(rows.column("namespace").to_pylist()))


def revoked_documents(docs: pa.Table, revocations: list[RevocationRecord]) -> dict[str, str]:
    """doc_id -> the first revocation matching it, over `docs` holding the provenance columns."""
    revoked: dict[str, str] = {}
    for revocation in revocations:
        hit = docs.filter(revoked_mask(docs, [revocation])).column("doc_id").to_pylist()
        for doc_id in hit:
            revoked.setdefault(doc_id, revocation.revocation_id)
    return revoked


def exclude_documents(settings: Settings, version_key: str, excluded: dict[str, str]) -> None:
    """Record the documents (doc_id -> revocation id) a version leaves out of its snapshots."""
    if not excluded:
        return
    rows = pa.table(
        {
            "version_key": [version_key] * len(excluded),
            "doc_id": list(excluded),
            "revocation_id": list(excluded.values()),
        }
    )
    catalog.replace_rows(
        settings, "version_exclusions", rows, catalog.where_equal("version_key", version_key)
    )


def excluded_documents(settings: Settings, version_key: str) -> set[str]:
    """Doc ids a version leaves out of the snapshots it tags (empty for an ordinary version)."""
    rows = catalog.read_table(
        settings,
        "version_exclusions",
        row_filter=catalog.where_equal("version_key", version_key),
        columns=("doc_id",),
    )
    return set(rows.column("doc_id").to_pylist())
