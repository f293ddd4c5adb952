"""The orphan sweep removes the files of a run that never committed, and nothing else."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files
from fm_assets.storage.orphans import sweep_orphans
from tests.rows import quarantine_rows

NS = "cloud"  # the data namespace whose tables these tests write


def _path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def test_files_of_a_run_that_never_committed_are_swept_and_committed_ones_kept(
    fm_settings: Settings,
) -> None:
    handle = data_files.table_handle(fm_settings, "quarantine", NS)
    committed = data_files.write_files(handle, quarantine_rows("b-1", 3), uuid.uuid4(), 0)
    data_files.commit_files(
        fm_settings, "quarantine", catalog.where_equal("batch_id", "b-1"), committed, {}, NS
    )
    # A run that wrote its files and was killed before its commit.
    orphaned = data_files.write_files(handle, quarantine_rows("b-2", 2), uuid.uuid4(), 0)
    assert all(_path(f.file_path).exists() for f in orphaned)

    # Within the grace period (a run may still be writing): nothing is touched.
    assert sweep_orphans(fm_settings).files == 0

    seen = sweep_orphans(fm_settings, grace=dt.timedelta(0), dry_run=True)
    assert seen.tables == {"fm_cloud.quarantine": (1, _path(orphaned[0].file_path).stat().st_size)}
    assert all(_path(f.file_path).exists() for f in orphaned), "a dry run deleted a file"

    swept = sweep_orphans(fm_settings, grace=dt.timedelta(0))
    assert [_path(uri) for uri in swept.removed] == [_path(f.file_path) for f in orphaned]
    assert not any(_path(f.file_path).exists() for f in orphaned)
    assert all(_path(f.file_path).exists() for f in committed)
    b1 = catalog.where_equal("batch_id", "b-1")
    assert catalog.read_table(fm_settings, "quarantine", b1, namespace=NS).num_rows == 3


def test_a_table_whose_only_commit_replaced_a_partition_with_nothing_is_swept(
    fm_settings: Settings,
) -> None:
    """Such a snapshot holds no manifest (every run that quarantines nothing commits one)."""
    data_files.commit_files(
        fm_settings, "quarantine", catalog.where_equal("batch_id", "b-1"), [], {}, NS
    )
    assert catalog.load_table(fm_settings, "quarantine", namespace=NS).current_snapshot()
    assert sweep_orphans(fm_settings, grace=dt.timedelta(0)).files == 0


def test_files_under_a_percent_encoded_partition_value_are_kept(fm_settings: Settings) -> None:
    """Iceberg writes `shard_set_key=web%40v1%2F...` literally: the sweep must not decode it."""
    from fm_assets.shards.lineage import SAMPLE_DOCUMENTS

    row = {"shard_set_key": "web@v1/abc-s512", "sample": 0, "doc_id": "d" * 64}
    row |= {"token_start": 0, "token_end": 8, "doc_offset": 0}
    rows = pa.Table.from_pylist([row], schema=SAMPLE_DOCUMENTS)
    handle = data_files.table_handle(fm_settings, "sample_documents", NS)
    written = data_files.write_files(handle, rows, uuid.uuid4(), 0)
    assert "%40" in written[0].file_path
    data_files.commit_files(
        fm_settings,
        "sample_documents",
        catalog.where_equal("shard_set_key", "web@v1/abc-s512"),
        written,
        {},
        NS,
    )
    assert sweep_orphans(fm_settings, grace=dt.timedelta(0)).files == 0
    assert catalog.read_table(fm_settings, "sample_documents", namespace=NS).num_rows == 1
