"""Text sets: a version's curated text for tokenizing in the loader, one partition per version."""

import dagster as dg

from fm_assets.defs.openlineage import describe_set, emits_lineage
from fm_assets.defs.partitions import dataset_versions
from fm_assets.defs.progress import progress_logger
from fm_assets.defs.resources import FmPlatform
from fm_assets.defs.versions import DATASET_VERSION
from fm_assets.shards.text_export import export_text_set

TEXT_SET = dg.AssetKey("text_set")


@dg.asset(
    key=TEXT_SET,
    group_name="shards",
    partitions_def=dataset_versions,
    deps=[DATASET_VERSION],
    kinds={"mds"},
    description="A version's curated text as MDS (doc_id, text), for make_dataset(..., "
    "tokenize_online=True) with a tokenizer given at load time.",
)
@emits_lineage(describe_set)
def text_set(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    build = export_text_set(
        fm.settings(),
        context.partition_key,
        run_id=context.run.run_id,
        progress=progress_logger(context),
    )
    manifest = build.manifest
    return dg.MaterializeResult(
        metadata={
            "uri": build.uri,
            "created": build.created,
            "manifest_sha256": build.manifest_sha256,
            "num_documents": manifest.num_documents,
            "num_bytes": manifest.num_bytes,
            "shards": len(manifest.shards),
        },
        data_version=dg.DataVersion(manifest.version_content_hash[:16]),
    )
