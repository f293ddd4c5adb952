"""`fm purge REVOCATION_ID` (and `fm revoke ... --purge`): the revoked documents physically
removed from every artifact, after the revocation replaced the versions holding them.

    plan       what the revocation covers in each data namespace, every landed record of it,
               what each version loses, what becomes of each landed file: recorded first
               (`purge_plan`, `purge_landing`)
    sets       shard sets and text sets holding the documents rewritten in place; their
               `fm_purged.json` makes node caches drop their copies (`purge_sets`)
    tables     every table of those namespaces, every snapshot it keeps, rewritten without the
               rows (`storage.purge.snapshots`): stage tables batch by batch under the stage
               runner's locks of those batches, the dedup indexes under their namespace locks
    landing    landed files deleted, or their records blanked in place (`purge_landing`)
    cards      the dataset cards of versions over those batches written again (an image-text
               card shows images)
    audit      `purges`: who, when, what, how many documents, rows, files and bytes, and what
               remains (`storage.purge.records`)

One purge (or maintenance run) at a time: the maintenance lock. Every step is idempotent and
its plan is recorded before anything is removed, so a purge killed anywhere finishes when run
again. The old versions stay readable, without the documents, and `version_purges` marks them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from fm_assets.execution.pipelines import pipeline_of_batch
from fm_assets.settings import Settings
from fm_assets.shards.build import read_shard_set_row
from fm_assets.shards.lineage import samples_holding, shard_set_lineage
from fm_assets.shards.purge_landing import excise_landing
from fm_assets.shards.purge_plan import Plan, plan_purge
from fm_assets.shards.purge_sets import SetPurge, purge_shard_set, purge_text_set
from fm_assets.shards.revoke import latest_shard_sets
from fm_assets.shards.text_export import latest_text_set
from fm_assets.storage import catalog
from fm_assets.storage.locks import exclusive, index_lock, stage_lock
from fm_assets.storage.maintenance.run import INDEX_WRITERS, MAINTENANCE_LOCK
from fm_assets.storage.maintenance.tables import TableRef, existing_tables, load
from fm_assets.storage.partitioning import partition_columns
from fm_assets.storage.purge import records
from fm_assets.storage.purge.landing_files import REMAIN, FileOutcome
from fm_assets.storage.purge.scope import PurgeScope
from fm_assets.storage.purge.snapshots import TablePurge, purge_table
from fm_assets.storage.revocations import RevocationRecord, current_user, require_revocation
from fm_assets.versions.dataset_version import DatasetVersion, require_version
from fm_assets.versions.revocation import all_versions, recorded_outcomes, revoked_in

Progress = Callable[[str], None]
# Writes a version's dataset card again, and its copies beside the version's shard sets (cards
# sit beside shards in the layers: the caller above both passes it).
CardWriter = Callable[[Settings, DatasetVersion], None]
LOCKS_AT_ONCE = 64  # stage locks held together (each a file lock, or a Postgres connection)


@dataclass
class PurgeReport:
    """Everything one purge did."""

    revocation: RevocationRecord
    purged_by: str
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    documents: int = 0
    resumed: bool = False  # finishing a killed run: the counts are what this run removed
    tables: list[TablePurge] = field(default_factory=list)
    sets: list[SetPurge] = field(default_factory=list)
    landed: list[tuple[str, FileOutcome]] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    cards: list[str] = field(default_factory=list)
    remaining: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        sets_bytes = sum(s.bytes_before - s.bytes_after for s in self.sets)
        landed_bytes = sum(f.bytes_removed for _, f in self.landed)
        return {
            "documents": self.documents,
            "rows_removed": sum(t.rows_removed for t in self.tables),
            "bytes_removed": sum(t.bytes_removed for t in self.tables) + sets_bytes + landed_bytes,
            "files_deleted": sum(t.files_deleted for t in self.tables)
            + sum(f.outcome == "deleted" for _, f in self.landed),
            "tables_rewritten": sum(t.snapshots_rewritten > 0 for t in self.tables),
            "sets_rewritten": len(self.sets),
            "landed_files": len(self.landed),
        }

    def details(self) -> dict[str, Any]:
        return {
            "tables": [t.as_dict() for t in self.tables if t.rows_removed or t.files_deleted],
            "sets": [s.as_dict() for s in self.sets],
            "landed": [{"batch_id": b, **dataclasses.asdict(f)} for b, f in self.landed],
            "versions": self.versions,
            "cards": self.cards,
            "resumed": self.resumed,
        }


def require_applied(settings: Settings, revocation: RevocationRecord) -> None:
    """A purge removes what the revocation's replacements already leave out: every version
    holding its documents must have been replaced first (`fm revoke`)."""
    done = {o.version_key for o in recorded_outcomes(settings, revocation.revocation_id)}
    pending = [
        v.version_key
        for v in all_versions(settings)
        if v.version_key not in done and revoked_in(settings, v, revocation).num_rows
    ]
    if pending:
        raise ValueError(
            f"{revocation.revocation_id} has not replaced {', '.join(pending)} yet: its "
            "`revocation` partition was not materialized; run `fm revoke` again (it finishes an "
            "interrupted revocation), then purge"
        )


def purge(
    settings: Settings,
    revocation_id: str,
    write_card: CardWriter,
    progress: Progress = lambda message: None,
) -> PurgeReport:
    """Remove what revocation `revocation_id` names from every artifact (see the module);
    `write_card` writes a version's dataset card again."""
    revocation = require_revocation(settings, revocation_id)
    require_applied(settings, revocation)
    report = PurgeReport(revocation, current_user(), dt.datetime.now(dt.UTC))
    grace = dt.timedelta(hours=settings.maintenance_grace_hours)
    with exclusive(settings, MAINTENANCE_LOCK, progress):
        plan = plan_purge(settings, revocation, progress)
        report.documents, report.resumed = plan.documents, plan.resumed
        report.versions = sorted(
            str(r["version_key"])
            for r in catalog.read_table(
                settings, "version_purges", catalog.where_equal("revocation_id", revocation_id)
            ).to_pylist()
        )
        _sets(settings, plan, report, progress)
        for _, scope in sorted(plan.scopes.items()):
            _tables(settings, scope, revocation_id, report, report.started_at, grace, progress)
        for namespace, rows in sorted(plan.records.items()):
            report.landed += excise_landing(settings, revocation_id, rows, progress)
            _record_landing(settings, namespace, rows, report.landed)
        _cards(settings, plan, report, write_card, progress)
    report.remaining = _remaining(report)
    report.finished_at = dt.datetime.now(dt.UTC)
    totals = report.totals()
    records.record_purge(
        settings,
        {
            "revocation_id": revocation_id,
            "criterion": revocation.criterion,
            "value": revocation.value,
            "purged_by": report.purged_by,
            "started_at": report.started_at,
            "finished_at": report.finished_at,
            "documents": totals["documents"],
            "rows_removed": totals["rows_removed"],
            "bytes_removed": totals["bytes_removed"],
            "files_deleted": totals["files_deleted"],
            "details": json.dumps(report.details(), sort_keys=True, default=str),
            "remaining": "\n".join(report.remaining),
        },
    )
    return report


