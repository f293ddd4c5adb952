"""Registries: quality classifiers by model hash, the contamination registry, version re-scans."""

import json
from collections.abc import Iterator
from typing import Any

import dagster as dg
from pydantic import Field

from fm_assets.cards.build import build_card, version_card_prefix, write_card_to_store
from fm_assets.contamination.store import (
    local_copy,
    register_benchmark,
    registered_benchmark,
    registry_ref,
)
from fm_assets.defs.openlineage import describe_scan, emits_lineage
from fm_assets.defs.partitions import benchmarks, dataset_versions, quality_classifiers
from fm_assets.defs.resources import FmPlatform
from fm_assets.registries.classifiers import require_classifier
from fm_assets.storage.objectstore import open_object_store
from fm_assets.versions.contamination_scan import record_flags, scan_version
from fm_assets.versions.dataset_version import require_version


@dg.asset(
    group_name="registry",
    partitions_def=quality_classifiers,
    kinds={"fasttext", "iceberg"},
    description="A trained fastText quality classifier, by model sha256: where its copy lives, "
    "its held-out accuracy and the hashes of the data it was trained on.",
)
@emits_lineage()
def quality_classifier_registry(
    context: dg.AssetExecutionContext, fm: FmPlatform
) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation

    info = require_classifier(fm.settings(), context.partition_key)
    report = info.report
    return dg.MaterializeResult(
        metadata={
            "model_sha256": info.model_sha256,
            "uri": info.uri,
            "recipe_version": info.recipe_version,
            "holdout_accuracy": info.holdout_accuracy,
            "holdout_precision": float(report["holdout_precision"]),
            "holdout_recall": float(report["holdout_recall"]),
            "positives_sha256": report["positives_sha256"],
            "negatives_sha256": report["negatives_sha256"],
            "training_sources": dg.MetadataValue.json(report.get("sources") or {}),
            "report": dg.MetadataValue.json(json.loads(json.dumps(report, default=str))),
        },
        data_version=dg.DataVersion(info.model_sha256[:16]),
    )


CONTAMINATION_REGISTRY = dg.AssetKey("contamination_registry")


class BenchmarkConfig(dg.Config):
    """The eval-set file and its text fields; empty: register the stored copy again."""

    path: str = ""
    fields: list[str] = Field(default_factory=list)


@dg.asset(
    key=CONTAMINATION_REGISTRY,
    group_name="registry",
    partitions_def=benchmarks,
    kinds={"iceberg"},
    description="One held-out eval set per partition: normalised n-gram hashes and exact hashes "
    "of its items, in Iceberg; every decontamination stage and shard-set gate matches against it.",
)
@emits_lineage()
def contamination_registry(
    context: dg.AssetExecutionContext, config: BenchmarkConfig, fm: FmPlatform
) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    import tempfile
    from pathlib import Path

    settings = fm.settings()
    benchmark = context.partition_key
    path, fields = config.path, list(config.fields)
    with tempfile.TemporaryDirectory(prefix="fm-evalset-") as scratch:
        if not path:
            known = registered_benchmark(settings, benchmark)
            if known is None:
                raise ValueError(
                    f"benchmark {benchmark} has no stored eval set; register it with "
                    f"`fm registry add {benchmark} PATH --fields a,b`"
                )
            path = str(local_copy(settings, str(known["file_uri"]), Path(scratch)))
            fields = list(known["fields"])  # type: ignore[call-overload]
        if not fields:
            raise ValueError("name the eval set's text fields (e.g. --fields question,answer)")
        info = register_benchmark(settings, benchmark, path, fields)
    return dg.MaterializeResult(
        metadata={
            "benchmark": info.benchmark,
            "file_sha256": info.file_sha256,
            "file_uri": info.file_uri,
            "fields": dg.MetadataValue.json(list(info.fields)),
            "item_count": info.item_count,
            "empty_items": info.empty_items,
            "unmatchable_items": info.unmatchable_items,
            "hash_rows": info.ngram_rows,
            "registry": registry_ref(settings),
        },
        data_version=dg.DataVersion(info.file_sha256[:16]),
    )


@dg.asset(
    group_name="registry",
    partitions_def=dataset_versions,
    deps=[
        dg.AssetDep(CONTAMINATION_REGISTRY, partition_mapping=dg.AllPartitionMapping()),
        dg.AssetDep("dataset_version"),
    ],
    kinds={"iceberg"},
    description="A dataset version re-scanned against the contamination registry as it stands; "
    "runs for every version when a benchmark is registered. Contaminated versions are flagged "
    "in their metadata and dataset card.",
)
@emits_lineage(describe_scan)
def contamination_scan(context: dg.AssetExecutionContext, fm: FmPlatform) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    settings = fm.settings()
    version = require_version(settings, context.partition_key)
    ref = registry_ref(settings)
    rows = scan_version(settings, version, ref)
    record_flags(settings, version, rows, ref)
    by_benchmark: dict[str, set[int]] = {}
    for row in rows:
        by_benchmark.setdefault(row["benchmark"], set()).add(row["item_id"])
    documents = len({row["doc_id"] for row in rows})
    summary: dict[str, Any] = {
        "contaminated": bool(rows),
        "contaminated_documents": documents,
        "items_by_benchmark": {b: len(items) for b, items in sorted(by_benchmark.items())},
        "registry": ref,
    }
    card = build_card(settings, version, contamination=summary)
    card_uris = write_card_to_store(
        card, open_object_store(settings), version_card_prefix(version.version_key)
    )
    # Flag the version itself, where a user looks first.
    context.instance.report_runless_asset_event(
        dg.AssetObservation(
            asset_key=dg.AssetKey("dataset_version"),
            partition=version.version_key,
            metadata={
                "contaminated": summary["contaminated"],
                "contaminated_documents": documents,
                "contamination": dg.MetadataValue.json(summary),
            },
        )
    )
    if rows:
        context.log.warning(
            f"{version.version_key} holds {documents} documents matching registered eval items"
        )
    return dg.MaterializeResult(
        metadata={
            "contaminated": summary["contaminated"],
            "contaminated_documents": documents,
            "items_by_benchmark": dg.MetadataValue.json(summary["items_by_benchmark"]),
            "registry": ref,
            "dataset_card": dg.MetadataValue.md(card.markdown),
            "dataset_card_uri": dg.MetadataValue.url(card_uris[-1]),
        }
    )


rescan_versions = dg.define_asset_job(
    "rescan_versions", selection=[contamination_scan], executor_def=dg.in_process_executor
)


@dg.asset_sensor(
    asset_key=CONTAMINATION_REGISTRY,
    job=rescan_versions,
    minimum_interval_seconds=30,
    description="A benchmark was registered: re-scan every dataset version against the registry.",
)
def contamination_registry_sensor(
    context: dg.SensorEvaluationContext, asset_event: dg.EventLogEntry
) -> Iterator[dg.RunRequest]:
    for version in context.instance.get_dynamic_partitions("dataset_version"):
        yield dg.RunRequest(
            run_key=f"{asset_event.run_id}:{asset_event.timestamp}:{version}",
            partition_key=version,
        )
