"""The exact-dedup index's files, laid out so that a batch reads only the rows of its hashes.

`document_index` (one per data namespace, partitioned by hash bucket) holds a row per kept raw
document: its hash (`doc_id`), batch and record. Each raw-stage run writes one keyed file per
bucket (`storage/keyed/files.py`): sorted by `doc_id`, in row groups of `GROUP_ROWS` rows, each
with the hash's statistics and a split-block Bloom filter. A bucket's task asks the bucket's
files for its candidates' hashes only (`storage/keyed/reads.py`): a file's row groups are found
by binary search, a hash no row holds is answered by one 32-byte filter block, and only the row
groups holding a candidate are read. What a batch reads follows its documents (and the files a
hash may be in), not the namespace's index: before, every bucket's task read every row of its
bucket, so each batch read the whole index.

Files written before this layout (named by pyiceberg's writer, not `PREFIX`) are read correctly
all the same: their row groups are checked by statistics and read when they may hold a hash.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask
from pyiceberg.transforms import IdentityTransform
from pyiceberg.typedef import Record

from fm_assets.storage import schemas
from fm_assets.storage.data_files import TableHandle, write_files
from fm_assets.storage.keyed.files import sort_by_key, write_keyed_file
from fm_assets.storage.keyed.reads import ReadCounts, rows_of_keys

PREFIX = "di1"  # the layout's version, in every file name it writes
GROUP_ROWS = 1024  # ~100 bytes a row: a present hash costs about 100 KB to read
KEY = "doc_id"


def is_keyed(path: str) -> bool:
    """Whether a data file of the index was written by this layout (sorted by hash)."""
    return path.rsplit("/", 1)[-1].startswith(f"{PREFIX}-")


def write_index_rows(
    index: TableHandle, rows: pa.Table, bucket: int, write_id: uuid.UUID, task_id: int
) -> list[DataFile]:
    """Write one bucket's new index rows as a keyed file; return it (none for no rows)."""
    if rows.num_rows == 0:
        return []
    spec = index.metadata.spec()
    source = [index.metadata.schema().find_field(f.source_id).name for f in spec.fields]
    if source != ["bucket"] or not isinstance(spec.fields[0].transform, IdentityTransform):
        # A table of another partitioning than the declared one: the table's own writer.
        return write_files(index, rows, write_id, task_id)
    ordered = sort_by_key(rows.cast(schemas.DOCUMENT_INDEX), KEY)
    name = f"{PREFIX}-{bucket:03d}-{task_id:07d}-{write_id}.parquet"
    return [write_keyed_file(index, ordered, KEY, name, GROUP_ROWS, partition=Record(bucket))]


def kept_before(
    index: TableHandle,
    files: Sequence[FileScanTask],
    doc_ids: pa.Array,
    batch_id: str,
    counts: ReadCounts | None = None,
) -> dict[str, str]:
    """Of `doc_ids`, those another batch kept first, each with "<batch>/<record id>" of it.

    The files may hold this batch's own rows too, when an earlier run of it committed some
    (a rerun, or an attempt killed after its index commit): those are not "kept before"."""
    if not files or len(doc_ids) == 0:
        return {}
    rows = rows_of_keys(
        index,
        files,
        KEY,
        doc_ids,
        (KEY, "batch_id", "record_id"),
        counts,
        sorted_file=is_keyed,
    )
    rows = rows.filter(pc.not_equal(rows.column("batch_id"), batch_id))
    return {
        d: f"{b}/{r}"
        for d, b, r in zip(
            *(rows.column(c).to_pylist() for c in (KEY, "batch_id", "record_id")), strict=True
        )
    }
