"""The tables maintenance visits, and the snapshots of each that dataset versions read.

Only tables that exist are visited, each loaded straight from the catalog: maintenance never
creates a table nor brings one to its declaration (`catalog.load_table` would commit to do so).

A version reads its document tables at the snapshots its `dataset_versions` row names (also
tagged), and every other table of its data namespaces with a `batch_id` column (quarantine, the
PII audit, the dedup indexes, ...) as it stood when the version's latest pinned commit was made
(`versions.reader.version_snapshot`). Those are the snapshots `version_pins` returns: expiring
one would change what the version reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table import Table

from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_loader.storage.retry import with_retries


@dataclass(frozen=True)
class TableRef:
    """A table of the catalog: its name, its data namespace (None: platform-wide) and the
    identifier it has in the catalog."""

    name: str
    namespace: str | None
    identifier: str


def existing_tables(settings: Settings, namespace: str | None = None) -> list[TableRef]:
    """Every table the platform's catalog namespaces hold, platform-wide ones first; with
    `namespace`, only that data namespace's."""
    known = catalog.data_namespaces(settings)
    if namespace is not None and namespace not in known:
        listed = ", ".join(known) or "none yet"
        raise ValueError(f"no data namespace {namespace!r} in the catalog (namespaces: {listed})")
    owners: list[str | None] = [namespace] if namespace is not None else [None, *known]
    found = []
    iceberg = catalog.open_catalog(settings)
    for owner in owners:
        catalog_namespace = catalog.catalog_namespace(settings, owner)
        for identifier in sorted(iceberg.list_tables(catalog_namespace)):
            name = identifier[-1]
            found.append(TableRef(name, owner, f"{catalog_namespace}.{name}"))
    return found


def load(settings: Settings, table: TableRef) -> Table:
    """The table as the catalog holds it now (retried while the catalog fails transiently)."""
    iceberg = catalog.open_catalog(settings)
    return with_retries(
        lambda: iceberg.load_table(table.identifier), what=f"loading table {table.identifier}"
    )


def version_pins(settings: Settings, tables: list[TableRef]) -> dict[str, set[int]]:
    """identifier -> the snapshots of that table some dataset version reads."""
    pins: dict[str, set[int]] = {t.identifier: set() for t in tables}
    by_namespace: dict[str | None, list[TableRef]] = {}
    for table in tables:
        by_namespace.setdefault(table.namespace, []).append(table)
    loaded: dict[str, Table] = {}

    def table_of(ref: TableRef) -> Table:
        if ref.identifier not in loaded:
            loaded[ref.identifier] = load(settings, ref)
        return loaded[ref.identifier]

    for pinned in _versions(settings):
        for namespace, snapshots in pinned.items():
            refs = {t.name: t for t in by_namespace.get(namespace, [])}
            times = []
            for name, snapshot_id in snapshots.items():
                if name in refs:
                    pins[refs[name].identifier].add(snapshot_id)
                    snapshot = table_of(refs[name]).snapshot_by_id(snapshot_id)
                    if snapshot is not None:
                        times.append(snapshot.timestamp_ms)
            if not times:
                continue
            for name, ref in refs.items():
                if name in snapshots:
                    continue
                as_of = table_of(ref).snapshot_as_of_timestamp(max(times))
                if as_of is not None:
                    pins[ref.identifier].add(as_of.snapshot_id)
    return pins


def _versions(settings: Settings) -> list[dict[str, dict[str, int]]]:
    """Each dataset version's pinned snapshots: {data namespace: {table: snapshot id}}."""
    identifier = catalog.table_identifier(settings, "dataset_versions")
    try:
        table = catalog.open_catalog(settings).load_table(identifier)
    except NoSuchTableError:
        return []
    rows = table.scan(selected_fields=("version_key", "snapshot_ids")).to_arrow().to_pylist()
    found = []
    for row in rows:
        snapshots = json.loads(str(row["snapshot_ids"]))
        if any(not isinstance(v, dict) for v in snapshots.values()):
            raise ValueError(
                f"dataset version {row['version_key']} was cut before each data namespace had "
                "its own catalog namespace; this platform cannot tell which snapshots it reads, "
                "so it maintains nothing: use a new FM_HOME"
            )
        found.append({ns: {t: int(v) for t, v in tabs.items()} for ns, tabs in snapshots.items()})
    return found
