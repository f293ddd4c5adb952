"""Catalog maintenance, one part at a time, on tables these tests commit to as the stage runner
does: merging a partition's small files, the history of expired snapshots, old metadata files,
the locks it shares with the runner, its settings, and its Dagster job and command."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from fm_assets.settings import Settings, load_settings
from fm_assets.storage import catalog, data_files
from fm_assets.storage.batch_history import may_hold_rows
from fm_assets.storage.bookkeeping import file_checksums
from fm_assets.storage.locks import exclusive, stage_lock, try_exclusive
from fm_assets.storage.maintenance.history import ancestors, readable_snapshot
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.run import INDEX_WRITERS, maintain
from fm_loader.storage.remote import filesystem_for
from tests.rows import quarantine_rows
from tests.services.fixtures import create_database
from tests.services.postgres import PostgresServer

NS = "cloud"
STAGE = "raw_documents"  # the stage `quarantine_rows` names
NOW = MaintenancePolicy(
    retention=dt.timedelta(0), grace=dt.timedelta(0), min_files=2, merge_manifests_at=2
)


def _commit(settings: Settings, batch: str, rows: int, *, rerun: bool = False) -> int:
    """Commit quarantine rows of `batch` as a stage run does (a rerun replaces its partition);
    return the snapshot id."""
    handle = data_files.table_handle(settings, "quarantine", NS)
    written = data_files.write_files(handle, quarantine_rows(batch, rows), uuid.uuid4(), 0)
    replace = catalog.where_equal("batch_id", batch) if rerun else catalog.NOTHING
    tags = {"fm.batch_id": batch, "fm.stage": STAGE}
    return data_files.commit_files(settings, "quarantine", replace, written, tags, NS)


def _rows(settings: Settings, batch: str, snapshot: int | None = None) -> list[str]:
    where = catalog.where_equal("batch_id", batch)
    table = catalog.read_table(settings, "quarantine", where, snapshot, namespace=NS)
    return sorted(table.column("record_id").to_pylist())


def _files(settings: Settings, batch: str) -> list[str]:
    where = catalog.where_equal("batch_id", batch)
    return [
        t.file.file_path for t in data_files.plan_files(settings, "quarantine", where, None, NS)
    ]


def test_a_partitions_small_files_are_merged_into_one_holding_the_same_rows(
    fm_settings: Settings,
) -> None:
    settings = fm_settings
    for rows in (2, 3, 4):  # three commits of one partition: three small files
        _commit(settings, "b-1", rows)
    before = _rows(settings, "b-1")
    assert len(_files(settings, "b-1")) == 3

    with exclusive(settings, stage_lock(STAGE, "b-1")):  # its stage is running for that batch
        held = maintain(settings, NOW)
    assert len(_files(settings, "b-1")) == 3
    assert any(stage_lock(STAGE, "b-1") in note for t in held.tables for note in t.notes)

    report = maintain(settings, NOW)
    merged = _files(settings, "b-1")
    assert len(merged) == 1 and _rows(settings, "b-1") == before
    assert sum(t.merged_files for t in report.tables) == 3
    pinned = file_checksums(settings, merged)
    fs, path = filesystem_for(merged[0])
    assert pinned[merged[0]] == data_files.file_sha256(fs, path)
    current = catalog.load_table(settings, "quarantine", namespace=NS).current_snapshot()
    assert current is not None and current.summary is not None
    assert current.summary.operation.value == "replace"
    # A merge moves rows: a batch that never committed still commits without a delete.
    assert not may_hold_rows(settings, "quarantine", NS, "b-2", stage=STAGE)
    assert may_hold_rows(settings, "quarantine", NS, "b-1", stage=STAGE)


def test_the_history_of_expired_snapshots_answers_for_them(fm_settings: Settings) -> None:
    settings = fm_settings
    first = _commit(settings, "b-1", 2)
    second = _commit(settings, "b-2", 3)
    b2_rows = _rows(settings, "b-2", second)
    _commit(settings, "b-1", 4, rerun=True)
    _commit(settings, "b-3", 1)
    maintain(settings, NOW)
    table = catalog.load_table(settings, "quarantine", namespace=NS)
    assert table.snapshot_by_id(first) is None and table.snapshot_by_id(second) is None

    # Which batches ever committed: known for those whose snapshots are gone too.
    for batch in ("b-1", "b-2", "b-3"):
        assert may_hold_rows(settings, "quarantine", NS, batch, stage=STAGE)
    assert not may_hold_rows(settings, "quarantine", NS, "b-4", stage=STAGE)
    # What a stage-run row names reads on: b-2's rows are where its expired snapshot had them.
    live = readable_snapshot(settings, "quarantine", NS, "b-2", second)
    assert table.snapshot_by_id(live) is not None and _rows(settings, "b-2", live) == b2_rows
    # b-1 was rerun after its first commit: what that commit held is gone, and it says so.
    with pytest.raises(ValueError, match="rows changed after it"):
        readable_snapshot(settings, "quarantine", NS, "b-1", first)
    with pytest.raises(ValueError, match="did not expire it"):
        readable_snapshot(settings, "quarantine", NS, "b-1", 12345)
    current = table.current_snapshot()
    assert current is not None
    assert {first, second} <= ancestors(settings, table.metadata, current.snapshot_id)


def test_metadata_files_that_fell_off_the_log_are_deleted(fm_settings: Settings) -> None:
    settings = fm_settings
    for i in range(8):
        _commit(settings, f"b-{i}", 1)
    keep = dataclasses.replace(NOW, metadata_versions=3)
    maintain(settings, keep)  # caps the log from the next commit on
    for i in range(8, 12):
        _commit(settings, f"b-{i}", 1)
    report = maintain(settings, keep)
    table = catalog.load_table(settings, "quarantine", namespace=NS)
    location = Path(table.location().removeprefix("file://")) / "metadata"
    on_disk = {str(p) for p in location.glob("*.metadata.json")}
    logged = {e.metadata_file.removeprefix("file://") for e in table.metadata.metadata_log}
    assert on_disk == logged | {table.metadata_location.removeprefix("file://")}
    assert len(logged) <= 3
    assert sum(t.deleted.files["metadata"] for t in report.tables) > 0


def test_maintenance_takes_the_locks_the_index_writers_hold() -> None:
    from fm_assets.execution.runner import NAMESPACE_WIDE
    from fm_assets.stages.image_text.dedup import ImageDedupStage
    from fm_assets.stages.near_dedup import NearDupStage
    from fm_assets.stages.raw import RawStage

    assert {
        "document_index": NAMESPACE_WIDE[RawStage.name],
        "neardup_index": NAMESPACE_WIDE[NearDupStage.name],
        "image_index": NAMESPACE_WIDE[ImageDedupStage.name],
    } == INDEX_WRITERS


def test_maintenance_settings_are_read_and_checked(tmp_path: Path) -> None:
    env = {"FM_HOME": str(tmp_path)}
    settings = load_settings(env | {"FM_MAINTENANCE_RETENTION_HOURS": "48"})
    policy = MaintenancePolicy.from_settings(settings)
    assert policy.retention == dt.timedelta(hours=48) and policy.grace == dt.timedelta(hours=24)
    assert MaintenancePolicy.from_settings(settings, grace_hours=0).grace == dt.timedelta(0)
    for bad in ("-1", "a week"):
        with pytest.raises(ValueError, match="FM_MAINTENANCE_GRACE_HOURS"):
            load_settings(env | {"FM_MAINTENANCE_GRACE_HOURS": bad})


def test_the_job_runs_daily_and_fm_maintain_runs_it(fm_settings: Settings) -> None:
    from fm_assets.commands.cli import main
    from fm_assets.definitions import defs
    from fm_assets.defs.materialize import dagster_instance

    schedule = defs.resolve_schedule_def("catalog_maintenance_schedule")
    assert schedule.job_name == "catalog_maintenance"
    assert schedule.cron_schedule == "0 3 * * *" and schedule.execution_timezone == "UTC"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING

    settings = fm_settings
    first = _commit(settings, "b-1", 2)
    _commit(settings, "b-1", 3, rerun=True)
    gone = set(_files_of_snapshot(settings, first))
    dry = CliRunner().invoke(main, ["maintain", "--dry-run", "--retention", "0", "--grace", "0"])
    assert dry.exit_code == 0, dry.output
    assert "dry run" in dry.output and "fm_cloud.quarantine" in dry.output
    assert all(Path(p).exists() for p in gone)
    done = CliRunner().invoke(main, ["maintain", "--retention", "0", "--grace", "0"])
    assert done.exit_code == 0, done.output
    assert not [p for p in gone if Path(p).exists()]
    assert _rows(settings, "b-1") == [f"r{i}" for i in range(3)]

    instance = dagster_instance(settings)
    runs = instance.get_runs(dg.RunsFilter(job_name="catalog_maintenance"))
    assert len(runs) == 2 and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    outputs = [
        event.dagster_event.step_output_data.metadata
        for event in instance.all_logs(runs[0].run_id)
        if event.dagster_event is not None and event.dagster_event.is_successful_output
    ]
    assert outputs and outputs[0]["files_deleted"].value >= len(gone)
    assert "fm_cloud.quarantine" in outputs[0]["tables"].value


def _files_of_snapshot(settings: Settings, snapshot: int) -> list[str]:
    table = catalog.load_table(settings, "quarantine", namespace=NS)
    scan = table.scan(snapshot_id=snapshot)
    return [t.file.file_path.removeprefix("file://") for t in scan.plan_files()]


HOLD = """
import sys, time
from fm_assets.settings import load_settings
from fm_assets.storage.locks import exclusive
with exclusive(load_settings(), sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def _try_while_another_process_holds(env: dict[str, str]) -> tuple[bool, bool]:
    """(got it while a subprocess held it, got it after the holder died)."""
    settings = load_settings(env)
    name = stage_lock(STAGE, "b-1")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, name], stdout=subprocess.PIPE, text=True, env=env
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    try:
        with try_exclusive(settings, name) as while_held:
            pass
    finally:
        holder.kill()
        holder.wait(timeout=10)
    with try_exclusive(settings, name) as after:
        return while_held, after


