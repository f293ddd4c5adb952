"""Reading the near-dup index's rows that hold given keys, and nothing else of the index.

A batch needs, of its namespace's index, the band rows sharing a band hash with one of its
documents (its candidates) and the shingle-set rows of some documents (already indexed ones,
and the candidates to confirm). `key_rows` asks the index's files of that kind of row for
those keys (`storage/keyed/reads.py`): the files whose key bounds (from the manifest) hold a
key; in each, the row groups holding one (binary search over the footer's statistics, the
files being sorted by key: `layout`); of those, the keys the group's Bloom filter may hold (32
bytes read a key); then only the row groups still holding a key are read. What a batch reads
follows its keys, its matches and the number of runs a key may be in (`compaction` bounds
it), not the index's size; each file's footer is read once per process while it stays in a
bounded cache (files never change). `bench/results/near_dedup_lookup.md` measures it at
10^5, 10^6 and 10^7 index rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyiceberg.table import FileScanTask

from fm_assets.execution.near_dedup.layout import KEY, kind_of_name
from fm_assets.storage.data_files import TableHandle
from fm_assets.storage.keyed.reads import ReadCounts, clear_footer_cache, rows_of_keys

__all__ = ["ReadCounts", "clear_footer_cache", "key_rows"]


def key_rows(
    index: TableHandle,
    files: Sequence[FileScanTask],
    kind: str,
    keys: pa.Array,
    columns: Sequence[str],
    counts: ReadCounts | None = None,
) -> pa.Table:
    """The rows of `files` (the index's) whose `KEY[kind]` is one of `keys`, with `columns`
    (the key among them), typed as the index's schema. Files of the other kind are skipped;
    a file of no known kind (an older platform's) is read by its statistics alone."""
    own = [t for t in files if kind_of_name(t.file.file_path) in (kind, None)]
    return rows_of_keys(
        index,
        own,
        KEY[kind],
        keys,
        columns,
        counts,
        sorted_file=lambda path: kind_of_name(path) is not None,
    )
