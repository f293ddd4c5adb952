"""Iceberg transactions (fm_assets.storage.transactions): the same commits, with the working
metadata built once per staged change instead of once per look."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import Table

import fm_assets.storage.transactions as transactions
from fm_assets.storage.catalog import where_equal
from fm_assets.storage.transactions import share_frozen_metadata_parts, transaction

ROWS = pa.table({"batch_id": pa.array(["a", "a", "b"]), "n": pa.array([1, 2, 3], pa.int64())})


def _table(tmp_path: Path, name: str) -> Table:
    catalog = SqlCatalog(
        "t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse"
    )
    catalog.create_namespace_if_not_exists("ns")
    return catalog.create_table(f"ns.{name}", schema=ROWS.schema)


def test_replace_and_append_leave_the_rows_a_plain_transaction_leaves(tmp_path: Path) -> None:
    plain, memo = _table(tmp_path, "plain"), _table(tmp_path, "memo")
    for table, begin in ((plain, lambda t: t.transaction()), (memo, transaction)):
        with begin(table) as tx:
            tx.append(ROWS)
        with begin(table) as tx:
            tx.delete(where_equal("batch_id", "a"))
            tx.append(pa.table({"batch_id": ["a"], "n": pa.array([9], pa.int64())}))
    rows = [sorted(t.refresh().scan().to_arrow().to_pylist(), key=str) for t in (plain, memo)]
    assert (
        rows[0]
        == rows[1]
        == [
            {"batch_id": "a", "n": 9},
            {"batch_id": "b", "n": 3},
        ]
    )
    summaries = [
        [s.summary.operation if s.summary else None for s in t.metadata.snapshots]
        for t in (plain, memo)
    ]
    assert summaries[0] == summaries[1]


def test_working_metadata_follows_each_staged_change_and_is_built_once_per_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(tmp_path, "t")
    builds = 0
    real = transactions.update_table_metadata

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal builds
        builds += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(transactions, "update_table_metadata", counting)
    tx = transaction(table)
    first = tx.table_metadata
    assert tx.table_metadata is first and builds == 1
    tx.set_properties(owner="curation")
    assert tx.table_metadata.properties["owner"] == "curation"
    assert builds == 2
    with tx:
        tx.append(ROWS)
    assert table.refresh().properties["owner"] == "curation"
    assert table.scan().to_arrow().num_rows == 3
    # A fast append reads the working metadata many times; a plain Transaction rebuilt (and
    # deep-copied) it on every read.
    assert builds < 8


def test_metadata_copies_share_snapshots_and_later_commits_leave_earlier_metadata_alone(
    tmp_path: Path,
) -> None:
    share_frozen_metadata_parts()  # storage.catalog installs it on import; idempotent
    table = _table(tmp_path, "t")
    with transaction(table) as tx:
        tx.append(ROWS)
    earlier = table.metadata
    snapshots = list(earlier.snapshots)
    summaries = [repr(s.summary) for s in snapshots]
    copy = earlier.model_copy(deep=True)
    assert copy == earlier and copy.snapshots is not earlier.snapshots
    assert all(a is b for a, b in zip(copy.snapshots, earlier.snapshots, strict=True))
    with transaction(table) as tx:
        tx.delete(where_equal("batch_id", "a"))
        tx.append(pa.table({"batch_id": ["a"], "n": pa.array([9], pa.int64())}))
    # The commit built new metadata; what an earlier reader holds is unchanged.
    assert earlier.snapshots == snapshots and len(table.refresh().metadata.snapshots) == 3
    assert [repr(s.summary) for s in earlier.snapshots] == summaries
    assert earlier.current_snapshot_id == snapshots[-1].snapshot_id
    assert sorted(table.scan().to_arrow().column("n").to_pylist()) == [3, 9]
