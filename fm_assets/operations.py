"""What the `fm` commands do, as plain functions: the CLI, the demo and tests call these.

Materializations go through Dagster in-process against the instance under FM_HOME, so every
run shows up in the Dagster UI with its checks and lineage.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fm_assets.settings import Settings
from fm_assets.storage.landing import BatchManifest

Log = Callable[[str], None]


class ChecksFailed(RuntimeError):
    """A materialization failed or one of its blocking checks did not pass."""


def dagster_instance(settings: Settings) -> Any:
    from dagster import DagsterInstance

    from fm_assets.instance import ensure_dagster_home, ensure_pool_limits

    ensure_dagster_home(settings)
    instance = DagsterInstance.get()
    ensure_pool_limits(instance)
    return instance


def land(
    settings: Settings, paths: list[Path], *, source: str, license: str, namespace: str = "default"
) -> tuple[BatchManifest, bool]:
    from fm_assets.storage.landing import land_files
    from fm_assets.storage.objectstore import open_object_store

    return land_files(
        open_object_store(settings), paths, source=source, license=license, namespace=namespace
    )


def materialize(
    settings: Settings,
    keys: list[str],
    partition_key: object,
    log: Log,
    run_config: dict[str, Any] | None = None,
) -> None:
    """Materialize assets in-process; log every check; raise ChecksFailed unless all passed."""
    import dagster as dg

    from fm_assets.definitions import defs

    warnings.filterwarnings("ignore", category=dg.PreviewWarning)
    config = {"loggers": {"console": {"config": {"log_level": "INFO"}}}, **(run_config or {})}
    result = dg.materialize(
        list(defs.assets or []),  # type: ignore[arg-type]
        selection=dg.AssetSelection.assets(*[dg.AssetKey(k) for k in keys]),
        partition_key=partition_key,  # type: ignore[arg-type]
        instance=dagster_instance(settings),
        resources={"fm": defs.resources["fm"]} if defs.resources else None,
        run_config=config,
        raise_on_error=False,
    )
    failures = []
    for evaluation in result.get_asset_check_evaluations():
        description = evaluation.metadata.get("description")
        text = description.value if description is not None else ""
        name = f"{evaluation.asset_check_key.asset_key.to_user_string()}.{evaluation.check_name}"
        log(f"check {name}: {'passed' if evaluation.passed else 'FAILED'} {text}")
        if not evaluation.passed:
            failures.append(f"{name}: {text}")
    if not result.success:
        for event in result.all_events:
            if not event.is_step_failure:
                continue
            error = event.step_failure_data.error
            message = error.message.strip() if error else "failed"
            failures.append(f"step {event.step_key}: {message}")
    if failures:
        raise ChecksFailed("; ".join(failures))


def run_batch(settings: Settings, batch_id: str, log: Log) -> None:
    """Every stage of one landing batch, with blocking checks; raises ChecksFailed on failure."""
    from fm_assets.defs.jobs import BATCH_ASSET_KEYS
    from fm_assets.defs.partitions import landing_batches
    from fm_assets.storage.landing import read_manifest
    from fm_assets.storage.objectstore import open_object_store

    read_manifest(open_object_store(settings), batch_id)  # fail early on an unknown batch
    dagster_instance(settings).add_dynamic_partitions(landing_batches.name, [batch_id])
    materialize(settings, [k.to_user_string() for k in BATCH_ASSET_KEYS], batch_id, log)


def create_version(settings: Settings, dataset: str, batches: list[str], log: Log) -> str:
    """Cut the next version of `dataset`; returns its key."""
    from fm_assets.defs.partitions import dataset_versions
    from fm_assets.versions import next_version_key

    key = next_version_key(settings, dataset)
    dagster_instance(settings).add_dynamic_partitions(dataset_versions.name, [key])
    run_config = {"ops": {"dataset_version": {"config": {"batches": batches}}}}
    materialize(settings, ["dataset_version"], key, log, run_config)
    return key


def build_shards(
    settings: Settings, version_key: str, tokenizer: str, seq_len: int, log: Log
) -> str:
    """Build (or find) the shard set of a version for a tokenizer and seq_len; returns its key."""
    from dagster import MultiPartitionKey

    from fm_assets.defs.partitions import dataset_versions, shard_configs
    from fm_assets.shard_sets import shard_config_key, shard_set_key
    from fm_assets.tokenizer_registry import resolve_tokenizer
    from fm_assets.versions import require_version

    require_version(settings, version_key)
    info = resolve_tokenizer(settings, tokenizer)
    config = shard_config_key(info.tokenizer_hash, seq_len)
    instance = dagster_instance(settings)
    instance.add_dynamic_partitions(dataset_versions.name, [version_key])
    instance.add_dynamic_partitions(shard_configs.name, [config])
    partition = MultiPartitionKey({"version": version_key, "shard_config": config})
    materialize(settings, ["shard_set"], partition, log)
    return shard_set_key(version_key, config)


def train_classifier(
    settings: Settings,
    positives: list[Any],
    negatives: list[Any],
    sources: dict[str, str],
    log: Log,
) -> str:
    """Train a fastText quality classifier, register it by hash, record it in Dagster."""
    import tempfile

    from fm_assets.classifier_registry import register_classifier
    from fm_assets.curation.quality_classifier import train_classifier as train

    with tempfile.TemporaryDirectory(prefix="fm-classifier-") as out:
        log(f"training on {len(positives)} positive and {len(negatives)} negative documents")
        report = train(positives, negatives, Path(out), sources=sources)
        log(
            f"held-out accuracy {report.holdout_accuracy:.3f} (precision "
            f"{report.holdout_precision:.3f}, recall {report.holdout_recall:.3f})"
        )
        info = register_classifier(settings, report)
    instance = dagster_instance(settings)
    instance.add_dynamic_partitions("quality_classifier", [info.model_sha256])
    materialize(settings, ["quality_classifier_registry"], info.model_sha256, log)
    return info.model_sha256


def register_benchmark(
    settings: Settings, benchmark: str, path: Path, fields: list[str], log: Log
) -> None:
    """Register an eval set as a partition of `contamination_registry`, through Dagster."""
    if not path.is_file():
        raise ValueError(f"eval-set file {path} does not exist")
    instance = dagster_instance(settings)
    instance.add_dynamic_partitions("benchmark", [benchmark])
    config = {"path": str(path.resolve()), "fields": fields}
    materialize(
        settings,
        ["contamination_registry"],
        benchmark,
        log,
        run_config={"ops": {"contamination_registry": {"config": config}}},
    )
