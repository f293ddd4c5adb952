"""The platform's tables: each owner declares its tables once (name, schema, partitions).

Storage declares its own (quarantine, bookkeeping, registries, versions, shard sets); every stage
declares its output table from its class (`stages.base.Stage`), and the MinHash index and the
contamination registry declare theirs beside the code that fills them. The catalog creates a
table from its declaration on first use.

A table holding documents, or anything derived from one data namespace's documents, is declared
`per_namespace`: each data namespace has its own copy, in a catalog namespace of its own
(`storage.catalog.catalog_namespace`). The others are platform-wide, in the platform's namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class TableSpec:
    """A platform table: its name in the catalog, its Arrow schema, its identity partitions,
    whether each data namespace keeps its own copy (documents and what derives from them), and
    the table properties it is created with (`properties`: what a reader may rely on of a
    table this platform version created, e.g. a layout)."""

    name: str
    schema: pa.Schema
    partition_by: tuple[str, ...] = ()
    per_namespace: bool = False
    properties: tuple[tuple[str, str], ...] = ()


_DECLARED: dict[str, TableSpec] = {}


def declare(*specs: TableSpec) -> None:
    """Declare tables; declaring the same name again with another schema is a bug, and raises."""
    for spec in specs:
        known = _DECLARED.get(spec.name)
        if known is not None and known != spec:
            raise ValueError(
                f"table {spec.name!r} is declared twice with different schemas or partitions"
            )
        _DECLARED[spec.name] = spec


def table_spec(name: str) -> TableSpec:
    """The declaration of table `name`; the error lists the declared ones."""
    try:
        return _DECLARED[name]
    except KeyError:
        raise KeyError(
            f"unknown table {name!r}; declared tables: {', '.join(sorted(_DECLARED))} "
            "(stage tables are declared when fm_assets.execution.pipelines is imported)"
        ) from None


def declared_tables() -> list[str]:
    """Names of every table declared so far, sorted."""
    return sorted(_DECLARED)
