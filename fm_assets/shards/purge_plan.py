"""What a purge removes: the revoked records of every data namespace, where their landed bytes
are, and what each dataset version loses.

A revocation by batch, source or licence covers whole landing batches (from the landing
manifests: a batch has one source and one licence); one by document or raw bytes covers every
(batch, document) instance any table of any snapshot holds with that id or those bytes. The
plan is recorded (`purged_documents`, `version_purges`) before anything is removed; run again
after a crash, the purge adds what it finds to what it recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.execution.pipelines import PIPELINES
from fm_assets.settings import Settings
from fm_assets.shards.purge_landing import plan_landing
from fm_assets.storage import catalog
from fm_assets.storage.landing import list_batches
from fm_assets.storage.maintenance.tables import TableRef, existing_tables
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.purge import records
from fm_assets.storage.purge.find import rows_matching, table_columns
from fm_assets.storage.purge.scope import PurgeScope, doomed_mask
from fm_assets.storage.revocations import RevocationRecord
from fm_assets.versions.reader import version_documents
from fm_assets.versions.revocation import all_versions

Progress = Callable[[str], None]
RAW_TABLES = tuple(p.names[0] for p in PIPELINES.values())
FINAL_TABLES = tuple(p.final for p in PIPELINES.values())
RECORD_COLUMNS = ["batch_id", "doc_id", "record_id", "source_file"]


@dataclass
class Plan:
    """The purge of one revocation: per data namespace, its scope and its purged records."""

    revocation: RevocationRecord
    scopes: dict[str, PurgeScope] = field(default_factory=dict)
    records: dict[str, pa.Table] = field(default_factory=dict)  # PURGED_DOCUMENTS rows
    # (batch, source file) -> records the file holds, purged or not
    file_records: dict[tuple[str, str], int] = field(default_factory=dict)
    versions: list[dict[str, object]] = field(default_factory=list)  # version_purges rows
    resumed: bool = False  # an earlier run recorded this plan (and was killed after it)

    @property
    def documents(self) -> int:
        """Purged (batch, document) instances."""
        found = 0
        for rows in self.records.values():
            pairs = zip(rows["batch_id"].to_pylist(), rows["doc_id"].to_pylist(), strict=True)
            found += len({(b, d) for b, d in pairs if d})
        return found

    def doc_ids(self) -> set[str]:
        """Every purged document id, of every namespace (what sets may hold)."""
        return set().union(*(s.documents for s in self.scopes.values()))


def _ref(settings: Settings, name: str, namespace: str) -> TableRef:
    return TableRef(name, namespace, catalog.table_identifier(settings, name, namespace))


def find_scopes(settings: Settings, revocation: RevocationRecord) -> dict[str, PurgeScope]:
    """The rows the revocation covers in each data namespace (those holding any)."""
    scopes: dict[str, PurgeScope] = {}
    if revocation.criterion in ("batch", "source", "license"):
        for manifest in list_batches(open_object_store(settings)):
            value = {
                "batch": manifest.batch_id,
                "source": manifest.source,
                "license": manifest.license,
            }[revocation.criterion]
            if value == revocation.value:
                scope = scopes.setdefault(manifest.namespace, PurgeScope(manifest.namespace))
                scope.batches.add(manifest.batch_id)
    else:
        where = catalog.where_equal(revocation.column, revocation.value)
        for namespace in catalog.data_namespaces(settings):
            scope = PurgeScope(namespace)
            for ref in existing_tables(settings, namespace):
                names = table_columns(settings, ref)
                wanted = {revocation.column, "batch_id", "doc_id"}
                if ref.name in records.KEPT_TABLES or not wanted <= set(names):
                    continue
                rows = rows_matching(settings, ref, where, ["batch_id", "doc_id"])
                pairs = zip(rows["batch_id"].to_pylist(), rows["doc_id"].to_pylist(), strict=True)
                scope.pairs |= {(b, d) for b, d in pairs if d}
            if not scope.empty:
                scopes[namespace] = scope
    for namespace, scope in scopes.items():
        scope.documents |= {doc_id for _, doc_id in scope.pairs}
        if scope.batches:
            where = catalog.where_in("batch_id", sorted(scope.batches))
            present = {r.name for r in existing_tables(settings, namespace)}
            for name in sorted(present.intersection(FINAL_TABLES)):
                rows = rows_matching(settings, _ref(settings, name, namespace), where, ["doc_id"])
                scope.documents |= set(rows["doc_id"].to_pylist())
    return scopes


def _records(settings: Settings, scope: PurgeScope) -> tuple[pa.Table, pa.Table]:
    """(purged raw-stage records, every raw-stage record) of the scope's batches: rows of the
    first stage's table and its quarantine rows, each once."""
    touched = sorted(scope.touched_batches())
    where = catalog.where_in("batch_id", touched)
    schema = pa.schema([records.PURGED_DOCUMENTS.field(c) for c in RECORD_COLUMNS])
    raw_stage = catalog.where_all(where, catalog.where_in("stage", list(RAW_TABLES)))
    sources = [(name, where) for name in RAW_TABLES] + [("quarantine", raw_stage)]
    # A namespace holds the tables of its own pipeline only (text or image-text), and no
    # quarantine until a stage quarantined something.
    present = {r.name for r in existing_tables(settings, scope.namespace)}
    parts = [pa.Table.from_pylist([], schema=schema)]
    for name, condition in sources:
        if name not in present:
            continue
        ref = _ref(settings, name, scope.namespace)
        rows = rows_matching(settings, ref, condition, RECORD_COLUMNS)
        parts.append(rows.select(RECORD_COLUMNS).cast(schema))
    every = pa.concat_tables(parts)
    keys = pc.binary_join_element_wise(every["batch_id"], every["record_id"], "\x1f")
    first = pc.index_in(pc.unique(keys), keys)  # one row per record
    every = every.take(first)
    return every.filter(doomed_mask(every, scope)), every


