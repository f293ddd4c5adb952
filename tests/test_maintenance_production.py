"""Catalog maintenance on the production profile: the catalog on Postgres (its history table,
its advisory locks), the warehouse on S3 (SeaweedFS on loopback: listing, object times,
deletes). A partition replaced by a rerun loses its old files from the bucket once no live
snapshot references them; every batch reads its rows as before; the history still answers."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog, data_files
from fm_assets.storage.batch_history import may_hold_rows
from fm_assets.storage.bookkeeping import file_checksums
from fm_assets.storage.maintenance.history import readable_snapshot
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.run import maintain
from fm_loader.storage.remote import filesystem_for
from tests.rows import quarantine_rows
from tests.services.fixtures import create_database
from tests.services.postgres import PostgresServer
from tests.services.s3 import S3Server

pytestmark = pytest.mark.slow

NS = "cloud"
NOW = MaintenancePolicy(
    retention=dt.timedelta(0), grace=dt.timedelta(0), min_files=2, merge_manifests_at=2
)


def _commit(settings: Settings, batch: str, rows: int, rerun: bool = False) -> int:
    handle = data_files.table_handle(settings, "quarantine", NS)
    written = data_files.write_files(handle, quarantine_rows(batch, rows), uuid.uuid4(), 0)
    replace = catalog.where_equal("batch_id", batch) if rerun else catalog.NOTHING
    tags = {"fm.batch_id": batch, "fm.stage": "raw_documents"}
    return data_files.commit_files(settings, "quarantine", replace, written, tags, NS)


def _rows(settings: Settings) -> dict[str, list[str]]:
    table = catalog.read_table(settings, "quarantine", namespace=NS).to_pylist()
    found: dict[str, list[str]] = {}
    for row in table:
        found.setdefault(row["batch_id"], []).append(row["record_id"])
    return {batch: sorted(ids) for batch, ids in found.items()}


def test_maintenance_on_postgres_and_s3(
    postgres: PostgresServer,
    s3_session: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    database = f"fm_maintain_{uuid.uuid4().hex[:8]}"
    create_database(postgres, database)
    prefix = f"s3://{s3_session.bucket}/{database}"
    monkeypatch.setenv("FM_HOME", str(tmp_path))
    monkeypatch.setenv("FM_CATALOG_URI", postgres.url(database, driver="postgresql+psycopg2"))
    monkeypatch.setenv("FM_OBJECT_STORE", f"{prefix}/objects")
    monkeypatch.setenv("FM_WAREHOUSE", f"{prefix}/warehouse")
    monkeypatch.setenv("FM_S3_ENDPOINT", s3_session.endpoint)
    for name, value in s3_session.env().items():
        monkeypatch.setenv(name, value)
    settings = load_settings()

    first = _commit(settings, "b-1", 3)
    _commit(settings, "b-2", 2)
    second = _commit(settings, "b-2", 1)  # a second small file in b-2's partition: merged
    replaced = catalog.load_table(settings, "quarantine", namespace=NS)
    old = {t.file.file_path for t in replaced.scan(snapshot_id=first).plan_files()}
    _commit(settings, "b-1", 4, rerun=True)
    before = _rows(settings)
    fs = s3_session.filesystem()
    in_bucket = [fs.get_file_info(u.removeprefix("s3://")).type for u in old]
    assert old and in_bucket == [pafs.FileType.File] * len(old)

    maintain(settings, NOW)
    report = maintain(settings, NOW)

    assert _rows(settings) == before
    kept = [u for u in old if fs.get_file_info(u.removeprefix("s3://")).type == pafs.FileType.File]
    assert not kept, f"replaced files still in the bucket: {kept}"
    assert sum(t.deleted.total_files for t in report.tables) > 0
    where = catalog.where_equal("batch_id", "b-2")
    b2 = data_files.plan_files(settings, "quarantine", where, None, NS)
    assert len(b2) == 1, "b-2's small files were not merged"
    tasks = data_files.plan_files(settings, "quarantine", catalog.ALWAYS_TRUE, None, NS)
    live = [t.file.file_path for t in tasks]
    pinned = file_checksums(settings, live)
    for uri in live:
        bucket_fs, path = filesystem_for(uri, settings.s3_endpoint)
        assert data_files.file_sha256(bucket_fs, path) == pinned[uri]
    table = catalog.load_table(settings, "quarantine", namespace=NS)
    assert table.snapshot_by_id(first) is None and table.snapshot_by_id(second) is None
    for batch in ("b-1", "b-2"):
        assert may_hold_rows(settings, "quarantine", NS, batch, stage="raw_documents")
    assert not may_hold_rows(settings, "quarantine", NS, "b-3", stage="raw_documents")
    live_b2 = readable_snapshot(settings, "quarantine", NS, "b-2", second)
    rows = catalog.read_table(settings, "quarantine", where, live_b2, namespace=NS)
    assert sorted(rows.column("record_id").to_pylist()) == before["b-2"]
