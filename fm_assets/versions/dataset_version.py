"""Dataset versions: immutable `<dataset>@v<N>` cuts over the curated tables.

A version is a row in `dataset_versions` plus an Iceberg tag of the same name on every document
table of every data namespace it holds (each namespace's tables live in its own catalog
namespace), so its documents can be read back exactly as they were, whatever later runs commit.
A version cut by a revocation shares its base's snapshots and lists the documents it leaves out in
`version_exclusions`, as does a version over several namespaces for the extra copies of a
document; every read of a version's rows goes through `versions.reader`, which drops them.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from fm_assets.curation.generators import refuse_generators
from fm_assets.curation.namespaces import load_namespace_policy
from fm_assets.execution.pipeline import Pipeline
from fm_assets.execution.pipelines import pipeline_for, pipeline_of_batch
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import latest_check_results, latest_stage_run
from fm_assets.storage.landing import TEXT_MODALITY, published_log
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.revocations import read_revocations
from fm_assets.versions.membership import (
    batch_namespaces,
    batches_by_namespace,
    choose_documents,
    exclude_documents,
    record_namespaces,
    version_namespaces,
)
from fm_assets.versions.policies import record_policies, refuse_stale_batches

_KEY = re.compile(r"^(?P<dataset>[a-z0-9][a-z0-9_.-]*)@v(?P<n>[1-9][0-9]*)$")
DATASET_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@dataclass(frozen=True)
class DatasetVersion:
    version_key: str
    dataset: str
    version: int
    batches: tuple[str, ...]
    snapshot_ids: dict[str, dict[str, int]]  # data namespace -> {document table: snapshot id}
    code_versions: dict[str, str]
    tokenizer_hash: str
    num_documents: int
    num_tokens: int
    content_hash: str
    modality: str = TEXT_MODALITY  # the pipeline of its batches: "text" or "image-text"

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline of the version's batches: its stages are the tables it tags."""
        return pipeline_for(self.modality)

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The data namespaces whose tables the version tagged, sorted."""
        return tuple(sorted(self.snapshot_ids))

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> DatasetVersion:
        snapshots = json.loads(str(row["snapshot_ids"]))
        if any(not isinstance(v, dict) for v in snapshots.values()):
            raise ValueError(
                f"dataset version {row['version_key']} was cut before each data namespace had "
                "its own catalog namespace, and this platform cannot read it; existing FM_HOMEs "
                "are not migrated: land and run the data again on a new FM_HOME"
            )
        return cls(
            version_key=str(row["version_key"]),
            dataset=str(row["dataset"]),
            version=int(row["version"]),
            batches=tuple(row["batches"]),
            snapshot_ids={
                ns: {t: int(v) for t, v in tables.items()} for ns, tables in snapshots.items()
            },
            code_versions=json.loads(str(row["code_versions"])),
            tokenizer_hash=str(row["tokenizer_hash"]),
            num_documents=int(row["num_documents"]),
            num_tokens=int(row["num_tokens"]),
            content_hash=str(row["content_hash"]),
            modality=str(row.get("modality") or TEXT_MODALITY),
        )


def parse_version_key(key: str) -> tuple[str, int]:
    match = _KEY.match(key)
    if not match:
        raise ValueError(f"{key!r} is not a version key; expected DATASET@vN, e.g. web@v1")
    return match["dataset"], int(match["n"])


def read_version(settings: Settings, version_key: str) -> DatasetVersion | None:
    rows = catalog.read_table(
        settings, "dataset_versions", row_filter=catalog.where_equal("version_key", version_key)
    ).to_pylist()
    return DatasetVersion.from_row(rows[0]) if rows else None


def require_version(settings: Settings, version_key: str) -> DatasetVersion:
    version = read_version(settings, version_key)
    if version is None:
        raise ValueError(
            f"dataset version {version_key} does not exist; create one with "
            f"`fm version create {version_key.split('@')[0]}`"
        )
    return version


def next_version_key(settings: Settings, dataset: str) -> str:
    if not DATASET_NAME.match(dataset):
        raise ValueError(f"dataset name {dataset!r} must match {DATASET_NAME.pattern}")
    rows = catalog.read_table(
        settings,
        "dataset_versions",
        row_filter=catalog.where_equal("dataset", dataset),
        columns=("version",),
    )
    latest = pc.max(rows.column("version")).as_py() if rows.num_rows else 0
    return f"{dataset}@v{(latest or 0) + 1}"


def default_batches(settings: Settings, modality: str | None = None) -> list[str]:
    """Every published batch (of `modality`, if given) whose stages all ran and whose latest
    checks all passed."""
    store = open_object_store(settings)
    published = list(dict.fromkeys(b for _, b in published_log(store)))
    stages = {b: pipeline_of_batch(settings, b).names for b in published}
    if modality is not None:
        published = [b for b in published if pipeline_of_batch(settings, b).modality == modality]
    results = latest_check_results(settings)
    passed: dict[tuple[str, str], bool] = {}
    for (asset, partition, _), row in results.items():
        passed[(asset, partition)] = passed.get((asset, partition), True) and bool(row["passed"])
    return [
        batch_id
        for batch_id in published
        if all(passed.get((stage, batch_id), False) for stage in stages[batch_id])
    ]


def batches_pipeline(settings: Settings, version_key: str, batches: list[str]) -> Pipeline:
    """The one pipeline of `batches`; a version mixing modalities is refused, saying how to
    cut one per modality."""
    found: dict[str, list[str]] = {}
    for batch_id in batches:
        found.setdefault(pipeline_of_batch(settings, batch_id).modality, []).append(batch_id)
    if len(found) > 1:
        counts = ", ".join(f"{len(b)} {m}" for m, b in sorted(found.items()))
        raise ValueError(
            f"{version_key} would mix modalities ({counts} batches); a version holds one: "
            "cut one per modality with `fm version create DATASET --modality text|image-text` "
            "(a loader mixture may combine them)"
        )
    return pipeline_for(next(iter(found), TEXT_MODALITY))


def choose_batches(
    settings: Settings, version_key: str, batches: list[str] | None, modality: str | None = None
) -> list[str]:
    """The batches a new version covers (default: all passing, of `modality` if given); refuses
    a version with no documents, or of two modalities.

    Reads only the bookkeeping, so `fm version create` refuses at once, naming what each stage
    dropped, instead of cutting an empty version that fails at `fm shards build`.
    """
    chosen = sorted(set(batches or default_batches(settings, modality)))
    if not chosen:
        of = f" of modality {modality}" if modality else ""
        raise ValueError(
            f"no landing batch{of} has passed its checks: process one with `fm run --batch ID`, "
            "or name batches with --batches"
        )
    batch_pipeline = batches_pipeline(settings, version_key, chosen)
    if modality is not None and batch_pipeline.modality != modality:
        raise ValueError(
            f"{version_key}: the batches named are {batch_pipeline.modality}, not {modality}"
        )
    final = batch_pipeline.final
    runs = {b: latest_stage_run(settings, b, final) for b in chosen}
    missing = [b for b, run in runs.items() if run is None]
    if missing:
        raise ValueError(
            f"batches {', '.join(missing)} have not run {final}; run `fm run --batch ID` first"
        )
    load_namespace_policy(settings).refuse_mix(batch_namespaces(settings, chosen), version_key)
    refuse_stale_batches(settings, version_key, chosen)
    if sum(int(run["records_kept"]) for run in runs.values() if run) == 0:
        raise ValueError(
            f"{version_key} would hold no documents: {drop_summary(settings, chosen)}; "
            "land more data, or change the dataset's policy (FM_POLICY_FILE) and rerun"
        )
    return chosen


def namespaces_of(settings: Settings, version: DatasetVersion) -> list[str]:
    """The namespaces a version holds: as recorded, or (cut before they were) its batches'."""
    return version_namespaces(settings, version.version_key) or batch_namespaces(
        settings, version.batches
    )


