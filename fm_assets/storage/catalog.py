"""The Iceberg catalog: opening it, creating the platform's tables, reading and replacing rows.

Document tables, quarantine and stage runs are partitioned by `batch_id`, so a stage rerun replaces
exactly its batch's partition in one atomic commit.

Platform-wide tables (registries, versions, shard sets, revocations) live in the platform's
catalog namespace (`fm`); a table declared `per_namespace` (documents and what derives from them)
lives in one catalog namespace per data namespace, `fm_<data namespace>` with hyphens as
underscores (`fm_cloud`, `fm_on_device`), whose metadata and data files sit below
`<warehouse>/fm_<data namespace>/`. Every call names the data namespace of such a table
(`namespace=`; `read_batch` reads the batch's own); nothing defaults to one, so no code reads
another namespace by accident.
"""

from __future__ import annotations

import threading
import warnings
from functools import cache

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    NoSuchNamespaceError,
    NoSuchTableError,
)
from pyiceberg.expressions import (
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    In,
    NotEqualTo,
    Or,
)
from pyiceberg.table import Table

from fm_assets.settings import Settings
from fm_assets.storage import (  # noqa: F401  (declare the tables storage owns)
    image_text_schemas,
    schemas,
)
from fm_assets.storage.avro_schemas import convert_schemas_once
from fm_assets.storage.landing import NAMESPACE_NAME, read_manifest
from fm_assets.storage.objectstore import iceberg_s3_properties, open_object_store
from fm_assets.storage.parquet_checksums import write_page_checksums
from fm_assets.storage.partitioning import align_partitions, partition_columns
from fm_assets.storage.schema_evolution import (
    align_columns,
    declared_columns_missing,
    dropped_required_columns,
)
from fm_assets.storage.sql_catalog import CachingSqlCatalog
from fm_assets.storage.tables import table_spec
from fm_assets.storage.transactions import share_frozen_metadata_parts, transaction
from fm_loader.storage.retry import with_retries

write_page_checksums()  # before any table is written in this process
convert_schemas_once()
share_frozen_metadata_parts()
_lock = threading.Lock()
ALWAYS_TRUE: BooleanExpression = AlwaysTrue()
NOTHING: BooleanExpression = AlwaysFalse()  # a commit's `replace` that removes no row
# Concurrent runs (two batches, a backfill) commit to the same tables; a commit that lost the
# race is retried on the refreshed table (pyiceberg re-applies the overwrite's filter), so no
# commit is lost. pyiceberg's default of 4 retries is thin for several writers on one table.
COMMIT_RETRY_PROPERTIES = {
    "commit.retry.num-retries": "12",
    "commit.retry.min-wait-ms": "100",
    "commit.retry.max-wait-ms": "5000",
}
# Properties of a data namespace's catalog namespace: which data namespace, of which platform
# namespace. `data_namespaces` lists by them, not by a name another deployment could share.
DATA_NAMESPACE_PROPERTY = "fm.data-namespace"
PLATFORM_NAMESPACE_PROPERTY = "fm.platform-namespace"


def _catalog_properties(settings: Settings) -> dict[str, str]:
    props = {"uri": settings.catalog_uri, "warehouse": settings.warehouse}
    return props | iceberg_s3_properties(settings.s3_endpoint)


@cache
def _open(name: str, props: tuple[tuple[str, str], ...]) -> Catalog:
    return CachingSqlCatalog(name, **dict(props))


def open_catalog(settings: Settings) -> Catalog:
    """Open (once per process) the SQL catalog and make sure the platform's namespace exists."""
    if settings.catalog_uri.startswith("sqlite:///"):
        settings.home.mkdir(parents=True, exist_ok=True)
    catalog = _open(settings.catalog_name, tuple(sorted(_catalog_properties(settings).items())))
    _ensure_namespace(catalog, settings.namespace, {})
    return catalog


def _ensure_namespace(catalog: Catalog, name: str, properties: dict[str, str]) -> None:
    if catalog.namespace_exists(name):
        return
    try:
        catalog.create_namespace(name, properties)
    except Exception:
        # Another process created it between the check and the insert (a unique-key
        # violation on Postgres, not always NamespaceAlreadyExistsError).
        if not catalog.namespace_exists(name):
            raise


def catalog_namespace(settings: Settings, namespace: str | None) -> str:
    """The Iceberg namespace holding a table of data namespace `namespace` (None: the platform's).

    `fm_<namespace>` with hyphens as underscores: one level, letters, digits and underscores,
    which every Iceberg catalog accepts (Glue and Hive allow neither nesting nor hyphens) and SQL
    needs no quoting for. Data namespace names hold no underscore, so the mapping is one to one.
    """
    if namespace is None:
        return settings.namespace
    if not NAMESPACE_NAME.fullmatch(namespace):
        raise ValueError(
            f"data namespace {namespace!r} is not lower-case letters, digits and hyphens; "
            "`fm land --namespace` accepts only such names"
        )
    return f"{settings.namespace}_{namespace.replace('-', '_')}"


