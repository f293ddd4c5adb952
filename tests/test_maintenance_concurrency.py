"""Maintenance while a writer commits: nothing the writer wrote is lost.

A writer process commits quarantine partitions (first runs, then reruns) while maintenance runs
again and again: their commits race (a manifest merge against a writer's append or replace),
the loser retries on the winner's metadata, and every partition reads the rows its last commit
wrote, each data file with the checksum pinned for it. Files a writer wrote and has not
committed yet are younger than the grace period and stay, even one written before maintenance
started and committed after it ended (a dry run without the grace period would delete it);
unreferenced files older than the grace period go. Expiry is left out of the race: a snapshot
a writer started from was current within the retention, which is what the retention is for
(docs/maintenance.md).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.compute as pc
import pytest

from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files
from fm_assets.storage.bookkeeping import file_checksums
from fm_assets.storage.maintenance.policy import MaintenancePolicy
from fm_assets.storage.maintenance.run import maintain
from fm_loader.storage.remote import filesystem_for
from tests.maintenance_writer import NS, rows_of
from tests.paths import REPO
from tests.rows import quarantine_rows

pytestmark = pytest.mark.slow

COMMITS = 10  # partitions the writer commits, each twice
POLICY = MaintenancePolicy(
    retention=dt.timedelta(hours=1), grace=dt.timedelta(hours=1), merge_manifests_at=2
)


def _path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _write(settings: Settings, batch: str, rows: int) -> list[str]:
    """Write (not commit) quarantine rows of `batch`, as a stage's workers do; their URIs."""
    handle = data_files.table_handle(settings, "quarantine", NS)
    written = data_files.write_files(handle, quarantine_rows(batch, rows), uuid.uuid4(), 0)
    return [f.file_path for f in written]


def test_a_writer_committing_during_maintenance_loses_nothing(fm_settings: Settings) -> None:
    settings = fm_settings
    data_files.commit_files(settings, "quarantine", catalog.NOTHING, [], {}, NS)
    handle = data_files.table_handle(settings, "quarantine", NS)
    pending = data_files.write_files(handle, quarantine_rows("late", 4), uuid.uuid4(), 0)
    # Left by a run killed two hours ago: unreferenced, and old enough to go.
    stale = _write(settings, "killed", 3)
    two_hours_ago = time.time() - 2 * 3600
    for uri in stale:
        os.utime(_path(uri), (two_hours_ago, two_hours_ago))
    without_grace = dataclasses.replace(POLICY, grace=dt.timedelta(0))
    exposed = maintain(settings, without_grace, dry_run=True)
    assert sum(t.deleted.files["data"] for t in exposed.tables) == len(pending) + len(stale)

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.maintenance_writer", str(COMMITS)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs, merged = 0, 0
    while writer.poll() is None or runs < 2:
        report = maintain(settings, POLICY)
        merged += sum(t.manifests_before > t.manifests_after for t in report.tables)
        runs += 1
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err[-3000:]
    assert out.count("committed") == 2 * COMMITS
    assert merged > 0, "maintenance never merged the writer's manifests: no race was run"

    assert not [uri for uri in stale if _path(uri).exists()]
    assert all(_path(f.file_path).exists() for f in pending)
    late = catalog.where_equal("batch_id", "late")
    data_files.commit_files(settings, "quarantine", late, pending, {}, NS)
    rows = catalog.read_table(settings, "quarantine", namespace=NS)
    batches = rows.column("batch_id")
    counts = {b: pc.sum(pc.equal(batches, b)).as_py() for b in set(batches.to_pylist())}
    assert counts == {f"w-{i}": rows_of(i, 1) for i in range(COMMITS)} | {"late": 4}
    tasks = data_files.plan_files(settings, "quarantine", catalog.ALWAYS_TRUE, None, NS)
    live = [t.file.file_path for t in tasks]
    pinned = file_checksums(settings, live)
    assert set(pinned) == set(live)
    for uri in live:
        fs, path = filesystem_for(uri)
        assert data_files.file_sha256(fs, path) == pinned[uri]
