"""The one place that reads environment variables: everything else receives a frozen `Settings`.

Embedded defaults keep every piece of state under `FM_HOME` (default `./.fm`); production sets
`FM_OBJECT_STORE`, `FM_WAREHOUSE`, `FM_S3_ENDPOINT`, `FM_CATALOG_URI`, `FM_DAGSTER_PG_URL` and
`RAY_ADDRESS` instead (docs/deploy.md), and FM_HOME then holds only logs and caches.
The catalog settings are the loader's own (`fm_loader.settings`), so both read one catalog.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
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
class S3Credentials:
    """A static S3 key pair (and session token): the identity Ray workers use when this process
    starts them (docs/deploy.md, "Least privilege in the object store")."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    def environment(self) -> dict[str, str]:
        """The AWS variables that make a process use this identity (an empty token clears a
        token the process inherited from another identity)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_SESSION_TOKEN": self.session_token or "",
        }


@dataclass(frozen=True)
class Settings:
    """Where state lives and how compute is reached; build it with `load_settings()`."""

    home: Path
    object_store: str  # a local path or a URI (file://, s3://)
    # SQLAlchemy URL of the Iceberg SQL catalog; may hold a password, so never in a repr.
    catalog_uri: str = field(repr=False)
    catalog_name: str
    warehouse: str  # URI under which Iceberg writes data files
    namespace: str  # Iceberg namespace holding the platform's tables
    ray_address: str | None  # None: start (or join) a local Ray
    ray_num_cpus: int | None
    s3_endpoint: str | None  # for S3-compatible stores (SeaweedFS, MinIO) in tests and on-prem
    extract_timeout_s: float  # per-document extraction budget
    max_document_bytes: int  # larger raw records are quarantined, not processed
    part_bytes: int = 64 << 20  # landed files over twice this are read in parts of about this
    # The identity the Ray workers this process starts use for S3 (a local Ray; a cluster's
    # nodes have their own): they parse untrusted input, so they may write new data files but
    # not delete or commit. None: the workers use this process's own AWS credentials.
    worker_s3_credentials: S3Credentials | None = field(default=None, repr=False)
    policy_file: Path | None = None  # per-dataset curation policies (fm_assets.curation.policy)
    # Where the default quality classifier's recipe reads its training data (the shared
    # article-extraction benchmark), when `fm run` trains it on first need.
    shared_data: Path = Path("../shared/data")
    # postgresql://... for Dagster's run/event/schedule storage; None: SQLite under FM_HOME.
    dagster_pg_url: str | None = field(default=None, repr=False)
    # Warm Ray workers that outlive a command (execution/warm_pool.py): "auto" (one per CPU of
    # the local Ray, none on a cluster), or how many ("0": plain tasks).
    warm_workers: str = "auto"
    # Catalog maintenance (`fm maintain`, the catalog_maintenance job): how long a snapshot no
    # version pins is kept once superseded, and how old an unreferenced file must be to go.
    maintenance_retention_hours: float = 168.0
    maintenance_grace_hours: float = 24.0
    # A local Ray head (no RAY_ADDRESS) stops itself after this long with no driver connected
    # (execution/ray_watchdog.py); 0: it runs until `fm ray stop`.
    ray_idle_stop_s: float = 900.0
    # On a Ray cluster (RAY_ADDRESS), a stage cuts its input into slices of about this many
    # bytes (a stage of k slices per CPU, k times smaller), however many CPUs the cluster has
    # when it starts: nodes that join mid-stage find work (execution/compute.planning_cpus).
    cluster_slice_bytes: int = 16 << 20
    # A step whose driver lost its Ray cluster is retried by Dagster after this long (a
    # KubeRay head pod is back within about a minute; defs/ray_loss.py).
    ray_lost_retry_s: float = 30.0
    # The team a landing batch is charged to when `fm land` names none (docs/costs.md).
    team: str = "unassigned"
    # Prices per unit for `fm cost` and the cost_report asset (deploy/prices.example.toml);
    # None: figures are measured and reported without prices.
    prices_file: Path | None = None
    # Where OpenLineage run events go (docs/openlineage.md): an HTTP endpoint (Marquez,
    # DataHub, ...) and/or a JSON-lines file; neither: none are sent.
    openlineage_url: str | None = None
    openlineage_file: Path | None = None
    openlineage_namespace: str = "fm"  # the OpenLineage namespace of the platform's jobs
    # Bearer token the endpoint requires (DataHub, a gateway in front of Marquez); never in a repr.
    openlineage_api_key: str | None = field(default=None, repr=False)

    @property
    def dagster_home(self) -> Path:
        """DAGSTER_HOME: the embedded instance's state, or only a generated dagster.yaml that
        names the production storage by environment variable (a cache: nothing else lives there)."""
        if self.dagster_pg_url:
            return self.home / "cache" / "dagster"
        return self.home / "dagster"

    @property
    def logs_dir(self) -> Path:
        """Local logs (compute-log staging before upload); allowed under FM_HOME in production."""
        return self.home / "logs"


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value not in (None, "") else None


def _path_or_none(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None


def _check_formats(env: dict[str, str]) -> None:
    """Refuse a malformed production setting at once, naming it (services are probed later)."""
    worker_key = env.get("FM_S3_WORKER_ACCESS_KEY_ID") or ""
    worker_secret = env.get("FM_S3_WORKER_SECRET_ACCESS_KEY") or ""
    if bool(worker_key) != bool(worker_secret):
        raise ValueError(
            "FM_S3_WORKER_ACCESS_KEY_ID and FM_S3_WORKER_SECRET_ACCESS_KEY go together (the Ray "
            "workers' S3 identity); set both, or neither to give workers this process's own"
        )
    catalog_uri = env.get("FM_CATALOG_URI") or ""
    if catalog_uri and not catalog_uri.startswith(("sqlite:///", "postgresql")):
        raise ValueError(
            f"FM_CATALOG_URI must be sqlite:///PATH or postgresql+psycopg2://USER:PASSWORD@HOST"
            f":PORT/DB, got a URL starting {catalog_uri.split(':', 1)[0]!r}"
        )
    dagster_pg = env.get("FM_DAGSTER_PG_URL") or ""
    if dagster_pg and not dagster_pg.startswith(("postgresql://", "postgres://")):
        raise ValueError(
            "FM_DAGSTER_PG_URL must be postgresql://USER:PASSWORD@HOST:PORT/DB, got a URL "
            f"starting {dagster_pg.split(':', 1)[0]!r}"
        )
    ray_address = env.get("RAY_ADDRESS") or ""
    if ray_address and ray_address != "auto":
        host, _, port = ray_address.removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(
                f"RAY_ADDRESS {ray_address!r} is not HOST:PORT (a cluster's GCS, e.g. "
                "ray-head:6379) or ray://HOST:PORT (Ray Client, e.g. ray://ray-head:10001)"
            )
    warm = env.get("FM_WARM_WORKERS") or "auto"
    if warm != "auto" and not warm.isdigit():
        raise ValueError(
            f"FM_WARM_WORKERS must be auto or a number of workers (0: plain Ray tasks), got "
            f"{warm!r}"
        )
    for name in ("FM_MAINTENANCE_RETENTION_HOURS", "FM_MAINTENANCE_GRACE_HOURS"):
        value = env.get(name) or ""
        try:
            hours = float(value) if value else 0.0
        except ValueError:
            hours = -1.0
        if hours < 0:
            raise ValueError(f"{name} must be a number of hours (0 or more), got {value!r}")
    for name, meaning in (
        ("FM_RAY_IDLE_STOP_S", "the seconds a local Ray may stay idle before it stops (0: never)"),
        ("FM_RAY_LOST_RETRY_S", "the seconds to wait before retrying a step that lost Ray"),
    ):
        value = env.get(name) or "0"
        try:
            valid = float(value) >= 0
        except ValueError:
            valid = False
        if not valid:
            raise ValueError(f"{name} must be {meaning}, got {value!r}")
    slice_bytes = env.get("FM_SLICE_BYTES") or str(16 << 20)
    if not slice_bytes.isdigit() or int(slice_bytes) < 1:
        raise ValueError(
            f"FM_SLICE_BYTES must be the bytes of input one task of a stage reads on a Ray "
            f"cluster (a positive integer, default {16 << 20}), got {slice_bytes!r}"
        )
    openlineage = env.get("FM_OPENLINEAGE_URL") or ""
    if openlineage and not openlineage.startswith(("http://", "https://")):
        raise ValueError(
            f"FM_OPENLINEAGE_URL must be the http(s):// base URL of an OpenLineage endpoint "
            f"(events are POSTed to /api/v1/lineage), got {openlineage!r}"
        )
    for name in ("FM_OBJECT_STORE", "FM_WAREHOUSE"):
        value = env.get(name) or ""
        if "://" in value and not value.startswith(("s3://", "file://")):
            raise ValueError(f"{name} must be s3://BUCKET/PREFIX or a local path, got {value!r}")


def _worker_credentials(env: dict[str, str]) -> S3Credentials | None:
    if not env.get("FM_S3_WORKER_ACCESS_KEY_ID"):
        return None
    return S3Credentials(
        access_key_id=env["FM_S3_WORKER_ACCESS_KEY_ID"],
        secret_access_key=env["FM_S3_WORKER_SECRET_ACCESS_KEY"],
        session_token=env.get("FM_S3_WORKER_SESSION_TOKEN") or None,
    )


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Read settings from `env` (default: the process environment), filling embedded defaults."""
    env = dict(os.environ if env is None else env)
    _check_formats(env)
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
        worker_s3_credentials=_worker_credentials(env),
        policy_file=Path(env["FM_POLICY_FILE"]).expanduser() if env.get("FM_POLICY_FILE") else None,
        shared_data=Path(env.get("FM_SHARED_DATA") or "../shared/data").expanduser().absolute(),
        dagster_pg_url=env.get("FM_DAGSTER_PG_URL") or None,
        warm_workers=env.get("FM_WARM_WORKERS") or "auto",
        maintenance_retention_hours=float(env.get("FM_MAINTENANCE_RETENTION_HOURS") or 168),
        maintenance_grace_hours=float(env.get("FM_MAINTENANCE_GRACE_HOURS") or 24),
        ray_idle_stop_s=float(env.get("FM_RAY_IDLE_STOP_S") or "900"),
        cluster_slice_bytes=int(env.get("FM_SLICE_BYTES") or str(16 << 20)),
        ray_lost_retry_s=float(env.get("FM_RAY_LOST_RETRY_S") or "30"),
        team=env.get("FM_TEAM") or "unassigned",
        prices_file=_path_or_none(env.get("FM_PRICES_FILE")),
        openlineage_url=env.get("FM_OPENLINEAGE_URL") or None,
        openlineage_file=_path_or_none(env.get("FM_OPENLINEAGE_FILE")),
        openlineage_namespace=env.get("FM_OPENLINEAGE_NAMESPACE") or "fm",
        openlineage_api_key=env.get("FM_OPENLINEAGE_API_KEY") or None,
    )