def drop_summary(settings: Settings, batches: list[str]) -> str:
    """What each stage dropped from `batches`: "raw_documents 3 -> 1 (2 empty_record), ..."."""
    rules: dict[str, Counter[str]] = {}
    quarantined = pa.concat_tables(
        [
            catalog.read_table(
                settings,
                "quarantine",
                catalog.where_in("batch_id", held),
                columns=("stage", "rule"),
                namespace=namespace,
            )
            for namespace, held in batches_by_namespace(settings, batches).items()
        ]
    )
    for stage, rule in zip(
        quarantined.column("stage").to_pylist(), quarantined.column("rule").to_pylist(), strict=True
    ):
        rules.setdefault(stage, Counter())[rule] += 1
    parts = []
    for stage in batches_pipeline(settings, "the version", batches).names:
        runs = [latest_stage_run(settings, b, stage) for b in batches]
        records_in = sum(int(r["records_in"]) for r in runs if r)
        kept = sum(int(r["records_kept"]) for r in runs if r)
        if kept < records_in:
            why = ", ".join(f"{n} {rule}" for rule, n in rules.get(stage, Counter()).most_common(3))
            parts.append(f"{stage} {records_in} -> {kept} ({why})")
    return "; ".join(parts) or "the batches hold no records"


def create_version(
    settings: Settings,
    version_key: str,
    batches: list[str] | None,
    run_id: str | None,
    modality: str | None = None,
) -> tuple[DatasetVersion, bool]:
    """Cut `version_key` over `batches` (default: all passing ones, of `modality` if given);
    return (version, created)."""
    dataset, number = parse_version_key(version_key)
    existing = read_version(settings, version_key)
    if existing is not None:
        wanted = batches or default_batches(settings, modality or existing.modality)
        if tuple(sorted(set(wanted))) != existing.batches:
            raise ValueError(
                f"{version_key} already exists over other batches; versions are immutable: "
                f"create {dataset}@v{number + 1} instead"
            )
        return existing, False
    chosen = choose_batches(settings, version_key, batches, modality)
    batch_pipeline = batches_pipeline(settings, version_key, chosen)
    final_stage = batch_pipeline.final
    stage_keys = []
    code_versions: dict[str, str] = {}
    for batch_id in chosen:
        for stage in batch_pipeline.names:
            run = latest_stage_run(settings, batch_id, stage)
            if run is None:
                raise ValueError(
                    f"batch {batch_id} has not run {stage}; run `fm run --batch {batch_id}`"
                )
            code_versions[stage] = str(run["code_version"])
            if stage == final_stage:
                stage_keys.append(str(run["stage_key"]))

    held = batches_by_namespace(settings, chosen)
    snapshot_ids = {
        namespace: {
            t: snapshot
            for t in batch_pipeline.names
            if (snapshot := catalog.current_snapshot_id(settings, t, namespace=namespace))
            is not None
        }
        for namespace in held
    }
    docs = pa.concat_tables(
        [
            catalog.read_table(
                settings,
                final_stage,
                row_filter=catalog.where_in("batch_id", in_namespace),
                snapshot_id=snapshot_ids[namespace][final_stage],
                columns=(
                    "doc_id",
                    "num_tokens",
                    "tokenizer_hash",
                    "source",
                    "license",
                    "batch_id",
                    "namespace",
                    "generator_model",
                ),
                namespace=namespace,
            )
            for namespace, in_namespace in held.items()
        ]
    )
    # What a recorded revocation names stays out of every later version too; a document landed
    # into several of the version's namespaces is kept once.
    published = {b: i for i, (_, b) in enumerate(published_log(open_object_store(settings)))}
    docs, revoked, duplicates = choose_documents(
        docs, read_revocations(settings), lambda b: published.get(b, len(published))
    )
    refuse_generators(settings, version_key, docs)
    if docs.num_rows == 0:
        raise ValueError(
            f"{version_key} would hold no documents: every document of batches "
            f"{', '.join(chosen)} is revoked (see `fm lineage revocations`); land other data"
        )
    tokenizers = pc.unique(docs.column("tokenizer_hash")).to_pylist()
    if len(tokenizers) > 1:
        raise ValueError(
            f"batches were tokenized with {len(tokenizers)} different tokenizers; rerun them "
            "with one default tokenizer (`fm tokenizer register PATH --default`, then `fm run`)"
        )
    doc_ids = sorted(docs.column("doc_id").to_pylist())
    content_hash = hashlib.sha256("\n".join([*sorted(stage_keys), *doc_ids]).encode()).hexdigest()

    version = DatasetVersion(
        version_key=version_key,
        dataset=dataset,
        version=number,
        batches=tuple(chosen),
        snapshot_ids=snapshot_ids,
        code_versions=code_versions,
        tokenizer_hash=tokenizers[0] if tokenizers else "",
        num_documents=docs.num_rows,
        num_tokens=int(pc.sum(docs.column("num_tokens")).as_py() or 0),
        content_hash=content_hash,
        modality=batch_pipeline.modality,
    )
    for namespace in held:
        exclude_documents(
            settings, version_key, namespace, revoked.get(namespace, {}), duplicates.get(namespace)
        )
    record_namespaces(settings, version_key, list(held))
    record_policies(settings, version_key, chosen)
    register_version(settings, version, run_id)
    return version, True