def test_try_exclusive_skips_a_file_lock_another_process_holds(tmp_path: Path) -> None:
    env = {**os.environ, "FM_HOME": str(tmp_path / "fm")}
    env.pop("FM_CATALOG_URI", None)
    assert _try_while_another_process_holds(env) == (False, True)


@pytest.mark.slow
def test_try_exclusive_skips_a_postgres_lock_another_process_holds(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    create_database(postgres, "fm_try_locks")
    url = postgres.url("fm_try_locks", driver="postgresql+psycopg2")
    env = {**os.environ, "FM_HOME": str(tmp_path / "fm"), "FM_CATALOG_URI": url}
    assert _try_while_another_process_holds(env) == (False, True)


def test_merged_image_index_rows_keep_their_key_order(fm_settings: Settings) -> None:
    """The image dedup stage skips row groups by their (chunk, value) statistics: a merge of
    its index's small files writes their rows sorted by that key, not one file after another."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fm_assets.storage.image_text_schemas import IMAGE_INDEX

    settings = fm_settings
    for batch, values in (("b-1", [5, 40, 90]), ("b-2", [1, 50, 70]), ("b-3", [20, 60, 99])):
        # Key (chunk 0, value v); every other column filled by its type.
        rows = pa.Table.from_pylist(
            [
                {f.name: f"{batch}-{v}" if f.type == pa.string() else v for f in IMAGE_INDEX}
                | {"chunks": 4, "chunk": 0, "batch_id": batch}
                for v in values
            ],
            schema=IMAGE_INDEX,
        )
        handle = data_files.table_handle(settings, "image_index", NS)
        written = data_files.write_files(handle, rows, uuid.uuid4(), 0)
        data_files.commit_files(settings, "image_index", catalog.NOTHING, written, {}, NS)
    maintain(settings, NOW)
    tasks = data_files.plan_files(settings, "image_index", catalog.ALWAYS_TRUE, None, NS)
    assert len(tasks) == 1
    fs, path = filesystem_for(tasks[0].file.file_path)
    with fs.open_input_file(path) as f:
        values = pq.read_table(f).column("value").to_pylist()
    assert values == sorted(values) and len(values) == 9
