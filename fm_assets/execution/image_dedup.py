"""The image dedup stage across a Ray cluster: one task decides the batch against its data
namespace's `image_index`, then every slice applies the verdicts and writes its pairs.

    decide   one task: the batch's hashes in order (~150 bytes a pair, no image), and the index
             rows sharing a key with them (exact pixel key, or a pHash piece; other batches of
             the namespace only); writes the index rows of the images it keeps
    write    per slice: its pairs kept or quarantined by the verdicts

The index is laid out by key: a file's row-group statistics on (chunk, value) let the read skip
what shares no key with the batch, so a batch reads about (its images x pieces x index rows per
key) rows, not the index. Index rows written under another distance (another piece count) are
read whole, once, when the policy's distance changes: correct, and said in the progress log.
The driver holds file lists and object references only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyiceberg.expressions import BooleanExpression
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask

from fm_assets.curation.images.near_dup import ImageIndex, Kept, Verdict, pieces, pixel_key
from fm_assets.execution.compute import Progress, get, remote, run_tasks
from fm_assets.execution.planning import table_slices
from fm_assets.execution.slice_tasks import Outputs, SliceOutcome, write_result
from fm_assets.settings import Settings
from fm_assets.stages.image_text.dedup import ImageDedupStage
from fm_assets.storage import catalog
from fm_assets.storage.data_files import (
    TableHandle,
    plan_files,
    read_files,
    table_handle,
    write_files,
)
from fm_assets.storage.image_text_schemas import IMAGE_INDEX, PIXEL_CHUNK

INDEX_TABLE = "image_index"
KEY_COLUMNS = ("doc_id", "batch_id", "pixel_hash", "phash")
_INDEX_TASK_ID = 2_000_000


def run_image_dedup(
    settings: Settings,
    stage: ImageDedupStage,
    source: TableHandle,
    files: Sequence[FileScanTask],
    outputs: Outputs,
    cpus: int,
    progress: Progress,
) -> tuple[list[SliceOutcome], dict[str, list[DataFile]]]:
    """Decide the batch's duplicate images on Ray; return slice outcomes and the index files."""
    namespace, batch_id = source.namespace, outputs.batch_id
    slices = table_slices(files, cpus, stage.slices_per_cpu)
    progress(f"{stage.name}: {len(files)} input files of {batch_id} in {len(slices)} slices")
    index = table_handle(settings, INDEX_TABLE, namespace)
    has_index = catalog.current_snapshot_id(settings, INDEX_TABLE, namespace=namespace) is not None
    others = (
        plan_files(settings, INDEX_TABLE, _others(batch_id), None, namespace) if has_index else []
    )
    verdicts, index_files = _decide(stage, source, files, index, others, outputs)
    writer = remote(apply_slice)
    outcomes = run_tasks(
        lambda i: writer.remote(stage, source, slices[i], i, verdicts, outputs),
        len(slices),
        progress=progress,
        label=stage.name,
    )
    return outcomes, {INDEX_TABLE: get(index_files)}


def _decide(
    stage: ImageDedupStage,
    source: TableHandle,
    files: Sequence[FileScanTask],
    index: TableHandle,
    others: list[FileScanTask],
    outputs: Outputs,
) -> tuple[Any, Any]:
    ordered = sorted(files, key=lambda t: t.file.file_path)  # plan order is not stable
    refs = remote(decide_batch, num_returns=2).remote(
        stage, source, ordered, index, others, outputs.write_id
    )
    return refs[0], refs[1]


def _others(batch_id: str) -> BooleanExpression:
    return catalog.where_not_equal("batch_id", batch_id)


def decide_batch(
    stage: ImageDedupStage,
    source: TableHandle,
    files: list[FileScanTask],
    index: TableHandle,
    others: list[FileScanTask],
    write_id: Any,
) -> tuple[dict[str, Verdict], list[DataFile]]:
    """Verdicts for the batch's pairs in order, and the index rows of those it keeps (on a
    worker)."""
    batch = read_files(source, files, KEY_COLUMNS) if files else _empty_keys()
    chunks = stage.max_distance + 1
    decider = ImageIndex(stage.max_distance)
    found = _index_rows(index, others, batch, chunks)
    decider.load(
        found.column("pixel_hash").to_pylist(),
        [
            Kept(d, b, p)
            for d, b, p in zip(
                *(found.column(c).to_pylist() for c in ("doc_id", "batch_id", "phash")),
                strict=True,
            )
        ],
    )
    verdicts = stage.decide(batch, decider)
    kept = batch.filter(pa.array([d not in verdicts for d in batch.column("doc_id").to_pylist()]))
    rows = index_rows(kept, chunks)
    return verdicts, write_files(index, rows, write_id, _INDEX_TASK_ID)


