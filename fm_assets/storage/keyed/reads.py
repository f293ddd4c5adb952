"""Reading the rows of a table's data files that hold given keys, and nothing else.

`rows_of_keys` finds them the way keyed files (`files`) allow: the files whose key bounds
(from the manifest) hold a key; in each, the row groups whose statistics hold one (found by
binary search in a key-sorted file, each group checked in any other); of those, the keys the
group's Bloom filter may hold (32 bytes read a key); then only the row groups still holding a
key are read, with the columns asked for, and filtered to the keys. What a lookup reads
follows its keys and the number of files a key may be in, not the table's size; each file's
footer is read once per process while it stays in a bounded cache (data files never change).
A file without statistics or filters is read correctly all the same, with less help.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.table import FileScanTask

from fm_assets.storage import catalog
from fm_assets.storage.data_files import TableHandle, read_files
from fm_assets.storage.keyed import bloom

# Parsed footers kept per process (warm workers keep theirs between batches), by file path.
FOOTER_CACHE_BYTES = 64 << 20
_footers: OrderedDict[str, _Footer] = OrderedDict()
_footer_bytes = 0
_footer_lock = threading.Lock()


@dataclass
class ReadCounts:
    """What lookups read: shown by the benchmark, and a check for tests."""

    files: int = 0  # data files opened
    footers: int = 0  # footers read (not found in the cache)
    footer_bytes: int = 0
    row_groups: int = 0  # row groups read
    filter_blocks: int = 0  # Bloom filter blocks read

    def add(self, other: ReadCounts) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def rows_of_keys(
    table: TableHandle,
    files: Sequence[FileScanTask],
    column: str,
    keys: pa.Array,
    columns: Sequence[str],
    counts: ReadCounts | None = None,
    *,
    sorted_file: Callable[[str], bool] = lambda path: False,
) -> pa.Table:
    """The rows of `files` (the table's) whose `column` is one of `keys`, with `columns` (the
    key among them), typed as the table's schema. `sorted_file` says, of a file's path,
    whether its rows are sorted by `column` (a keyed file): its row groups are then found by
    binary search; any other file's are each checked."""
    counts = counts if counts is not None else ReadCounts()
    wanted = pa.schema([table.schema.field(c) for c in columns])
    found: list[pa.Table] = []
    probe = Probe.of(keys)
    if probe.size:
        for task in files:
            inside = probe.within(_bounds(table, task, column))
            if not inside.size:
                continue
            if task.delete_files:  # rows the file's own groups do not say: read as Iceberg does
                where = catalog.where_in(column, inside.values.to_pylist())
                found.append(read_files(table, [task], columns, where))
                continue
            found.append(_file_rows(table, task, column, inside, columns, counts, sorted_file))
    rows = [catalog.conform(t, wanted, fill_nullable=True) for t in found if t.num_rows]
    return pa.concat_tables(rows) if rows else wanted.empty_table()


@dataclass(frozen=True)
class Probe:
    """Sorted distinct keys and their Bloom hashes."""

    values: pa.Array
    hashes: np.ndarray[Any, np.dtype[np.uint64]]
    numeric: bool

    @classmethod
    def of(cls, keys: pa.Array) -> Probe:
        unique = pc.unique(keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys)
        unique = unique.filter(pc.is_valid(unique)).take(pc.sort_indices(unique))
        numeric = pa.types.is_integer(unique.type)
        if numeric:
            ints = unique.cast(pa.int64()).to_numpy()
            return cls(pa.array(ints), bloom.hash_int64(ints), True)
        strings = unique.cast(pa.string()).to_pylist()
        return cls(pa.array(strings, pa.string()), bloom.hash_strings(strings), False)

    @property
    def size(self) -> int:
        return len(self.values)

    def within(self, bounds: tuple[Any, Any] | None) -> Probe:
        """The keys in [low, high] (all of them when the bounds are unknown)."""
        if bounds is None:
            return self
        start, end = self.span(bounds)
        return Probe(self.values[start:end], self.hashes[start:end], self.numeric)

    def span(self, bounds: tuple[Any, Any]) -> tuple[int, int]:
        """[start, end) of the keys in [low, high]."""
        low, high = bounds
        if self.numeric:
            ints = self.values.to_numpy()
            return (
                int(np.searchsorted(ints, low, side="left")),
                int(np.searchsorted(ints, high, side="right")),
            )
        strings = self.values.to_pylist()
        return bisect.bisect_left(strings, low), bisect.bisect_right(strings, high)


