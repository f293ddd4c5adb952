"""The shards layer: MDS shard sets, partitioned by dataset version x shard config."""

import dagster as dg

from fm_assets.cards import build_card, write_card_to_store
from fm_assets.checks.shard_checks import (
    published_copy,
    samples_carry_provenance,
    shard_checksums_valid,
    token_counts_match_version,
)
from fm_assets.contamination.scan import no_contaminated_samples
from fm_assets.defs.checks import to_check_result
from fm_assets.defs.partitions import shard_set_partitions
from fm_assets.defs.resources import FmPlatform
from fm_assets.defs.versions import DATASET_VERSION
from fm_assets.shard_sets import (
    build_shard_set,
    parse_shard_config,
    shard_set_key,
    shard_set_prefix,
)
from fm_assets.storage.objectstore import open_object_store
from fm_assets.tokenizer_registry import resolve_tokenizer
from fm_assets.versions import require_version

SHARD_SET = dg.AssetKey("shard_set")

_CHECKS = {
    "shard_checksums_valid": "Every shard's sha256 matches the manifest.",
    "token_counts_match_version": "Shards hold exactly the tokens of the version's documents.",
    "samples_carry_provenance": "Every sample names documents of the version with valid spans.",
    "no_contaminated_samples": "The gate: no sample holds a document matching the contamination "
    "registry as it stands when the shard set is built.",
}


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
    check_specs=[
        dg.AssetCheckSpec(
            name,
            asset=SHARD_SET,
            blocking=True,
            partitions_def=shard_set_partitions,
            description=text,
        )
        for name, text in _CHECKS.items()
    ],
    description="A version packed best-fit-decreasing into seq_len sequences, as MDS shards.",
)
def shard_set(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    settings = fm.settings()
    partition_key = context.partition_key
    if not isinstance(partition_key, dg.MultiPartitionKey):
        raise ValueError(f"shard_set partitions are version x shard config, got {partition_key!r}")
    key = partition_key.keys_by_dimension
    version_key, config = key["version"], key["shard_config"]
    tokenizer_prefix, seq_len = parse_shard_config(config)
    tokenizer = resolve_tokenizer(settings, tokenizer_prefix)
    build = build_shard_set(
        settings,
        version_key,
        tokenizer,
        seq_len,
        run_id=context.run.run_id,
        progress=context.log.info,
    )
    manifest = build.manifest
    version = require_version(settings, version_key)
    # On S3 the checks read a fresh download of what was published, not the staging copy.
    with published_copy(build.uri, manifest, settings.s3_endpoint) as directory:
        outcomes = [
            shard_checksums_valid(directory, manifest),
            token_counts_match_version(manifest, build.documents_tokens),
            samples_carry_provenance(directory, manifest, settings, version),
            no_contaminated_samples(settings, directory, manifest, version),
        ]
    partition = shard_set_key(version_key, config)
    card = build_card(settings, version)
    card_uris = write_card_to_store(
        card, open_object_store(settings), f"{shard_set_prefix(version_key, config)}/card"
    )
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
