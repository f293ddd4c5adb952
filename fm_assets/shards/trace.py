"""Lineage queries: a sample back to its raw records, a document forward to every sample, a run.

Each answer is a list of flat JSON-ready dicts (what `fm lineage` prints one per line), built
from catalog queries: `sample_documents`, the versions' tagged snapshots of `raw_documents`, the
stage-run bookkeeping, and the run records beside each shard set. A version is read in the data
namespaces it holds; a document (whose namespace the caller need not know) in every namespace.
"""

from __future__ import annotations

import json
from typing import Any

from fm_assets.execution.pipelines import PIPELINES
from fm_assets.settings import Settings
from fm_assets.shards.build import read_shard_set_row
from fm_assets.shards.lineage import sample_segments, samples_holding
from fm_assets.storage import bookkeeping, catalog
from fm_assets.storage.landing import IMAGE_TEXT_MODALITY, TEXT_MODALITY
from fm_assets.storage.maintenance.history import ancestors
from fm_assets.storage.schemas import PROVENANCE_FIELDS
from fm_assets.versions.dataset_version import DatasetVersion, require_version
from fm_assets.versions.reader import version_documents
from fm_assets.versions.revocation import all_versions
from fm_loader.sources.provenance import read_revocation, read_run_record, read_run_records

_PROVENANCE = tuple(f.name for f in PROVENANCE_FIELDS)
# Where a raw record is in its landed file, per modality: a WARC record's offset, line and id;
# a pair's tar member (and its header's offset) or Parquet row.
_POSITION = {
    TEXT_MODALITY: ("record_offset", "record_line", "warc_record_id"),
    IMAGE_TEXT_MODALITY: ("record_offset", "record_line", "image_member"),
}


def stage_code_versions(settings: Settings, version: DatasetVersion) -> dict[str, dict[str, str]]:
    """batch -> {stage: code version} of the stage runs whose output the version tagged."""
    # Ancestry across what catalog maintenance expired (its history table keeps the links).
    history = {
        (namespace, stage): ancestors(
            settings, catalog.load_table(settings, stage, namespace=namespace).metadata, snapshot_id
        )
        for namespace, snapshots in version.snapshot_ids.items()
        for stage, snapshot_id in snapshots.items()
    }
    found: dict[str, dict[str, str]] = {b: {} for b in version.batches}
    namespace_of = {b: catalog.batch_namespace(settings, b) for b in version.batches}
    for run in bookkeeping.stage_runs(settings):  # oldest first: the latest run wins
        batch, stage = run["batch_id"], run["stage"]
        if batch not in found:
            continue
        if int(run["output_snapshot_id"]) in history.get((namespace_of[batch], stage), set()):
            found[batch][stage] = str(run["code_version"])
    return found


def _record_index(record_id: str) -> int | None:
    index = record_id.rpartition(":")[2]
    return int(index) if index.isdigit() else None


def describe_sample(settings: Settings, shard_set_key: str, sample: int) -> list[dict[str, Any]]:
    """One dict per document segment of a sample: its span, raw record and stage versions."""
    row = read_shard_set_row(settings, shard_set_key)
    if row is None:
        raise ValueError(
            f"unknown shard set {shard_set_key}; shard set keys look like web@v1/<config>, "
            "as `fm shards build` prints them"
        )
    version = require_version(settings, str(row["version_key"]))
    segments = sample_segments(settings, shard_set_key, sample, version)
    doc_ids = sorted({s["doc_id"] for s in segments})
    position = _POSITION[version.modality]
    raw = version_documents(
        settings,
        version,
        version.pipeline.names[0],
        (*_PROVENANCE, *position, "raw_size"),
        catalog.where_in("doc_id", doc_ids),
    )
    by_id = {r["doc_id"]: r for r in raw.to_pylist()}
    code_versions = stage_code_versions(settings, version)
    out = []
    for segment in segments:
        origin = by_id.get(segment["doc_id"])
        if origin is None:
            raise ValueError(
                f"document {segment['doc_id']} of {shard_set_key} sample {sample} is missing "
                f"from {version.pipeline.names[0]} at {version.version_key}'s snapshot: were "
                "snapshots expired?"
            )
        out.append(
            {
                "doc_id": segment["doc_id"],
                "token_start": segment["token_start"],
                "token_end": segment["token_end"],
                "doc_token_offset": segment["doc_offset"],
                "raw_sha256": origin["raw_sha256"],
                "raw_size": origin["raw_size"],
                "batch_id": origin["batch_id"],
                "source_file": origin["source_file"],
                "record_id": origin["record_id"],
                "record_index": _record_index(origin["record_id"]),
                **{name: origin[name] for name in position},
                "url": origin["url"],
                "external_id": origin["external_id"],
                "source": origin["source"],
                "license": origin["license"],
                "namespace": origin["namespace"],
                **generator_fields(origin),
                "version": version.version_key,
                "shard_set": shard_set_key,
                "sample": sample,
                "code_versions": code_versions.get(origin["batch_id"], {}),
            }
        )
    return out


def _shard_set_rows(settings: Settings) -> dict[str, dict[str, Any]]:
    """shard_set_key -> its latest `shard_sets` row."""
    latest: dict[str, dict[str, Any]] = {}
    rows = catalog.read_table(settings, "shard_sets").to_pylist()
    for row in sorted(rows, key=lambda r: r["created_at"]):
        latest[row["shard_set_key"]] = row
    return latest


