"""`fm backup create DIR` / `fm backup restore DIR`: the production profile's two Postgres
databases, dumped and restored with pg_dump / pg_restore.

Dagster's storage (`FM_DAGSTER_PG_URL`: runs, events, schedules, sensor cursors) is dumped first,
then the catalog (`FM_CATALOG_URI`: the Iceberg SQL catalog and the platform's bookkeeping, one
database, so one consistent snapshot): whatever a run committed while the first dump ran is in
the second, so a restore never shows Dagster a stage the catalog lacks (a run the catalog is ahead
of looks unfinished and is rerun; stages are content-keyed, so finished ones are skipped).

The catalog names each table's current metadata file; those files, the manifests and the data
files live in the object store, which a database dump does not copy: the bucket's versioning and
replication are its backup (docs/deploy.md). `restore` ends by checking that every metadata file
the restored catalog names is in the object store.

Passwords reach pg_dump through its environment (PGPASSWORD), never its command line.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fm_assets.settings import PIPELINE_VERSION, Settings, load_settings
from fm_assets.storage.services import redact, safe_url, secret_values

MANIFEST = "manifest.json"
FORMAT = 1
# Dagster's database first (see the module docstring), each in pg_dump's custom format.
DATABASES = ("dagster", "catalog")


def _urls(settings: Settings) -> dict[str, str]:
    if not settings.catalog_uri.startswith("postgresql") or not settings.dagster_pg_url:
        raise ValueError(
            "fm backup covers the production profile: FM_CATALOG_URI and FM_DAGSTER_PG_URL on "
            "Postgres. On embedded settings everything is under FM_HOME: copy that directory "
            "while no fm command runs"
        )
    return {"dagster": settings.dagster_pg_url, "catalog": settings.catalog_uri}


def _libpq_env(url: str) -> dict[str, str]:
    """The libpq environment that reaches the database of `url` (password included)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    env = {
        "PGHOST": parsed.host or "localhost",
        "PGPORT": str(parsed.port or 5432),
        "PGUSER": parsed.username or "",
        "PGDATABASE": parsed.database or "",
        "PGPASSWORD": parsed.password or "",
        "PGCONNECT_TIMEOUT": "10",
    }
    sslmode = parsed.query.get("sslmode")
    if sslmode:
        env["PGSSLMODE"] = sslmode if isinstance(sslmode, str) else sslmode[0]
    return env


def _tool(name: str, pg_bin: Path | None) -> str:
    found = str(pg_bin / name) if pg_bin else shutil.which(name)
    if not found or not Path(found).is_file():
        raise ValueError(
            f"{name} not found {'in ' + str(pg_bin) if pg_bin else 'on PATH'}: install the "
            "PostgreSQL client of your server's major version (Debian: postgresql-client-16) "
            "or pass --pg-bin DIR"
        )
    return found


def _major(version_text: str) -> int:
    match = re.search(r"(\d+)(?:\.\d+)?", version_text)
    if not match:
        raise ValueError(f"cannot read a PostgreSQL version from {version_text!r}")
    return int(match.group(1))


def _server_major(url: str) -> int:
    import sqlalchemy as sa

    from fm_assets.defs.instance import psycopg2_url

    engine = sa.create_engine(psycopg2_url(url), connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as connection:
            number = int(connection.execute(sa.text("SHOW server_version_num")).scalar_one())
    finally:
        engine.dispose()
    return number // 10000


def _run(command: list[str], env: dict[str, str], secrets: list[str]) -> str:
    result = subprocess.run(
        command, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        said = redact((result.stderr or result.stdout).strip()[-2000:], secrets)
        raise ValueError(f"{Path(command[0]).name} failed ({result.returncode}): {said}")
    return result.stdout


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def create_backup(
    settings: Settings, directory: Path, pg_bin: Path | None, say: Callable[[str], None]
) -> dict[str, Any]:
    """Dump both databases into `directory` (new or empty) with a manifest; returns it."""
    urls = _urls(settings)
    if directory.exists() and any(directory.iterdir()):
        raise ValueError(f"{directory} is not empty: give a new directory for each backup")
    directory.mkdir(parents=True, exist_ok=True)
    pg_dump = _tool("pg_dump", pg_bin)
    secrets = secret_values(settings)
    client = _major(_run([pg_dump, "--version"], {}, secrets))
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "fm_platform": PIPELINE_VERSION,
        "object_store": settings.object_store,
        "warehouse": settings.warehouse,
        "pg_dump_major": client,
        "databases": {},
    }
    for name in DATABASES:
        url = urls[name]
        server = _server_major(url)
        if client < server:
            raise ValueError(
                f"pg_dump {client} cannot dump the PostgreSQL {server} server of "
                f"{safe_url(url)}: use the client of version {server} or newer (--pg-bin)"
            )
        target = directory / f"{name}.dump"
        # Custom format: compressed, restored selectively and in parallel by pg_restore.
        _run([pg_dump, "--format=custom", f"--file={target}"], _libpq_env(url), secrets)
        manifest["databases"][name] = {
            "file": target.name,
            "sha256": _sha256(target),
            "bytes": target.stat().st_size,
            "server_major": server,
            "url": safe_url(url),
        }
        say(f"dumped {name} ({safe_url(url)}) to {target} ({target.stat().st_size:,} bytes)")
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_backup(directory: Path) -> dict[str, Any]:
    """The manifest of a backup, its dumps checked against it."""
    path = directory / MANIFEST
    if not path.is_file():
        raise ValueError(f"{directory} holds no {MANIFEST}: not a backup made by fm backup create")
    manifest: dict[str, Any] = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path} has format {manifest.get('format')!r}; this fm reads {FORMAT}")
    for name in DATABASES:
        entry = manifest["databases"][name]
        dump = directory / entry["file"]
        if not dump.is_file() or _sha256(dump) != entry["sha256"]:
            raise ValueError(f"{dump} is missing or differs from the sha256 in {path}: damaged")
    return manifest


