"""A table purge on real Iceberg tables (no Ray): every snapshot keeps its id, lineage and tags
and reads as before less the purged rows; counts still add up; the old files are gone and no
byte of the purged rows is left under the table, not even in a manifest's bounds."""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
import pytest

from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files
from fm_assets.storage.bookkeeping import file_checksums
from fm_assets.storage.maintenance.files import list_files, referenced_files
from fm_assets.storage.maintenance.history import history_complete
from fm_assets.storage.maintenance.tables import TableRef, load
from fm_assets.storage.purge.scope import PurgeScope
from fm_assets.storage.purge.snapshots import purge_table
from tests.byte_scan import scan_tree

NS = "cloud"
PLANTED = "Zq7-licensor-took-this-back-4411"  # starts the purged row's reason: its bounds hold it


def _rows(batch: str, docs: list[str], planted: str | None = None) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "batch_id": batch,
                "stage": "raw_documents",
                "code_version": "1",
                "record_id": f"{batch}:{i}",
                "doc_id": doc,
                "rule": "exact_duplicate",
                "reason": f"{planted} duplicate" if planted and doc == "d1" else "duplicate",
                "quarantined_at": dt.datetime.now(dt.UTC),
            }
            for i, doc in enumerate(docs)
        ],
        schema=catalog.table_schema("quarantine"),
    )


def _commit(settings: Settings, rows: pa.Table, batch: str, *, rerun: bool = False) -> int:
    handle = data_files.table_handle(settings, "quarantine", NS)
    written = data_files.write_files(handle, rows, uuid.uuid4(), 0)
    replace = catalog.where_equal("batch_id", batch) if rerun else catalog.NOTHING
    tags = {"fm.batch_id": batch, "fm.stage": "raw_documents"}
    return data_files.commit_files(settings, "quarantine", replace, written, tags, NS)


def _docs(settings: Settings, snapshot: int | None) -> list[tuple[str, str]]:
    table = catalog.read_table(settings, "quarantine", None, snapshot, namespace=NS)
    return sorted(zip(table["batch_id"].to_pylist(), table["doc_id"].to_pylist(), strict=True))


@pytest.fixture
def history(fm_settings: Settings) -> dict[str, int]:
    """Four commits: b1 (d1 with the planted reason, d2), b2 (d3, and d1 again: a duplicate of
    another batch, which a purge of b1's d1 keeps), a rerun of b1 (new files, the old ones
    deleted), b3; a version-like tag on the first."""
    s = fm_settings
    first = _commit(s, _rows("b1", ["d1", "d2"], PLANTED), "b1")
    second = _commit(s, _rows("b2", ["d3", "d1"]), "b2")
    rerun = _commit(s, _rows("b1", ["d1", "d2"], PLANTED), "b1", rerun=True)
    last = _commit(s, _rows("b3", ["d4"]), "b3")
    table = catalog.load_table(s, "quarantine", namespace=NS)
    table.manage_snapshots().create_tag(first, "web@v1").commit()
    return {"first": first, "second": second, "rerun": rerun, "last": last}


def test_every_snapshot_loses_the_rows_and_keeps_its_id(
    fm_settings: Settings, history: dict[str, int]
) -> None:
    s = fm_settings
    before = {sid: _docs(s, sid) for sid in history.values()}
    home = s.home
    needles = [PLANTED.encode(), PLANTED[:12].encode()]
    planted = {
        f.where.rsplit("/", 1)[-1].split(" ")[0] for f in scan_tree(home / "warehouse", needles)
    }
    # In the data files, and (the reason's first characters) in the manifests' bounds.
    assert any(p.endswith(".parquet") for p in planted)
    assert any(p.endswith(".avro") and not p.startswith("snap-") for p in planted)

    ref = TableRef("quarantine", NS, catalog.table_identifier(s, "quarantine", NS))
    started = dt.datetime.now(dt.UTC)
    report = purge_table(
        s,
        ref,
        PurgeScope(NS, pairs={("b1", "d1")}),
        "rev-test",
        started=started,
        grace=dt.timedelta(hours=24),
        locked=lambda uri: True,
    )
    assert report.rows_removed == 2  # d1 in b1's first files and in the rerun's
    table = load(s, ref)
    for name, sid in history.items():
        assert table.snapshot_by_id(sid) is not None, name
        expected = [r for r in before[sid] if r != ("b1", "d1")]
        assert _docs(s, sid) == expected, name
        total = table.snapshot_by_id(sid).summary["total-records"]  # type: ignore[union-attr]
        assert int(total) == len(expected), name
    # The tag still names the first snapshot; the head is a new `replace` over the old one.
    assert table.snapshot_by_name("web@v1").snapshot_id == history["first"]  # type: ignore[union-attr]
    head = table.current_snapshot()
    assert head is not None and head.parent_snapshot_id == history["last"]
    assert head.summary is not None and head.summary["fm.operation"] == "purge"
    assert _docs(s, None) == [("b1", "d2"), ("b2", "d1"), ("b2", "d3"), ("b3", "d4")]
    assert history_complete(s, table.metadata)

    # Nothing of the purged rows is left, and every file a snapshot names is pinned.
    assert scan_tree(home / "warehouse", needles) == []
    listing = list_files(s, table)
    referenced = referenced_files(s, table)
    on_disk = {path for path, _, _ in listing.files}
    assert referenced - on_disk <= set(), referenced - on_disk
    pinned_paths = [
        f"{listing.prefix}{p}" for p in on_disk & referenced if not p.endswith(".metadata.json")
    ]
    assert set(file_checksums(s, pinned_paths)) == set(pinned_paths)

    # A second purge of the same scope finds nothing.
    again = purge_table(
        s,
        ref,
        PurgeScope(NS, pairs={("b1", "d1")}),
        "rev-test",
        started=dt.datetime.now(dt.UTC),
        grace=dt.timedelta(hours=24),
        locked=lambda uri: True,
    )
    assert again.rows_removed == 0 and again.snapshots_rewritten == 0


def test_a_whole_batch_and_a_table_without_batches(fm_settings: Settings) -> None:
    s = fm_settings
    _commit(s, _rows("b1", ["d1", "d2"]), "b1")
    _commit(s, _rows("b2", ["d3"]), "b2")
    ref = TableRef("quarantine", NS, catalog.table_identifier(s, "quarantine", NS))
    report = purge_table(
        s,
        ref,
        PurgeScope(NS, batches={"b1"}),
        "rev-test",
        started=dt.datetime.now(dt.UTC),
        grace=dt.timedelta(hours=24),
        locked=lambda uri: False,
    )
    assert report.files_emptied == 1 and report.rows_removed == 2
    assert _docs(s, None) == [("b2", "d3")]
    table = load(s, ref)
    assert history_complete(s, table.metadata)
