"""The shards layer: MDS shard sets, partitioned by dataset version x shard config."""

import warnings

import dagster as dg

from fm_assets.cards.build import copy_version_card
from fm_assets.checks.shard_sets import published_copy
from fm_assets.checks.table import SHARD_SET_CHECKS, ShardSetSubject, evaluate
from fm_assets.defs.checks import check_specs, to_check_result
from fm_assets.defs.openlineage import describe_set, emits_lineage
from fm_assets.defs.partitions import shard_set_partitions
from fm_assets.defs.progress import progress_logger
from fm_assets.defs.resources import FmPlatform
from fm_assets.defs.versions import DATASET_VERSION
from fm_assets.registries.tokenizers import resolve_tokenizer
from fm_assets.shards.build import parse_shard_config, shard_set_key
from fm_assets.shards.revision import build_version_shard_set
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.dataset_version import require_version

SHARD_SET = dg.AssetKey("shard_set")

# MultiToSingleDimensionPartitionMapping is beta in Dagster 1.13; it is the mapping we need.
warnings.filterwarnings("ignore", category=dg.BetaWarning)


@dg.asset(
    key=SHARD_SET,
    group_name="shards",
    partitions_def=shard_set_partitions,
    deps=[
        dg.AssetDep("contamination_registry", partition_mapping=dg.AllPartitionMapping()),
        dg.AssetDep(
            DATASET_VERSION,
            partition_mapping=dg.MultiToSingleDimensionPartitionMapping(
                partition_dimension_name="version"
            ),
        ),
    ],
    kinds={"ray"},
    pool="ray",
    check_specs=check_specs(SHARD_SET, SHARD_SET_CHECKS, shard_set_partitions),
    description="A version packed best-fit-decreasing into seq_len sequences, as MDS shards "
    "(a revocation's replacement version: its base's set with the revoked documents removed).",
)
@emits_lineage(describe_set)
def shard_set(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    settings = fm.settings()
    partition_key = context.partition_key
    if not isinstance(partition_key, dg.MultiPartitionKey):
        raise ValueError(f"shard_set partitions are version x shard config, got {partition_key!r}")
    key = partition_key.keys_by_dimension
    version_key, config = key["version"], key["shard_config"]
    tokenizer_prefix, seq_len = parse_shard_config(config)
    tokenizer = resolve_tokenizer(settings, tokenizer_prefix)
    build = build_version_shard_set(
        settings,
        version_key,
        tokenizer,
        seq_len,
        run_id=context.run.run_id,
        progress=progress_logger(context),
    )
    manifest = build.manifest
    version = require_version(settings, version_key)
    # On S3 the checks read a fresh download of what was published, not the staging copy.
    with published_copy(build.uri, manifest, settings.s3_endpoint) as directory:
        subject = ShardSetSubject(settings, directory, manifest, version, build.documents_tokens)
        outcomes = evaluate(SHARD_SET.to_user_string(), SHARD_SET_CHECKS, subject)
    partition = shard_set_key(version_key, config)
    store = open_object_store(settings)
    card_uris = copy_version_card(settings, store, version, f"{store.key_of(build.uri)}/card")
    return dg.MaterializeResult(
        metadata={
            "shard_set_key": manifest.shard_set_key,
            "uri": build.uri,
            "created": build.created,
            "num_samples": manifest.num_samples,
            "num_tokens": manifest.num_tokens,
            "num_documents": manifest.num_documents,
            "packing_efficiency": float(manifest.packing_efficiency),
            "seq_len": manifest.seq_len,
            "token_dtype": manifest.token_dtype,
            "tokenizer_hash": manifest.tokenizer_hash,
            "schema_fingerprint": manifest.schema_fingerprint,
            "shards": len(manifest.shards),
            "dataset_card": dg.MetadataValue.url(card_uris[-1]),
        },
        check_results=[
            to_check_result(settings, SHARD_SET, partition, outcome, context.run.run_id)
            for outcome in outcomes
        ],
        data_version=dg.DataVersion(manifest.version_content_hash[:16] + config),
    )
