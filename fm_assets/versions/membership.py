"""What a dataset version holds beyond its batches and snapshots: the documents it leaves out and
the data namespaces of its documents.

A version cut by a revocation shares its base's tagged snapshots and lists the documents it
leaves out in `version_exclusions`; so does a version over several data namespaces for the extra
copies of a document landed into more than one (dedup is per namespace; where namespaces meet, in
a version, the copy of the earliest published batch is kept). Each data namespace keeps its own
`version_exclusions` rows (they name its documents); `version_namespaces` records the namespaces
(`fm land --namespace`) a version holds, which the namespace policy checked when it was cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.revocations import RevocationRecord, revoked_mask
from fm_assets.storage.tables import TableSpec, declare

# Documents a version leaves out of the snapshots it tags, in one data namespace: revoked ones
# (a revocation's replacement, or a version cut after a revocation), and copies of a document
# the version keeps from another namespace.
VERSION_EXCLUSIONS = pa.schema(
    [
        pa.field("version_key", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("revocation_id", pa.string(), nullable=True),  # null: a copy kept elsewhere
        pa.field("kept_in", pa.string(), nullable=True),  # the namespace whose copy is kept
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
    TableSpec("version_exclusions", VERSION_EXCLUSIONS, ("version_key",), per_namespace=True),
    TableSpec("version_namespaces", VERSION_NAMESPACES, ("version_key",)),
)

# data namespace -> {doc_id: why}: a revocation id, or the namespace whose copy is kept
Excluded = dict[str, dict[str, str]]


def batch_namespaces(settings: Settings, batches: Iterable[str]) -> list[str]:
    """The data namespaces the batches were landed into, sorted."""
    return sorted(batches_by_namespace(settings, batches))


def batches_by_namespace(settings: Settings, batches: Iterable[str]) -> dict[str, list[str]]:
    """data namespace -> its batches among `batches` (sorted), from the landing manifests."""
    found: dict[str, list[str]] = {}
    for batch_id in sorted(set(batches)):
        found.setdefault(catalog.batch_namespace(settings, batch_id), []).append(batch_id)
    return dict(sorted(found.items()))


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


def choose_documents(
    docs: pa.Table, revocations: list[RevocationRecord], order: Callable[[str], int]
) -> tuple[pa.Table, Excluded, Excluded]:
    """The rows of `docs` (final documents with provenance columns, of every namespace) a new
    version keeps, its revoked rows and its extra copies: (kept, revoked, duplicates).

    A row any recorded revocation matches is left out. A document left in more than one data
    namespace is kept once: the copy of the batch published first (`order`), as exact dedup does
    within a namespace.
    """
    revoked: Excluded = {}
    hit = pa.array([False] * docs.num_rows, pa.bool_())
    for revocation in revocations:
        mask = pc.and_(revoked_mask(docs, [revocation]), pc.invert(hit))
        for namespace, doc_id in zip(
            docs.filter(mask).column("namespace").to_pylist(),
            docs.filter(mask).column("doc_id").to_pylist(),
            strict=True,
        ):
            revoked.setdefault(namespace, {})[doc_id] = revocation.revocation_id
        hit = pc.or_(hit, mask)
    docs = docs.filter(pc.invert(hit))
    duplicates: Excluded = {}
    if len(set(docs.column("namespace").to_pylist())) > 1:
        rank = pa.array([order(b) for b in docs.column("batch_id").to_pylist()], pa.int64())
        docs = docs.append_column("_order", rank).sort_by([("_order", "ascending")])
        kept_in: dict[str, str] = {}
        keep = []
        for doc_id, namespace in zip(
            docs.column("doc_id").to_pylist(), docs.column("namespace").to_pylist(), strict=True
        ):
            first = kept_in.setdefault(doc_id, namespace)
            keep.append(first == namespace)
            if first != namespace:
                duplicates.setdefault(namespace, {})[doc_id] = first
        docs = docs.filter(pa.array(keep, pa.bool_())).drop_columns(["_order"])
    return docs, revoked, duplicates


def exclude_documents(
    settings: Settings,
    version_key: str,
    namespace: str,
    revoked: Mapping[str, str],
    duplicates: Mapping[str, str] | None = None,
) -> None:
    """Record what a version leaves out in one data namespace: revoked documents (doc_id ->
    revocation id) and copies it keeps from another namespace (doc_id -> that namespace)."""
    duplicates = duplicates or {}
    if not revoked and not duplicates:
        return
    doc_ids = [*revoked, *duplicates]
    rows = pa.table(
        {
            "version_key": [version_key] * len(doc_ids),
            "doc_id": doc_ids,
            "revocation_id": [*revoked.values(), *[None] * len(duplicates)],
            "kept_in": [*[None] * len(revoked), *duplicates.values()],
        },
        schema=VERSION_EXCLUSIONS,
    )
    catalog.replace_rows(
        settings,
        "version_exclusions",
        rows,
        catalog.where_equal("version_key", version_key),
        namespace=namespace,
    )


def exclusions(settings: Settings, version_key: str, namespace: str) -> pa.Table:
    """The `version_exclusions` rows of a version in one data namespace."""
    return catalog.read_table(
        settings,
        "version_exclusions",
        row_filter=catalog.where_equal("version_key", version_key),
        namespace=namespace,
    )


def excluded_documents(settings: Settings, version_key: str, namespace: str) -> set[str]:
    """Doc ids a version leaves out of the snapshots it tags in one data namespace (empty for
    an ordinary single-namespace version)."""
    return set(exclusions(settings, version_key, namespace).column("doc_id").to_pylist())


def revoked_exclusions(
    settings: Settings, version_key: str, namespaces: Iterable[str]
) -> dict[str, str]:
    """doc_id -> revocation id of every document a version leaves out because it is revoked."""
    found: dict[str, str] = {}
    for namespace in namespaces:
        rows = exclusions(settings, version_key, namespace).to_pylist()
        found |= {r["doc_id"]: r["revocation_id"] for r in rows if r["revocation_id"]}
    return found
