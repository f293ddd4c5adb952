"""The curated layer: one asset per pipeline stage, partitioned by landing batch.

Built from every modality's pipeline (`execution.pipelines`), so a new stage, or a new modality,
appears here without edits.
"""

import dataclasses

import dagster as dg

from fm_assets.checks.table import BATCH_CHECKS, BatchSubject, evaluate, stage_data_version
from fm_assets.curation.approval import approval_gate
from fm_assets.defs.checks import check_specs, to_check_result
from fm_assets.defs.landing import LANDING_BATCH
from fm_assets.defs.openlineage import describe_stage, emits_lineage
from fm_assets.defs.partitions import add_partition_keys, landing_batches, quality_classifiers
from fm_assets.defs.progress import progress_logger
from fm_assets.defs.ray_loss import retried_when_ray_is_lost
from fm_assets.defs.resources import FmPlatform
from fm_assets.execution.pipeline import StageEntry
from fm_assets.execution.pipelines import PIPELINES
from fm_assets.execution.runner import run_stage
from fm_assets.registries.classifiers import NoDefaultClassifier, ensure_default_classifier
from fm_assets.storage import catalog


def build_stage_asset(entry: StageEntry, upstream: dg.AssetKey, first: bool) -> dg.AssetsDefinition:
    key = dg.AssetKey(entry.name)

    @dg.asset(
        key=key,
        group_name="curated",
        partitions_def=landing_batches,
        deps=[upstream],
        check_specs=check_specs(key, BATCH_CHECKS, landing_batches),
        pool=entry.pool,
        kinds={"ray", "iceberg"},
        description=entry.description,
    )
    @emits_lineage(describe_stage)
    @retried_when_ray_is_lost
    def _stage_asset(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
        settings = fm.settings()
        batch_id = context.partition_key
        if not first:
            # A quarantined batch stops after validation until `fm approve` (or forever).
            waiting = approval_gate(settings, batch_id)
            if waiting is not None:
                raise dg.Failure(description=waiting)
        progress = progress_logger(context)
        try:
            report = run_stage(
                settings, entry.name, batch_id, run_id=context.run.run_id, progress=progress
            )
        except NoDefaultClassifier:
            # A sensor's run needs the default classifier too: train it where the recipe's
            # data is (else this fails naming the command), and show it in the registry.
            digest = ensure_default_classifier(settings, progress)
            add_partition_keys(context.instance, quality_classifiers, [digest])
            context.instance.report_runless_asset_event(
                dg.AssetMaterialization(
                    dg.AssetKey("quality_classifier_registry"),
                    partition=digest,
                    description="the default quality classifier, trained on first need",
                )
            )
            report = run_stage(
                settings, entry.name, batch_id, run_id=context.run.run_id, progress=progress
            )
        # The checks read the batch's output and quarantine partitions as they stand now: if
        # neither changed since a passing evaluation (a rerun with nothing to do), it stands.
        data_version = stage_data_version(settings, entry.name, batch_id, report.stage_key)
        subject = BatchSubject(settings, entry.name, batch_id)
        checks = [
            to_check_result(settings, key, batch_id, outcome, context.run.run_id)
            for outcome in evaluate(entry.name, BATCH_CHECKS, subject, data_version)
        ]
        metadata = {
            k: dg.MetadataValue.json(v) if isinstance(v, dict) else v
            for k, v in dataclasses.asdict(report).items()
            if v is not None
        }
        metadata["table"] = catalog.table_identifier(
            settings, entry.name, catalog.batch_namespace(settings, batch_id)
        )
        return dg.MaterializeResult(
            metadata=metadata,
            check_results=checks,
            data_version=dg.DataVersion(report.stage_key[:16]),
        )

    return _stage_asset


def build_curated_assets() -> list[dg.AssetsDefinition]:
    assets = []
    for modality_pipeline in PIPELINES.values():
        upstream = LANDING_BATCH
        for position, entry in enumerate(modality_pipeline.stages):
            assets.append(build_stage_asset(entry, upstream, first=position == 0))
            upstream = dg.AssetKey(entry.name)
    return assets
