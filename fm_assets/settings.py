"""The one place that reads environment variables: everything else receives a frozen `Settings`.

Embedded defaults keep every piece of state under `FM_HOME` (default `./.fm`); production sets
`FM_OBJECT_STORE`, `FM_CATALOG_URI`, `FM_WAREHOUSE`, `RAY_ADDRESS` instead (docs/settings.md).
The catalog settings are the loader's own (`fm_loader.settings`), so both read one catalog.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from fm_loader.settings import load_loader_settings


def _package_version() -> str:
    try:
        return version("fm-platform")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"


# Stamped into shard-set manifests: which release of the platform wrote them.
PIPELINE_VERSION = _package_version()


@dataclass(frozen=True)
class Settings:
    """Where state lives and how compute is reached; build it with `load_settings()`."""

    home: Path
    object_store: str  # a local path or a URI (file://, s3://)
    catalog_uri: str  # SQLAlchemy URL of the Iceberg SQL catalog
    catalog_name: str
    warehouse: str  # URI under which Iceberg writes data files
    namespace: str  # Iceberg namespace holding the platform's tables
    ray_address: str | None  # None: start (or join) a local Ray
    ray_num_cpus: int | None
    s3_endpoint: str | None  # for S3-compatible stores (SeaweedFS, MinIO) in tests and on-prem
    extract_timeout_s: float  # per-document extraction budget
    max_document_bytes: int  # larger raw records are quarantined, not processed
    part_bytes: int = 64 << 20  # landed files over twice this are read in parts of about this
    policy_file: Path | None = None  # per-dataset curation policies (fm_assets.curation.policy)

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Read settings from `env` (default: the process environment), filling embedded defaults."""
    env = dict(os.environ if env is None else env)
    catalog = load_loader_settings(env)
    return Settings(
        home=catalog.home,
        object_store=env.get("FM_OBJECT_STORE", str(catalog.home / "objects")),
        catalog_uri=catalog.catalog_uri,
        catalog_name=catalog.catalog_name,
        warehouse=catalog.warehouse,
        namespace=catalog.namespace,
        ray_address=env.get("RAY_ADDRESS") or None,
        ray_num_cpus=_int_or_none(env.get("FM_RAY_NUM_CPUS")),
        s3_endpoint=catalog.s3_endpoint,
        extract_timeout_s=float(env.get("FM_EXTRACT_TIMEOUT_S", "10")),
        max_document_bytes=int(env.get("FM_MAX_DOCUMENT_BYTES", str(8 * 1024 * 1024))),
        part_bytes=int(env.get("FM_PART_BYTES", str(64 << 20))),
        policy_file=Path(env["FM_POLICY_FILE"]).expanduser() if env.get("FM_POLICY_FILE") else None,
    )
