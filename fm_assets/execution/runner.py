"""Run one curation stage for one landing batch on Ray, and commit its output to Iceberg.

Each run is keyed by content: (upstream stage key, stage name, code version, config hash).
When the latest committed run of the stage for the batch has the same key, nothing runs.
Otherwise the stage runs on Ray workers over chunks of the batch, and the quarantine rows, the
output partition and a `stage_runs` row are committed, in that order: a crash before the last
commit leaves no matching run, so the next attempt redoes and replaces the partitions.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from fm_assets.curation.policy import load_policy
from fm_assets.execution import pipeline
from fm_assets.execution.compute import Progress, ensure_ray, process_on_ray, ray_cpus, split_rows
from fm_assets.settings import Settings
from fm_assets.stages.base import CombineContext, Stage, StageResult
from fm_assets.stages.raw import LANDED_FILES
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import latest_stage_run, record_stage_run
from fm_assets.storage.landing import BatchManifest, published_log, read_manifest
from fm_assets.storage.objectstore import open_object_store


@dataclass(frozen=True)
class StageRunReport:
    """What one stage run did for one batch; becomes the asset's materialization metadata."""

    stage: str
    batch_id: str
    stage_key: str
    code_version: str
    config_hash: str
    skipped: bool  # True: same key as the last committed run, no work done
    records_in: int
    records_kept: int
    records_quarantined: int
    input_snapshot_id: int | None
    output_snapshot_id: int
    seconds: float
    quarantine_rules: dict[str, int] = field(default_factory=dict)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def earlier_batches(settings: Settings, batch_id: str) -> list[str]:
    """Batches published before `batch_id`: the ones its exact dedup compares against."""
    order = [b for _, b in published_log(open_object_store(settings))]
    if batch_id not in order:
        raise ValueError(f"batch {batch_id} is not published in the landing zone; land it first")
    return order[: order.index(batch_id)]


def landed_files_table(settings: Settings, manifest: BatchManifest) -> pa.Table:
    store = open_object_store(settings)
    rows = [
        {
            "batch_id": manifest.batch_id,
            "file_name": f.name,
            "file_sha256": f.sha256,
            "file_uri": store.uri(f.key),
            "source": manifest.source,
            "license": manifest.license,
            "namespace": manifest.namespace,
        }
        for f in manifest.files
    ]
    return pa.Table.from_pylist(rows, schema=LANDED_FILES)


def run_stage(
    settings: Settings,
    stage_name: str,
    batch_id: str,
    *,
    run_id: str | None = None,
    progress: Progress = lambda message: None,
) -> StageRunReport:
    """Run `stage_name` for `batch_id` unless its content key is already committed."""
    started = time.monotonic()
    manifest = read_manifest(open_object_store(settings), batch_id)
    stage = pipeline.entry(stage_name).build(settings, load_policy(settings, manifest.source))
    upstream = pipeline.upstream_of(stage_name)
    earlier: list[str] = []
    if upstream is None:
        earlier = earlier_batches(settings, batch_id)
        upstream_key = _digest("landing", batch_id, *earlier)
        input_snapshot_id = None
    else:
        upstream_run = latest_stage_run(settings, batch_id, upstream)
        if upstream_run is None:
            raise ValueError(
                f"{stage_name} needs {upstream} for batch {batch_id}, which has not run; "
                f"run `fm run --batch {batch_id}`"
            )
        upstream_key = str(upstream_run["stage_key"])
        input_snapshot_id = int(upstream_run["output_snapshot_id"])
    stage_key = _digest(upstream_key, stage.name, stage.version, stage.config_hash())

    report = functools.partial(
        StageRunReport,
        stage=stage_name,
        batch_id=batch_id,
        stage_key=stage_key,
        code_version=stage.version,
        config_hash=stage.config_hash(),
        input_snapshot_id=input_snapshot_id,
    )
    last = latest_stage_run(settings, batch_id, stage_name)
    if last is not None and last["stage_key"] == stage_key:
        progress(f"{stage_name}: up to date for {batch_id}, nothing to do")
        return report(
            skipped=True,
            records_in=int(last["records_in"]),
            records_kept=int(last["records_kept"]),
            records_quarantined=int(last["records_quarantined"]),
            output_snapshot_id=int(last["output_snapshot_id"]),
            seconds=time.monotonic() - started,
        )

    ensure_ray(settings)
    if upstream is None:
        inputs = landed_files_table(settings, manifest)
    else:
        inputs = catalog.read_table(
            settings,
            upstream,
            row_filter=catalog.where_equal("batch_id", batch_id),
            snapshot_id=input_snapshot_id,
        )
    progress(f"{stage_name}: {inputs.num_rows} input rows for {batch_id}")
    chunks = split_rows(inputs, ray_cpus(), one_per_row=upstream is None)
    result = process_on_ray(stage, chunks, progress)
    result = stage.combine(
        result,
        CombineContext(
            batch_id=batch_id,
            earlier_documents=_earlier_documents(settings, earlier),
            read_other_batches=functools.partial(other_batches, settings, batch_id),
        ),
    )
    kept, bad = result.kept.num_rows, result.quarantined.num_rows
    records_in = kept + bad if upstream is None else inputs.num_rows
    if kept + bad != records_in:
        raise RuntimeError(
            f"stage {stage_name} {stage.version} lost records for {batch_id}: "
            f"{records_in} in, {kept} kept + {bad} quarantined; this is a bug in the stage"
        )
    output_snapshot_id = _commit(
        settings, stage, batch_id, result, stage_key, input_snapshot_id, run_id, records_in
    )
    rules = Counter(result.quarantined.column("rule").to_pylist())
    done = report(
        skipped=False,
        records_in=records_in,
        records_kept=kept,
        records_quarantined=bad,
        output_snapshot_id=output_snapshot_id,
        seconds=time.monotonic() - started,
        quarantine_rules=dict(sorted(rules.items())),
    )
    progress(f"{stage_name}: {kept} kept, {bad} quarantined in {done.seconds:.1f}s")
    return done


