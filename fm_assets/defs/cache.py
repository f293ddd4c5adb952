"""The serving layer: a shard set pre-warmed into a node's hot cache, one partition per shard set.

A training run's launch can depend on `shard_set_cache` for its shard sets: when the
materialization succeeds, every shard and manifest is in the node's cache and verified, and
`make_dataset(..., cache_dir=...)` reads none from the object store. The run executes where its
run worker runs: launch it on the trainer node (or point `cache_dir` at the node-local volume
the trainers mount). Its metadata says how long the warm-up took and how much was already warm.
"""

from pathlib import Path

import dagster as dg

from fm_assets.defs.openlineage import describe_cache, emits_lineage
from fm_assets.defs.partitions import shard_set_partitions
from fm_assets.defs.progress import progress_logger
from fm_assets.defs.resources import FmPlatform
from fm_assets.defs.shards import SHARD_SET
from fm_assets.shards.build import read_shard_set_row, shard_set_key
from fm_loader.sources.catalog import Location
from fm_loader.sources.warmup import warm
from fm_loader.storage.cache_dir import default_cache_dir, read_config

SHARD_SET_CACHE = dg.AssetKey("shard_set_cache")


class CacheConfig(dg.Config):
    """The node cache directory to warm (empty: `$FM_LOADER_CACHE_DIR`, else
    ~/.cache/fm_loader, the loader's default)."""

    cache_dir: str = ""


@dg.asset(
    key=SHARD_SET_CACHE,
    group_name="serving",
    partitions_def=shard_set_partitions,
    deps=[SHARD_SET],
    kinds={"cache"},
    description="A shard set downloaded and verified into a node's hot cache (pre-warm).",
)
@emits_lineage(describe_cache)
def shard_set_cache(
    context: dg.AssetExecutionContext, config: CacheConfig, fm: FmPlatform
) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    settings = fm.settings()
    partition = context.partition_key
    if not isinstance(partition, dg.MultiPartitionKey):
        raise ValueError(f"shard_set_cache partitions are version x shard config, got {partition}")
    dims = partition.keys_by_dimension
    key = shard_set_key(dims["version"], dims["shard_config"])
    row = read_shard_set_row(settings, key)
    if row is None:
        raise ValueError(f"shard set {key} is not built; build it first with `fm shards build`")
    root = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
    progress = progress_logger(context)
    progress(f"pre-warming {key} from {row['uri']} into {root}")
    report = warm(Location(key, row["uri"], row["manifest_sha256"]), root, settings.s3_endpoint)
    if report.entry is None:
        progress(f"{key} is stored locally ({row['uri']}): read in place, nothing to warm")
    else:
        progress(
            f"{key}: {report.bytes_total / 1e6:,.1f} MB warm in {report.seconds:.1f} s "
            f"({report.fetched_bytes / 1e6:,.1f} MB fetched, {report.warm_bytes / 1e6:,.1f} MB "
            f"already there and verified again; {report.mb_per_s:,.0f} MB/s)"
        )
    quota = read_config(root).quota_bytes
    return dg.MaterializeResult(
        metadata={
            "shard_set_key": key,
            "uri": row["uri"],
            "manifest_sha256": row["manifest_sha256"],
            "cache_dir": str(root),
            "cache_entry": str(report.entry) if report.entry else "(local set: read in place)",
            "warmup_s": report.seconds,
            "bytes_total": report.bytes_total,
            "bytes_fetched": report.fetched_bytes,
            "bytes_already_warm": report.warm_bytes,
            "hit_rate": report.hit_rate,
            "mb_per_s": report.mb_per_s,
            "quota_bytes": quota if quota is not None else "none",
        },
    )
