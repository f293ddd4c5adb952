"""The UI's approval action for batches that wait after validation: a job that records a
decision (who, why), and a sensor that runs an approved batch through curation."""

from typing import Any

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from fm_assets.curation.approval import record_decision
from fm_assets.defs.landing import BATCH_TAG
from fm_assets.defs.resources import FmPlatform
from fm_assets.storage.landing import read_manifest
from fm_assets.storage.objectstore import open_object_store

DECISION_OP = "record_batch_decision"


class BatchDecision(dg.Config):
    """A decision on a batch waiting for approval; every field is kept for audits."""

    batch_id: str
    approve: bool
    reason: str
    decided_by: str


@dg.op(name=DECISION_OP, description="Record an approval or a rejection of a waiting batch.")
def record_batch_decision(
    context: dg.OpExecutionContext,
    config: BatchDecision,
    fm: FmPlatform,  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
) -> None:
    row = record_decision(
        fm.settings(),
        config.batch_id,
        approved=config.approve,
        reason=config.reason,
        decided_by=config.decided_by,
    )
    context.log.info(f"batch {config.batch_id} {row['decision']} by {row['decided_by']}")


@dg.job(
    name="decide_quarantined_batch",
    executor_def=dg.in_process_executor,
    description="Approve (approve: true) or reject a batch that waits after validation; an "
    "approved batch then runs through curation (approved_batch_sensor).",
)
def decide_quarantined_batch() -> None:
    record_batch_decision()


def build_approved_batch_sensor(
    jobs: dict[str, UnresolvedAssetJobDefinition],
) -> dg.SensorDefinition:
    """A sensor that requests the curation run of each batch a UI decision approved, by the job
    of its modality (`jobs`: modality -> job)."""

    @dg.run_status_sensor(
        name="approved_batch_sensor",
        run_status=dg.DagsterRunStatus.SUCCESS,
        monitored_jobs=[decide_quarantined_batch],
        request_jobs=list(jobs.values()),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Runs a batch through curation once decide_quarantined_batch approved it.",
    )
    def approved_batch_sensor(
        context: dg.RunStatusSensorContext,
        fm: FmPlatform,  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    ) -> dg.RunRequest | dg.SkipReason:
        ops: dict[str, Any] = context.dagster_run.run_config["ops"]  # type: ignore[assignment]
        config = ops[DECISION_OP]["config"]
        batch_id = str(config["batch_id"])
        if not config["approve"]:
            return dg.SkipReason(f"batch {batch_id} was rejected: it never reaches curation")
        modality = read_manifest(open_object_store(fm.settings()), batch_id).modality
        return dg.RunRequest(
            # One curation run per approving decision, whatever ran for the batch before.
            run_key=f"{batch_id}:approved:{context.dagster_run.run_id}",
            job_name=jobs[modality].name,
            partition_key=batch_id,
            tags={BATCH_TAG: batch_id},
        )

    return approved_batch_sensor
