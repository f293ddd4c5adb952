"""Catalog maintenance on an FM_HOME built with real stages: every version reads the same rows
before and after, `fm verify` passes, what the bookkeeping names still reads, the catalog
shrinks, and the platform carries on (a new batch, reruns, lineage) as before."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fm_assets.checks.documents import records_accounted_for
from fm_assets.checks.integrity import verify
from fm_assets.contamination.store import registry_ref
from fm_assets.execution import pipeline
from fm_assets.execution.runner import up_to_date
from fm_assets.shards.trace import stage_code_versions
from fm_assets.storage import bookkeeping, catalog
from fm_assets.storage.batch_history import may_hold_rows
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.report import MaintenanceReport
from fm_assets.storage.maintenance.run import maintain
from fm_assets.versions.dataset_version import require_version
from tests.maintained_homes import (
    Home,
    build_home,
    current_data_files,
    environment,
    land_and_run,
    readings,
    table_paths,
)

pytestmark = pytest.mark.slow

NS = "cloud"
FINAL = pipeline.STAGE_NAMES[-1]
# Everything superseded is old enough; small enough that these small tables have files to merge.
NOW = MaintenancePolicy(
    retention=dt.timedelta(0), grace=dt.timedelta(0), min_files=2, merge_manifests_at=2
)


@dataclass
class Maintained:
    home: Home
    before: dict[str, str]  # `readings` before maintenance
    paths_before: dict[str, set[str]]
    stage_runs: list[dict[str, object]]
    code_versions: dict[str, dict[str, dict[str, str]]]
    content_keys: dict[str, object]  # `_content_keys` before maintenance
    replaced_files: set[str]  # data files of the final stage's partition that a rerun replaced
    dry: MaintenanceReport
    paths_after_dry: dict[str, set[str]]
    first: MaintenanceReport
    second: MaintenanceReport


@pytest.fixture(scope="module")
def maintained(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Maintained]:
    root = tmp_path_factory.mktemp("maintained")
    home = build_home(root / "fm")
    settings = home.settings
    with environment(home.env):
        # The final stage's files of the last batch before its two reruns are referenced only
        # by snapshots no version pins: the second run deletes them.
        runs = bookkeeping.stage_runs(settings)
        replaced = set()
        table = catalog.load_table(settings, FINAL, namespace=NS)
        for run in runs:
            if run["batch_id"] == home.batches[-1] and run["stage"] == FINAL:
                snapshot = table.snapshot_by_id(int(run["output_snapshot_id"]))
                assert snapshot is not None
                where = catalog.where_equal("batch_id", home.batches[-1])
                scan = table.scan(row_filter=where, snapshot_id=snapshot.snapshot_id)
                replaced |= {t.file.file_path.removeprefix("file://") for t in scan.plan_files()}
        replaced -= current_data_files(settings, FINAL, NS)
        versions = {
            key: stage_code_versions(settings, require_version(settings, key))
            for key in home.versions
        }
        keys = _content_keys(home)
        before, paths = readings(settings), table_paths(settings)
        dry = maintain(settings, NOW, dry_run=True)
        paths_after_dry = table_paths(settings)
        first = maintain(settings, NOW)
        second = maintain(settings, NOW)
        yield Maintained(
            home, before, paths, runs, versions, keys, replaced, dry, paths_after_dry, first, second
        )


def _content_keys(home: Home) -> dict[str, object]:
    """What decides whether a stage must run again: each stage's key for each batch (with the
    contamination registry's snapshot ids in decontamination's), and the registry's ref."""
    keys: dict[str, object] = {"registry": registry_ref(home.settings)}
    with environment(home.env):
        for batch in home.batches:
            for stage in pipeline.STAGE_NAMES:
                keys[f"{batch} {stage}"] = up_to_date(home.settings, stage, batch)
    return keys


def test_no_stage_of_any_batch_is_out_of_date_after_maintenance(maintained: Maintained) -> None:
    assert _content_keys(maintained.home) == maintained.content_keys
    assert all(maintained.content_keys.values())  # every stage was current to begin with