def generator_fields(row: dict[str, Any]) -> dict[str, Any]:
    """A document's generator, as lineage prints it: the model id and the whole record (null
    both for a natural document)."""
    text = row.get("generator")
    return {
        "generator_model": row.get("generator_model"),
        "generator": json.loads(text) if text else None,
    }


def _generators(settings: Settings, doc_ids: list[str]) -> dict[str, dict[str, Any]]:
    """doc id -> its generator fields, from the first table of each pipeline."""
    found: dict[str, dict[str, Any]] = {}
    for first in sorted({p.names[0] for p in PIPELINES.values()}):
        rows = catalog.read_namespaces(
            settings,
            first,
            catalog.data_namespaces(settings),
            catalog.where_in("doc_id", doc_ids),
            ("doc_id", "generator_model", "generator"),
        )
        for row in rows.to_pylist():
            found[row["doc_id"]] = generator_fields(row)
    return found


def document_ids(settings: Settings, ref: str) -> list[str]:
    """Doc ids named by `ref`: a doc id, or the sha256 of raw record bytes (of a pair: of its
    landed image, so every pair holding that image)."""
    found: set[str] = set()
    for first in sorted({p.names[0] for p in PIPELINES.values()}):
        rows = catalog.read_namespaces(
            settings,
            first,
            catalog.data_namespaces(settings),
            catalog.where_equal("raw_sha256", ref),
            ("doc_id",),
        )
        found.update(rows.column("doc_id").to_pylist())
    return sorted({ref, *found})


def versions_holding(settings: Settings, doc_ids: list[str]) -> list[str]:
    """Every version whose documents (at its tagged snapshots, less its exclusions) include one
    of `doc_ids`: only versions over a batch the documents were landed in are read."""
    batches: set[str] = set()
    for final in sorted({p.final for p in PIPELINES.values()}):
        landed = catalog.read_namespaces(
            settings,
            final,
            catalog.data_namespaces(settings),
            catalog.where_in("doc_id", doc_ids),
            ("batch_id",),
        )
        batches |= set(landed.column("batch_id").to_pylist())
    wanted = catalog.where_in("doc_id", doc_ids)
    return [
        version.version_key
        for version in all_versions(settings)
        if batches & set(version.batches)
        and version_documents(
            settings, version, version.pipeline.final, ("doc_id",), wanted
        ).num_rows
    ]


def places_of_document(settings: Settings, ref: str) -> list[dict[str, Any]]:
    """One dict per (shard set, sample) holding the document, with the runs that read the set,
    then one per version holding it that no shard set of it does (shard_set and sample null)."""
    doc_ids = document_ids(settings, ref)
    generators = _generators(settings, doc_ids)
    natural = generator_fields({})
    rows = samples_holding(settings, doc_ids)
    sets = _shard_set_rows(settings)
    runs: dict[str, list[str]] = {}
    revoked: dict[str, str | None] = {}
    for key in {r["shard_set_key"] for r in rows}:
        uri = str(sets[key]["uri"])
        runs[key] = [r.run_id for r in read_run_records(uri, settings.s3_endpoint)]
        marker = read_revocation(uri, settings.s3_endpoint)
        revoked[key] = marker.revocation_id if marker else None
    places: list[dict[str, Any]] = [
        {
            "doc_id": r["doc_id"],
            "version": sets[r["shard_set_key"]]["version_key"],
            "shard_set": r["shard_set_key"],
            "sample": r["sample"],
            "token_start": r["token_start"],
            "token_end": r["token_end"],
            "revoked": revoked[r["shard_set_key"]],
            "runs": runs[r["shard_set_key"]],
            **generators.get(r["doc_id"], natural),
        }
        for r in rows
    ]
    in_sets = {p["version"] for p in places}
    for version_key in versions_holding(settings, doc_ids):
        if version_key not in in_sets:
            places.append(
                {
                    "doc_id": ref,
                    "version": version_key,
                    "shard_set": None,
                    "sample": None,
                    # A raw sha256 names documents landed with those bytes: one generator each.
                    **generators.get(ref, next(iter(generators.values()), natural)),
                }
            )
    if not places:
        raise ValueError(
            f"no dataset version holds document {ref}; check the id (a doc id or raw sha256): "
            "it may have been dropped by a stage (see the quarantine table) or never landed"
        )
    return places


def describe_run(settings: Settings, run_id: str) -> list[dict[str, Any]]:
    """One dict per shard set a training run read: version, snapshots and position consumed."""
    out = []
    for key, row in sorted(_shard_set_rows(settings).items()):
        record = read_run_record(str(row["uri"]), run_id, settings.s3_endpoint)
        if record is None:
            continue
        version = require_version(settings, str(row["version_key"]))
        out.append(
            {
                "run_id": run_id,
                "version": version.version_key,
                "shard_set": key,
                "snapshot_ids": version.snapshot_ids,
                "manifest_sha256": record.manifest_sha256,
                "sources": list(record.sources),
                "epoch": record.epoch,
                "position": record.position,
                "source_counts": list(record.source_counts),
                "world_size": record.world_size,
                "seed": record.seed,
                "recorded_at": record.recorded_at,
            }
        )
    if not out:
        raise ValueError(
            f"no training run {run_id} is recorded beside any shard set; a trainer records its "
            "run with make_dataset(..., run_id=...)"
        )
    return out
