"""`fm revoke`: record a revocation, replace every affected version and shard set, mark the old.

Order matters for a crash: the revocation row first (so it is never lost), then replacement
versions and shard sets, and last the `fm_revoked.json` marker on each old set (and on the old
version's text set), which names its replacement; a loader refuses a marked set. The shard-set
outcomes go to `shard_set_revocations`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from fm_assets.execution.compute import Progress
from fm_assets.settings import Settings
from fm_assets.shards.build import read_shard_set_row, shard_set_key
from fm_assets.shards.revision import rebuild_without
from fm_assets.shards.text_export import latest_text_set
from fm_assets.storage import catalog
from fm_assets.storage.revocations import RevocationRecord, record_revocation
from fm_assets.storage.tables import TableSpec, declare
from fm_assets.versions.dataset_version import DatasetVersion, require_version
from fm_assets.versions.membership import revoked_exclusions
from fm_assets.versions.revocation import VersionRevocation, replacement_of, revoke_versions
from fm_loader.provenance import (
    PROVENANCE_FORMAT_VERSION,
    Revocation,
    RunRecord,
    read_revocation,
    read_run_records,
    write_revocation,
)

SHARD_SET_REVOCATIONS = pa.schema(
    [
        pa.field("revocation_id", pa.string(), nullable=False),
        pa.field("shard_set_key", pa.string(), nullable=False),
        pa.field("replacement", pa.string(), nullable=True),
        pa.field("bytes_rewritten", pa.int64(), nullable=False),
        pa.field("bytes_total", pa.int64(), nullable=False),
        pa.field("shards_rewritten", pa.int64(), nullable=False),
        pa.field("shards_total", pa.int64(), nullable=False),
        pa.field("revoked_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
declare(TableSpec("shard_set_revocations", SHARD_SET_REVOCATIONS, ("revocation_id",)))


@dataclass
class RevocationReport:
    """Everything `fm revoke` did, for printing and for tests."""

    revocation: RevocationRecord
    versions: list[VersionRevocation] = field(default_factory=list)
    shard_sets: list[dict[str, Any]] = field(default_factory=list)  # shard_set_revocations rows
    runs: list[RunRecord] = field(default_factory=list)  # training runs that read revoked sets


def latest_shard_sets(settings: Settings, version_key: str) -> list[dict[str, Any]]:
    """The current `shard_sets` row of each shard set of a version."""
    rows = catalog.read_table(
        settings, "shard_sets", catalog.where_equal("version_key", version_key)
    ).to_pylist()
    latest: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: r["created_at"]):
        latest[row["shard_set_key"]] = row
    return [latest[k] for k in sorted(latest)]


def revoke(
    settings: Settings,
    criterion: str,
    value: str,
    reason: str,
    *,
    revoked_by: str | None = None,
    progress: Progress = lambda message: None,
) -> RevocationReport:
    """Revoke what `criterion`=`value` names from every version and shard set holding it."""
    revocation = record_revocation(settings, criterion, value, reason, revoked_by)
    progress(f"recorded {revocation.revocation_id}: {revocation.describe()} ({reason})")
    report = RevocationReport(revocation)
    report.versions = revoke_versions(settings, revocation)
    now = dt.datetime.now(dt.UTC)
    for outcome in report.versions:
        replacement = _replacement_to_build(settings, outcome)
        progress(
            f"{outcome.version_key}: {len(outcome.removed)} documents revoked; "
            f"replacement {outcome.replacement or 'none'}"
        )
        for row in latest_shard_sets(settings, outcome.version_key):
            report.runs.extend(read_run_records(str(row["uri"]), settings.s3_endpoint))
            new_key: str | None = None
            cost = {"bytes_rewritten": 0, "bytes_total": 0, "shards_rewritten": 0}
            shards_total = 0
            if (
                replacement is not None
                and read_shard_set_row(
                    settings, shard_set_key(replacement.version_key, str(row["shard_config"]))
                )
                is None
            ):
                removed = revoked_exclusions(
                    settings, replacement.version_key, replacement.namespaces
                )
                rebuilt = rebuild_without(settings, row, replacement, set(removed), progress)
                new_key = rebuilt.shard_set_key
                cost = {
                    "bytes_rewritten": rebuilt.bytes_rewritten,
                    "bytes_total": rebuilt.bytes_total,
                    "shards_rewritten": rebuilt.shards_rewritten,
                }
                shards_total = rebuilt.shards_total
            if outcome.replacement is not None or _unmarked(settings, row):
                # A set already revoked keeps the marker naming its first replacement.
                marker = _marker(revocation, reason, new_key)
                write_revocation(str(row["uri"]), marker, settings.s3_endpoint)
            report.shard_sets.append(
                {
                    "revocation_id": revocation.revocation_id,
                    "shard_set_key": row["shard_set_key"],
                    "replacement": new_key,
                    **cost,
                    "shards_total": shards_total,
                    "revoked_at": now,
                }
            )
        _mark_text_set(settings, outcome, revocation, reason)
    if report.shard_sets:
        catalog.append_rows(
            settings, "shard_set_revocations", pa.Table.from_pylist(report.shard_sets)
        )
    return report


def _replacement_to_build(settings: Settings, outcome: VersionRevocation) -> DatasetVersion | None:
    """The version whose shard sets this revocation must build for `outcome`'s version: its new
    replacement, or, when an earlier run was interrupted before building them, the earlier one."""
    key = outcome.replacement
    if key is None:
        first = replacement_of(settings, outcome.version_key)
        key = str(first["replacement"]) if first and first["replacement"] else None
    return require_version(settings, key) if key else None


def _mark_text_set(
    settings: Settings, outcome: VersionRevocation, revocation: RevocationRecord, reason: str
) -> None:
    """The version's exported text (if any) is refused by loaders too; its replacement is the
    replacement version, whose text is exported with `fm text export`."""
    row = latest_text_set(settings, outcome.version_key)
    if row is None or not (outcome.replacement is not None or _unmarked(settings, row)):
        return
    marker = _marker(revocation, reason, outcome.replacement)
    write_revocation(str(row["uri"]), marker, settings.s3_endpoint)


def _marker(revocation: RevocationRecord, reason: str, replacement: str | None) -> Revocation:
    """The `fm_revoked.json` a loader reads beside a revoked set."""
    return Revocation(
        format_version=PROVENANCE_FORMAT_VERSION,
        revocation_id=revocation.revocation_id,
        reason=reason,
        revoked_by=revocation.revoked_by,
        revoked_at=revocation.revoked_at.isoformat(timespec="seconds"),
        replacement=replacement,
    )


def _unmarked(settings: Settings, row: dict[str, Any]) -> bool:
    return read_revocation(str(row["uri"]), settings.s3_endpoint) is None
