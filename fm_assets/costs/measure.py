"""What the platform measures for cost attribution, read from its own records.

- object-store bytes: each landing batch's files (its manifest), each batch's data files in the
  tables partitioned by batch (stage outputs, quarantine, the PII and contamination audits; the
  namespace-wide dedup indexes are not counted), each shard set's and text set's objects;
- node-cache byte-hours: the cache's usage record (`fm_loader.storage.cache_usage`) of each
  cache directory given;
- compute: CPU and GPU seconds of every stage run (`fm_stage_runs`, measured in the slice tasks).

A batch's holdings belong to the batch's team and source; a version's (its shard sets, text sets
and their cached copies) are shared by its batches in proportion to the tokens each contributes.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc

from fm_assets.execution.pipelines import PIPELINES
from fm_assets.settings import Settings
from fm_assets.storage import bookkeeping, catalog
from fm_assets.storage.landing import published_log, read_manifest
from fm_assets.storage.objectstore import ObjectStore, open_object_store
from fm_assets.storage.tables import declared_tables, table_spec
from fm_assets.storage.teams import batch_team
from fm_assets.versions.dataset_version import read_version
from fm_assets.versions.reader import version_documents
from fm_loader.storage.cache_usage import Occupancy, occupancy

LANDING, TABLES, SHARD_SET, TEXT_SET = "landing", "tables", "shard_set", "text_set"


@dataclass(frozen=True)
class Holding:
    """Bytes the object store holds for one batch (landing, tables) or one version's set."""

    kind: str  # LANDING, TABLES, SHARD_SET or TEXT_SET
    name: str  # the batch id, or the set's key
    bytes: int
    created: dt.datetime
    batch: str | None = None  # the owner of a batch's holding
    version: str | None = None  # the version of a set


@dataclass(frozen=True)
class StageCompute:
    batch: str
    stage: str
    committed_at: dt.datetime
    cpu_seconds: float
    gpu_seconds: float


@dataclass
class Measurements:
    """Everything measured, before attribution."""

    owners: dict[str, tuple[str, str]]  # batch -> (team, source)
    holdings: list[Holding]
    cache: list[Occupancy]  # within the window
    compute: list[StageCompute]  # every stage run, whenever committed
    version_tokens: dict[str, dict[str, int]] = field(default_factory=dict)  # version -> batch


def _batch_tables(settings: Settings) -> dict[str, dict[str, int]]:
    """batch -> bytes of its data files in each data namespace's tables partitioned by batch,
    at their current snapshots (only tables that exist: nothing is created here)."""
    _ = PIPELINES  # the stage tables are declared once the pipelines are imported
    by_batch = {name for name in declared_tables() if "batch_id" in table_spec(name).partition_by}
    found: dict[str, dict[str, int]] = {}
    iceberg = catalog.open_catalog(settings)
    for namespace in catalog.data_namespaces(settings):
        present = {
            identifier[-1]
            for identifier in iceberg.list_tables(catalog.catalog_namespace(settings, namespace))
        }
        for name in sorted(by_batch & present):
            files = catalog.load_table(settings, name, namespace=namespace).inspect.files()
            if files.num_rows == 0:
                continue
            batches = pc.struct_field(files.column("partition"), "batch_id").to_pylist()
            sizes = files.column("file_size_in_bytes").to_pylist()
            for batch, size in zip(batches, sizes, strict=True):
                per_table = found.setdefault(str(batch), {})
                per_table[name] = per_table.get(name, 0) + int(size)
    return found


def _directory_bytes(store: ObjectStore, uri: str) -> int:
    """Bytes of the objects directly under the directory `uri` (a set's files)."""
    key = store.key_of(uri)
    return sum(store.size(f"{key}/{name}") or 0 for name in store.list_dir(key))


def _latest_rows(settings: Settings, table: str, key: str) -> list[dict[str, object]]:
    latest: dict[str, dict[str, object]] = {}
    for row in sorted(
        catalog.read_table(settings, table).to_pylist(), key=lambda r: r["created_at"]
    ):
        latest[str(row[key])] = row
    return list(latest.values())


def _version_of(set_key: str) -> str:
    return set_key.split("/", 1)[0]


def measure(
    settings: Settings, cache_dirs: list[Path], since: dt.datetime, until: dt.datetime
) -> Measurements:
    """Every measured figure of the platform (the cache's byte-hours within [since, until))."""
    store = open_object_store(settings)
    owners: dict[str, tuple[str, str]] = {}
    holdings: list[Holding] = []
    runs = bookkeeping.stage_runs(settings)
    first_commit: dict[str, dt.datetime] = {}
    for run in runs:
        first_commit.setdefault(str(run["batch_id"]), run["committed_at"])
    tables = _batch_tables(settings)
    for _, batch in published_log(store):
        if batch in owners:
            continue
        manifest = read_manifest(store, batch)
        owners[batch] = (str(batch_team(store, batch)), manifest.source)
        landed = dt.datetime.fromisoformat(manifest.ingested_at)
        holdings.append(Holding(LANDING, batch, manifest.total_bytes, landed, batch=batch))
        if batch in tables:
            created = first_commit.get(batch, landed)
            size = sum(tables[batch].values())
            holdings.append(Holding(TABLES, batch, size, created, batch=batch))
    sets = [(SHARD_SET, "shard_set_key", "shard_sets"), (TEXT_SET, "uri", "text_sets")]
    for kind, key, table in sets:
        for row in _latest_rows(settings, table, key):
            size = _directory_bytes(store, str(row["uri"]))
            made: dt.datetime = row["created_at"]  # type: ignore[assignment]
            name, version = str(row[key]), str(row["version_key"])
            holdings.append(Holding(kind, name, size, made, version=version))
    cache = [o for root in cache_dirs for o in occupancy(root, since, until)]
    compute = [
        StageCompute(
            str(r["batch_id"]),
            str(r["stage"]),
            r["committed_at"],
            float(r.get("cpu_seconds") or 0.0),
            float(r.get("gpu_seconds") or 0.0),
        )
        for r in runs
    ]
    measured = Measurements(owners, holdings, cache, compute)
    versions = {h.version for h in holdings if h.version} | {
        _version_of(o.shard_set_key) for o in cache
    }
    for version_key in sorted(v for v in versions if v):
        measured.version_tokens[version_key] = _tokens_by_batch(settings, version_key)
    return measured


def _tokens_by_batch(settings: Settings, version_key: str) -> dict[str, int]:
    """batch -> tokens it contributes to the version (documents, if it has no tokens)."""
    version = read_version(settings, version_key)
    if version is None:
        return {}
    docs = version_documents(settings, version, version.pipeline.final, ("batch_id", "num_tokens"))
    grouped = docs.group_by("batch_id").aggregate([("num_tokens", "sum"), ("batch_id", "count")])
    rows = grouped.to_pylist()
    tokens = {str(r["batch_id"]): int(r["num_tokens_sum"] or 0) for r in rows}
    if sum(tokens.values()) == 0:
        tokens = {str(r["batch_id"]): int(r["batch_id_count"]) for r in rows}
    return tokens
