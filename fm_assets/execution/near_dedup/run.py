"""The near-duplicate stage across a Ray cluster: MinHash LSH decided by band-partitioned work,
against the index of every other batch of the same data namespace, read one band (and one
shingle bucket) at a time.

    sketch    per slice: shingles and band hashes; band rows by band, shingles by bucket
    candidates per band: pairs sharing the band's hash, with other batches' rows of that band
              (bands, and the buckets written below, go several to a task on a small batch)
    confirm   per slice: exact shingle Jaccard of its pairs, fetching only partners' buckets
    resolve   one task: the batch in order (a duplicate needs a *kept* partner), over the
              confirmed pairs only
    write     per slice its documents; per band group its index rows; per bucket group its
              documents' shingle sets (index rows too, under negative bands)

A batch of one small slice runs the same steps in one task instead (`one_task`).

The driver holds file lists, counts and object references; rows move worker to worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask

from fm_assets.execution.compute import Progress, get, remote, run_tasks
from fm_assets.execution.near_dedup.compaction import compacted
from fm_assets.execution.near_dedup.layout import BANDS, SETS
from fm_assets.execution.near_dedup.migration import with_shingle_sets_in_index
from fm_assets.execution.near_dedup.one_task import decided_in_one_task, run_in_one_task
from fm_assets.execution.near_dedup.tasks import (
    SHINGLE_BUCKETS,
    band_candidates,
    confirm_pairs,
    resolve,
    sketch_slice,
)
from fm_assets.execution.near_dedup.writes import write_index_rows, write_slice
from fm_assets.execution.planning import table_slices, task_groups
from fm_assets.execution.slice_tasks import Outputs, SliceOutcome
from fm_assets.settings import Settings
from fm_assets.stages.near_dedup import NearDupStage
from fm_assets.storage.data_files import TableHandle, plan_handle, table_handle

MAX_ROUTES = 64
# Rows one grouped task takes at most: band rows are ~100 bytes (hash, position, id), shingle
# rows a document's shingle set (~4 KB for a 3 KB page), so either is a few hundred MB.
BAND_ROWS_PER_TASK = 2_000_000
SHINGLE_ROWS_PER_TASK = 50_000


def run_near_dedup(
    settings: Settings,
    stage: NearDupStage,
    source: TableHandle,
    files: Sequence[FileScanTask],
    outputs: Outputs,
    cpus: int,
    progress: Progress,
) -> tuple[list[SliceOutcome], dict[str, list[DataFile]]]:
    """Decide the batch's near-duplicates on Ray; return slice outcomes and the index files."""
    import ray

    config, batch_id = stage.minhash, outputs.batch_id
    bands = config.bands
    slices = table_slices(files, cpus, stage.slices_per_cpu)
    if len(slices) >= 1 << 31:
        raise ValueError("a batch of over 2**31 slices cannot be near-deduplicated at once")
    progress(f"{stage.name}: {len(files)} input files of {batch_id} in {len(slices)} slices")
    if decided_in_one_task(files, slices):
        return run_in_one_task(settings, stage, source, slices[0], outputs, progress)
    sketch = remote(sketch_slice, num_returns=1 + bands + SHINGLE_BUCKETS)
    sketched: list[list[Any]] = [[] for _ in slices]

    def submit_sketch(i: int) -> Any:
        # Sent when a worker is free (run_tasks), like every slice task.
        sketched[i] = sketch.remote(source, slices[i], i, config)
        return sketched[i][0]

    # The batch's data namespace's own index: near dedup never reads another namespace's.
    namespace = source.namespace
    with_shingle_sets_in_index(
        settings, table_handle(settings, "neardup_index", namespace), config, progress
    )
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="near-dedup-plan") as planner:
        # Other batches' index files do not depend on this batch's sketches: the driver
        # compacts and plans them (a scan of every manifest of the table) while the workers
        # sketch. The plan holds this batch's own rows only on a rerun, and the readers skip
        # them by `batch_id`.
        planned = planner.submit(
            lambda: plan_handle(compacted(settings, "neardup_index", namespace, progress))
        )
        rows_in = sum(run_tasks(submit_sketch, len(slices), progress=progress, label="sketch"))
        other_index = planned.result()

    index = table_handle(settings, "neardup_index", namespace)
    routes = min(len(slices), MAX_ROUTES) or 1
    band_groups = task_groups(bands, cpus, rows_in, BAND_ROWS_PER_TASK)
    bucket_groups = task_groups(SHINGLE_BUCKETS, cpus, rows_in, SHINGLE_ROWS_PER_TASK)
    candidates = remote(band_candidates, num_returns=1 + routes)
    # The index's files: put once, shared by every task that looks up rows in them (each reads
    # only the row groups holding its keys).
    stored = ray.put(other_index)
    paired: list[list[Any]] = [  # type: ignore[misc]
        candidates.remote(
            group,
            index,
            stored,
            batch_id,
            routes,
            number == 0,  # one task looks up which documents are indexed already
            *[refs[1 + b] for b in group for refs in sketched],
        )
        for number, group in enumerate(band_groups)
    ]
    shingle_refs = [[refs[1 + bands + k] for k in range(SHINGLE_BUCKETS)] for refs in sketched]
    confirm = remote(confirm_pairs)
    confirmed = [
        confirm.remote(
            i,
            config,
            shingle_refs,
            index,
            stored,
            *[refs[1 + i % routes] for refs in paired],
        )
        for i in range(len(slices))
    ]
    preexisting = [get(refs[0]) for refs in paired]  # ids other batches indexed: usually none
    duplicates, found = remote(resolve, num_returns=2).remote(preexisting, *confirmed)
    progress(f"{stage.name}: {get(found)} near-duplicates among {rows_in} documents")

    # The index's band and shingle-set rows and the slices' data files are written by one
    # stream of tasks: none waits for another, so no core idles between the three kinds.
    index_writer, writer = remote(write_index_rows), remote(write_slice)
    first_bucket, first_slice = len(band_groups), len(band_groups) + len(bucket_groups)

    def write(task: int) -> Any:
        if task < first_slice:
            # A band group's band-hash rows, or a bucket group's shingle sets (1 + bands + k).
            kind, group, offset = (
                (BANDS, band_groups[task], 1)
                if task < first_bucket
                else (SETS, bucket_groups[task - first_bucket], 1 + bands)
            )
            return index_writer.remote(
                index,
                kind,
                group,
                batch_id,
                config,
                duplicates,
                preexisting,
                outputs.write_id,
                *[refs[offset + part] for part in group for refs in sketched],
            )
        i = task - first_slice
        return writer.remote(stage, source, slices[i], i, duplicates, outputs)

    written = run_tasks(write, first_slice + len(slices), progress=progress, label=stage.name)
    index_files = [f for task_files in written[:first_slice] for f in task_files]
    return written[first_slice:], {"neardup_index": index_files}