def register_version(settings: Settings, version: DatasetVersion, run_id: str | None) -> None:
    """Tag the version's snapshots (every document table of every namespace it holds) with its
    key and append its `dataset_versions` row.

    The row goes last: a crash before it leaves tags that the next attempt replaces.
    """
    for namespace, snapshots in version.snapshot_ids.items():
        for table_name, snapshot_id in snapshots.items():
            table = catalog.load_table(settings, table_name, namespace=namespace)
            manage = table.manage_snapshots()
            if version.version_key in table.metadata.refs:
                # Left by an attempt that crashed before writing the version row.
                manage = manage.remove_tag(version.version_key)
            manage.create_tag(snapshot_id, version.version_key).commit()
    row = {
        "version_key": version.version_key,
        "dataset": version.dataset,
        "version": version.version,
        "batches": list(version.batches),
        "snapshot_ids": json.dumps(version.snapshot_ids, sort_keys=True),
        "code_versions": json.dumps(version.code_versions, sort_keys=True),
        "tokenizer_hash": version.tokenizer_hash,
        "num_documents": version.num_documents,
        "num_tokens": version.num_tokens,
        "content_hash": version.content_hash,
        "run_id": run_id,
        "created_at": dt.datetime.now(dt.UTC),
        "modality": version.modality,
    }
    catalog.append_rows(settings, "dataset_versions", pa.Table.from_pylist([row]))
