"""What a stage's Ray work is, by kind of stage: the raw stage's parse and exact dedup, near
dedup's band-partitioned decisions, image dedup's one deciding task, or a slice task per range of
the upstream's data files (a GPU each for a stage running models where the cluster has GPUs).

The CPUs planned for are the local Ray's, or on a cluster as many as the data fills
(`compute.planning_cpus`), so that nodes joining mid-stage find slices waiting.
"""

from __future__ import annotations

from pyiceberg.manifest import DataFile

from fm_assets.execution.compute import Progress, planning_cpus, ray_gpus, remote, run_tasks
from fm_assets.execution.exact_dedup import run_raw
from fm_assets.execution.image_dedup import run_image_dedup
from fm_assets.execution.near_dedup.run import run_near_dedup
from fm_assets.execution.slice_tasks import Outputs, SliceOutcome, process_files
from fm_assets.execution.table_ranges import range_slices
from fm_assets.settings import Settings
from fm_assets.stages.base import Stage
from fm_assets.stages.image_text.dedup import ImageDedupStage
from fm_assets.stages.image_text.score import ScoreStage
from fm_assets.stages.near_dedup import NearDupStage
from fm_assets.stages.raw import RawStage
from fm_assets.storage import catalog
from fm_assets.storage.data_files import plan_files, table_handle
from fm_assets.storage.landing import BatchManifest


def execute_stage(
    settings: Settings,
    stage: Stage,
    manifest: BatchManifest,
    upstream: str | None,
    input_snapshot_id: int | None,
    outputs: Outputs,
    progress: Progress,
) -> tuple[list[SliceOutcome], dict[str, list[DataFile]]]:
    """Run the stage's Ray work for the batch of `manifest` (reading `upstream` at
    `input_snapshot_id`); return each slice's outcome and the data files of extra tables."""
    batch_id, namespace = manifest.batch_id, manifest.namespace
    if isinstance(stage, RawStage):
        index = table_handle(settings, "document_index", namespace)
        cpus = planning_cpus(settings, manifest.total_bytes)
        run = run_raw(settings, stage, manifest, outputs, index, cpus, progress)
        return run.slices, {"document_index": run.index_files}
    if upstream is None:
        raise RuntimeError(f"stage {stage.name} has no upstream table and is not the raw stage")
    files = plan_files(
        settings, upstream, catalog.where_equal("batch_id", batch_id), input_snapshot_id, namespace
    )
    source = table_handle(settings, upstream, namespace)
    cpus = planning_cpus(settings, sum(f.file.file_size_in_bytes for f in files))
    if isinstance(stage, NearDupStage):
        return run_near_dedup(settings, stage, source, files, outputs, cpus, progress)
    if isinstance(stage, ImageDedupStage):
        return run_image_dedup(settings, stage, source, files, outputs, cpus, progress)
    slices = range_slices(files, cpus, stage.slices_per_cpu)
    progress(f"{stage.name}: {len(files)} input files of {batch_id} in {len(slices)} slices")
    gpus = 1 if isinstance(stage, ScoreStage) and stage.uses_models and ray_gpus() else 0
    process = remote(process_files, num_gpus=gpus)
    outcomes = run_tasks(
        lambda i: process.remote(stage, source, slices[i], outputs, i),
        len(slices),
        progress=progress,
        label=stage.name,
    )
    return outcomes, {}
