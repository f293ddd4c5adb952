"""The versions layer: immutable dataset versions, one partition per `<dataset>@v<N>`."""

import dagster as dg
from pydantic import Field

from fm_assets.cards.build import build_card, version_card_prefix, write_card_to_store
from fm_assets.checks.table import VERSION_CHECKS, VersionSubject, evaluate
from fm_assets.defs.checks import check_specs, to_check_result
from fm_assets.defs.openlineage import describe_version, emits_lineage
from fm_assets.defs.partitions import dataset_versions
from fm_assets.defs.resources import FmPlatform
from fm_assets.execution.pipelines import PIPELINES
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import create_version

DATASET_VERSION = dg.AssetKey("dataset_version")


class DatasetVersionConfig(dg.Config):
    """Which landing batches the version covers; empty means every batch whose checks passed."""

    batches: list[str] = Field(default_factory=list)


@dg.asset(
    key=DATASET_VERSION,
    group_name="versions",
    partitions_def=dataset_versions,
    # A version reads the last stage of its modality's pipeline.
    deps=[
        dg.AssetDep(p.final, partition_mapping=dg.AllPartitionMapping()) for p in PIPELINES.values()
    ],
    kinds={"iceberg"},
    check_specs=check_specs(DATASET_VERSION, VERSION_CHECKS, dataset_versions),
    description="An immutable cut of curated batches: a dataset_versions row and Iceberg tags.",
)
@emits_lineage(describe_version)
def dataset_version(
    context: dg.AssetExecutionContext, config: DatasetVersionConfig, fm: FmPlatform
) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    settings = fm.settings()
    version, created = create_version(
        settings, context.partition_key, config.batches or None, context.run.run_id
    )
    card = build_card(settings, version)
    card_uris = write_card_to_store(
        card, open_object_store(settings), version_card_prefix(version.version_key)
    )
    return dg.MaterializeResult(
        metadata={
            "created": created,
            "batches": dg.MetadataValue.json(list(version.batches)),
            "num_documents": version.num_documents,
            "num_tokens": version.num_tokens,
            "content_hash": version.content_hash,
            "tokenizer_hash": version.tokenizer_hash,
            "snapshot_ids": dg.MetadataValue.json(version.snapshot_ids),
            "code_versions": dg.MetadataValue.json(version.code_versions),
            "dataset_card": dg.MetadataValue.md(card.markdown),
            "dataset_card_uri": dg.MetadataValue.url(card_uris[-1]),
            "card_summary": dg.MetadataValue.json(card.summary),
        },
        check_results=[
            to_check_result(
                settings, DATASET_VERSION, version.version_key, outcome, context.run.run_id
            )
            for outcome in evaluate(
                DATASET_VERSION.to_user_string(), VERSION_CHECKS, VersionSubject(settings, version)
            )
        ],
        data_version=dg.DataVersion(version.content_hash[:16]),
    )
