"""Turn plain data-check outcomes into Dagster check results, and log them to the catalog."""

from __future__ import annotations

from typing import Any

import dagster as dg

from fm_assets.checks.data_checks import CheckOutcome, record_outcome
from fm_assets.settings import Settings


def to_check_result(
    settings: Settings,
    asset_key: dg.AssetKey,
    partition: str,
    outcome: CheckOutcome,
    run_id: str,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
) -> dg.AssetCheckResult:
    record_outcome(settings, asset_key.to_user_string(), partition, outcome, run_id)
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