def _empty_keys() -> pa.Table:
    schema = IMAGE_INDEX
    return pa.schema([schema.field(c) for c in KEY_COLUMNS]).empty_table()


def _index_rows(
    index: TableHandle, others: list[FileScanTask], batch: pa.Table, chunks: int
) -> pa.Table:
    """One row per kept image of other batches sharing a key with the batch (an image found by
    several keys comes back once)."""
    columns = ("phash", "pixel_hash", "doc_id", "batch_id")
    if not others or batch.num_rows == 0:
        return pa.schema([IMAGE_INDEX.field(c) for c in columns]).empty_table()
    hashes = batch.column("phash").to_pylist()
    by_piece: list[set[int]] = [set() for _ in range(chunks)]
    for value in hashes:
        for piece, wanted in zip(pieces(value, chunks), by_piece, strict=True):
            wanted.add(piece)
    keys = [
        catalog.where_all(catalog.where_equal("chunk", c), catalog.where_in("value", sorted(v)))
        for c, v in enumerate(by_piece)
    ]
    pixel_values = sorted({pixel_key(p) for p in batch.column("pixel_hash").to_pylist()})
    keys.append(
        catalog.where_all(
            catalog.where_equal("chunk", PIXEL_CHUNK), catalog.where_in("value", pixel_values)
        )
    )
    same_scheme = catalog.where_all(
        catalog.where_equal("chunks", chunks), catalog.where_any(*keys), _others_of(batch)
    )
    # Rows cut for another distance: each image once (its piece 0 row), compared by hand.
    other_scheme = catalog.where_all(
        catalog.where_not_equal("chunks", chunks),
        catalog.where_equal("chunk", 0),
        _others_of(batch),
    )
    found = read_files(
        index, others, columns, row_filter=catalog.where_any(same_scheme, other_scheme)
    )
    if found.num_rows == 0:
        return found
    return (
        found.group_by(["doc_id"])
        .aggregate([("phash", "first"), ("pixel_hash", "first"), ("batch_id", "first")])
        .rename_columns(["doc_id", "phash", "pixel_hash", "batch_id"])
        .select(list(columns))
    )


def _others_of(batch: pa.Table) -> BooleanExpression:
    ids = set(batch.column("batch_id").to_pylist())
    return catalog.where_all(*(catalog.where_not_equal("batch_id", b) for b in sorted(ids)))


def index_rows(kept: pa.Table, chunks: int) -> pa.Table:
    """The `image_index` rows of kept pairs: a pixel-key row and one row per pHash piece, sorted
    by key so each data file's statistics bound its keys."""
    rows: dict[str, list[object]] = {name: [] for name in IMAGE_INDEX.names}
    for doc_id, batch_id, pixels, phash in zip(
        *(kept.column(c).to_pylist() for c in KEY_COLUMNS), strict=True
    ):
        keys = [(PIXEL_CHUNK, pixel_key(pixels)), *enumerate(pieces(phash, chunks))]
        for chunk, value in keys:
            for name, item in (
                ("chunks", chunks),
                ("chunk", chunk),
                ("value", value),
                ("phash", phash),
                ("pixel_hash", pixels),
                ("doc_id", doc_id),
                ("batch_id", batch_id),
            ):
                rows[name].append(item)
    table = pa.table(rows, schema=IMAGE_INDEX)
    return table.sort_by([("chunk", "ascending"), ("value", "ascending")])


def apply_slice(
    stage: ImageDedupStage,
    source: TableHandle,
    files: list[FileScanTask],
    task_id: int,
    verdicts: dict[str, Verdict],
    outputs: Outputs,
) -> SliceOutcome:
    """Read one slice, keep or quarantine its pairs by the verdicts, write them (on a worker)."""
    batch = read_files(source, files)
    result = stage.apply(batch, verdicts)
    bytes_in = sum(t.file.file_size_in_bytes for t in files)
    return write_result(result, outputs, task_id, records_in=batch.num_rows, bytes_in=bytes_in)
