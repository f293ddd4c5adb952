"""What the catalog occupies on disk: the SQL catalog's database (Iceberg's table pointers and
the platform's bookkeeping beside them), each table's metadata (metadata files, manifest lists,
manifests: everything under a table's `metadata/`) and its data files, under the warehouse.
Dagster's own storage under the home (runs, event log) is counted apart: it is not the
catalog and catalog maintenance does not touch it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from fm_assets.settings import Settings


@dataclass(frozen=True)
class Footprint:
    """Bytes (and files) on disk at one moment."""

    db_bytes: int
    metadata_bytes: int
    metadata_files: int
    data_bytes: int
    data_files: int
    dagster_bytes: int

    @property
    def catalog_bytes(self) -> int:
        """The catalog's database, metadata and data together."""
        return self.db_bytes + self.metadata_bytes + self.data_bytes


def _tree(root: Path) -> list[tuple[Path, int]]:
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder, name)
            try:
                found.append((path, path.stat().st_size))
            except FileNotFoundError:
                continue  # deleted while we looked
    return found


def _local_path(uri: str, scheme: str) -> Path:
    parsed = urlparse(uri)
    if scheme == "sqlite":
        if not uri.startswith("sqlite:///"):
            raise ValueError(f"the soak measures an embedded catalog; FM_CATALOG_URI is {uri}")
        return Path(uri.removeprefix("sqlite:///"))
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"the soak measures a local warehouse; FM_WAREHOUSE is {uri}")
    return Path(parsed.path)


def footprint(settings: Settings) -> Footprint:
    """The catalog's bytes under `settings` (embedded profile: SQLite and a local warehouse)."""
    database = _local_path(settings.catalog_uri, "sqlite")
    db_bytes = sum(
        p.stat().st_size
        for p in (database, Path(f"{database}-wal"), Path(f"{database}-journal"))
        if p.exists()
    )
    warehouse = _local_path(settings.warehouse, "file")
    metadata = data = metadata_files = data_files = 0
    for path, size in _tree(warehouse):
        if "metadata" in path.relative_to(warehouse).parts[:-1]:
            metadata += size
            metadata_files += 1
        else:
            data += size
            data_files += 1
    dagster = sum(size for _, size in _tree(settings.dagster_home))
    return Footprint(db_bytes, metadata, metadata_files, data, data_files, dagster)
