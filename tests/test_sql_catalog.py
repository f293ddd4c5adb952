"""The SQL catalog that keeps parsed table metadata (fm_assets.storage.sql_catalog): a load
still sees every commit, its own or another process's, and an unchanged table is not parsed
again. Avro manifest schemas converted once (fm_assets.storage.avro_schemas) read the same rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.serializers import FromInputFile

import fm_assets.storage.catalog  # noqa: F401  (installs the Avro schema conversion once)
from fm_assets.storage.sql_catalog import CachingSqlCatalog

ROWS = pa.table({"batch_id": pa.array(["a", "b"]), "n": pa.array([1, 2], pa.int64())})


def _catalogs(tmp_path: Path) -> tuple[CachingSqlCatalog, CachingSqlCatalog]:
    """Two catalogs on one database: two processes of one FM_HOME."""
    props = {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/wh"}
    return CachingSqlCatalog("fm", **props), CachingSqlCatalog("fm", **props)


def test_a_load_sees_commits_made_through_another_catalog(tmp_path: Path) -> None:
    writer, reader = _catalogs(tmp_path)
    writer.create_namespace("ns")
    writer.create_table("ns.t", schema=ROWS.schema).append(ROWS)
    assert reader.load_table("ns.t").scan().to_arrow().num_rows == 2
    writer.load_table("ns.t").append(ROWS)
    seen = reader.load_table("ns.t")
    assert seen.scan().to_arrow().num_rows == 4
    assert len(seen.metadata.snapshots) == 2


def test_a_table_is_parsed_once_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog, _ = _catalogs(tmp_path)
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=ROWS.schema)
    parsed: list[str] = []
    parse = FromInputFile.table_metadata

    def counting(input_file, encoding="utf-8"):  # type: ignore[no-untyped-def]
        parsed.append(input_file.location)
        return parse(input_file, encoding)

    monkeypatch.setattr(FromInputFile, "table_metadata", staticmethod(counting))
    first = catalog.load_table("ns.t")
    parsed_first, before = len(parsed), first.metadata_location
    for _ in range(3):
        assert catalog.load_table("ns.t").metadata == first.metadata
    first.append(ROWS)  # the commit's own metadata is kept: the load after it parses nothing
    after = catalog.load_table("ns.t")
    assert after.metadata_location != before
    assert after.scan().to_arrow().num_rows == 2
    assert parsed_first <= 1
    assert len(parsed) == parsed_first


def test_rows_read_through_the_platform_match_a_plain_catalog(tmp_path: Path) -> None:
    cached, _ = _catalogs(tmp_path)
    cached.create_namespace("ns")
    table = cached.create_table("ns.t", schema=ROWS.schema)
    for _ in range(3):
        table.append(ROWS)
    table.delete("batch_id = 'a'")
    plain = SqlCatalog(
        "fm", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh"
    )
    rows = [
        sorted(c.load_table("ns.t").scan().to_arrow().to_pylist(), key=str) for c in (cached, plain)
    ]
    assert rows[0] == rows[1] == [{"batch_id": "b", "n": 2}] * 3


def test_a_namespace_created_elsewhere_is_found(tmp_path: Path) -> None:
    one, other = _catalogs(tmp_path)
    assert not other.namespace_exists("later")
    one.create_namespace("later")
    one.create_table("later.t", schema=ROWS.schema)
    assert other.namespace_exists("later")


def test_an_embedded_catalog_logs_ahead_and_readers_do_not_wait_for_a_writer(
    tmp_path: Path,
) -> None:
    writer, reader = _catalogs(tmp_path)
    writer.create_namespace("ns")
    writer.create_table("ns.t", schema=ROWS.schema).append(ROWS)
    with writer.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL

    # Another process holds a write transaction open (mid-commit): a load still answers, with
    # the table as last committed, instead of failing "database is locked" after the timeout.
    held = sqlite3.connect(tmp_path / "catalog.db", timeout=0.1)
    held.execute("BEGIN EXCLUSIVE")
    held.execute("UPDATE iceberg_tables SET metadata_location = metadata_location")
    try:
        assert reader.load_table("ns.t").scan().to_arrow().num_rows == 2
    finally:
        held.rollback()
        held.close()
