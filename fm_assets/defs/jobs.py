"""Jobs: processing one landing batch end to end, in one process so Ray starts once per run;
one job per modality, each selecting its pipeline's stages."""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from fm_assets.defs.landing import LANDING_BATCH
from fm_assets.execution.pipelines import PIPELINES
from fm_assets.storage.landing import TEXT_MODALITY


def batch_asset_keys(modality: str) -> list[dg.AssetKey]:
    """The landing batch and every stage of `modality`'s pipeline, in order."""
    return [LANDING_BATCH, *(dg.AssetKey(name) for name in PIPELINES[modality].names)]


def _job_name(modality: str) -> str:
    if modality == TEXT_MODALITY:
        return "process_landing_batch"  # the text job's name since the first release
    return f"process_{modality.replace('-', '_')}_batch"


# The in-process executor: a process per step costs 3-4 s and a Ray start each; one run, one Ray.
BATCH_JOBS: dict[str, UnresolvedAssetJobDefinition] = {
    modality: dg.define_asset_job(
        _job_name(modality),
        selection=dg.AssetSelection.assets(*batch_asset_keys(modality)),
        executor_def=dg.in_process_executor,
        description=f"Every curation stage for one {modality} landing batch, with its blocking "
        "checks.",
    )
    for modality in PIPELINES
}
process_landing_batch = BATCH_JOBS[TEXT_MODALITY]


def batch_job_name(modality: str) -> str:
    """The job that processes a batch of `modality`."""
    return BATCH_JOBS[modality].name
