"""The one reader of what a dataset version holds.

Every path that reads a version's rows (`fm export --version`, the text export, cards,
contamination scans, lineage, shard builds, checks) goes through this module, which reads each
table as the version sees it and drops the documents the version leaves out (`version_exclusions`:
revoked documents, and copies of a document kept in another data namespace).
`tests/test_version_reader.py` fails when a module reads a version's pinned snapshots or its
exclusions any other way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import BooleanExpression

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.tables import table_spec
from fm_assets.versions.dataset_version import DatasetVersion
from fm_assets.versions.membership import excluded_documents


def version_snapshot(
    settings: Settings, version: DatasetVersion, table: str, namespace: str
) -> int | None:
    """The snapshot of `table` (in data namespace `namespace`) the version sees; None when the
    table had no rows then.

    A document table is read at the version's tag. Another table (quarantine, PII audit,
    contamination matches) at its own tag of the version when it has one, else as it stood at
    the version's latest pinned document commit: the runner commits a stage's quarantine and side
    tables before its output, so that instant holds the rows behind the version's documents.
    """
    pinned_ids = version.snapshot_ids.get(namespace, {})
    if table in pinned_ids:
        return pinned_ids[table]
    if table in version.pipeline.names:
        return None  # create_version pins every document table that had a snapshot
    iceberg = catalog.load_table(settings, table, namespace=namespace)
    tagged = iceberg.snapshot_by_name(version.version_key)
    if tagged is not None:
        return tagged.snapshot_id
    pinned = [
        catalog.load_table(settings, name, namespace=namespace).snapshot_by_id(snapshot_id)
        for name, snapshot_id in pinned_ids.items()
    ]
    times = [s.timestamp_ms for s in pinned if s is not None]
    snapshot = iceberg.snapshot_as_of_timestamp(max(times)) if times else None
    return snapshot.snapshot_id if snapshot is not None else None


def _namespaces(
    version: DatasetVersion, table: str, only: Iterable[str] | None
) -> list[str | None]:
    if not table_spec(table).per_namespace:
        return [None]
    wanted = None if only is None else set(only)
    return [n for n in version.namespaces if wanted is None or n in wanted]


def _without_excluded(rows: pa.Table, excluded: set[str]) -> pa.Table:
    if not excluded or "doc_id" not in rows.schema.names:
        return rows
    return rows.filter(pc.invert(pc.is_in(rows.column("doc_id"), pa.array(sorted(excluded)))))


def _empty(table: str, columns: tuple[str, ...] | None) -> pa.Table:
    schema = catalog.table_schema(table)
    return (pa.schema([schema.field(c) for c in columns]) if columns else schema).empty_table()


def version_rows(
    settings: Settings,
    version: DatasetVersion,
    table: str,
    columns: tuple[str, ...] | None = None,
    where: BooleanExpression | None = None,
    namespaces: Iterable[str] | None = None,
) -> pa.Table:
    """The version's rows of any platform table (matching `where`), from every data namespace
    it holds (or those of them in `namespaces`), less the rows of documents it leaves out.

    A table with a `version_key` column gives the rows recorded for the version; a table with a
    `batch_id` column the rows of the version's batches, read at `version_snapshot`. Any other
    table cannot be selected by version, and raises.
    """
    schema = catalog.table_schema(table)
    if "version_key" in schema.names:
        selected = catalog.where_equal("version_key", version.version_key)
        snapshot_of = None
    elif "batch_id" in schema.names:
        selected = catalog.where_in("batch_id", list(version.batches))
        snapshot_of = version_snapshot
    else:
        raise ValueError(
            f"{table} cannot be selected by version: it has neither a version_key nor a "
            "batch_id column; export it whole"
        )
    row_filter = selected if where is None else catalog.where_all(selected, where)
    parts = []
    for namespace in _namespaces(version, table, namespaces):
        snapshot_id = None
        if snapshot_of is not None and namespace is not None:
            snapshot_id = snapshot_of(settings, version, table, namespace)
            if snapshot_id is None:
                continue
        excluded = (
            excluded_documents(settings, version.version_key, namespace)
            if namespace is not None and "doc_id" in schema.names
            else set()
        )
        wanted = columns
        if excluded and columns is not None and "doc_id" not in columns:
            wanted = (*columns, "doc_id")
        rows = catalog.read_table(
            settings, table, row_filter, snapshot_id, columns=wanted, namespace=namespace
        )
        rows = _without_excluded(rows, excluded)
        parts.append(rows if columns is None else rows.select(list(columns)))
    return pa.concat_tables(parts) if parts else _empty(table, columns)


def version_documents(
    settings: Settings,
    version: DatasetVersion,
    table: str,
    columns: tuple[str, ...] | None = None,
    where: BooleanExpression | None = None,
) -> pa.Table:
    """The version's rows of a document table (one stage's output), matching `where`."""
    if table not in version.pipeline.names:
        raise ValueError(
            f"{table} is not a document table of {version.version_key} ({version.modality}: "
            f"{', '.join(version.pipeline.names)}); read other tables with version_rows"
        )
    return version_rows(settings, version, table, columns, where)


def version_text_documents(
    settings: Settings, version: DatasetVersion, columns: tuple[str, ...]
) -> pa.Table:
    """`columns` (`text` among them) of the version's documents, from the last table holding
    their text (`Pipeline.text_table`), for exactly the documents its final table holds."""
    held = version_documents(settings, version, version.pipeline.final, ("doc_id",))
    wanted = columns if "doc_id" in columns else (*columns, "doc_id")
    docs = version_documents(settings, version, version.pipeline.text_table, wanted)
    return docs.filter(pc.is_in(docs.column("doc_id"), held.column("doc_id"))).select(list(columns))


def stream_version_documents(
    settings: Settings,
    version: DatasetVersion,
    table: str,
    columns: tuple[str, ...],
    held: pa.Array,
) -> Iterator[pa.RecordBatch]:
    """Record batches of `columns` of the version's documents in `table` whose doc_id is in
    `held` (the version's documents, from its final table), streamed: a wide column (the text)
    never sits in memory whole."""
    wanted = columns if "doc_id" in columns else (*columns, "doc_id")
    for namespace in version.namespaces:
        snapshot_id = version_snapshot(settings, version, table, namespace)
        if snapshot_id is None:
            continue
        scan = catalog.load_table(settings, table, namespace=namespace).scan(
            row_filter=catalog.where_in("batch_id", list(version.batches)),
            snapshot_id=snapshot_id,
            selected_fields=wanted,
        )
        for batch in scan.to_arrow_batch_reader():
            kept = batch.filter(pc.is_in(batch.column("doc_id"), held))
            yield kept.select(list(columns))


def count_version_rows(settings: Settings, version: DatasetVersion, table: str) -> int:
    """How many of the version's rows `table` holds: the data files' record counts (the filter
    selects whole `batch_id` partitions, no rows read) less the rows of documents the version
    leaves out."""
    where = catalog.where_in("batch_id", list(version.batches))
    total = 0
    for namespace in version.namespaces:
        snapshot_id = version_snapshot(settings, version, table, namespace)
        if snapshot_id is None:
            continue
        iceberg = catalog.load_table(settings, table, namespace=namespace)
        total += iceberg.scan(row_filter=where, snapshot_id=snapshot_id).count()
        excluded = excluded_documents(settings, version.version_key, namespace)
        if excluded:
            total -= (
                iceberg.scan(
                    row_filter=catalog.where_all(
                        where, catalog.where_in("doc_id", sorted(excluded))
                    ),
                    snapshot_id=snapshot_id,
                    selected_fields=("doc_id",),
                )
                .to_arrow()
                .num_rows
            )
    return total