def _sets(settings: Settings, plan: Plan, report: PurgeReport, progress: Progress) -> None:
    """Every shard set and text set holding purged documents, rewritten in place."""
    documents = plan.doc_ids()
    keys = {str(r["shard_set_key"]) for r in samples_holding(settings, sorted(documents))}
    for version_key in report.versions:
        # A set whose purge stopped after its lineage changed is found by its version.
        keys |= {str(r["shard_set_key"]) for r in latest_shard_sets(settings, version_key)}
    for key in sorted(keys):
        row = read_shard_set_row(settings, key)
        if row is None:
            continue
        version = require_version(settings, str(row["version_key"]))
        lineage = shard_set_lineage(settings, key, version)
        rev = plan.revocation.revocation_id
        done = purge_shard_set(settings, row, version, lineage, documents, rev, progress)
        if done is not None:
            report.sets.append(done)
    for version_key in report.versions:
        text = latest_text_set(settings, version_key)
        if text is not None:
            rev = plan.revocation.revocation_id
            done = purge_text_set(settings, text, documents, rev, progress)
            if done is not None:
                report.sets.append(done)


@contextlib.contextmanager
def _holding(settings: Settings, names: list[str], progress: Progress) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for name in sorted(set(names)):
            stack.enter_context(exclusive(settings, name, progress))
        yield