def namespace_location(settings: Settings, namespace: str | None) -> str:
    """Where the tables of a catalog namespace keep their metadata and data files."""
    return f"{settings.warehouse.rstrip('/')}/{catalog_namespace(settings, namespace)}"


def data_namespaces(settings: Settings) -> list[str]:
    """Every data namespace holding tables in the catalog, sorted (created on a first write)."""
    catalog = open_catalog(settings)
    found = []
    for identifier in catalog.list_namespaces():
        if len(identifier) != 1 or not identifier[0].startswith(f"{settings.namespace}_"):
            continue
        try:
            properties = catalog.load_namespace_properties(identifier)
        except NoSuchNamespaceError:
            continue
        name = properties.get(DATA_NAMESPACE_PROPERTY)
        if name and properties.get(PLATFORM_NAMESPACE_PROPERTY) == settings.namespace:
            found.append(name)
    return sorted(found)


@cache
def batch_namespace(settings: Settings, batch_id: str) -> str:
    """The data namespace a landing batch was landed into (its manifest is immutable: cached)."""
    return read_manifest(open_object_store(settings), batch_id).namespace


def table_schema(name: str) -> pa.Schema:
    """The Arrow schema of a declared table (`storage.tables`)."""
    return table_spec(name).schema


def table_identifier(settings: Settings, name: str, namespace: str | None = None) -> str:
    """`<catalog namespace>.<table>` of a declared table; raises when `namespace` is missing for a
    table each data namespace keeps, or given for a platform-wide one."""
    spec = table_spec(name)  # unknown names fail here, listing the declared tables
    if spec.per_namespace and namespace is None:
        raise ValueError(
            f"table {name} is kept per data namespace (catalog namespaces "
            f"{settings.namespace}_<namespace>): name the data namespace to read or write"
        )
    if not spec.per_namespace and namespace is not None:
        raise ValueError(
            f"table {name} is platform-wide (catalog namespace {settings.namespace}); it has no "
            f"copy for data namespace {namespace!r}"
        )
    return f"{catalog_namespace(settings, namespace)}.{name}"


def load_table(settings: Settings, name: str, *, namespace: str | None = None) -> Table:
    """Load a platform table (of data namespace `namespace`, for a table declared
    `per_namespace`), creating it (with its partition spec) on first use.

    A catalog or metadata read that fails transiently (a dropped connection to Postgres, a reset
    from S3) is retried; a persistent one raises `StorageUnavailable`.
    """
    identifier = table_identifier(settings, name, namespace)
    return with_retries(
        lambda: _load_table(settings, name, identifier, namespace),
        what=f"loading table {identifier}",
    )


def _load_table(settings: Settings, name: str, identifier: str, namespace: str | None) -> Table:
    catalog = open_catalog(settings)
    spec = table_spec(name)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    else:
        if set(partition_columns(table)) != set(spec.partition_by):
            align_partitions(catalog, identifier, table, spec.partition_by, _lock)
            table = catalog.load_table(identifier)
        if declared_columns_missing(table, spec.schema) or dropped_required_columns(
            table, spec.schema
        ):
            align_columns(catalog, identifier, table, spec.schema, _lock)
            table = catalog.load_table(identifier)
        return table
    if namespace is not None:
        # The location pins the layout whatever the catalog's own convention (SqlCatalog's
        # `<warehouse>/<ns>/`, Glue's `<ns>.db/`): a bucket policy matches these prefixes.
        properties = {
            "location": namespace_location(settings, namespace),
            DATA_NAMESPACE_PROPERTY: namespace,
            PLATFORM_NAMESPACE_PROPERTY: settings.namespace,
        }
        _ensure_namespace(catalog, catalog_namespace(settings, namespace), properties)
    with _lock:
        table = catalog.create_table_if_not_exists(
            identifier,
            schema=spec.schema,
            properties={**COMMIT_RETRY_PROPERTIES, **dict(spec.properties)},
        )
    align_partitions(catalog, identifier, table, spec.partition_by, _lock)
    return catalog.load_table(identifier)


def where_equal(column: str, value: str | int) -> BooleanExpression:
    """Rows whose `column` equals `value` (pyiceberg's pydantic constructors defeat mypy)."""
    return EqualTo(column, value)  # type: ignore[call-arg, arg-type]


def where_not_equal(column: str, value: str | int) -> BooleanExpression:
    return NotEqualTo(column, value)  # type: ignore[call-arg, arg-type]


def where_in(column: str, values: list[str] | list[int]) -> BooleanExpression:
    return In(column, values)  # type: ignore[call-arg, arg-type]


