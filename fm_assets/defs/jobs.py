"""Jobs: processing one landing batch end to end, in one process so Ray starts once per run."""

from __future__ import annotations

import dagster as dg

from fm_assets.defs.landing import LANDING_BATCH
from fm_assets.execution import pipeline

BATCH_ASSET_KEYS = [LANDING_BATCH, *(dg.AssetKey(name) for name in pipeline.STAGE_NAMES)]

# The in-process executor: a process per step costs 3-4 s and a Ray start each; one run, one Ray.
process_landing_batch = dg.define_asset_job(
    "process_landing_batch",
    selection=dg.AssetSelection.assets(*BATCH_ASSET_KEYS),
    executor_def=dg.in_process_executor,
    description="Every curation stage for one landing batch, with its blocking checks.",
)
