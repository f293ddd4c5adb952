"""A table partition cut into equal slices for Ray tasks, files split where the cut falls.

Whole-file slices leave cores idle whenever a partition has few data files or files of uneven
size: three files on two CPUs keep one worker busy for two files while the other idles after
one. Here the partition's files, in path order, are weighed by their bytes and cut into a
multiple of the CPU count of equal weight: the stage's `slices_per_cpu` per CPU within the slice
byte bounds (`planning.slice_count`), however few files there are (a light stage, one slice per
CPU, writes few files for the heavy stage after it). A cut inside a file gives each side the
rows in proportion to its share of the file's bytes. The cut is decided from sizes alone (the
driver never reads a record) and applied by each worker to the rows it reads, so the stretches
of one file are disjoint and cover it whatever its deletes.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.table import FileScanTask

from fm_assets.execution.planning import SLICES_PER_CPU, slice_count
from fm_assets.storage.data_files import TableHandle, read_files

# A cut this close to a file's edge (as a share of one slice) moves onto the edge: a sliver of
# a file would cost its reader the whole file for a handful of rows.
SNAP_SHARE = 8


@dataclass(frozen=True)
class FileRange:
    """The stretch [start, stop) of one data file's bytes, as weighed for slicing; its rows are
    the same share of the rows the file holds. A whole file is [0, weight)."""

    task: FileScanTask
    start: int
    stop: int

    @property
    def weight(self) -> int:
        return file_weight(self.task)

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.stop == self.weight

    def rows(self, count: int) -> tuple[int, int]:
        """The [first, end) rows of this stretch in the file read as `count` rows."""
        return self.start * count // self.weight, self.stop * count // self.weight


def file_weight(task: FileScanTask) -> int:
    return max(1, task.file.file_size_in_bytes)


def _on_a_row(cut: int, start: int, weight: int, rows: int) -> int:
    """`cut`, inside a file of `rows` rows and `weight` bytes starting at `start`, moved onto
    the nearest row boundary (as `FileRange.rows` counts rows), or onto the file's edge when
    that boundary is its first or last: no stretch of a file holds no row."""
    row = round((cut - start) * rows / weight)
    if row <= 0:
        return start
    if row >= rows:
        return start + weight
    return start + -(-row * weight // rows)


def _cuts(tasks: Sequence[FileScanTask], edges: Sequence[int], count: int) -> list[int]:
    """Where `count` equal slices of weight `edges[-1]` end: near a file edge (within a share
    of a slice) on it, inside a file on a row boundary."""
    total = edges[-1]
    snap = total // count // SNAP_SHARE
    cuts = []
    for j in range(1, count):
        cut = j * total // count
        i = bisect.bisect_right(edges, cut) - 1  # the file the cut falls in
        nearest = min(edges[i : i + 2], key=lambda edge: abs(edge - cut))
        if abs(nearest - cut) <= snap:
            cuts.append(nearest)
        else:
            weight = edges[i + 1] - edges[i]
            cuts.append(_on_a_row(cut, edges[i], weight, tasks[i].file.record_count))
    return sorted({0, *cuts, total})


def range_slices(
    tasks: Sequence[FileScanTask], cpus: int, per_cpu: int = SLICES_PER_CPU
) -> list[list[FileRange]]:
    """A table partition's data files as slices of equal bytes, in path order, up to `per_cpu`
    per CPU; a slice may end inside one file and the next begin there."""
    ordered = sorted(tasks, key=lambda t: t.file.file_path)  # plan order is not stable
    if not ordered:
        return []
    edges = [0]
    for task in ordered:
        edges.append(edges[-1] + file_weight(task))
    cuts = _cuts(ordered, edges, slice_count(edges[-1], cpus, per_cpu=per_cpu))
    slices: list[list[FileRange]] = []
    for low, high in itertools.pairwise(cuts):
        stretch = []
        for i in range(bisect.bisect_right(edges, low) - 1, len(ordered)):
            start, end = edges[i], edges[i + 1]
            if start >= high:
                break
            stretch.append(FileRange(ordered[i], max(low, start) - start, min(high, end) - start))
        slices.append(stretch)
    return slices


def read_ranges(handle: TableHandle, ranges: Sequence[FileRange]) -> pa.Table:
    """The rows of `ranges`, in order (on a worker): whole files read together, a split file
    read and cut to its stretch."""
    parts: list[pa.Table] = []
    whole: list[FileScanTask] = []
    for stretch in ranges:
        if stretch.whole:
            whole.append(stretch.task)
            continue
        if whole:
            parts.append(read_files(handle, whole))
            whole = []
        rows = read_files(handle, [stretch.task])
        first, end = stretch.rows(rows.num_rows)
        parts.append(rows.slice(first, end - first))
    if whole:
        parts.append(read_files(handle, whole))
    if not parts:
        raise ValueError(f"an empty slice of {handle.name}: a slice holds at least one range")
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)
