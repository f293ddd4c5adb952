"""The orphan sweep removes the files of a run that never committed, and nothing else."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files
from fm_assets.storage.orphans import sweep_orphans
from tests.rows import quarantine_rows


def _path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def test_files_of_a_run_that_never_committed_are_swept_and_committed_ones_kept(
    fm_settings: Settings,
) -> None:
    handle = data_files.table_handle(fm_settings, "quarantine")
    committed = data_files.write_files(handle, quarantine_rows("b-1", 3), uuid.uuid4(), 0)
    data_files.commit_files(
        fm_settings, "quarantine", catalog.where_equal("batch_id", "b-1"), committed, {}
    )
    # A run that wrote its files and was killed before its commit.
    orphaned = data_files.write_files(handle, quarantine_rows("b-2", 2), uuid.uuid4(), 0)
    assert all(_path(f.file_path).exists() for f in orphaned)

    # Within the grace period (a run may still be writing): nothing is touched.
    assert sweep_orphans(fm_settings).files == 0

    seen = sweep_orphans(fm_settings, grace=dt.timedelta(0), dry_run=True)
    assert seen.tables == {"quarantine": (1, _path(orphaned[0].file_path).stat().st_size)}
    assert all(_path(f.file_path).exists() for f in orphaned), "a dry run deleted a file"

    swept = sweep_orphans(fm_settings, grace=dt.timedelta(0))
    assert [_path(uri) for uri in swept.removed] == [_path(f.file_path) for f in orphaned]
    assert not any(_path(f.file_path).exists() for f in orphaned)
    assert all(_path(f.file_path).exists() for f in committed)
    assert catalog.read_batch(fm_settings, "quarantine", "b-1").num_rows == 3


def test_a_table_whose_only_commit_replaced_a_partition_with_nothing_is_swept(
    fm_settings: Settings,
) -> None:
    """Such a snapshot holds no manifest (every run that quarantines nothing commits one)."""
    data_files.commit_files(
        fm_settings, "quarantine", catalog.where_equal("batch_id", "b-1"), [], {}
    )
    assert catalog.load_table(fm_settings, "quarantine").current_snapshot() is not None
    assert sweep_orphans(fm_settings, grace=dt.timedelta(0)).files == 0