def _bounds(index: TableHandle, task: FileScanTask, column: str) -> tuple[Any, Any] | None:
    """A data file's [lowest, highest] `column` value by its manifest entry, if it says."""
    field = index.metadata.schema().find_field(column)
    lower = (task.file.lower_bounds or {}).get(field.field_id)
    upper = (task.file.upper_bounds or {}).get(field.field_id)
    if lower is None or upper is None:
        return None
    # A string's bounds may be truncated: the lower to a prefix (still <= every value), the
    # upper to an incremented prefix (still >= every value).
    return from_bytes(field.field_type, lower), from_bytes(field.field_type, upper)  # type: ignore[arg-type]


def _file_rows(
    table: TableHandle,
    task: FileScanTask,
    column: str,
    probe: Probe,
    columns: Sequence[str],
    counts: ReadCounts,
    sorted_file: Callable[[str], bool],
) -> pa.Table:
    path = task.file.file_path
    counts.files += 1
    with table.io.new_input(path).open(seekable=True) as file:
        footer = _footer(path, task.file.file_size_in_bytes, file, counts)
        metadata = footer.metadata
        position = _column_position(metadata, column)
        candidates = _candidate_groups(footer, position, probe, sorted_file(path))
        kept = _filtered(file, footer, position, probe, candidates, counts)
        if not kept:
            return pa.table({})
        groups = sorted(kept)
        names = set(metadata.schema.to_arrow_schema().names)
        reader = pq.ParquetFile(file, metadata=metadata)
        rows = reader.read_row_groups(groups, columns=[c for c in columns if c in names])
        counts.row_groups += len(groups)
    present = np.unique(np.concatenate([kept[g] for g in groups]))
    keys = probe.values.take(pa.array(present)).cast(rows.schema.field(column).type)
    return rows.filter(pc.is_in(rows.column(column), value_set=keys))


Positions = np.ndarray[Any, np.dtype[np.int64]]


def _candidate_groups(
    footer: _Footer, position: int, probe: Probe, sorted_file: bool
) -> dict[int, Positions]:
    """The row groups whose statistics may hold one of the keys, each with those keys (their
    positions in `probe`).

    A keyed file is sorted by its key, so its row groups' minima and maxima both ascend: a
    key's groups are found by binary search in the footer's (cached) ranges, and what this
    costs follows the keys, not the file's row groups. Any other file's groups are each
    checked."""
    keys = probe.values.to_numpy() if probe.numeric else np.array(probe.values.to_pylist())
    ranges = footer.ranges(position) if sorted_file else None
    if ranges is None:
        metadata = footer.metadata
        found = {}
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(position).statistics
            start, end = 0, probe.size
            if stats is not None and stats.has_min_max:
                start = int(np.searchsorted(keys, stats.min, side="left"))
                end = int(np.searchsorted(keys, stats.max, side="right"))
            if end > start:
                found[group] = np.arange(start, end, dtype=np.int64)
        return found
    lows, highs = ranges
    first = np.searchsorted(highs, keys, side="left")  # the first group ending at or after
    last = np.searchsorted(lows, keys, side="right") - 1  # the last group starting at or before
    spans = np.maximum(last - first + 1, 0)  # how many groups each key may be in
    if not spans.any():
        return {}
    held = np.repeat(np.arange(len(keys)), spans)  # a (group, key) pair each
    nth = np.arange(len(held)) - np.repeat(np.cumsum(spans) - spans, spans)
    groups = first[held] + nth
    order = np.argsort(groups, kind="stable")
    groups, held = groups[order], held[order]
    cuts = np.flatnonzero(np.diff(groups)) + 1
    return {
        int(g[0]): k.astype(np.int64)
        for g, k in zip(np.split(groups, cuts), np.split(held, cuts), strict=True)
    }


