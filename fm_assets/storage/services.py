"""Probing the configured services before any work: each answers within seconds or the error
names the setting to fix. Credentials never appear in what this module says.

Embedded settings (local directories, SQLite, a local Ray) have nothing to probe. In production
every `fm` command and every Dagster run starts here: an S3 store that refuses the credentials or
does not answer, a Postgres that refuses the login or does not answer, a Ray address with nothing
listening, each fails in at most `timeout_s` instead of hanging in a client's retry loop.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping

import pyarrow.fs as pafs

from fm_assets.settings import Settings

PROBE_TIMEOUT_S = 5.0
# Environment variables whose values are credentials wherever they appear.
SECRET_ENV = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "RAY_AUTH_TOKEN",
    "FM_S3_WORKER_SECRET_ACCESS_KEY",
    "FM_S3_WORKER_SESSION_TOKEN",
    "FM_S3_WORKER_ACCESS_KEY_ID",
)


class ConfigurationError(RuntimeError):
    """A production setting points at a service that refuses or does not answer."""


def _url_password(url: str | None) -> str | None:
    if not url or "://" not in url:
        return None
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).password  # type: ignore[return-value]
    except Exception:  # a malformed URL has no password we can find; nothing to hide
        return None


def secret_values(settings: Settings, env: Mapping[str, str] | None = None) -> list[str]:
    """Every credential the settings and environment hold (passwords, keys, tokens)."""
    env = os.environ if env is None else env
    values = [env.get(name) for name in SECRET_ENV]
    values += [_url_password(settings.catalog_uri), _url_password(settings.dagster_pg_url)]
    return sorted({v for v in values if v and len(v) >= 4}, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret replaced by `***`."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def safe_url(url: str) -> str:
    """A database URL with its password masked, for messages."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("://", 1)[0] + "://..."


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _probe_s3(settings: Settings, timeout_s: float) -> str | None:
    from fm_loader.remote import s3_filesystem

    base = s3_filesystem(settings.s3_endpoint)
    kwargs: dict[str, object] = {
        "connect_timeout": timeout_s,
        "request_timeout": timeout_s,
        # One attempt: the SDK's retries turn a dead endpoint into a minute-long hang.
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        "region": base.region,
    }
    if settings.s3_endpoint:
        endpoint = settings.s3_endpoint
        scheme, _, host = endpoint.partition("://") if "://" in endpoint else ("http", "", endpoint)
        kwargs |= {"endpoint_override": host.rstrip("/"), "scheme": scheme}
    fs = pafs.S3FileSystem(**kwargs)  # type: ignore[arg-type]
    problems = []
    for name, location in (
        ("FM_OBJECT_STORE", settings.object_store),
        ("FM_WAREHOUSE", settings.warehouse),
    ):
        if not location.startswith("s3://"):
            continue
        bucket = location.removeprefix("s3://").split("/", 1)[0]
        try:
            try:
                missing = fs.get_file_info(bucket).type == pafs.FileType.NotFound
            except OSError as exc:
                if "ACCESS_DENIED" not in str(exc) or location.rstrip("/") == f"s3://{bucket}":
                    raise
                # An identity confined to its prefixes (deploy/iam/) may not ask about the
                # bucket itself: list the prefix it was given instead (a new one holds nothing).
                prefix = location.removeprefix("s3://").rstrip("/")
                fs.get_file_info(pafs.FileSelector(prefix, allow_not_found=True))
                missing = False
        except OSError as exc:
            where = f" at FM_S3_ENDPOINT={settings.s3_endpoint}" if settings.s3_endpoint else ""
            problems.append(
                f"{name}={location}: S3{where} refused or did not answer within {timeout_s:.0f} s "
                f"({_first_line(exc)}); check FM_S3_ENDPOINT and the AWS credentials "
                "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_REGION or the pod's role)"
            )
            continue
        if missing:
            problems.append(f"{name}={location}: bucket {bucket!r} does not exist; create it")
    return "; ".join(problems) or None


def _probe_postgres(name: str, url: str, timeout_s: float) -> str | None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import SQLAlchemyError

    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg2://" + url.split("://", 1)[1]  # SQLAlchemy 2.1: psycopg 3
    engine = create_engine(url, connect_args={"connect_timeout": max(1, int(timeout_s))})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc
        return (
            f"{name}={safe_url(url)}: Postgres refused or did not answer within "
            f"{timeout_s:.0f} s ({_first_line(cause)}); check the host, port, user and password"
        )
    finally:
        engine.dispose()
    return None


def _probe_ray(address: str, timeout_s: float) -> str | None:
    if address == "auto":
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return (
            f"RAY_ADDRESS={address}: nothing answers there within {timeout_s:.0f} s ({exc}); "
            "start the Ray cluster or point RAY_ADDRESS at its head (HOST:6379 or "
            "ray://HOST:10001)"
        )


_checked: set[tuple[str | None, ...]] = set()


def check_services(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Probe every configured production service once per process; raise ConfigurationError
    naming each setting that does not work. A no-op on embedded settings."""
    key = (
        settings.object_store,
        settings.warehouse,
        settings.s3_endpoint,
        settings.catalog_uri,
        settings.dagster_pg_url,
        settings.ray_address,
    )
    if key in _checked:
        return
    problems: list[str | None] = []
    if settings.object_store.startswith("s3://") or settings.warehouse.startswith("s3://"):
        problems.append(_probe_s3(settings, timeout_s))
    if settings.catalog_uri.startswith("postgresql"):
        problems.append(_probe_postgres("FM_CATALOG_URI", settings.catalog_uri, timeout_s))
    if settings.dagster_pg_url:
        problems.append(_probe_postgres("FM_DAGSTER_PG_URL", settings.dagster_pg_url, timeout_s))
    if settings.ray_address:
        problems.append(_probe_ray(settings.ray_address, timeout_s))
    found = [p for p in problems if p]
    if found:
        raise ConfigurationError(redact("; ".join(found), secret_values(settings)))
    _checked.add(key)
