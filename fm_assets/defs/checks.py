"""Dagster's side of the check table: check specs from it, and check results logged."""

from __future__ import annotations

import warnings
from typing import Any

import dagster as dg

from fm_assets.checks.outcome import CheckOutcome
from fm_assets.checks.table import DataCheck, checks_for
from fm_assets.settings import Settings
from fm_assets.storage.bookkeeping import record_check_result

# Partitioned asset checks are a preview feature in Dagster 1.13; we rely on them knowingly.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


def check_specs(
    key: dg.AssetKey,
    table: tuple[DataCheck[Any], ...],
    partitions_def: dg.PartitionsDefinition[Any],
) -> list[dg.AssetCheckSpec]:
    """Blocking check specs for every check of `table` that runs on asset `key`."""
    return [
        dg.AssetCheckSpec(
            check.name,
            asset=key,
            blocking=True,
            partitions_def=partitions_def,
            description=check.description,
        )
        for check in checks_for(key.to_user_string(), table)
    ]


def to_check_result(
    settings: Settings,
    asset_key: dg.AssetKey,
    partition: str,
    outcome: CheckOutcome,
    run_id: str,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
) -> dg.AssetCheckResult:
    """Log `outcome` to `check_results` and turn it into Dagster's check result."""
    record_check_result(
        settings,
        asset=asset_key.to_user_string(),
        partition=partition,
        check_name=outcome.name,
        passed=outcome.passed,
        description=outcome.description,
        run_id=run_id,
        data_version=outcome.data_version,
    )
    metadata = {"description": outcome.description, **outcome.metadata}
    return dg.AssetCheckResult(
        asset_key=asset_key,
        check_name=outcome.name,
        passed=outcome.passed,
        severity=severity,
        metadata={k: _metadata_value(v) for k, v in metadata.items()},
    )


def _metadata_value(value: Any) -> Any:
    if isinstance(value, (list, tuple, dict)):
        return dg.MetadataValue.json(value)
    return value
