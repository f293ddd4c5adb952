"""The provenance layer: revocations, one partition per revocation id, and the job that purges
a revocation's documents."""

import json

import dagster as dg

from fm_assets.cards.build import (
    build_card,
    copy_version_card,
    version_card_prefix,
    write_card_to_store,
)
from fm_assets.defs.openlineage import describe_revocation, emits_lineage
from fm_assets.defs.partitions import (
    add_partition_keys,
    dataset_versions,
    revocations,
    shard_configs,
)
from fm_assets.defs.progress import PROGRESS
from fm_assets.defs.resources import FmPlatform
from fm_assets.defs.versions import DATASET_VERSION
from fm_assets.settings import Settings
from fm_assets.shards.purge import PurgeReport, purge
from fm_assets.shards.revoke import cut_replacements, latest_shard_sets
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.revocations import require_revocation
from fm_assets.versions.dataset_version import DatasetVersion

REVOCATION = dg.AssetKey("revocation")


@dg.asset(
    key=REVOCATION,
    group_name="provenance",
    partitions_def=revocations,
    deps=[dg.AssetDep(DATASET_VERSION, partition_mapping=dg.AllPartitionMapping())],
    kinds={"iceberg"},
    description="A recorded revocation (who, when, why, what it names) and the replacement "
    "versions it cut; `fm revoke` then materializes their dataset_version and shard_set "
    "partitions, whose blocking checks run.",
)
@emits_lineage(describe_revocation)
def revocation(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    settings = fm.settings()
    record = require_revocation(settings, context.partition_key)
    plan = cut_replacements(settings, record)
    # The replacements' partitions exist from here on, whoever materializes them.
    add_partition_keys(context.instance, dataset_versions, plan.replacement_versions)
    configs = sorted({str(s.old["shard_config"]) for s in plan.shard_sets if s.build})
    add_partition_keys(context.instance, shard_configs, configs)
    return dg.MaterializeResult(
        metadata={
            "criterion": record.criterion,
            "value": record.value,
            "reason": record.reason,
            "revoked_by": record.revoked_by,
            "revoked_at": record.revoked_at.isoformat(timespec="seconds"),
            "versions": dg.MetadataValue.json(
                {v.version_key: v.replacement for v in plan.versions}
            ),
            "documents_removed": sum(v.documents_removed for v in plan.versions),
            "tokens_removed": sum(v.tokens_removed for v in plan.versions),
            "shard_sets": dg.MetadataValue.json(
                {str(s.old["shard_set_key"]): s.key for s in plan.shard_sets}
            ),
        },
        data_version=dg.DataVersion(record.revocation_id),
    )


PURGE_OP = "purge_revocation"


def rewrite_card(settings: Settings, version: DatasetVersion) -> None:
    """A version's dataset card written again after a purge (it counts what the version holds),
    and its copies beside the version's shard sets (an image-text card shows images)."""
    store = open_object_store(settings)
    write_card_to_store(
        build_card(settings, version), store, version_card_prefix(version.version_key)
    )
    for row in latest_shard_sets(settings, version.version_key):
        prefix = f"{store.key_of(str(row['uri']))}/card"
        if store.exists(prefix):
            store.delete_dir(prefix)
            copy_version_card(settings, store, version, prefix)


class PurgeConfig(dg.Config):
    """The revocation whose documents to purge (its replacements cut by `fm revoke`)."""

    revocation_id: str


@dg.op(
    name=PURGE_OP,
    description="Physically remove a revocation's documents from every artifact: table "
    "snapshots old versions pin, quarantine, the dedup indexes, shard and text sets, landed "
    "files (docs/provenance.md); who, when, what and how many bytes in the output metadata.",
)
def purge_revocation(
    context: dg.OpExecutionContext,
    config: PurgeConfig,
    fm: FmPlatform,  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
) -> dg.Output[PurgeReport]:
    def progress(message: str) -> None:
        context.log.info(message)
        PROGRESS.info(message)  # what `fm purge` prints

    report = purge(fm.settings(), config.revocation_id, rewrite_card, progress)
    totals = report.totals()
    return dg.Output(
        report,
        metadata={
            **{name: dg.MetadataValue.int(value) for name, value in totals.items()},
            "revocation_id": config.revocation_id,
            "purged_by": report.purged_by,
            "started_at": report.started_at.isoformat(timespec="seconds"),
            "remaining": dg.MetadataValue.md("\n".join(f"- {r}" for r in report.remaining)),
            "details": dg.MetadataValue.json(json.loads(json.dumps(report.details(), default=str))),
        },
    )


@dg.job(
    name="purge",
    executor_def=dg.in_process_executor,
    description="Purge a revoked document set from every artifact (`fm purge REVOCATION_ID`).",
)
def purge_job() -> None:
    purge_revocation()