def plan_purge(settings: Settings, revocation: RevocationRecord, progress: Progress) -> Plan:
    """Find what the revocation covers, merged with the plan an earlier run recorded, and
    record the plan (the versions' losses only on the first run: later the rows are gone)."""
    plan = Plan(revocation)
    found = find_scopes(settings, revocation)
    namespaces = sorted(set(found) | set(catalog.data_namespaces(settings)))
    first_run = True
    for namespace in namespaces:
        earlier = records.read_plan(settings, namespace, revocation.revocation_id)
        scope = found.get(namespace, PurgeScope(namespace))
        if earlier.num_rows:
            first_run = False
            pairs = zip(earlier["batch_id"].to_pylist(), earlier["doc_id"].to_pylist(), strict=True)
            scope.pairs |= {(b, d) for b, d in pairs if d}
            scope.documents |= {d for d in earlier["doc_id"].to_pylist() if d}
        if scope.empty:
            continue
        purged, every = _records(settings, scope)
        if earlier.num_rows:
            purged = pa.concat_tables([earlier.select(RECORD_COLUMNS), purged])
        rows = purged
        keys = pc.binary_join_element_wise(rows["batch_id"], rows["record_id"], "\x1f")
        rows = rows.take(pc.index_in(pc.unique(keys), keys))
        table = rows.append_column(
            "revocation_id", pa.array([revocation.revocation_id] * rows.num_rows, pa.string())
        ).append_column("landing", pa.nulls(rows.num_rows, pa.string()))
        columns = records.PURGED_DOCUMENTS.names
        plan.records[namespace] = table.select(columns).cast(records.PURGED_DOCUMENTS)
        plan.scopes[namespace] = scope
        files = zip(every["batch_id"].to_pylist(), every["source_file"].to_pylist(), strict=True)
        for batch, name in files:
            plan.file_records[(batch, name)] = plan.file_records.get((batch, name), 0) + 1
        progress(
            f"{namespace}: {len(scope.batches)} whole batches, {len(scope.pairs)} documents of "
            f"other batches, {plan.records[namespace].num_rows} landed records"
        )
    plan.resumed = not first_run
    if first_run:
        plan.versions = _version_losses(settings, plan)
    for namespace, rows in plan.records.items():
        records.record_plan(settings, namespace, rows)
        whole = plan.scopes[namespace].batches
        plan_landing(settings, revocation.revocation_id, rows, plan.file_records, whole)
    if first_run:
        records.record_version_purges(settings, revocation.revocation_id, plan.versions)
    return plan


def _version_losses(settings: Settings, plan: Plan) -> list[dict[str, object]]:
    """version_purges rows: each version's documents (and tokens) the plan removes."""
    touched = {ns: s.touched_batches() for ns, s in plan.scopes.items()}
    now = records.now()
    rows = []
    for version in all_versions(settings):
        held = {b for ns in version.namespaces for b in touched.get(ns, set())}
        batches = held & set(version.batches)
        if not batches:
            continue
        docs = version_documents(
            settings,
            version,
            version.pipeline.final,
            ("doc_id", "batch_id", "namespace", "num_tokens"),
            catalog.where_in("batch_id", sorted(batches)),
        )
        lost = pa.array([False] * docs.num_rows, pa.bool_())
        for namespace, scope in plan.scopes.items():
            mine = pc.equal(docs["namespace"], namespace)
            lost = pc.or_(lost, pc.and_(mine, doomed_mask(docs, scope)))
        gone = docs.filter(lost)
        if gone.num_rows:
            rows.append(
                {
                    "version_key": version.version_key,
                    "revocation_id": plan.revocation.revocation_id,
                    "documents_removed": gone.num_rows,
                    "tokens_removed": int(pc.sum(gone["num_tokens"]).as_py() or 0),
                    "purged_at": now,
                }
            )
    return rows
