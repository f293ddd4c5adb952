"""Revoking documents from dataset versions: each affected version gets a replacement without them.

Versions are immutable, so a revocation never edits one: it cuts the next version of the same
dataset over the same tagged snapshots, listing the revoked documents (and whatever its base
already excluded) in `version_exclusions` of the namespaces holding them, and records (revocation,
version, replacement) in `version_revocations`. A version already revoked keeps its first
replacement; a later revocation that also touches it is recorded against it, and its replacement,
which holds the documents too, gets a replacement of its own.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.revocations import RevocationRecord
from fm_assets.storage.tables import TableSpec, declare
from fm_assets.versions.dataset_version import (
    DatasetVersion,
    namespaces_of,
    next_version_key,
    parse_version_key,
    register_version,
)
from fm_assets.versions.membership import exclude_documents, exclusions, record_namespaces
from fm_assets.versions.policies import copy_policies
from fm_assets.versions.reader import version_documents

VERSION_REVOCATIONS = pa.schema(
    [
        pa.field("revocation_id", pa.string(), nullable=False),
        pa.field("version_key", pa.string(), nullable=False),
        pa.field("replacement", pa.string(), nullable=True),  # None: nothing was left to keep
        pa.field("documents_removed", pa.int64(), nullable=False),
        pa.field("tokens_removed", pa.int64(), nullable=False),
        pa.field("revoked_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
declare(TableSpec("version_revocations", VERSION_REVOCATIONS, ("revocation_id",)))


@dataclass(frozen=True)
class VersionRevocation:
    """What one revocation did to one dataset version."""

    revocation_id: str
    version_key: str
    replacement: str | None
    documents_removed: int
    tokens_removed: int

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> VersionRevocation:
        return cls(
            revocation_id=str(row["revocation_id"]),
            version_key=str(row["version_key"]),
            replacement=str(row["replacement"]) if row["replacement"] else None,
            documents_removed=int(row["documents_removed"]),
            tokens_removed=int(row["tokens_removed"]),
        )


def all_versions(settings: Settings) -> list[DatasetVersion]:
    """Every dataset version, by dataset and number."""
    rows = catalog.read_table(settings, "dataset_versions").to_pylist()
    return sorted((DatasetVersion.from_row(r) for r in rows), key=lambda v: (v.dataset, v.version))


def revoked_in(
    settings: Settings, version: DatasetVersion, revocation: RevocationRecord
) -> pa.Table:
    """(doc_id, num_tokens, namespace) of the version's documents the revocation matches: scans
    pruned by the revocation's column at the version's snapshots, less the version's exclusions."""
    return version_documents(
        settings,
        version,
        version.pipeline.final,
        ("doc_id", "num_tokens", "namespace"),
        catalog.where_equal(revocation.column, revocation.value),
    )


def recorded_outcomes(settings: Settings, revocation_id: str) -> list[VersionRevocation]:
    """What a revocation did to each version it touched, as recorded, by version."""
    rows = catalog.read_table(
        settings, "version_revocations", catalog.where_equal("revocation_id", revocation_id)
    ).to_pylist()
    return sorted((VersionRevocation.from_row(r) for r in rows), key=lambda o: o.version_key)


def replaced_base(settings: Settings, version_key: str) -> VersionRevocation | None:
    """The revocation that cut `version_key` as a replacement, and the version it replaces."""
    rows = catalog.read_table(
        settings, "version_revocations", catalog.where_equal("replacement", version_key)
    ).to_pylist()
    return VersionRevocation.from_row(min(rows, key=lambda r: r["revoked_at"])) if rows else None


def replacement_of(settings: Settings, version_key: str) -> dict[str, object] | None:
    """The first revocation row of `version_key` (with its replacement), or None."""
    rows = catalog.read_table(
        settings, "version_revocations", catalog.where_equal("version_key", version_key)
    ).to_pylist()
    return min(rows, key=lambda r: r["revoked_at"]) if rows else None


def cut_replacement(
    settings: Settings, version: DatasetVersion, removed: pa.Table, revocation_id: str
) -> DatasetVersion:
    """The next version of `version.dataset`: the same snapshots less `removed` (doc_id,
    num_tokens, namespace: what `revocation_id` revokes) and whatever `version` already
    excluded."""
    key = next_version_key(settings, version.dataset)
    dataset, number = parse_version_key(key)
    doc_ids = removed.column("doc_id").to_pylist()
    content_hash = hashlib.sha256(
        "\n".join([version.content_hash, *sorted(doc_ids)]).encode()
    ).hexdigest()
    # Everything else (batches, tokenizer, modality, ...) is the version's own.
    replacement = dataclasses.replace(
        version,
        version_key=key,
        dataset=dataset,
        version=number,
        snapshot_ids={ns: dict(tables) for ns, tables in version.snapshot_ids.items()},
        code_versions=dict(version.code_versions),
        num_documents=version.num_documents - len(doc_ids),
        num_tokens=version.num_tokens - int(pc.sum(removed.column("num_tokens")).as_py() or 0),
        content_hash=content_hash,
    )
    # The exclusions first: once the version row exists, readers trust it.
    for namespace in version.namespaces:
        before = exclusions(settings, version.version_key, namespace).to_pylist()
        revoked = {r["doc_id"]: f"via {version.version_key}" for r in before if r["revocation_id"]}
        duplicates = {r["doc_id"]: r["kept_in"] for r in before if not r["revocation_id"]}
        mine = removed.filter(pc.equal(removed.column("namespace"), namespace))
        revoked |= {doc_id: revocation_id for doc_id in mine.column("doc_id").to_pylist()}
        exclude_documents(settings, key, namespace, revoked, duplicates)
    record_namespaces(settings, key, namespaces_of(settings, version))
    copy_policies(settings, version.version_key, key)
    register_version(settings, replacement, run_id=None)
    return replacement


def revoke_versions(settings: Settings, revocation: RevocationRecord) -> list[VersionRevocation]:
    """Cut a replacement for every version (not already replaced) holding revoked documents,
    and record what happened to each version the revocation touches; return every outcome of
    the revocation. Run again for the same revocation (its asset rematerialized after a crash),
    it leaves the versions it already recorded as they are."""
    done = {o.version_key for o in recorded_outcomes(settings, revocation.revocation_id)}
    for version in all_versions(settings):
        if version.version_key in done:
            continue
        hits = revoked_in(settings, version, revocation)
        if hits.num_rows == 0:
            continue
        tokens = int(pc.sum(hits.column("num_tokens")).as_py() or 0)
        replacement: str | None = None
        if replacement_of(settings, version.version_key) is None and hits.num_rows < (
            version.num_documents
        ):
            cut = cut_replacement(settings, version, hits, revocation.revocation_id)
            replacement = cut.version_key
        # Right after the cut: a rerun after a crash sees the version replaced, not cuts again.
        row = {
            "revocation_id": revocation.revocation_id,
            "version_key": version.version_key,
            "replacement": replacement,
            "documents_removed": hits.num_rows,
            "tokens_removed": tokens,
            "revoked_at": dt.datetime.now(dt.UTC),
        }
        catalog.append_rows(settings, "version_revocations", pa.Table.from_pylist([row]))
    return recorded_outcomes(settings, revocation.revocation_id)
