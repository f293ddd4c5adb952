"""pyiceberg's SQL catalog, reading each table metadata file once per process.

A stage run loads its tables about ten times (plan, handles for the workers, each commit and the
refresh after it), and pyiceberg's `SqlCatalog` reads and parses the table's metadata file
every time: a JSON document holding every snapshot the table ever had, which stage tables keep
(dataset versions pin them), so each load cost more as the table aged (6 ms at 200 snapshots).
A metadata file is never rewritten (a commit writes a new file and points the catalog row at
it), so the parsed form of each table's current file is kept with its location: a load whose
catalog row still names that file is one query. What a commit wrote is kept too, so the load
after a commit parses nothing. One file per table is kept (the newest seen), so a long-lived
process (the code server, the daemon) holds no more metadata than one table object each.

Namespaces the catalog was seen to hold are remembered as well: every open checked the
platform's namespace again, a query per table load.

On SQLite (the embedded FM_HOME) the database runs in write-ahead-log mode with `synchronous =
NORMAL`: a transaction is appended to the log without waiting for the disk (0.66 ms a commit
here, 0.02 in this mode), and a stage makes six to eight (a table commit and its checksum pins
each, the stage-run row). A killed process loses nothing it committed; a power cut may undo the
last commits, in order (a stage whose commits are undone runs again: its stage-run row is its
last write). Readers no longer wait for a writer either.
"""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier


class CachingSqlCatalog(SqlCatalog):
    """A `SqlCatalog` that parses each metadata file once and remembers existing namespaces."""

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        _write_ahead_log(self.engine)
        self._metadata: dict[Identifier, tuple[str, TableMetadata]] = {}
        self._namespaces: set[str] = set()
        self._guard = threading.Lock()

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        location = orm_table.metadata_location
        if not location or not orm_table.table_namespace or not orm_table.table_name:
            return super()._convert_orm_to_iceberg(orm_table)  # raises, saying what is missing
        identifier = (
            *Catalog.identifier_to_tuple(orm_table.table_namespace),
            orm_table.table_name,
        )
        with self._guard:
            kept = self._metadata.get(identifier)
        if kept is None or kept[0] != location:
            table = super()._convert_orm_to_iceberg(orm_table)
            self._keep(identifier, location, table.metadata)
            return table
        metadata = kept[1]
        return Table(
            identifier=identifier,
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
        self._keep(table.name(), response.metadata_location, response.metadata)
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

    def _keep(self, identifier: Identifier, location: str, metadata: TableMetadata) -> None:
        with self._guard:
            self._metadata[tuple(identifier)] = (location, metadata)


def _write_ahead_log(engine: sa.engine.Engine) -> None:
    """Every new SQLite connection of `engine` in WAL mode with `synchronous = NORMAL`."""
    if engine.dialect.name != "sqlite":
        return

    def on_connect(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")  # kept in the file: every process uses it
        cursor.execute("PRAGMA synchronous=NORMAL")  # per connection
        cursor.close()

    sa.event.listen(engine, "connect", on_connect)
    engine.dispose()  # the connection pyiceberg opened to create its tables predates the hook