def _filtered(
    file: Any,
    footer: _Footer,
    position: int,
    probe: Probe,
    candidates: dict[int, Positions],
    counts: ReadCounts,
) -> dict[int, Positions]:
    """Of each candidate group's keys, those its Bloom filter may hold (all of them in a group
    without one): the filter blocks of every (group, key) pair are read together, in one read
    per run of adjacent blocks."""
    kept: dict[int, Positions] = {}
    probed: list[tuple[int, Positions, bloom.Filter]] = []
    for group, keys in candidates.items():
        found = footer.filter(file, group, position)
        if found is None:
            kept[group] = keys
        else:
            probed.append((group, keys, found))
    if not probed:
        return kept
    hashes = np.concatenate([probe.hashes[keys] for _, keys, _ in probed])
    offsets = np.concatenate(
        [f.offset + f.block_of(probe.hashes[keys]) * bloom.BLOCK_BYTES for _, keys, f in probed]
    )
    wanted = np.unique(offsets)
    counts.filter_blocks += len(wanted)
    words = bloom.read_blocks_at(file, wanted)
    maybe = bloom.may_contain(words[np.searchsorted(wanted, offsets)], hashes)
    start = 0
    for group, keys, _ in probed:
        here = maybe[start : start + len(keys)]
        start += len(keys)
        if here.any():
            kept[group] = keys[here]
    return kept


def _column_position(metadata: pq.FileMetaData, column: str) -> int:
    for position in range(metadata.num_columns):
        if metadata.schema.column(position).path == column:
            return position
    raise ValueError(f"index data file lacks column {column}: {metadata.schema.names}")


@dataclass
class _Footer:
    """A data file's parsed footer, and its row groups' key ranges once asked for."""

    metadata: pq.FileMetaData
    _ranges: dict[int, tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None] = field(
        default_factory=dict
    )
    _filters: dict[tuple[int, int], bloom.Filter | None] = field(default_factory=dict)

    def filter(self, file: Any, group: int, position: int) -> bloom.Filter | None:
        """Where the Bloom filter of a column chunk lies (its header read once), if it has
        one this reader knows."""
        if (group, position) not in self._filters:
            chunk = self.metadata.row_group(group).column(position)
            offset, length = chunk.bloom_filter_offset, chunk.bloom_filter_length
            found = None
            if offset is not None and length is not None:
                found = bloom.parse_header(file.read_at(min(length, 64), offset), length, offset)
            self._filters[(group, position)] = found
        return self._filters[(group, position)]

    def ranges(self, position: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
        """Every row group's (minimum, maximum) of column `position`, as two arrays; None
        when a group has no statistics."""
        if position not in self._ranges:
            lows, highs = [], []
            for group in range(self.metadata.num_row_groups):
                stats = self.metadata.row_group(group).column(position).statistics
                if stats is None or not stats.has_min_max:
                    self._ranges[position] = None
                    return None
                lows.append(stats.min)
                highs.append(stats.max)
            self._ranges[position] = (np.array(lows), np.array(highs))
        return self._ranges[position]


def _footer(path: str, size: int, file: Any, counts: ReadCounts) -> _Footer:
    """The file's parsed footer: from the cache, else read (its exact bytes) and cached."""
    global _footer_bytes
    with _footer_lock:
        cached = _footers.get(path)
        if cached is not None:
            _footers.move_to_end(path)
            return cached
    tail = file.read_at(8, size - 8)
    if len(tail) != 8 or tail[4:] != b"PAR1":
        raise OSError(f"{path} is not a whole Parquet file (no footer magic)")
    length = int.from_bytes(tail[:4], "little")
    footer = file.read_at(length, size - 8 - length)
    metadata = pq.read_metadata(pa.BufferReader(b"PAR1" + footer + tail))
    counts.footers += 1
    counts.footer_bytes += length + 8
    parsed = _Footer(metadata)
    with _footer_lock:
        _footers[path] = parsed
        # The key ranges, once built, add about a tenth of the footer's size.
        _footer_bytes += metadata.serialized_size
        while _footer_bytes > FOOTER_CACHE_BYTES and len(_footers) > 1:
            _, dropped = _footers.popitem(last=False)
            _footer_bytes -= dropped.metadata.serialized_size
    return parsed


def clear_footer_cache() -> None:
    """Forget every cached footer (a benchmark's cold read)."""
    global _footer_bytes
    with _footer_lock:
        _footers.clear()
        _footer_bytes = 0
