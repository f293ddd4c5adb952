"""The exact-dedup index is written as keyed files and read by hash
(`execution/exact_dedup_index.py`): a bucket's task learns exactly which of its hashes another
batch kept first, from files of the layout and from files an older platform wrote alike, and
reads only the row groups holding its hashes, not the bucket.

Synthetic rows, written with the stage's own writer into a fresh FM_HOME's catalog.
"""

from __future__ import annotations

import hashlib
import uuid

import pyarrow as pa

from fm_assets.execution import exact_dedup_index
from fm_assets.settings import Settings
from fm_assets.storage import catalog, data_files, schemas
from fm_assets.storage.keyed.reads import ReadCounts

NS = "cloud"
BUCKET = 3
RUNS = 6
DOCS = 8_000  # a run's documents: 8 row groups


def _rows(batch_id: str, docs: int) -> pa.Table:
    ids = [hashlib.sha256(f"{batch_id}/{i}".encode()).hexdigest() for i in range(docs)]
    return pa.table(
        {
            "bucket": pa.array([BUCKET] * docs, pa.int32()),
            "doc_id": ids,
            "batch_id": [batch_id] * docs,
            "record_id": [f"r{i}" for i in range(docs)],
        },
        schema=schemas.DOCUMENT_INDEX,
    )


def _commit(settings: Settings, files: list[object]) -> None:
    data_files.commit_files(settings, "document_index", catalog.NOTHING, files, {}, NS)  # type: ignore[arg-type]


def test_a_bucket_learns_exactly_its_hashes_kept_before_reading_only_their_row_groups(
    fm_settings: Settings,
) -> None:
    handle = data_files.table_handle(fm_settings, "document_index", NS)
    runs = [_rows(f"b{n}", DOCS) for n in range(RUNS)]
    for n, rows in enumerate(runs):
        _commit(
            fm_settings,
            exact_dedup_index.write_index_rows(handle, rows, BUCKET, uuid.uuid4(), n),
        )
    # A file as platforms before wrote the index (the table's own writer, unsorted).
    old = _rows("old", 500)
    _commit(fm_settings, data_files.write_files(handle, old, uuid.uuid4(), 99))
    handle = data_files.table_handle(fm_settings, "document_index", NS)
    files = data_files.plan_files(
        fm_settings, "document_index", catalog.where_equal("bucket", BUCKET), None, NS
    )
    keyed = [t for t in files if exact_dedup_index.is_keyed(t.file.file_path)]
    assert len(keyed) == RUNS and len(files) == RUNS + 1

    # The asking batch is b5: its own rows (an earlier run of it) are not "kept before".
    present = [(runs[n], i) for n, i in ((0, 17), (1, 4_000), (2, 7_999), (3, 0), (4, 2_500))]
    wanted = {
        r.column("doc_id")[i].as_py(): f"{r.column('batch_id')[i].as_py()}/r{i}" for r, i in present
    }
    wanted[old.column("doc_id")[42].as_py()] = "old/r42"
    own = runs[5].column("doc_id")[10].as_py()
    absent = [hashlib.sha256(f"new/{i}".encode()).hexdigest() for i in range(40)]
    asked = pa.array([*wanted, own, *absent])
    counts = ReadCounts()
    found = exact_dedup_index.kept_before(handle, files, asked, "b5", counts)

    assert found == wanted
    # The keyed files' row groups holding the five hashes, plus the run of b5 holding its own
    # (read, then filtered), plus the old file's one group and a rare filter false positive:
    # not the bucket's 48 keyed row groups.
    total_groups = RUNS * DOCS // exact_dedup_index.GROUP_ROWS + 1
    assert 7 <= counts.row_groups <= 10 < total_groups, counts
    assert counts.files == RUNS + 1
