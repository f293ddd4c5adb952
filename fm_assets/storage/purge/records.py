"""The audit of purges: who purged what, when, and how many bytes went.

- `purges` (platform-wide): one row per run of `fm purge` for a revocation: who (`FM_USER` or
  the login), when it started and finished, what the revocation names, how many documents and
  rows, bytes and files went, every artifact's outcome (JSON), and what remains;
- `purged_documents` (per data namespace: it names documents): every purged record, with its
  batch, document, record id, landed file and what became of its bytes there. Written before
  anything is removed: a purge killed midway and run again reads its plan back from here;
- `version_purges` (platform-wide): each dataset version whose documents a purge removed, and
  how many documents and tokens it lost: the version still reads, without them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.tables import TableSpec, declare

PURGES = pa.schema(
    [
        pa.field("revocation_id", pa.string(), nullable=False),
        pa.field("criterion", pa.string(), nullable=False),
        pa.field("value", pa.string(), nullable=False),
        pa.field("purged_by", pa.string(), nullable=False),
        pa.field("started_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("finished_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("documents", pa.int64(), nullable=False),  # (batch, document) instances
        pa.field("rows_removed", pa.int64(), nullable=False),  # from every table's data files
        pa.field("bytes_removed", pa.int64(), nullable=False),  # tables + sets + landed files
        pa.field("files_deleted", pa.int64(), nullable=False),
        pa.field("details", pa.string(), nullable=False),  # JSON: every artifact's outcome
        pa.field("remaining", pa.string(), nullable=False),  # what still holds any of it
    ]
)
PURGED_DOCUMENTS = pa.schema(
    [
        pa.field("revocation_id", pa.string(), nullable=False),
        pa.field("batch_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=True),  # null: a record with no content
        pa.field("record_id", pa.string(), nullable=True),  # "<file sha256[:16]>:<index>"
        pa.field("source_file", pa.string(), nullable=True),
        pa.field("landing", pa.string(), nullable=True),  # what became of its landed bytes
    ]
)
VERSION_PURGES = pa.schema(
    [
        pa.field("version_key", pa.string(), nullable=False),
        pa.field("revocation_id", pa.string(), nullable=False),
        pa.field("documents_removed", pa.int64(), nullable=False),
        pa.field("tokens_removed", pa.int64(), nullable=False),
        pa.field("purged_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
declare(
    TableSpec("purges", PURGES, ("revocation_id",)),
    TableSpec("purged_documents", PURGED_DOCUMENTS, ("revocation_id",), per_namespace=True),
    TableSpec("version_purges", VERSION_PURGES, ("revocation_id",)),
)
# Tables a purge never removes rows from: its own record, and what says which documents a
# version leaves out (ids, no content: the record of what was revoked).
KEPT_TABLES = frozenset({"purged_documents", "version_exclusions"})


def record_plan(settings: Settings, namespace: str, rows: pa.Table) -> None:
    """Replace the revocation's planned rows in `namespace` with `rows` (PURGED_DOCUMENTS)."""
    revocations = set(rows.column("revocation_id").to_pylist())
    if len(revocations) != 1:
        raise ValueError(f"a purge plan is for one revocation, got {sorted(revocations)}")
    catalog.replace_rows(
        settings,
        "purged_documents",
        rows,
        catalog.where_equal("revocation_id", revocations.pop()),
        namespace=namespace,
    )


def read_plan(settings: Settings, namespace: str, revocation_id: str) -> pa.Table:
    return catalog.read_table(
        settings,
        "purged_documents",
        catalog.where_equal("revocation_id", revocation_id),
        namespace=namespace,
    )


def _exists(settings: Settings, name: str, namespace: str | None = None) -> bool:
    """Whether the table was ever created (readers of a catalog no purge touched create none)."""
    identifier = catalog.table_identifier(settings, name, namespace)
    return bool(catalog.open_catalog(settings).table_exists(identifier))


def purged_records(settings: Settings, namespace: str, batch_id: str) -> list[str]:
    """Record ids of `batch_id` that purges removed (for the raw stage's accounting)."""
    if not _exists(settings, "purged_documents", namespace):
        return []
    rows = catalog.read_table(
        settings,
        "purged_documents",
        catalog.where_equal("batch_id", batch_id),
        columns=("record_id",),
        namespace=namespace,
    )
    return sorted({r for r in rows.column("record_id").to_pylist() if r})


def record_version_purges(
    settings: Settings, revocation_id: str, rows: Iterable[dict[str, object]]
) -> None:
    """What the revocation's purge removes from each version (written once, with its plan)."""
    data = pa.Table.from_pylist(list(rows), schema=VERSION_PURGES)
    catalog.replace_rows(
        settings, "version_purges", data, catalog.where_equal("revocation_id", revocation_id)
    )


def version_purged(settings: Settings, version_key: str) -> tuple[int, int]:
    """(documents, tokens) purges removed from what `version_key` holds."""
    if not _exists(settings, "version_purges"):
        return 0, 0
    rows = catalog.read_table(
        settings, "version_purges", catalog.where_equal("version_key", version_key)
    )
    documents = sum(rows.column("documents_removed").to_pylist())
    tokens = sum(rows.column("tokens_removed").to_pylist())
    return int(documents), int(tokens)


def record_purge(settings: Settings, row: dict[str, object]) -> None:
    catalog.append_rows(settings, "purges", pa.Table.from_pylist([row], schema=PURGES))


def read_purges(settings: Settings) -> list[dict[str, object]]:
    """Every purge run, oldest first."""
    rows = catalog.read_table(settings, "purges").to_pylist()
    return sorted(rows, key=lambda r: (r["started_at"], r["revocation_id"]))


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
