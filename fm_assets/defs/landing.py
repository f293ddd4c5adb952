"""The landing layer: one partition per landing batch, and the sensor that discovers them."""

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from dagster._core.storage.dagster_run import NOT_FINISHED_STATUSES

from fm_assets.checks.table import BATCH_CHECKS, BatchSubject, evaluate
from fm_assets.defs.checks import check_specs, to_check_result
from fm_assets.defs.openlineage import describe_landing, emits_lineage
from fm_assets.defs.partitions import landing_batches
from fm_assets.defs.resources import FmPlatform
from fm_assets.defs.run_health import reap_dead_runs
from fm_assets.execution.pipelines import pipeline_for
from fm_assets.storage.landing import published_log, read_manifest
from fm_assets.storage.objectstore import open_object_store

LANDING_BATCH = dg.AssetKey("landing_batch")


@dg.asset(
    key=LANDING_BATCH,
    group_name="landing",
    partitions_def=landing_batches,
    kinds={"s3"},
    check_specs=check_specs(LANDING_BATCH, BATCH_CHECKS, landing_batches),
    description="An immutable, content-addressed batch of landed files with its manifest.",
)
@emits_lineage(describe_landing)
def landing_batch(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    settings = fm.settings()
    manifest = read_manifest(open_object_store(settings), context.partition_key)
    subject = BatchSubject(settings, LANDING_BATCH.to_user_string(), manifest.batch_id)
    return dg.MaterializeResult(
        metadata={
            "source": manifest.source,
            "license": manifest.license,
            "namespace": manifest.namespace,
            "ingested_at": manifest.ingested_at,
            "files": dg.MetadataValue.json([f.__dict__ for f in manifest.files]),
            "bytes": manifest.total_bytes,
        },
        check_results=[
            to_check_result(settings, LANDING_BATCH, manifest.batch_id, outcome, context.run.run_id)
            for outcome in evaluate(LANDING_BATCH.to_user_string(), BATCH_CHECKS, subject)
        ],
        data_version=dg.DataVersion(manifest.batch_id),
    )


BATCH_TAG = "fm/batch"  # on every run that processes a whole batch: the sensor's and `fm run`'s


def processed_or_in_progress(instance: dg.DagsterInstance, batch_id: str, final_stage: str) -> bool:
    """Whether the batch's last stage (`final_stage`, of its modality's pipeline) is
    materialized (by anyone: `fm run`, the sensor, a backfill, the UI), or a run processing the
    whole batch is queued or running."""
    last_stage = dg.AssetKey(final_stage)
    done = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=last_stage, asset_partitions=[batch_id]), limit=1
    )
    if done.records:
        return True
    running = instance.get_runs(
        dg.RunsFilter(tags={BATCH_TAG: batch_id}, statuses=NOT_FINISHED_STATUSES), limit=1
    )
    return bool(running)


def build_landing_sensor(jobs: dict[str, UnresolvedAssetJobDefinition]) -> dg.SensorDefinition:
    """A sensor that adds a partition per newly published batch and requests its processing by
    the job of its modality (`jobs`: modality -> job)."""

    @dg.sensor(
        name="new_landing_batch_sensor",
        jobs=list(jobs.values()),
        minimum_interval_seconds=15,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Processes every batch published to the landing zone, once, in order.",
    )
    def new_landing_batch_sensor(
        context: dg.SensorEvaluationContext, fm: FmPlatform
    ) -> dg.SensorResult:
        # A killed `fm run` leaves its run STARTED, holding pool slots: failed here on every
        # tick, new batches or not, so its slots are freed and its batch is not skipped.
        reap_dead_runs(
            context.instance, context.log.info, by="new_landing_batch_sensor (the daemon)"
        )
        store = open_object_store(fm.settings())
        entries = published_log(store, after=context.cursor)
        if not entries:
            return dg.SensorResult(skip_reason="no new landing batch")
        batch_ids = list(dict.fromkeys(batch_id for _, batch_id in entries))
        modality = {b: read_manifest(store, b).modality for b in batch_ids}
        # A batch `fm run` processed (or is processing) gets its partition but no second run.
        todo = [
            b
            for b in batch_ids
            if not processed_or_in_progress(context.instance, b, pipeline_for(modality[b]).final)
        ]
        return dg.SensorResult(
            # run_key = batch id: the same batch is never requested twice; dagster.yaml limits
            # runs per partition to one at a time, so manual runs cannot overlap it either.
            run_requests=[
                dg.RunRequest(
                    run_key=batch_id,
                    job_name=jobs[modality[batch_id]].name,
                    partition_key=batch_id,
                    tags={BATCH_TAG: batch_id},
                )
                for batch_id in todo
            ],
            dynamic_partitions_requests=[landing_batches.build_add_request(batch_ids)],
            cursor=entries[-1][0],
        )

    return new_landing_batch_sensor
