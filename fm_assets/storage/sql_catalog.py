"""pyiceberg's SQL catalog, reading each table metadata file once per process.

A stage run loads its tables about ten times (plan, handles for the workers, each commit and the
refresh after it), and pyiceberg's `SqlCatalog` reads and parses the table's metadata file
every time: a JSON document holding every snapshot the table ever had, which stage tables keep
(dataset versions pin them), so each load cost more as the table aged (6 ms at 200 snapshots).
A metadata file is never rewritten (a commit writes a new file and points the catalog row at
it), so its parsed form is kept by location: a load is then one catalog query. What a commit
wrote is kept too, so the load after a commit parses nothing.

Namespaces the catalog was seen to hold are remembered as well: every open checked the
platform's namespace again, a query per table load.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier

# Parsed metadata files kept per process: one or two per table a command touches.
_KEPT_METADATA = 64


class CachingSqlCatalog(SqlCatalog):
    """A `SqlCatalog` that parses each metadata file once and remembers existing namespaces."""

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self._metadata: OrderedDict[str, TableMetadata] = OrderedDict()
        self._namespaces: set[str] = set()
        self._guard = threading.Lock()

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        location = orm_table.metadata_location
        metadata = self._kept(location) if location else None
        if (
            location is None
            or metadata is None
            or not orm_table.table_namespace
            or not orm_table.table_name
        ):
            table = super()._convert_orm_to_iceberg(orm_table)
            self._keep(table.metadata_location, table.metadata)
            return table
        return Table(
            identifier=(
                *Catalog.identifier_to_tuple(orm_table.table_namespace),
                orm_table.table_name,
            ),
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(metadata.properties, location),
            catalog=self,
        )

    def commit_table(
        self,
        table: Table,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        response = super().commit_table(table, requirements, updates)
        self._keep(response.metadata_location, response.metadata)
        return response

    def namespace_exists(self, identifier: str | Identifier) -> bool:
        key = Catalog.namespace_to_string(Catalog.identifier_to_tuple(identifier))
        if key in self._namespaces:
            return True
        exists = super().namespace_exists(identifier)
        if exists:
            with self._guard:
                self._namespaces.add(key)
        return exists

    def drop_namespace(self, namespace: str | Identifier) -> None:
        with self._guard:
            self._namespaces.discard(
                Catalog.namespace_to_string(Catalog.identifier_to_tuple(namespace))
            )
        super().drop_namespace(namespace)

    def _kept(self, location: str) -> TableMetadata | None:
        with self._guard:
            metadata = self._metadata.get(location)
            if metadata is not None:
                self._metadata.move_to_end(location)
            return metadata

    def _keep(self, location: str, metadata: TableMetadata) -> None:
        with self._guard:
            self._metadata[location] = metadata
            self._metadata.move_to_end(location)
            while len(self._metadata) > _KEPT_METADATA:
                self._metadata.popitem(last=False)
