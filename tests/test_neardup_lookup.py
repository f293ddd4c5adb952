"""A near-dup task reads, of the namespace's index, only the rows that can matter to its batch:
those sharing a band hash with one of the batch's documents (candidates) or holding one of its
document ids (already indexed). Every other row of its bands is dropped as the files are read,
a few files at a time, so a task never holds the whole index of its bands."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from fm_assets.execution import pipeline  # noqa: F401  (declares the stage tables)
from fm_assets.execution.near_dedup import lookup as near_dedup_lookup
from fm_assets.execution.near_dedup.lookup import other_batches_rows
from fm_assets.execution.near_dedup.tasks import BAND_ROWS
from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files

NS = "cloud"
BANDS = 4


def _index_batch(settings: Settings, batch_id: str, docs: int, first_hash: int) -> None:
    """Commit `docs` documents of `batch_id` to the index, each band hash its own value."""
    rows = [
        {
            "batch_id": batch_id,
            "doc_id": f"{batch_id}-doc-{d}",
            "band": band,
            "band_hash": first_hash + d * BANDS + band,
            "shingle_hashes": None,
            "index_config": "test",
        }
        for d in range(docs)
        for band in range(BANDS)
    ]
    handle = data_files.table_handle(settings, "neardup_index", NS)
    table = pa.Table.from_pylist(rows)
    written = data_files.write_files(handle, table, uuid.uuid4(), 0)
    data_files.commit_files(settings, "neardup_index", catalog.NOTHING, written, {}, NS)


def _band_tables(rows: list[tuple[int, int, str]]) -> list[pa.Table]:
    """The batch's band tables, one per band: (band, band_hash, doc_id) rows."""
    return [
        pa.Table.from_pylist(
            [
                {"band_hash": h, "pos": i, "doc_id": d}
                for i, (b, h, d) in enumerate(rows)
                if b == band
            ],
            BAND_ROWS,
        )
        for band in range(BANDS)
    ]


@pytest.mark.parametrize("read_rows", [near_dedup_lookup.READ_ROWS_AT_ONCE, 1])
def test_a_task_holds_only_the_index_rows_that_share_a_hash_or_a_document(
    fm_settings: Settings, monkeypatch: pytest.MonkeyPatch, read_rows: int
) -> None:
    # Three earlier batches of 200 documents (2,400 index rows); `1`: each file read on its own.
    monkeypatch.setattr(near_dedup_lookup, "READ_ROWS_AT_ONCE", read_rows)
    for n in range(3):
        _index_batch(fm_settings, f"b-{n}", 200, first_hash=n * 1_000_000)
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    files = data_files.plan_handle(handle)
    assert len(files) == 3

    # The new batch: one document sharing band 2's hash with b-0's doc 5, one holding b-1's
    # doc 7's id (already indexed), one sharing b-2's doc 9's band-3 hash but in band 1, and
    # its own earlier rows (a rerun's, batch "new") never count.
    shared = 5 * BANDS + 2
    band_tables = _band_tables(
        [
            (2, shared, "new-doc-a"),
            (0, 123_456_789, "b-1-doc-7"),
            (1, 2_000_000 + 9 * BANDS + 3, "new-doc-c"),
        ]
    )
    found = other_batches_rows(handle, files, [0, 1, 2], "new", band_tables)

    got = sorted(
        zip(*(found.column(c).to_pylist() for c in ("doc_id", "band", "band_hash")), strict=True)
    )
    b1_doc7 = [("b-1-doc-7", band, 1_000_000 + 7 * BANDS + band) for band in range(3)]
    assert got == sorted([("b-0-doc-5", 2, shared), *b1_doc7]), got
    # Band 3 is not this task's: b-2's doc 9 is not read, though its band-3 hash is the batch's.
    assert found.schema.names == ["doc_id", "band", "band_hash", "batch_id"]


def test_a_batch_without_shingled_documents_reads_no_index_file(
    fm_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _index_batch(fm_settings, "b-0", 10, first_hash=0)
    handle = data_files.table_handle(fm_settings, "neardup_index", NS)
    reads: list[int] = []
    read_files = near_dedup_lookup.read_files

    def counted(*args: object, **kwargs: object) -> pa.Table:
        reads.append(1)
        return read_files(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(near_dedup_lookup, "read_files", counted)
    found = other_batches_rows(
        handle, data_files.plan_handle(handle), [0, 1], "new", _band_tables([])
    )
    assert reads == []
    assert found.num_rows == 0
    assert found.schema.names == ["doc_id", "band", "band_hash", "batch_id"]