def where_all(*conditions: BooleanExpression) -> BooleanExpression:
    if not conditions:
        return AlwaysTrue()
    result = conditions[0]
    for condition in conditions[1:]:
        result = And(result, condition)
    return result


def where_any(*conditions: BooleanExpression) -> BooleanExpression:
    if not conditions:
        return AlwaysFalse()
    result = conditions[0]
    for condition in conditions[1:]:
        result = Or(result, condition)
    return result


def conform(data: pa.Table, schema: pa.Schema, *, fill_nullable: bool = False) -> pa.Table:
    """Cast `data` to exactly `schema` (column order, types, nullability) or fail saying why.

    `fill_nullable`: a nullable column `data` lacks reads as nulls (a snapshot written before
    the column was added to its table).
    """
    if fill_nullable:
        for f in schema:
            if f.nullable and f.name not in data.column_names:
                data = data.append_column(f.name, pa.nulls(data.num_rows, f.type))
    missing = [f.name for f in schema if f.name not in data.column_names]
    if missing:
        raise ValueError(f"table is missing columns {missing}; expected {schema.names}")
    data = data.select(schema.names)
    try:
        return data.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
        raise ValueError(f"cannot conform table to schema: {exc}") from exc


def read_table(
    settings: Settings,
    name: str,
    row_filter: BooleanExpression | None = None,
    snapshot_id: int | None = None,
    columns: tuple[str, ...] | None = None,
    *,
    namespace: str | None = None,
) -> pa.Table:
    """Read rows of a platform table as Arrow, typed exactly as the platform's schema."""
    table = load_table(settings, name, namespace=namespace)
    scan = table.scan(
        row_filter=row_filter if row_filter is not None else AlwaysTrue(),
        snapshot_id=snapshot_id,
        selected_fields=columns or ("*",),
    )
    data = scan.to_arrow()
    schema = table_schema(name)
    if columns:
        schema = pa.schema([schema.field(c) for c in columns])
    return conform(data, schema, fill_nullable=True)


def read_namespaces(
    settings: Settings,
    name: str,
    namespaces: list[str],
    row_filter: BooleanExpression | None = None,
    columns: tuple[str, ...] | None = None,
) -> pa.Table:
    """Rows of a per-namespace table in each of `namespaces`, current snapshots, concatenated."""
    parts = [
        read_table(settings, name, row_filter, None, columns, namespace=namespace)
        for namespace in namespaces
    ]
    if parts:
        return pa.concat_tables(parts)
    schema = table_schema(name)
    return (pa.schema([schema.field(c) for c in columns]) if columns else schema).empty_table()


def read_batch(
    settings: Settings,
    name: str,
    batch_id: str,
    snapshot_id: int | None = None,
    columns: tuple[str, ...] | None = None,
) -> pa.Table:
    """Read one landing batch's partition of a document table (in the batch's data namespace)."""
    namespace = batch_namespace(settings, batch_id) if table_spec(name).per_namespace else None
    return read_table(
        settings,
        name,
        where_equal("batch_id", batch_id),
        snapshot_id,
        columns,
        namespace=namespace,
    )


def replace_rows(
    settings: Settings,
    name: str,
    data: pa.Table,
    where: BooleanExpression,
    snapshot_properties: dict[str, str] | None = None,
    *,
    namespace: str | None = None,
) -> int:
    """Atomically replace the rows matching `where` with `data`; return the new snapshot id.

    One transaction: readers see the old rows or the new ones, never a mix, and a crash
    leaves the old snapshot in place. Ray may retry a stage, so writes must be replacements.
    """
    table = load_table(settings, name, namespace=namespace)
    data = conform(data, table_schema(name))
    with warnings.catch_warnings():
        # A first run of a batch has nothing to delete; pyiceberg warns about that, harmlessly.
        warnings.filterwarnings("ignore", message="Delete operation did not match any records")
        with transaction(table) as tx:
            tx.overwrite(
                data, overwrite_filter=where, snapshot_properties=snapshot_properties or {}
            )
    table = table.refresh()
    snapshot = table.current_snapshot()
    if snapshot is None:
        raise RuntimeError(f"table {name} has no snapshot after a commit")
    return snapshot.snapshot_id


def append_rows(
    settings: Settings, name: str, data: pa.Table, *, namespace: str | None = None
) -> None:
    """Append rows to a log-like table (stage runs, check results, registries)."""
    table = load_table(settings, name, namespace=namespace)
    with transaction(table) as tx:
        tx.append(conform(data, table_schema(name)))


def current_snapshot_id(
    settings: Settings, name: str, *, namespace: str | None = None
) -> int | None:
    snapshot = load_table(settings, name, namespace=namespace).current_snapshot()
    return snapshot.snapshot_id if snapshot else None
