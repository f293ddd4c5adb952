"""Dagster objects only, one module per layer: landing, curated, versions, shards, cache,
registry, provenance."""

from __future__ import annotations

import functools

import dagster as dg

from fm_assets.defs.approval import build_approved_batch_sensor, decide_quarantined_batch
from fm_assets.defs.cache import shard_set_cache
from fm_assets.defs.costs import cost_report_asset, cost_report_job, cost_report_schedule
from fm_assets.defs.curated import build_curated_assets
from fm_assets.defs.jobs import BATCH_JOBS
from fm_assets.defs.landing import build_landing_sensor, landing_batch
from fm_assets.defs.maintenance import catalog_maintenance, catalog_maintenance_schedule
from fm_assets.defs.provenance import purge_job, revocation
from fm_assets.defs.registry import (
    contamination_registry,
    contamination_registry_sensor,
    contamination_scan,
    quality_classifier_registry,
    rescan_versions,
)
from fm_assets.defs.resources import FmPlatform
from fm_assets.defs.shards import shard_set
from fm_assets.defs.texts import text_set
from fm_assets.defs.versions import dataset_version


@functools.cache
def build_definitions() -> dg.Definitions:
    """Every asset, job, sensor and resource of the platform's code location."""
    return dg.Definitions(
        assets=[
            landing_batch,
            *build_curated_assets(),
            dataset_version,
            shard_set,
            shard_set_cache,
            text_set,
            quality_classifier_registry,
            contamination_registry,
            contamination_scan,
            revocation,
            cost_report_asset,
        ],
        jobs=[
            *BATCH_JOBS.values(),
            rescan_versions,
            decide_quarantined_batch,
            catalog_maintenance,
            cost_report_job,
            purge_job,
        ],
        schedules=[catalog_maintenance_schedule, cost_report_schedule],
        sensors=[
            build_landing_sensor(BATCH_JOBS),
            build_approved_batch_sensor(BATCH_JOBS),
            contamination_registry_sensor,
        ],
        resources={"fm": FmPlatform()},
        executor=dg.in_process_executor,
    )