def _table_count(url: str) -> int:
    import sqlalchemy as sa

    from fm_assets.defs.instance import psycopg2_url

    engine = sa.create_engine(psycopg2_url(url), connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as connection:
            query = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            return int(connection.execute(sa.text(query)).scalar_one())
    finally:
        engine.dispose()


def restore_backup(
    settings: Settings,
    directory: Path,
    pg_bin: Path | None,
    say: Callable[[str], None],
    *,
    clean: bool = False,
) -> list[str]:
    """Restore both databases from `directory` into the (existing, empty) databases the
    settings name; returns the metadata files the restored catalog names that the object store
    lacks (empty when the restore is whole)."""
    urls = _urls(settings)
    manifest = read_backup(directory)
    pg_restore = _tool("pg_restore", pg_bin)
    secrets = secret_values(settings)
    for name in DATABASES:
        url = urls[name]
        if not clean and _table_count(url) > 0:
            raise ValueError(
                f"the {name} database {safe_url(url)} is not empty: restore into a new, empty "
                "database, or pass --clean to replace what it holds"
            )
        options = ["--no-owner", "--exit-on-error", "--single-transaction"]
        if clean:
            options += ["--clean", "--if-exists"]
        dump = directory / manifest["databases"][name]["file"]
        url_env = _libpq_env(url)
        database = url_env["PGDATABASE"]
        _run([pg_restore, *options, f"--dbname={database}", str(dump)], url_env, secrets)
        say(f"restored {name} into {safe_url(url)} from {dump}")
    return missing_metadata(settings)


def missing_metadata(settings: Settings) -> list[str]:
    """Every current metadata file the catalog names that the object store does not hold."""
    import pyarrow.fs as pafs
    import sqlalchemy as sa

    from fm_assets.defs.instance import psycopg2_url
    from fm_loader.remote import filesystem_for

    engine = sa.create_engine(psycopg2_url(settings.catalog_uri))
    try:
        with engine.connect() as connection:
            query = sa.text("SELECT metadata_location FROM iceberg_tables")
            locations = [row[0] for row in connection.execute(query)]
    finally:
        engine.dispose()
    missing = []
    for location in sorted(locations):
        fs, path = filesystem_for(location, settings.s3_endpoint)
        if fs.get_file_info(path).type != pafs.FileType.File:
            missing.append(location)
    return missing


@click.group()
def backup() -> None:
    """Back up and restore the production profile's databases (docs/deploy.md)."""


def _echo(message: str) -> None:
    click.echo(f"[fm backup] {message}", err=True)


@backup.command("create")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--pg-bin", type=click.Path(file_okay=False, exists=True, path_type=Path))
def create(directory: Path, pg_bin: Path | None) -> None:
    """Dump Dagster's database, then the catalog's, into DIRECTORY (new or empty)."""
    create_backup(load_settings(), directory, pg_bin, _echo)
    click.echo(str(directory))


@backup.command("restore")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--pg-bin", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--clean", is_flag=True, help="Replace what the databases hold (default: refuse).")
def restore(directory: Path, pg_bin: Path | None, clean: bool) -> None:
    """Restore both databases from DIRECTORY into the (empty) databases the settings name."""
    settings = load_settings()
    missing = restore_backup(settings, directory, pg_bin, _echo, clean=clean)
    if missing:
        raise ValueError(
            f"restored, but the object store lacks {len(missing)} metadata file(s) the catalog "
            f"names, e.g. {missing[0]}: restore the bucket's object versions from before the "
            "backup's time (docs/deploy.md), then run `fm verify` on each version"
        )
    _echo("every table's metadata file is in the object store; now run `fm verify KEY`")
