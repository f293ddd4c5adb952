"""The one place that reads environment variables: everything else receives a frozen `Settings`.

Embedded defaults put every piece of state under one home directory (`FM_HOME`, default `./.fm`):

    $FM_HOME/objects/     object store root (landing batches, shard sets, registries)
    $FM_HOME/catalog.db   Iceberg SQL catalog (SQLite)
    $FM_HOME/warehouse/   Iceberg data and metadata files
    $FM_HOME/dagster/     Dagster instance storage

Production changes settings, not code: `FM_OBJECT_STORE=s3://bucket/prefix`,
`FM_CATALOG_URI=postgresql+psycopg2://...`, `FM_WAREHOUSE=s3://...`, `RAY_ADDRESS=ray://head:10001`.
This module imports only the standard library, so the trainer-side loader can use it too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PIPELINE_VERSION = "0.1.0"


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
    policy_file: Path | None = None  # per-dataset curation policies (fm_assets.policy)

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Read settings from `env` (default: the process environment), filling embedded defaults."""
    env = dict(os.environ if env is None else env)
    home = Path(env.get("FM_HOME", ".fm")).expanduser().resolve()
    return Settings(
        home=home,
        object_store=env.get("FM_OBJECT_STORE", str(home / "objects")),
        catalog_uri=env.get("FM_CATALOG_URI", f"sqlite:///{home / 'catalog.db'}"),
        catalog_name=env.get("FM_CATALOG_NAME", "fm"),
        warehouse=env.get("FM_WAREHOUSE", (home / "warehouse").as_uri()),
        namespace=env.get("FM_NAMESPACE", "fm"),
        ray_address=env.get("RAY_ADDRESS") or None,
        ray_num_cpus=_int_or_none(env.get("FM_RAY_NUM_CPUS")),
        s3_endpoint=env.get("FM_S3_ENDPOINT") or None,
        extract_timeout_s=float(env.get("FM_EXTRACT_TIMEOUT_S", "10")),
        max_document_bytes=int(env.get("FM_MAX_DOCUMENT_BYTES", str(8 * 1024 * 1024))),
        policy_file=Path(env["FM_POLICY_FILE"]).expanduser() if env.get("FM_POLICY_FILE") else None,
    )
