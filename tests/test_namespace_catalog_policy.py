"""The example catalog policy (deploy/iam/catalog-namespaces.example.sql) keeps each role to the
Iceberg namespaces it may see, enforced by the catalog's Postgres, not by the platform's code.

The platform creates its catalog on a throwaway Postgres (a platform-wide table in `fm`, a
document table in `fm_cloud` and in `fm_on_device`); the policy is applied as written; each role
then opens the catalog as a trainer's loader does (read-only) and finds only what it may.
"""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchTableError

from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
from fm_assets.settings import load_settings
from fm_assets.storage import catalog
from tests.paths import REPO
from tests.services.fixtures import create_database
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.slow

POLICY = REPO / "deploy" / "iam" / "catalog-namespaces.example.sql"
ROLES = ("fm_trainers_cloud", "fm_trainers_on_device", "fm_analysts_cloud")
TABLES = ("fm.shard_sets", "fm_cloud.raw_documents", "fm_on_device.raw_documents")


def _execute(server: PostgresServer, database: str, sql: str) -> None:
    import psycopg2

    connection = psycopg2.connect(
        host=server.host,
        port=server.port,
        user=server.user,
        password=server.password,
        dbname=database,
        connect_timeout=5,
    )
    connection.autocommit = True
    with contextlib.closing(connection), connection.cursor() as cursor:
        cursor.execute(sql)


def _visible(server: PostgresServer, database: str, role: str, password: str) -> set[str]:
    """The tables of TABLES `role` can load through the catalog, read-only like a loader."""
    url = f"postgresql+psycopg2://{role}:{password}@{server.host}:{server.port}/{database}"
    iceberg = SqlCatalog("fm", uri=url, init_catalog_tables="false")
    found = set()
    for identifier in TABLES:
        with contextlib.suppress(NoSuchTableError):
            iceberg.load_table(identifier)
            found.add(identifier)
    return found


def test_each_role_sees_only_its_namespaces(postgres: PostgresServer, tmp_path: Path) -> None:
    database = f"policy_{secrets.token_hex(4)}"
    create_database(postgres, database)
    settings = load_settings(
        {
            "FM_HOME": str(tmp_path / "fm"),
            "FM_CATALOG_URI": postgres.url(database, driver="postgresql+psycopg2"),
        }
    )
    catalog.load_table(settings, "shard_sets")
    for namespace in ("cloud", "on-device"):
        catalog.load_table(settings, "raw_documents", namespace=namespace)
    assert catalog.data_namespaces(settings) == ["cloud", "on-device"]

    password = secrets.token_hex(12)
    for role in ROLES:  # roles are the cluster's: another test of the session may have made them
        if not postgres.query(database, f"SELECT 1 FROM pg_roles WHERE rolname = '{role}'"):
            _execute(postgres, database, f"CREATE ROLE {role} LOGIN")
        _execute(postgres, database, f"ALTER ROLE {role} PASSWORD '{password}'")
    _execute(postgres, database, POLICY.read_text())

    expected = {
        "fm_trainers_cloud": {"fm.shard_sets"},
        "fm_trainers_on_device": {"fm.shard_sets"},
        "fm_analysts_cloud": {"fm.shard_sets", "fm_cloud.raw_documents"},
    }
    for role, tables in expected.items():
        assert _visible(postgres, database, role, password) == tables, role
    # The platform's own role owns the catalog's tables: the policies leave it every namespace.
    assert _visible(postgres, database, postgres.user, postgres.password) == set(TABLES)
