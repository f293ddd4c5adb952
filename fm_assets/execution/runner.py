"""Run one curation stage for one landing batch on Ray, and commit its output to Iceberg.

Each run reads and writes only the tables of its batch's data namespace (`storage.catalog`).
Each run is keyed by content: (upstream stage key, stage name, code version, config hash). When
the latest committed run of the stage for the batch has the same key, nothing runs. Otherwise
Ray workers read their own slices of the input and write their own data files; the driver then
commits, one transaction per table, the quarantine rows, the side tables and the output partition,
and records the run, in that order: a crash before the last step leaves no matching run, so the
next attempt redoes the stage and replaces the partitions.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.expressions import AlwaysFalse, BooleanExpression
from pyiceberg.manifest import DataFile

from fm_assets.execution.compute import (
    Progress,
    ensure_ray,
    guarded,
)
from fm_assets.execution.pipelines import pipeline_for
from fm_assets.execution.slice_tasks import Outputs, SliceOutcome
from fm_assets.execution.stage_work import execute_stage
from fm_assets.registries.classifiers import NoDefaultClassifier
from fm_assets.settings import Settings
from fm_assets.stages.base import Stage
from fm_assets.stages.image_text.dedup import ImageDedupStage
from fm_assets.stages.image_text.raw import RawPairsStage
from fm_assets.stages.near_dedup import NearDupStage
from fm_assets.stages.raw import RawStage
from fm_assets.storage import catalog
from fm_assets.storage.batch_history import may_hold_rows
from fm_assets.storage.bookkeeping import (
    file_checksums,
    latest_stage_run,
    record_file_checksums,
    record_stage_run,
)
from fm_assets.storage.data_files import commit_files, plan_files, table_handle
from fm_assets.storage.landing import (
    BatchManifest,
    manifest_checksum,
    published_log,
    read_manifest,
)
from fm_assets.storage.locks import HeldLock, check_all, exclusive, index_lock, stage_lock
from fm_assets.storage.maintenance.history import readable_snapshot
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
    slices: int = 0  # Ray tasks the input was cut into
    bytes_in: int = 0  # input bytes read (landed files, or the upstream data files)
    nodes: int = 0  # Ray nodes the slices ran on
    cpu_seconds: float = 0.0  # CPU time of the slice tasks' processes
    gpu_seconds: float = 0.0  # GPU time of the slice tasks that held a GPU


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def earlier_batches(settings: Settings, batch_id: str) -> list[str]:
    """Batches published before `batch_id` (the publication log only grows: part of the raw
    stage's content key)."""
    order = [b for _, b in published_log(open_object_store(settings))]
    if batch_id not in order:
        raise ValueError(f"batch {batch_id} is not published in the landing zone; land it first")
    return order[: order.index(batch_id)]


@dataclass(frozen=True)
class _Plan:
    """A stage run's identity: what it reads and its content key."""

    stage: Stage
    manifest: BatchManifest
    policy: Any  # the modality's policy, resolved where it can be (the default classifier's hash)
    upstream: str | None
    stage_key: str
    input_snapshot_id: int | None
    upstream_kept: int | None  # records the upstream stage kept: what this stage must account for


def _plan(settings: Settings, stage_name: str, batch_id: str) -> _Plan:
    manifest = read_manifest(open_object_store(settings), batch_id)
    batch_pipeline = pipeline_for(manifest.modality)
    if stage_name not in batch_pipeline.names:
        raise ValueError(
            f"batch {batch_id} holds {manifest.modality} data, which goes through "
            f"{', '.join(batch_pipeline.names)}; {stage_name} is not one of its stages"
        )
    policy = batch_pipeline.load_policy(settings, manifest.source)
    # Only the quality stage needs the default classifier, and its build below says how to
    # get one; the other stages record the policy naming it "default".
    with contextlib.suppress(NoDefaultClassifier):
        policy = batch_pipeline.resolve(settings, policy)
    stage = batch_pipeline.entry(stage_name).build(settings, policy)
    upstream = batch_pipeline.upstream_of(stage_name)
    if upstream is None:
        earlier = earlier_batches(settings, batch_id)
        upstream_key, snapshot, kept = _digest("landing", batch_id, *earlier), None, None
    else:
        run = latest_stage_run(settings, batch_id, upstream)
        if run is None:
            raise ValueError(
                f"{stage_name} needs {upstream} for batch {batch_id}, which has not run; "
                f"run `fm run --batch {batch_id}`"
            )
        upstream_key = str(run["stage_key"])
        kept = int(run["records_kept"])
        # Catalog maintenance may have expired that snapshot: a later one holds the same rows.
        snapshot = readable_snapshot(
            settings, upstream, manifest.namespace, batch_id, int(run["output_snapshot_id"])
        )
    key = _digest(upstream_key, stage.name, stage.version, stage.config_hash())
    return _Plan(stage, manifest, policy, upstream, key, snapshot, kept)


def up_to_date(settings: Settings, stage_name: str, batch_id: str) -> str | None:
    """The stage key of the committed run of `stage_name` for `batch_id` if it is current (its
    content key unchanged), else None."""
    plan = _plan(settings, stage_name, batch_id)
    last = latest_stage_run(settings, batch_id, stage_name)
    return plan.stage_key if last is not None and last["stage_key"] == plan.stage_key else None


# Stages that decide against a namespace-wide index, and what their lock is called.
NAMESPACE_WIDE = {
    RawStage.name: "exact dedup",
    NearDupStage.name: "near dedup",
    RawPairsStage.name: "exact dedup",
    ImageDedupStage.name: "image dedup",
}


def run_stage(
    settings: Settings,
    stage_name: str,
    batch_id: str,
    *,
    run_id: str | None = None,
    progress: Progress = lambda message: None,
) -> StageRunReport:
    """Run `stage_name` for `batch_id` unless its content key is already committed.

    One run at a time per stage and batch, whoever started it (two `fm run`, the sensor, a
    backfill): a second waits, then finds the stage up to date. The lock dies with its holder;
    a run that loses it (a dropped Postgres connection) fails with `LockLost` between two Ray
    results or before its commits, instead of going on unlocked.
    """
    names = [stage_lock(stage_name, batch_id)]
    if stage_name in NAMESPACE_WIDE:
        # Dedup reads every other batch's index rows, then commits its own: one run at a time
        # per data namespace (each has its own index), or two batches holding the same
        # document would both keep it. (Dagster's `neardup` pool says the same for its runs;
        # this holds for every caller, and lets near dedup compact its index.)
        namespace = catalog.batch_namespace(settings, batch_id)
        names.append(index_lock(NAMESPACE_WIDE[stage_name], namespace))
    with contextlib.ExitStack() as stack:
        locks = [stack.enter_context(exclusive(settings, name, progress)) for name in names]
        stack.enter_context(guarded(lambda: check_all(locks)))
        return _run_stage(settings, stage_name, batch_id, run_id, progress, locks)


def _run_stage(
    settings: Settings,
    stage_name: str,
    batch_id: str,
    run_id: str | None,
    progress: Progress,
    locks: list[HeldLock],
) -> StageRunReport:
    started = time.monotonic()
    plan = _plan(settings, stage_name, batch_id)
    stage = plan.stage
    common = {
        "stage": stage_name,
        "batch_id": batch_id,
        "stage_key": plan.stage_key,
        "code_version": stage.version,
        "config_hash": stage.config_hash(),
        "input_snapshot_id": plan.input_snapshot_id,
    }
    last = latest_stage_run(settings, batch_id, stage_name)
    if last is not None and last["stage_key"] == plan.stage_key:
        progress(f"{stage_name}: up to date for {batch_id}, nothing to do")
        return StageRunReport(
            **common,  # type: ignore[arg-type]
            skipped=True,
            records_in=int(last["records_in"]),
            records_kept=int(last["records_kept"]),
            records_quarantined=int(last["records_quarantined"]),
            output_snapshot_id=int(last["output_snapshot_id"]),
            seconds=time.monotonic() - started,
        )

    ensure_ray(settings, progress)
    namespace = plan.manifest.namespace  # every table the run reads or writes is its namespace's
    outputs = Outputs(
        batch_id=batch_id,
        stage=stage.name,
        code_version=stage.version,
        write_id=uuid.uuid4(),
        output=table_handle(settings, stage.name, namespace),
        quarantine=table_handle(settings, "quarantine", namespace),
        side={name: table_handle(settings, name, namespace) for name in stage.side_tables},
    )
    outcomes, extra_files = execute_stage(
        settings,
        plan.stage,
        plan.manifest,
        plan.upstream,
        plan.input_snapshot_id,
        outputs,
        progress,
    )
    kept = sum(o.kept for o in outcomes)
    bad = sum(o.quarantined for o in outcomes)
    records_in = sum(o.records_in for o in outcomes)
    if plan.upstream_kept is not None and records_in != plan.upstream_kept:
        raise RuntimeError(
            f"stage {stage_name} read {records_in} records of {batch_id}, but {plan.upstream} "
            f"kept {plan.upstream_kept}; the input changed under the run: rerun it"
        )
    check_all(locks, now=True)  # the commits below are the run's: only if still its own
    if plan.upstream is None:
        _pin_manifest(settings, batch_id)
    snapshot_id = _commit(settings, plan, outputs, outcomes, extra_files, run_id)
    rules = Counter[str]()
    for outcome in outcomes:
        rules.update(outcome.rules)
    check_all(locks, now=True)  # the stage-run row says "done": never from an unlocked run
    record_stage_run(
        settings,
        {
            **{k: common[k] for k in ("batch_id", "stage", "code_version", "config_hash")},
            "stage_key": plan.stage_key,
            "input_snapshot_id": plan.input_snapshot_id,
            "output_snapshot_id": snapshot_id,
            "records_in": records_in,
            "records_kept": kept,
            "records_quarantined": bad,
            "run_id": run_id,
            "committed_at": dt.datetime.now(dt.UTC),
            "policy_json": plan.policy.to_json(),
            "config_json": json.dumps(stage.config(), sort_keys=True, default=str),
            "cpu_seconds": sum(o.cpu_seconds for o in outcomes),
            "gpu_seconds": sum(o.gpu_seconds for o in outcomes),
        },
    )
    report = StageRunReport(
        **common,  # type: ignore[arg-type]
        skipped=False,
        records_in=records_in,
        records_kept=kept,
        records_quarantined=bad,
        output_snapshot_id=snapshot_id,
        seconds=time.monotonic() - started,
        quarantine_rules=dict(sorted(rules.items())),
        slices=len(outcomes),
        bytes_in=sum(o.bytes_in for o in outcomes),
        nodes=len({o.node for o in outcomes if o.node}),
        cpu_seconds=round(sum(o.cpu_seconds for o in outcomes), 3),
        gpu_seconds=round(sum(o.gpu_seconds for o in outcomes), 3),
    )
    progress(f"{stage_name}: {kept} kept, {bad} quarantined in {report.seconds:.2f}s")
    return report


def _pin_manifest(settings: Settings, batch_id: str) -> None:
    """Pin the landing manifest's checksum the first time a batch is read (`fm verify`)."""
    uri, sha, size = manifest_checksum(open_object_store(settings), batch_id)
    if not file_checksums(settings, [uri]):
        record_file_checksums(settings, {uri: (sha, size)})


def _commit(
    settings: Settings,
    plan: _Plan,
    outputs: Outputs,
    outcomes: list[SliceOutcome],
    extra_files: dict[str, list[DataFile]],
    run_id: str | None,
) -> int:
    """One transaction per table; the output table last. Returns the output's snapshot id."""
    batch_id, stage, namespace = plan.manifest.batch_id, plan.stage, plan.manifest.namespace
    files: dict[str, list[DataFile]] = {name: list(f) for name, f in extra_files.items()}
    for outcome in outcomes:
        for name, data_files in outcome.files.items():
            files.setdefault(name, []).extend(data_files)
    properties = {
        "fm.stage": stage.name,
        "fm.batch_id": batch_id,
        "fm.run_id": run_id or "",
    }
    this_batch = catalog.where_equal("batch_id", batch_id)

    def replacing(
        name: str, where: BooleanExpression, stage: str | None = None, compacted: bool = False
    ) -> BooleanExpression:
        # A batch's first run has nothing to remove: no scan, no delete (see `may_hold_rows`).
        held = may_hold_rows(
            settings, name, namespace, batch_id, stage=stage, untagged_only_move_rows=compacted
        )
        return where if held else catalog.NOTHING

    this_stage = catalog.where_all(this_batch, catalog.where_equal("stage", stage.name))
    _commit_unless_unchanged(
        settings,
        "quarantine",
        replacing("quarantine", this_stage, stage=stage.name),
        files.get("quarantine", []),
        properties,
        namespace,
    )
    for name in outputs.side:
        _commit_unless_unchanged(
            settings, name, replacing(name, this_batch), files.get(name, []), properties, namespace
        )
    for name in extra_files:
        # Tables of many batches' rows (the near-dup index, compacted across batches): a delete
        # by `batch_id` would read every merged file, so it runs only on a rerun. Compactions
        # name no batch, and move rows that came with their batch's own snapshots.
        replace = replacing(name, this_batch, compacted=True)
        _commit_unless_unchanged(settings, name, replace, files[name], properties, namespace)
    output_properties = properties | {
        "fm.code_version": stage.version,
        "fm.config_hash": stage.config_hash(),
        "fm.stage_key": plan.stage_key,
        "fm.input_snapshot_ids": ""
        if plan.input_snapshot_id is None
        else str(plan.input_snapshot_id),
    }
    return commit_files(
        settings,
        stage.name,
        replacing(stage.name, this_batch),
        files.get(stage.name, []),
        output_properties,
        namespace,
    )


def _commit_unless_unchanged(
    settings: Settings,
    name: str,
    replace: BooleanExpression,
    data_files: list[DataFile],
    properties: dict[str, str],
    namespace: str,
) -> None:
    """`commit_files`, unless there is nothing to add and nothing to remove: most stages
    quarantine nothing on most batches, and an empty commit costs a snapshot and seconds."""
    if not data_files and (
        isinstance(replace, AlwaysFalse) or not plan_files(settings, name, replace, None, namespace)
    ):
        return
    commit_files(settings, name, replace, data_files, properties, namespace)
