"""Cutting a batch into slices for Ray tasks: landed files into parts (large files split where
their records allow), a table partition into groups of its data files, and a stage's parts
(near dedup's bands and buckets) into groups a task each. The driver plans from file sizes and
metadata only; it never reads a record."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import pyarrow as pa
from pyiceberg.table import FileScanTask

from fm_assets.formats.splitting import gzip_split_points, line_split_points
from fm_assets.settings import Settings
from fm_assets.stages.raw import LANDED_PARTS
from fm_assets.storage.landing import BatchManifest, LandedFile
from fm_assets.storage.objectstore import filesystem_for, open_object_store
from fm_loader.storage.retry import with_retries

T = TypeVar("T")
SLICES_PER_CPU = 4  # several per CPU: one slow slice then holds up the stage less at the end
MIN_SLICE_BYTES = 256 << 10
MAX_SLICE_BYTES = 64 << 20
_GZIP_ARCHIVES = (".warc.gz", ".wet.gz", ".arc.gz")
_LINE_FILES = (".jsonl", ".json", ".ndjson")


def slice_bytes(total: int, cpus: int, per_cpu: int = SLICES_PER_CPU) -> int:
    """The bytes one slice should hold: the batch over `per_cpu` slices per CPU, within bounds."""
    return max(MIN_SLICE_BYTES, min(MAX_SLICE_BYTES, total // max(1, per_cpu * cpus)))


def slice_count(
    total: int, cpus: int, largest: int | None = None, per_cpu: int = SLICES_PER_CPU
) -> int:
    """How many slices a batch of `total` bytes gets: `per_cpu` per CPU within the slice bounds
    (`slice_bytes`, and at most `largest` bytes a slice when given), and a multiple of the CPUs
    once there are as many slices as CPUs, so that every worker gets the same share."""
    target = min(largest or MAX_SLICE_BYTES, slice_bytes(total, cpus, per_cpu))
    count = max(1, round(total / max(1, target)))
    if count >= cpus:
        count = -(-count // cpus) * cpus
    return count


def balanced_groups(items: Sequence[T], weight: Callable[[T], int], count: int) -> list[list[T]]:
    """`items` cut into at most `count` consecutive groups of near-equal weight (order kept):
    each item joins the group its middle falls in, so a group is off its share by at most half
    an item each side."""
    weights = [max(0, weight(item)) for item in items]
    total = sum(weights)
    if total == 0 or count <= 1:
        return [list(items)] if items else []
    groups: list[list[T]] = [[] for _ in range(count)]
    before = 0
    for item, size in zip(items, weights, strict=True):
        groups[min(count - 1, (2 * before + size) * count // (2 * total))].append(item)
        before += size
    return [group for group in groups if group]


def table_slices(
    tasks: Sequence[FileScanTask], cpus: int, per_cpu: int = SLICES_PER_CPU
) -> list[list[FileScanTask]]:
    """A table partition's whole data files, in path order, grouped into slices of similar
    size, `per_cpu` per CPU (`table_ranges.range_slices` also splits files)."""
    ordered = sorted(tasks, key=lambda t: t.file.file_path)  # plan order is not stable
    total = sum(t.file.file_size_in_bytes for t in ordered)
    count = slice_count(total, cpus, per_cpu=per_cpu)
    return balanced_groups(ordered, lambda t: t.file.file_size_in_bytes, count)


def task_groups(parts: int, cpus: int, rows: int, rows_per_task: int) -> list[list[int]]:
    """Parts (bands, buckets) 0..parts-1 in contiguous groups, one Ray task each: one group
    per CPU while the batch is small (a task per part costs scheduling and an object fetch per
    slice, which dominate a small batch), more as `parts * rows` outgrows `rows_per_task`
    rows a task, up to one part a task."""
    if parts <= 0:
        return []
    wanted = max(cpus, -(-parts * rows // max(1, rows_per_task)))
    groups = max(1, min(parts, wanted))
    size, extra = divmod(parts, groups)
    out: list[list[int]] = []
    start = 0
    for g in range(groups):
        end = start + size + (1 if g < extra else 0)
        out.append(list(range(start, end)))
        start = end
    return out


def tables_by_part(parts: Sequence[int], tables: Sequence[T]) -> list[tuple[int, Sequence[T]]]:
    """Each part of a group with its own tables, when `tables` holds every part's tables in
    turn, the same number each (a grouped task's arguments: each band's slice tables, ...)."""
    if not parts:
        return []
    per_part, left = divmod(len(tables), len(parts))
    if left:
        raise ValueError(f"{len(tables)} tables do not divide among {len(parts)} parts")
    return [(part, tables[i * per_part : (i + 1) * per_part]) for i, part in enumerate(parts)]


def splittable(landed: LandedFile) -> str | None:
    """How a landed file could be split: "gzip" members, "lines", or None (read whole)."""
    name = landed.name.lower()
    if name.endswith(_GZIP_ARCHIVES):
        return "gzip"
    if name.endswith(_LINE_FILES):
        return "lines"
    return None


def split_points(
    uri: str, kind: str, size: int, part_bytes: int, s3_endpoint: str | None
) -> list[int]:
    """Where one landed file's parts start (runs on a worker: gzip files are read once).

    Read whole or retried whole, like the raw stage's parts: the landing manifest lists the file,
    so a failure to read it (even "not found") is the store's, not the file's."""
    fs, path = filesystem_for(uri, s3_endpoint)

    def find() -> list[int]:
        with fs.open_input_file(path) as stream:
            if kind == "gzip":
                return gzip_split_points(stream, part_bytes)  # type: ignore[arg-type]
            return line_split_points(stream, size, part_bytes)  # type: ignore[arg-type]

    return with_retries(find, what=f"reading {uri} to split it", must_exist=True)


def landed_parts(
    settings: Settings,
    manifest: BatchManifest,
    points: dict[str, list[int]],
) -> pa.Table:
    """LANDED_PARTS rows of a batch: each file whole, or cut at `points[file sha256]`."""
    store = open_object_store(settings)
    rows: list[dict[str, object]] = []
    for landed in manifest.files:
        starts = points.get(landed.sha256, [0])
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else -1
            rows.append(
                {
                    "batch_id": manifest.batch_id,
                    "file_name": landed.name,
                    "file_sha256": landed.sha256,
                    "file_uri": store.uri(landed.key),
                    "source": manifest.source,
                    "license": manifest.license,
                    "namespace": manifest.namespace,
                    "generator": manifest.generator.to_json() if manifest.generator else None,
                    "part": len(rows),
                    "start": start,
                    "end": end,
                    "whole_file": len(starts) == 1,
                    "first_index": 0,
                    "first_line": 1,
                    "file_items": -1,
                }
            )
    return pa.Table.from_pylist(rows, schema=LANDED_PARTS)


def part_bytes(parts: pa.Table, sizes: dict[str, int]) -> list[int]:
    """Bytes of each part (its range, or the rest of its file)."""
    out = []
    for sha, start, end in zip(
        parts.column("file_sha256").to_pylist(),
        parts.column("start").to_pylist(),
        parts.column("end").to_pylist(),
        strict=True,
    ):
        out.append((end if end >= 0 else sizes[sha]) - start)
    return out


def files_by_rows(files: Sequence[FileScanTask], max_rows: int) -> list[list[FileScanTask]]:
    """`files` in consecutive groups of at most `max_rows` rows (by their record counts), a
    bigger file in a group of its own: what one task reads at a time."""
    groups: list[list[FileScanTask]] = []
    rows = 0
    for task in files:
        if not groups or (groups[-1] and rows + task.file.record_count > max_rows):
            groups.append([])
            rows = 0
        groups[-1].append(task)
        rows += task.file.record_count
    return groups
