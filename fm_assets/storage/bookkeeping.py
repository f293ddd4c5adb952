"""The platform's own records: which stage runs are committed, and how each check came out.

`stage_runs` holds the content keys that make reruns free (the runner looks up the latest run of a
stage for a batch); `check_results` holds every check evaluation, so `fm status` and
`fm version create` see which batches passed without asking Dagster.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.storage import catalog


def latest_stage_run(settings: Settings, batch_id: str, stage: str) -> dict[str, Any] | None:
    """The last committed `stage_runs` row of `stage` for `batch_id`, or None."""
    runs = catalog.read_table(
        settings,
        "stage_runs",
        row_filter=catalog.where_all(
            catalog.where_equal("batch_id", batch_id), catalog.where_equal("stage", stage)
        ),
    ).to_pylist()
    return max(runs, key=lambda r: r["committed_at"]) if runs else None


def record_stage_run(settings: Settings, row: dict[str, Any]) -> None:
    """Append one `stage_runs` row: the commit that makes a stage run count as done."""
    catalog.append_rows(settings, "stage_runs", pa.Table.from_pylist([row]))


def record_check_result(
    settings: Settings,
    *,
    asset: str,
    partition: str,
    check_name: str,
    passed: bool,
    description: str,
    run_id: str | None,
) -> None:
    """Log a check evaluation so `fm status` and `fm version create` can see it."""
    row = {
        "asset": asset,
        "partition": partition,
        "check_name": check_name,
        "passed": passed,
        "description": description,
        "run_id": run_id,
        "checked_at": dt.datetime.now(dt.UTC),
    }
    catalog.append_rows(settings, "check_results", pa.Table.from_pylist([row]))


def latest_check_results(settings: Settings) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(asset, partition, check) -> its latest evaluation."""
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in catalog.read_table(settings, "check_results").to_pylist():
        key = (row["asset"], row["partition"], row["check_name"])
        if key not in latest or row["checked_at"] >= latest[key]["checked_at"]:
            latest[key] = row
    return latest