def other_batches(
    settings: Settings, batch_id: str, table: str, columns: tuple[str, ...] | None
) -> pa.Table:
    return catalog.read_table(
        settings, table, row_filter=catalog.where_not_equal("batch_id", batch_id), columns=columns
    )


def _earlier_documents(settings: Settings, earlier: list[str]) -> dict[str, str]:
    if not earlier:
        return {}
    rows = catalog.read_table(
        settings,
        "raw_documents",
        row_filter=catalog.where_in("batch_id", earlier),
        columns=("doc_id", "batch_id", "record_id"),
    )
    return {
        d: f"{b}/{r}"
        for d, b, r in zip(
            rows.column("doc_id").to_pylist(),
            rows.column("batch_id").to_pylist(),
            rows.column("record_id").to_pylist(),
            strict=True,
        )
    }


def _commit(
    settings: Settings,
    stage: Stage,
    batch_id: str,
    result: StageResult,
    stage_key: str,
    input_snapshot_id: int | None,
    run_id: str | None,
    records_in: int,
) -> int:
    now = dt.datetime.now(dt.UTC)
    bad = result.quarantined
    n = bad.num_rows
    quarantine = bad.append_column("batch_id", pa.array([batch_id] * n, pa.string()))
    quarantine = quarantine.append_column("stage", pa.array([stage.name] * n, pa.string()))
    quarantine = quarantine.append_column(
        "code_version", pa.array([stage.version] * n, pa.string())
    )
    quarantine = quarantine.append_column(
        "quarantined_at", pa.array([now] * n, pa.timestamp("us", tz="UTC"))
    )
    catalog.replace_rows(
        settings,
        "quarantine",
        quarantine,
        catalog.where_all(
            catalog.where_equal("batch_id", batch_id), catalog.where_equal("stage", stage.name)
        ),
        {"fm.stage": stage.name, "fm.batch_id": batch_id, "fm.run_id": run_id or ""},
    )
    for side_table in stage.side_tables:
        rows = result.side.get(side_table)
        if rows is None:
            rows = catalog.table_schema(side_table).empty_table()
        catalog.replace_rows(
            settings,
            side_table,
            rows,
            catalog.where_equal("batch_id", batch_id),
            {"fm.stage": stage.name, "fm.batch_id": batch_id, "fm.run_id": run_id or ""},
        )
    properties = {
        "fm.stage": stage.name,
        "fm.code_version": stage.version,
        "fm.config_hash": stage.config_hash(),
        "fm.stage_key": stage_key,
        "fm.batch_id": batch_id,
        "fm.input_snapshot_ids": "" if input_snapshot_id is None else str(input_snapshot_id),
        "fm.run_id": run_id or "",
    }
    snapshot_id = catalog.replace_rows(
        settings,
        stage.name,
        result.kept,
        catalog.where_equal("batch_id", batch_id),
        properties,
    )
    run_row = {
        "batch_id": batch_id,
        "stage": stage.name,
        "code_version": stage.version,
        "config_hash": stage.config_hash(),
        "stage_key": stage_key,
        "input_snapshot_id": input_snapshot_id,
        "output_snapshot_id": snapshot_id,
        "records_in": records_in,
        "records_kept": result.kept.num_rows,
        "records_quarantined": n,
        "run_id": run_id,
        "committed_at": now,
    }
    record_stage_run(settings, run_row)
    return snapshot_id
