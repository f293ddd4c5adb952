"""`may_hold_rows`: whether a batch's rerun must remove rows, read from the table's snapshots."""

from __future__ import annotations

import uuid

from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files
from fm_assets.storage.batch_history import may_hold_rows
from tests.rows import quarantine_rows

NS = "cloud"


def _commit(settings: Settings, batch_id: str, tags: dict[str, str]) -> None:
    handle = data_files.table_handle(settings, "quarantine", NS)
    written = data_files.write_files(handle, quarantine_rows(batch_id, 2), uuid.uuid4(), 0)
    data_files.commit_files(settings, "quarantine", catalog.NOTHING, written, tags, NS)


def _held(settings: Settings, batch_id: str, stage: str | None = None, moves: bool = False) -> bool:
    return may_hold_rows(
        settings, "quarantine", NS, batch_id, stage=stage, untagged_only_move_rows=moves
    )


def test_tagged_commits_say_which_batch_and_stage_a_table_may_hold(fm_settings: Settings) -> None:
    assert not _held(fm_settings, "b-1", "extract")  # a new table holds nothing
    _commit(fm_settings, "b-1", {"fm.batch_id": "b-1", "fm.stage": "extract"})
    assert _held(fm_settings, "b-1", "extract") and _held(fm_settings, "b-1")
    assert not _held(fm_settings, "b-1", "pii") and not _held(fm_settings, "b-2")
    # A commit that names no batch (an older platform's): any batch may have rows there,
    # unless the table's untagged commits only move rows (compactions).
    _commit(fm_settings, "b-3", {})
    assert _held(fm_settings, "b-2")
    assert not _held(fm_settings, "b-2", moves=True)


def test_a_table_whose_history_was_expired_may_hold_any_batch(fm_settings: Settings) -> None:
    _commit(fm_settings, "b-1", {"fm.batch_id": "b-1", "fm.stage": "extract"})
    _commit(fm_settings, "b-2", {"fm.batch_id": "b-2", "fm.stage": "extract"})
    assert not _held(fm_settings, "b-3", "extract")
    table = catalog.load_table(fm_settings, "quarantine", namespace=NS)
    first = table.metadata.snapshots[0].snapshot_id
    table.maintenance.expire_snapshots().by_id(first).commit()  # b-1's rows stay, its tag goes
    rows = catalog.read_table(fm_settings, "quarantine", catalog.ALWAYS_TRUE, namespace=NS)
    assert "b-1" in set(rows.column("batch_id").to_pylist())
    assert _held(fm_settings, "b-1", "extract") and _held(fm_settings, "b-3", "extract")
