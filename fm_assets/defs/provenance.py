"""The provenance layer: revocations, one partition per revocation id."""

import dagster as dg

from fm_assets.defs.openlineage import describe_revocation, emits_lineage
from fm_assets.defs.partitions import (
    add_partition_keys,
    dataset_versions,
    revocations,
    shard_configs,
)
from fm_assets.defs.resources import FmPlatform
from fm_assets.defs.versions import DATASET_VERSION
from fm_assets.shards.revoke import cut_replacements
from fm_assets.storage.revocations import require_revocation

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