def _tables(
    settings: Settings,
    scope: PurgeScope,
    revocation_id: str,
    report: PurgeReport,
    started: dt.datetime,
    grace: dt.timedelta,
    progress: Progress,
) -> None:
    """Every table of the scope's namespace, without the scope's rows."""
    refs = [
        r for r in existing_tables(settings, scope.namespace) if r.name not in records.KEPT_TABLES
    ]
    indexes = [r for r in refs if r.name in INDEX_WRITERS]
    by_batch = [
        r for r in refs if r not in indexes and "batch_id" in partition_columns(load(settings, r))
    ]
    others = [r for r in refs if r not in by_batch and r not in indexes]

    def run(ref: TableRef, part: PurgeScope, locked: Callable[[str], bool]) -> None:
        kwargs = {"started": started, "grace": grace, "locked": locked, "progress": progress}
        report.tables.append(purge_table(settings, ref, part, revocation_id, **kwargs))  # type: ignore[arg-type]

    # Tables of batches: a run of a batch's stage writes them under its stage lock. Held for a
    # chunk of batches at a time (every stage of each): no run commits their old rows back.
    batches = sorted(scope.touched_batches())
    stages = {b: pipeline_of_batch(settings, b).names for b in batches}
    chunk: list[str] = []
    chunks = []
    for batch in batches:
        if (
            chunk
            and (len(chunk) + 1) * max(len(stages[b]) for b in [*chunk, batch]) > LOCKS_AT_ONCE
        ):
            chunks.append(chunk)
            chunk = []
        chunk.append(batch)
    if chunk:
        chunks.append(chunk)
    for part_batches in chunks:
        part = PurgeScope(
            scope.namespace,
            batches=scope.batches & set(part_batches),
            pairs={p for p in scope.pairs if p[0] in part_batches},
        )
        if not part_batches:
            continue
        names = [stage_lock(stage, b) for b in part_batches for stage in stages[b]]
        with _holding(settings, names, progress):
            for ref in by_batch:
                run(ref, part, _in_batches(part_batches))
    # The dedup indexes: their stages write them under the namespace's index lock.
    for ref in indexes:
        with exclusive(settings, index_lock(INDEX_WRITERS[ref.name], scope.namespace), progress):
            run(ref, scope, lambda uri: True)
    # The rest (lineage, contamination flags) name no batch: their writers commit on the head.
    for ref in others:
        run(ref, scope, lambda uri: False)


def _in_batches(batches: list[str]) -> Callable[[str], bool]:
    """Whether a data file's path lies below a partition of one of `batches`."""
    markers = [f"batch_id={b}/" for b in batches]
    return lambda uri: any(m in uri for m in markers)


def _record_landing(
    settings: Settings, namespace: str, rows: pa.Table, landed: list[tuple[str, FileOutcome]]
) -> None:
    """Fill each planned record's `landing` column with what became of its file."""
    outcome = {(b, f.name): f"{f.outcome}: {f.detail}" for b, f in landed}
    values = [
        outcome.get((b, n))
        for b, n in zip(rows["batch_id"].to_pylist(), rows["source_file"].to_pylist(), strict=True)
    ]
    import pyarrow as pa

    filled = rows.set_column(
        rows.schema.get_field_index("landing"), "landing", pa.array(values, pa.string())
    )
    records.record_plan(settings, namespace, filled)


def _cards(
    settings: Settings, plan: Plan, report: PurgeReport, write_card: CardWriter, progress: Progress
) -> None:
    """The cards of versions over the purged batches, written again."""
    touched = set().union(*(s.touched_batches() for s in plan.scopes.values()))
    for version in all_versions(settings):
        if not touched & set(version.batches):
            continue
        progress(f"{version.version_key}: writing its dataset card again")
        write_card(settings, version)
        report.cards.append(version.version_key)


def _remaining(report: PurgeReport) -> list[str]:
    """What still holds any of the purged documents (or their ids), for the audit."""
    left = [
        f"landed file {batch}/{f.name}: {f.records} purged records' raw bytes remain ({f.detail})"
        for batch, f in report.landed
        if f.outcome == REMAIN
    ]
    left += [f"{t.identifier}: {note}" for t in report.tables for note in t.notes]
    if report.resumed:
        left.append(
            "this run finished one that was killed: its counts leave out what the killed run "
            "removed before"
        )
    left.append(
        "document ids (sha256 of the bytes, no content) in version_exclusions and "
        "purged_documents: the record of what was revoked and purged"
    )
    if report.sets:
        left.append(
            "node caches holding a purged set's old copy drop it at the set's next open or "
            "pre-warm there (fm_purged.json)"
        )
    return left
