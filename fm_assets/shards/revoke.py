"""`fm revoke`: what a revocation replaces, and marking what it replaced.

The command drives these steps through Dagster (`commands/operations.revoke`):

1. `record_revocation` (storage) writes the revocation row first, so it is never lost;
2. the `revocation` asset (`cut_replacements`) cuts a replacement for every version holding what
   it names (`versions.revocation`) and plans the shard sets to build for them;
3. each replacement `dataset_version` and `shard_set` partition is materialized, so its blocking
   checks run (the `shard_set` asset revises the base's set, rewriting only the shards that held
   revoked documents: `shards.revision`);
4. `finish_revocation` writes the `fm_revoked.json` marker on each old set (and on the old
   version's text set), naming its replacement, records `shard_set_revocations` with the bytes
   rewritten, and lists the training runs that read the old sets.

A crash anywhere leaves a state `fm revoke` run again finishes: a version already replaced is
not cut again, and its replacement's shard sets not built yet are built then.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from fm_assets.settings import Settings
from fm_assets.shards.build import read_shard_set_row, shard_set_key
from fm_assets.shards.revision import revision_cost
from fm_assets.shards.text_export import latest_text_set
from fm_assets.storage import catalog
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.revocations import RevocationRecord
from fm_assets.storage.tables import TableSpec, declare
from fm_assets.versions.revocation import (
    VersionRevocation,
    recorded_outcomes,
    replacement_of,
    revoke_versions,
)
from fm_loader.format.manifest import MANIFEST_NAME, parse_manifest
from fm_loader.sources.provenance import (
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


@dataclass(frozen=True)
class ShardSetPlan:
    """An old shard set a revocation touches, and the replacement version whose set replaces it."""

    old: dict[str, Any]  # the set's current `shard_sets` row
    version: str | None  # None: nothing left to replace it with
    build: bool  # False: the replacement set is built already (an earlier revocation, or a crash)

    @property
    def key(self) -> str | None:
        """The replacement set's key."""
        return shard_set_key(self.version, str(self.old["shard_config"])) if self.version else None


@dataclass(frozen=True)
class RevocationPlan:
    """What a revocation replaces: each version it touched, each shard set to build."""

    revocation: RevocationRecord
    versions: list[VersionRevocation]
    shard_sets: list[ShardSetPlan]

    @property
    def replacement_versions(self) -> list[str]:
        """Every version whose partition the revocation materializes: new replacements, and
        earlier ones whose shard sets it builds (an interrupted `fm revoke`)."""
        keys = {v.replacement for v in self.versions}
        keys |= {s.version for s in self.shard_sets if s.build}
        return sorted(k for k in keys if k)


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


def cut_replacements(settings: Settings, revocation: RevocationRecord) -> RevocationPlan:
    """Cut the revocation's replacement versions (once: again for the same revocation, it only
    reads what it did) and plan the shard sets to build for them."""
    return _plan(settings, revocation, revoke_versions(settings, revocation))


def revocation_plan(settings: Settings, revocation: RevocationRecord) -> RevocationPlan:
    """The plan of a revocation whose replacement versions are cut."""
    return _plan(settings, revocation, recorded_outcomes(settings, revocation.revocation_id))


def _plan(
    settings: Settings, revocation: RevocationRecord, outcomes: list[VersionRevocation]
) -> RevocationPlan:
    sets = []
    for outcome in outcomes:
        target = _replacement_to_build(settings, outcome)
        for row in latest_shard_sets(settings, outcome.version_key):
            key = shard_set_key(target, str(row["shard_config"])) if target else None
            # A set built already (by this revocation before a crash, or an earlier one) stays.
            built = key is not None and read_shard_set_row(settings, key) is not None
            sets.append(ShardSetPlan(row, target, build=key is not None and not built))
    return RevocationPlan(revocation, outcomes, sets)


def _replacement_to_build(settings: Settings, outcome: VersionRevocation) -> str | None:
    """The version whose shard sets this revocation must build for `outcome`'s version: its new
    replacement, or, when an earlier run was interrupted before building them, the earlier one."""
    if outcome.replacement is not None:
        return outcome.replacement
    first = replacement_of(settings, outcome.version_key)
    return str(first["replacement"]) if first and first["replacement"] else None


def finish_revocation(
    settings: Settings, plan: RevocationPlan, failed: Collection[str] = ()
) -> RevocationReport:
    """Mark every old set the revocation touched, record what building its replacement cost,
    and list the training runs that read it. A replacement that is not built, or is in `failed`
    (it failed its checks), is not named."""
    revocation = plan.revocation
    report = RevocationReport(revocation, list(plan.versions))
    replaced = {v.version_key: v.replacement for v in plan.versions}
    now = dt.datetime.now(dt.UTC)
    store = open_object_store(settings)
    for item in plan.shard_sets:
        old = item.old
        report.runs.extend(read_run_records(str(old["uri"]), settings.s3_endpoint))
        key = item.key
        built = read_shard_set_row(settings, key) if key is not None and key not in failed else None
        cost = {"bytes_rewritten": 0, "bytes_total": 0, "shards_rewritten": 0, "shards_total": 0}
        if built is not None and item.build:
            manifests = [
                parse_manifest(
                    store.read_bytes(f"{store.key_of(str(row['uri']))}/{MANIFEST_NAME}").decode()
                )
                for row in (old, built)
            ]
            cost = dataclasses.asdict(revision_cost(*manifests))
        if replaced.get(str(old["version_key"])) is not None or _unmarked(settings, old):
            # A set already revoked keeps the marker naming its first replacement.
            marker = _marker(revocation, key if built is not None else None)
            write_revocation(str(old["uri"]), marker, settings.s3_endpoint)
        report.shard_sets.append(
            {
                "revocation_id": revocation.revocation_id,
                "shard_set_key": old["shard_set_key"],
                "replacement": key if built is not None and item.build else None,
                **cost,
                "revoked_at": now,
            }
        )
    for outcome in plan.versions:
        _mark_text_set(settings, outcome, revocation)
    if report.shard_sets:
        catalog.append_rows(
            settings, "shard_set_revocations", pa.Table.from_pylist(report.shard_sets)
        )
    return report


def _mark_text_set(
    settings: Settings, outcome: VersionRevocation, revocation: RevocationRecord
) -> None:
    """The version's exported text (if any) is refused by loaders too; its replacement is the
    replacement version, whose text is exported with `fm text export`."""
    row = latest_text_set(settings, outcome.version_key)
    if row is None or not (outcome.replacement is not None or _unmarked(settings, row)):
        return
    marker = _marker(revocation, outcome.replacement)
    write_revocation(str(row["uri"]), marker, settings.s3_endpoint)


def _marker(revocation: RevocationRecord, replacement: str | None) -> Revocation:
    """The `fm_revoked.json` a loader reads beside a revoked set."""
    return Revocation(
        format_version=PROVENANCE_FORMAT_VERSION,
        revocation_id=revocation.revocation_id,
        reason=revocation.reason,
        revoked_by=revocation.revoked_by,
        revoked_at=revocation.revoked_at.isoformat(timespec="seconds"),
        replacement=replacement,
    )


def _unmarked(settings: Settings, row: dict[str, Any]) -> bool:
    return read_revocation(str(row["uri"]), settings.s3_endpoint) is None
