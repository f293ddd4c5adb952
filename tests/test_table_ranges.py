"""Table partitions cut into equal slices (fm_assets.execution.table_ranges): every row read
exactly once and in order, whatever the files' sizes, and every CPU given the same share."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

import fm_assets.execution.planning as planning
from fm_assets.execution.table_ranges import range_slices, read_ranges
from fm_assets.storage.catalog import where_equal
from fm_assets.storage.data_files import TableHandle

SCHEMA = pa.schema([("n", pa.int64()), ("text", pa.string())])


def _rows(first: int, count: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    texts = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz ", k=400)) for _ in range(count)]
    return pa.table({"n": pa.array(range(first, first + count), pa.int64()), "text": texts})


def _table(tmp_path: Path, file_rows: list[int]) -> Table:
    """A table of one data file per entry of `file_rows`, rows numbered 0.. across them."""
    catalog = SqlCatalog(
        "t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table("ns.docs", schema=SCHEMA)
    first = 0
    for seed, count in enumerate(file_rows):
        table.append(_rows(first, count, seed))
        first += count
    return table


def _handle(table: Table) -> TableHandle:
    return TableHandle("docs", table.io, table.metadata, SCHEMA)


@pytest.fixture(autouse=True)
def _small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    # Slices of a few dozen KB, so a test table of a few hundred KB gets several.
    monkeypatch.setattr(planning, "MIN_SLICE_BYTES", 16 << 10)


def _read_all(table: Table, cpus: int) -> tuple[list[int], list[int]]:
    """Every slice's rows concatenated (their `n`), and each slice's weight in bytes."""
    slices = range_slices(list(table.scan().plan_files()), cpus)
    handle = _handle(table)
    numbers: list[int] = []
    for ranges in slices:
        numbers.extend(read_ranges(handle, ranges).column("n").to_pylist())
    weights = [sum(r.stop - r.start for r in ranges) for ranges in slices]
    return numbers, weights


def test_three_uneven_files_on_two_cpus_become_equal_slices_that_read_every_row_once(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path, [300, 1200, 500])
    numbers, weights = _read_all(table, cpus=2)
    # Slices follow file paths (uuids here), not append order: compare the rows as a multiset.
    assert sorted(numbers) == list(range(2000))
    assert len(weights) % 2 == 0 and len(weights) >= 4
    # Equal shares within the snap to file edges (1/8 of a slice each side).
    assert max(weights) <= 1.3 * min(weights)
    per_cpu = [sum(weights[i::2]) for i in range(2)]
    assert max(per_cpu) <= 1.15 * min(per_cpu)


def test_a_file_split_between_slices_keeps_its_row_order(tmp_path: Path) -> None:
    table = _table(tmp_path, [2000])
    slices = range_slices(list(table.scan().plan_files()), 2)
    assert len(slices) >= 2 and all(not r.whole for ranges in slices for r in ranges)
    numbers, _ = _read_all(table, cpus=2)
    assert numbers == list(range(2000))


@pytest.mark.parametrize("file_rows", [(1,), (2,), (3, 1, 3)])
def test_a_file_of_a_few_large_rows_is_cut_between_rows_and_no_slice_is_empty(
    tmp_path: Path, file_rows: tuple[int, ...]
) -> None:
    # Rows of ~100 KB each: a cut by bytes lands mid-row, and a one-row file split in two
    # would leave one side without a row.
    catalog = SqlCatalog(
        "t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table("ns.docs", schema=SCHEMA)
    rng = random.Random(7)
    first = 0
    for count in file_rows:
        texts = ["".join(rng.choices("abcdefghij", k=100_000)) for _ in range(count)]
        numbers = pa.array(range(first, first + count), pa.int64())
        table.append(pa.table({"n": numbers, "text": texts}))
        first += count
    handle = _handle(table)
    for cpus in (2, 3, 4):
        slices = range_slices(list(table.scan().plan_files()), cpus)
        read = [read_ranges(handle, ranges).column("n").to_pylist() for ranges in slices]
        assert all(read), f"an empty slice on {cpus} CPUs: rows per slice {read}"
        assert sorted(n for rows in read for n in rows) == list(range(first))


def test_rows_deleted_from_a_split_file_are_neither_read_nor_counted_twice(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path, [900, 1100])
    table.delete(where_equal("n", 5))
    table.delete(where_equal("n", 1500))
    numbers, _ = _read_all(table, cpus=2)
    assert sorted(numbers) == [n for n in range(2000) if n not in (5, 1500)]


def test_a_small_partition_is_one_slice_of_whole_files(tmp_path: Path) -> None:
    table = _table(tmp_path, [10, 20])
    slices = range_slices(list(table.scan().plan_files()), 2)
    assert len(slices) == 1 and all(r.whole for r in slices[0])
    assert len(slices[0]) == 2


def test_whole_items_are_grouped_in_order_into_near_equal_groups() -> None:
    sizes = [5, 1, 1, 1, 9, 2, 2, 3, 4, 4]  # total 32: four groups of about 8
    groups = planning.balanced_groups(list(range(len(sizes))), lambda i: sizes[i], 4)
    assert [i for group in groups for i in group] == list(range(len(sizes)))
    weights = [sum(sizes[i] for i in group) for group in groups]
    # Closing a group once it reaches 8 (the old grouping) gives 8, 9, 11 and 4.
    assert weights == [8, 9, 7, 8]
    assert planning.balanced_groups([], len, 4) == []
    assert planning.balanced_groups(["a", "b"], lambda _: 0, 4) == [["a", "b"]]


def test_a_light_stage_gets_one_slice_per_cpu_a_heavy_one_several(tmp_path: Path) -> None:
    from fm_assets.stages.extract import ExtractStage
    from fm_assets.stages.normalize import NormalizeStage

    table = _table(tmp_path, [250] * 8)
    files = list(table.scan().plan_files())
    light = range_slices(files, 2, NormalizeStage.slices_per_cpu)
    heavy = range_slices(files, 2, ExtractStage.slices_per_cpu)
    # Normalizing costs less than a task per slice would: one slice per CPU, files whole.
    assert len(light) == 2 and all(r.whole for ranges in light for r in ranges)
    assert len(heavy) == 8
    # A light stage writes one file per slice: the heavy stage after it still gets several
    # slices per CPU, cut inside those files.
    (tmp_path / "light-output").mkdir()
    light_output = _table(tmp_path / "light-output", [1000, 1000])
    after = range_slices(list(light_output.scan().plan_files()), 2, ExtractStage.slices_per_cpu)
    assert len(after) == 8
    for table_, slices in ((table, light), (table, heavy), (light_output, after)):
        handle = _handle(table_)
        rows = [n for ranges in slices for n in read_ranges(handle, ranges).column("n").to_pylist()]
        assert sorted(rows) == list(range(2000))
