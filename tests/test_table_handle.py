"""A table handle (what every task of a stage is sent) carries the table's current snapshot,
not its history: it stays the same size however many commits the table has seen, and a worker
plans, reads and writes with it as with the whole metadata."""

from __future__ import annotations

import uuid

import ray.cloudpickle as cloudpickle

from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files
from tests.rows import quarantine_rows

NS = "cloud"


def _commit(settings: Settings, batch_id: str) -> None:
    handle = data_files.table_handle(settings, "quarantine", NS)
    written = data_files.write_files(handle, quarantine_rows(batch_id, 2), uuid.uuid4(), 0)
    data_files.commit_files(settings, "quarantine", catalog.NOTHING, written, {}, NS)


def test_a_handle_stays_small_and_plans_every_file_of_the_current_snapshot(
    fm_settings: Settings,
) -> None:
    _commit(fm_settings, "b-0")
    early = len(cloudpickle.dumps(data_files.table_handle(fm_settings, "quarantine", NS)))
    for n in range(1, 12):
        _commit(fm_settings, f"b-{n}")
    table = catalog.load_table(fm_settings, "quarantine", namespace=NS)
    assert len(table.metadata.snapshots) == 12

    handle = data_files.table_handle(fm_settings, "quarantine", NS)
    assert [s.snapshot_id for s in handle.metadata.snapshots] == [
        table.current_snapshot().snapshot_id
    ]
    # The same size after 12 commits as after one (the whole metadata grows with each).
    assert len(cloudpickle.dumps(handle)) < early + 200
    assert len(cloudpickle.dumps(table.metadata)) > 2 * len(cloudpickle.dumps(handle.metadata))

    shipped = cloudpickle.loads(cloudpickle.dumps(handle))
    files = data_files.plan_handle(shipped)
    rows = data_files.read_files(shipped, files)
    assert sorted(set(rows.column("batch_id").to_pylist())) == sorted(f"b-{n}" for n in range(12))
    assert rows.num_rows == 24
