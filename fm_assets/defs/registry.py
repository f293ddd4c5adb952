"""Registries: quality classifiers by model hash (and, with issue 5, the contamination registry)."""

import json

import dagster as dg

from fm_assets.defs.resources import FmPlatform

quality_classifiers = dg.DynamicPartitionsDefinition(name="quality_classifier")  # model sha256


@dg.asset(
    group_name="registry",
    partitions_def=quality_classifiers,
    kinds={"fasttext", "iceberg"},
    description="A trained fastText quality classifier, by model sha256: where its copy lives, "
    "its held-out accuracy and the hashes of the data it was trained on.",
)
def quality_classifier_registry(
    context: dg.AssetExecutionContext, fm: FmPlatform
) -> dg.MaterializeResult:  # type: ignore[type-arg]  # dagster rejects a subscripted annotation
    from fm_assets.classifier_registry import require_classifier

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