def test_every_version_and_table_reads_the_same_rows_and_verifies(maintained: Maintained) -> None:
    settings = maintained.home.settings
    after = readings(settings)
    changed = sorted(k for k in maintained.before if after.get(k) != maintained.before[k])
    assert not changed, f"reads changed by maintenance: {changed}"
    assert set(after) == set(maintained.before)
    for key in maintained.home.versions:
        result = verify(settings, key)
        assert result.ok, [f"{b.location}: {b.problem}" for b in result.bad]
        assert result.checked["Iceberg data files"] > 0


def test_a_dry_run_changes_nothing_and_says_what_a_run_deletes(maintained: Maintained) -> None:
    assert maintained.paths_after_dry == maintained.paths_before
    assert maintained.dry.dry_run and maintained.dry.totals()["files_deleted"] > 0
    assert "dry run" in maintained.dry.render()


def test_maintenance_expires_history_and_deletes_what_no_live_snapshot_references(
    maintained: Maintained,
) -> None:
    settings = maintained.home.settings
    totals = [maintained.first.totals(), maintained.second.totals()]
    assert totals[1]["snapshots_after"] < totals[0]["snapshots_before"]
    assert totals[0]["data_files_merged"] > 0  # the index buckets' small files, one per batch
    assert totals[1]["manifests_after"] < totals[0]["manifests_before"]
    assert totals[0]["files_deleted"] + totals[1]["files_deleted"] > 0
    # The data files the last batch's reruns replaced are gone; every live one is still there.
    assert maintained.replaced_files
    assert not [p for p in maintained.replaced_files if Path(p).exists()]
    assert all(Path(p).exists() for p in current_data_files(settings, FINAL, NS))
    # Each table reports what it holds on disk after, as listed.
    paths = table_paths(settings)
    for report in maintained.second.tables:
        assert report.disk_after.total_files == len(paths[report.identifier])
    # A third run finds nothing left to do.
    third = maintain(settings, NOW)
    assert third.totals()["files_deleted"] == 0
    assert third.totals()["snapshots_after"] == third.totals()["snapshots_before"]
    assert "total" in maintained.second.render()


def test_what_the_bookkeeping_names_still_reads(maintained: Maintained) -> None:
    """Stage runs name snapshots that maintenance expired: checks recount there, lineage walks
    the versions' history, and the runs themselves are untouched."""
    settings = maintained.home.settings
    assert bookkeeping.stage_runs(settings) == maintained.stage_runs
    table = catalog.load_table(settings, FINAL, namespace=NS)
    named = {int(r["output_snapshot_id"]) for r in maintained.stage_runs if r["stage"] == FINAL}
    assert any(table.snapshot_by_id(s) is None for s in named), "no recorded snapshot expired"
    for batch in maintained.home.batches:
        for stage in pipeline.STAGE_NAMES:
            outcome = records_accounted_for(settings, stage, batch)
            assert outcome.passed, f"{stage} {batch}: {outcome.description}"
    for key, expected in maintained.code_versions.items():
        assert stage_code_versions(settings, require_version(settings, key)) == expected


def test_the_platform_carries_on_after_maintenance(maintained: Maintained, tmp_path: Path) -> None:
    """A new batch's first run still commits without a delete (its tables' history says no
    batch of its id ever committed), and runs through every stage with its checks passing."""
    settings = maintained.home.settings
    with environment(maintained.home.env):
        for name in (FINAL, "quarantine"):
            assert not may_hold_rows(settings, name, NS, "b-never-landed", stage=FINAL)
        # The first batch's commits to the final stage's table were expired: the history says.
        assert may_hold_rows(settings, FINAL, NS, maintained.home.batches[0])
        batch = land_and_run(settings, tmp_path, 7)
        for stage in pipeline.STAGE_NAMES:
            assert records_accounted_for(settings, stage, batch).passed
