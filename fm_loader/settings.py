"""Where a trainer finds shard sets: the catalog and object-store settings the loader reads.

The loader's own settings, read from the same environment variables as the platform's
(`FM_HOME`, `FM_CATALOG_URI`, `FM_CATALOG_NAME`, `FM_WAREHOUSE`, `FM_NAMESPACE`,
`FM_S3_ENDPOINT`), so a trainer installing only `fm-platform[loader]` resolves `web@v3` exactly
as the platform wrote it. The platform builds its own settings on top of these.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class LoaderSettings:
    """The catalog holding `shard_sets` and how to reach an S3-compatible store."""

    home: Path
    catalog_uri: str  # SQLAlchemy URL of the Iceberg SQL catalog
    catalog_name: str
    warehouse: str  # URI under which Iceberg keeps data files
    namespace: str  # Iceberg namespace holding the platform's tables
    s3_endpoint: str | None  # S3-compatible stores (SeaweedFS, MinIO); None for AWS


class CatalogLocation(Protocol):
    """What the loader needs to find shard sets; `LoaderSettings` and the platform's `Settings`
    both satisfy it."""

    @property
    def catalog_uri(self) -> str: ...
    @property
    def catalog_name(self) -> str: ...
    @property
    def warehouse(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def s3_endpoint(self) -> str | None: ...


def load_loader_settings(env: Mapping[str, str] | None = None) -> LoaderSettings:
    """Read the loader's settings from `env` (default: the process environment)."""
    env = os.environ if env is None else env
    home = Path(env.get("FM_HOME", ".fm")).expanduser().resolve()
    return LoaderSettings(
        home=home,
        catalog_uri=env.get("FM_CATALOG_URI") or f"sqlite:///{home / 'catalog.db'}",
        catalog_name=env.get("FM_CATALOG_NAME") or "fm",
        warehouse=env.get("FM_WAREHOUSE") or (home / "warehouse").as_uri(),
        namespace=env.get("FM_NAMESPACE") or "fm",
        s3_endpoint=env.get("FM_S3_ENDPOINT") or None,
    )
