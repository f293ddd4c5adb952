"""Compaction of a namespace's near-dup index: runs of similar size merged as the index grows.

Every near-dedup run adds a *run* to the index: its files of each kind (`layout`), named by
the run's write id. A key may be in any run, so a lookup consults one file per run (a footer,
then 32 bytes of Bloom filter a key; `lookup`). Runs are kept few by size tiers: a run of
under `TIER_BYTES` is of tier 0, each tier's runs `TIER_GROWTH` times larger than the one's
below; once `MERGE_AT` runs of one kind share a tier, they and every smaller run of that kind
merge into one run (its files cut by key range). A namespace of n bytes of index keeps
about (MERGE_AT - 1) x log_TIER_GROWTH(n / TIER_BYTES) runs of each kind, and each row is
rewritten about log_TIER_GROWTH(n / TIER_BYTES) times over the index's life.

A merge reads its runs by key range, a file's row groups at a time (each run is sorted by
key): what a merge task holds is one output file's rows, whatever the runs' size. Files not of
the layout (an older platform's, partitioned by batch and band, or sorted by band; or files an
Iceberg row delete rewrote) are rewritten into it, their kinds apart, on the run after they
appear; a document's shingle set that an older platform kept on its band-0 row becomes a
shingle-set row.

It runs inside the near-dedup stage, which holds the namespace's near-dedup lock: no other
writer touches the index meanwhile. One snapshot swaps the merged files for the new ones (the
same rows); a swap that finds its files already gone gives up (nothing is lost: the next run
merges again).
"""

from __future__ import annotations

import math
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask
from pyiceberg.table.snapshots import TOTAL_DATA_FILES

from fm_assets.execution.compute import Progress, get, remote
from fm_assets.execution.near_dedup.layout import kind_of_name
from fm_assets.execution.near_dedup.merge import convert_files, merge_runs
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.data_files import (
    FilesGone,
    TableHandle,
    plan_files,
    replace_files,
    table_handle,
)

TIER_BYTES = 1 << 20  # a run under this size is of the smallest tier
TIER_GROWTH = 4  # each tier's runs are this many times larger than the tier's below
MERGE_AT = 4  # runs of one kind in one tier that start a merge
CHECK_AT = 4  # data files the table must have before the driver looks for a merge at all
CONVERT_BYTES = 256 << 20  # files not of the layout rewritten together by one task, at most


@dataclass(frozen=True)
class Run:
    """The files one near-dedup run (or merge) wrote of one kind."""

    kind: str
    files: tuple[FileScanTask, ...]

    @property
    def bytes(self) -> int:
        return sum(t.file.file_size_in_bytes for t in self.files)

    @property
    def tier(self) -> int:
        if self.bytes < TIER_BYTES:
            return 0
        return 1 + int(math.log(self.bytes / TIER_BYTES, TIER_GROWTH))


def runs_of(files: Sequence[FileScanTask]) -> tuple[list[Run], list[FileScanTask]]:
    """The index's runs (by kind and write id in the file names), and its files not of the
    layout."""
    grouped: dict[tuple[str, str], list[FileScanTask]] = defaultdict(list)
    strangers = []
    for task in files:
        kind = kind_of_name(task.file.file_path)
        if kind is None or task.delete_files:
            strangers.append(task)
            continue
        write_id = task.file.file_path.removesuffix(".parquet")[-36:]  # the name ends with it
        grouped[(kind, write_id)].append(task)
    runs = [Run(kind, tuple(tasks)) for (kind, _), tasks in sorted(grouped.items())]
    return runs, strangers


def merges_due(runs: Sequence[Run]) -> list[list[Run]]:
    """The groups of runs to merge now: of each kind whose tier holds `MERGE_AT` runs, every
    run of that tier and below (the highest such tier)."""
    due = []
    for kind in sorted({r.kind for r in runs}):
        own = [r for r in runs if r.kind == kind]
        counts: dict[int, int] = defaultdict(int)
        for run in own:
            counts[run.tier] += 1
        full = [tier for tier, count in counts.items() if count >= MERGE_AT]
        if full:
            top = max(full)
            due.append([r for r in own if r.tier <= top])
    return due


def convert_groups(strangers: Sequence[FileScanTask]) -> list[list[FileScanTask]]:
    """Files not of the layout, smallest first, in groups of up to `CONVERT_BYTES`."""
    ordered = sorted(strangers, key=lambda t: (t.file.file_size_in_bytes, t.file.file_path))
    groups: list[list[FileScanTask]] = []
    total = 0
    for task in ordered:
        size = task.file.file_size_in_bytes
        if not groups or total + size > CONVERT_BYTES:
            groups.append([])
            total = 0
        groups[-1].append(task)
        total += size
    return groups


def compacted(
    settings: Settings, name: str, namespace: str | None, progress: Progress
) -> TableHandle:
    """A handle of table `name` once `compact` has run on it, if a merge may be due: a table
    of fewer than `CHECK_AT` data files (its snapshot summary says) has nothing to merge, and
    nothing is planned for it."""
    handle = table_handle(settings, name, namespace)
    snapshot = handle.metadata.current_snapshot()
    if snapshot is None:
        return handle  # no commit yet: no files
    total = snapshot.summary[TOTAL_DATA_FILES] if snapshot.summary is not None else None
    if total is not None and int(total) < CHECK_AT:
        return handle
    compact(settings, name, namespace, progress)
    return table_handle(settings, name, namespace)


def compact(
    settings: Settings,
    name: str,
    namespace: str | None,
    progress: Progress,
    *,
    in_process: bool = False,
) -> list[FileScanTask]:
    """Rewrite the index's files not of the layout and merge the runs due, as Ray tasks (or
    in this process: a tool without Ray); return the table's files."""
    files = plan_files(settings, name, catalog.ALWAYS_TRUE, None, namespace)
    runs, strangers = runs_of(files)
    converts, merges = convert_groups(strangers), merges_due(runs)
    if not converts and not merges:
        return files
    handle = table_handle(settings, name, namespace)
    jobs: list[tuple[Callable[..., list[DataFile]], tuple[Any, ...]]] = [
        (convert_files, (handle, group, uuid.uuid4())) for group in converts
    ]
    jobs += [
        (merge_runs, (handle, [t for run in g for t in run.files], g[0].kind, uuid.uuid4()))
        for g in merges
    ]
    if in_process:
        outputs = [function(*args) for function, args in jobs]
    else:
        outputs = get([remote(function).remote(*args) for function, args in jobs])
    written: list[DataFile] = [f for files_of in outputs for f in files_of]
    old = [t.file for group in converts for t in group]
    old += [t.file for group in merges for run in group for t in run.files]
    what = (
        f"{len(old)} files ({sum(len(g) for g in converts)} rewritten into the layout, "
        f"{sum(len(g) for g in merges)} runs merged) into {len(written)}"
    )
    properties = {"fm.operation": "compaction", "fm.merged_files": str(len(old))}
    try:
        replace_files(settings, name, old, written, properties, namespace)
    except FilesGone as exc:
        progress(f"{name}: compaction given up ({exc}); the next run compacts again")
    else:
        progress(f"{name}: compacted {what}")
    return plan_files(settings, name, catalog.ALWAYS_TRUE, None, namespace)
