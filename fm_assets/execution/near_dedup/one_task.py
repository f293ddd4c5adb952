"""The near-duplicate stage on a small batch: the very steps of `execution.near_dedup.run` (sketch,
candidates, confirm, resolve, write), called one after another inside a single Ray task.

Spread over the cluster, a batch goes through five dependent rounds of tasks (eight tasks on
two CPUs for a one-slice batch), and on a batch of a few dozen documents the hand-offs weigh
more than the work: measured on 20 pages, the spread rounds took ~0.10 s, the same steps in one
task ~0.08 s, of which MinHash ~3 ms and the rest reading and writing the slice, index and
shingle files. A batch of one slice and at most `ONE_TASK_ROWS` documents is decided where its
rows are: one task reads the slice once, decides against the namespace's index (read by band
and by bucket as the spread path reads it) and writes the slice's documents and one index
file of its band hashes and shingle sets. Same functions, same inputs: the same detections
(`tests/test_near_dedup_paths.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask

from fm_assets.execution.compute import Progress, remote, run_tasks
from fm_assets.execution.near_dedup.compaction import compacted
from fm_assets.execution.near_dedup.index_reads import indexed_elsewhere, other_batches_rows
from fm_assets.execution.near_dedup.layout import BANDS, SETS, distinct, write_index_files
from fm_assets.execution.near_dedup.migration import with_shingle_sets_in_index
from fm_assets.execution.near_dedup.tasks import (
    CONFIRMED,
    SHINGLE_BUCKETS,
    candidates_among,
    confirm_pairs,
    resolve,
    sketch_rows,
)
from fm_assets.execution.near_dedup.writes import band_rows, shingle_set_rows, write_rows
from fm_assets.execution.slice_tasks import Outputs, SliceOutcome
from fm_assets.settings import Settings
from fm_assets.stages.near_dedup import NearDupStage
from fm_assets.storage.data_files import TableHandle, plan_handle, read_files

# Up to this many documents (and one slice) a batch is decided in one task. A one-slice batch
# is sketched by one task on either path; what spreading still buys (two band groups and the
# writes on other CPUs) grows with the batch. Measured on one-file batches of article pages
# (two runs each, one task / spread, seconds): 50 documents 0.11-0.17 / 0.18-0.21, 300
# 0.24-0.25 / 0.27-0.30, 500 0.28-0.33 / 0.33-0.46, 800 0.43-0.45 / 0.42-0.46 (even).
ONE_TASK_ROWS = 500


@dataclass(frozen=True)
class OneTaskResult:
    """What the single task hands back: the slice's outcome and the index files it wrote."""

    outcome: SliceOutcome
    index_files: list[DataFile]

    @property
    def records_in(self) -> int:  # read by `run_tasks`' progress line
        return self.outcome.records_in

    @property
    def bytes_in(self) -> int:
        return self.outcome.bytes_in


def decided_in_one_task(files: Sequence[FileScanTask], slices: Sequence[object]) -> bool:
    """Whether a batch (its input `files`, cut into `slices`) is small enough for one task."""
    return len(slices) == 1 and sum(t.file.record_count for t in files) <= ONE_TASK_ROWS


def run_in_one_task(
    settings: Settings,
    stage: NearDupStage,
    source: TableHandle,
    tasks: list[FileScanTask],
    outputs: Outputs,
    progress: Progress,
) -> tuple[list[SliceOutcome], dict[str, list[DataFile]]]:
    """Decide and write a one-slice batch in one Ray task; return its outcome and index files."""
    namespace = source.namespace
    # The task plans the index's files itself, from this handle (no catalog call).
    index = compacted(settings, "neardup_index", namespace, progress)
    index = with_shingle_sets_in_index(settings, index, stage.minhash, progress)
    decide = remote(decide_one_slice)
    (result,) = run_tasks(
        lambda _: decide.remote(stage, source, tasks, outputs, index),
        1,
        progress=progress,
        label=stage.name,
    )
    # No "near-duplicates among" line: the runner's next line says as much (each quarantined
    # row is one), and on the embedded Dagster instance each line is an event-log write.
    extra = {"neardup_index": result.index_files}
    return [result.outcome], extra


def decide_one_slice(
    stage: NearDupStage,
    source: TableHandle,
    tasks: list[FileScanTask],
    outputs: Outputs,
    index: TableHandle,
) -> OneTaskResult:
    """The spread path's steps for slice 0, in turn, in this task (a Ray task).

    One step after another, no threads: measured in-process on 20-document batches (18 calls
    each way), planning the index in a thread beside the sketch and writing the three tables
    side by side took 49.5 ms (median), the same steps in turn 45.6 ms.
    """
    config, batch_id = stage.minhash, outputs.batch_id
    bands = list(range(config.bands))
    batch = read_files(source, tasks)  # once: the sketch and the write both use its rows
    sketched = sketch_rows(batch, 0, config)
    band_tables = sketched[1 : 1 + config.bands]
    bucket_tables = list(sketched[1 + config.bands :])
    index_plan = plan_handle(index)
    earlier = other_batches_rows(index, index_plan, bands, batch_id, band_tables)
    doc_ids = distinct(list(band_tables), "doc_id", pa.string())
    indexed = indexed_elsewhere(index, index_plan, doc_ids, batch_id)
    preexisting, pairs = candidates_among(bands, earlier, indexed, batch_id, 1, *band_tables)
    confirmed = (
        confirm_pairs(0, config, [bucket_tables], index, index_plan, pairs)
        if pairs.num_rows
        else CONFIRMED.empty_table()
    )
    duplicates, _ = resolve([preexisting], confirmed)
    # A file of each kind of row, as the spread path's tasks write them (`layout`).
    kept = (duplicates, [preexisting])
    sets = shingle_set_rows(range(SHINGLE_BUCKETS), batch_id, config, *kept, *bucket_tables)
    index_files = [
        *write_index_files(index, sets, SETS, outputs.write_id, 0),
        *write_index_files(
            index,
            band_rows(bands, batch_id, config, *kept, *band_tables),
            BANDS,
            outputs.write_id,
            0,
        ),
    ]
    outcome = write_rows(stage, batch, tasks, 0, duplicates, outputs)
    return OneTaskResult(outcome, index_files)
