"""What the `fm` commands do, as plain functions: the CLI, the demo and tests call these.

Materializations go through Dagster in-process (`defs.materialize`), so every run shows up in
the Dagster UI with its checks and lineage.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from fm_assets.checks.table import batch_up_to_date
from fm_assets.commands.modality import batch_modality
from fm_assets.curation.approval import approval_gate
from fm_assets.curation.classifier.training import train_classifier as train
from fm_assets.defs.jobs import batch_asset_keys
from fm_assets.defs.landing import BATCH_TAG
from fm_assets.defs.materialize import (
    ChecksFailed,
    Log,
    add_partitions,
    dagster_instance,
    materialize,
    shard_set_partition,
)
from fm_assets.defs.partitions import (
    benchmarks,
    dataset_versions,
    landing_batches,
    quality_classifiers,
    revocations,
    shard_configs,
)
from fm_assets.execution.preflight import (
    DefaultClassifierMissing,
    PreconditionFailed,
    check_run_preconditions,
)
from fm_assets.registries.classifiers import ensure_default_classifier, register_classifier
from fm_assets.registries.tokenizers import resolve_tokenizer
from fm_assets.settings import Settings
from fm_assets.shards.build import shard_config_key, shard_set_key
from fm_assets.shards.revoke import RevocationReport, finish_revocation, revocation_plan
from fm_assets.storage.approvals import AwaitingApproval, decisions
from fm_assets.storage.landing import BatchManifest, land_files, read_manifest
from fm_assets.storage.objectstore import open_object_store
from fm_assets.storage.revocations import record_revocation
from fm_assets.versions.dataset_version import choose_batches, next_version_key, require_version

__all__ = [
    "ChecksFailed",
    "build_shards",
    "create_version",
    "dagster_instance",
    "land",
    "register_benchmark",
    "revoke",
    "run_batch",
    "train_classifier",
    "train_default_classifier",
]


def land(
    settings: Settings,
    paths: list[Path],
    *,
    source: str,
    license: str,
    namespace: str = "cloud",
    modality: str | None = None,
) -> tuple[BatchManifest, bool]:
    """Land `paths` as one batch of their modality (detected, or `modality` checked)."""
    return land_files(
        open_object_store(settings),
        paths,
        source=source,
        license=license,
        namespace=namespace,
        modality=batch_modality(paths, modality),
    )


def run_batch(
    settings: Settings, batch_id: str, log: Log, *, check_preconditions: bool = True
) -> None:
    """Every stage of one landing batch, with blocking checks; raises ChecksFailed on failure.

    Preconditions are checked first (PreconditionFailed, one line naming the fix); pass
    `check_preconditions=False` when the caller has just checked them.
    """
    if check_preconditions:
        check_batch_preconditions(settings, batch_id, log)
    modality = read_manifest(open_object_store(settings), batch_id).modality
    gate = approval_gate(settings, batch_id)
    if gate is not None:
        if decisions(settings, batch_id):  # the latest decision was a rejection
            raise ValueError(gate)
        # Validation only; the curation stages wait for `fm approve`.
        add_partitions(settings, landing_batches, [batch_id])
        keys = [k.to_user_string() for k in batch_asset_keys(modality)[:2]]
        materialize(settings, keys, batch_id, log, tags={BATCH_TAG: batch_id})
        raise AwaitingApproval(gate)
    if batch_up_to_date(settings, batch_id):
        # Nothing would run and every check passed on the data as it stands: no Dagster run.
        log(f"batch {batch_id}: every stage up to date and every check passed; nothing to do")
        return
    add_partitions(settings, landing_batches, [batch_id])
    # Tagged like the sensor's runs: the sensor sees this run and requests no second one.
    keys = [k.to_user_string() for k in batch_asset_keys(modality)]
    materialize(settings, keys, batch_id, log, tags={BATCH_TAG: batch_id})


def check_batch_preconditions(settings: Settings, batch_id: str, log: Log) -> None:
    """`check_run_preconditions`, training the default quality classifier on first need."""
    try:
        check_run_preconditions(settings, batch_id)
    except DefaultClassifierMissing:
        train_default_classifier(settings, log)
        check_run_preconditions(settings, batch_id)


def train_default_classifier(settings: Settings, log: Log) -> str:
    """Train the default recipe's classifier (from FM_SHARED_DATA) on first need, make it the
    default and record it in Dagster; PreconditionFailed naming the fix without the data."""
    try:
        digest = ensure_default_classifier(settings, log)
    except ValueError as exc:
        raise PreconditionFailed(str(exc)) from exc
    add_partitions(settings, quality_classifiers, [digest])
    materialize(settings, ["quality_classifier_registry"], digest, log)
    return digest


def create_version(
    settings: Settings,
    dataset: str,
    batches: list[str],
    log: Log,
    modality: str | None = None,
) -> str:
    """Cut the next version of `dataset` (over `batches`, or the passing batches of
    `modality`); returns its key."""
    key = next_version_key(settings, dataset)
    # Refuses at once when the version would be empty or mix modalities.
    chosen = choose_batches(settings, key, batches, modality)
    add_partitions(settings, dataset_versions, [key])
    # The chosen batches, not the default: a batch finishing meanwhile must not change the cut.
    run_config = {"ops": {"dataset_version": {"config": {"batches": batches or chosen}}}}
    materialize(settings, ["dataset_version"], key, log, run_config)
    return key


def build_shards(
    settings: Settings, version_key: str, tokenizer: str, seq_len: int, log: Log
) -> str:
    """Build (or find) the shard set of a version for a tokenizer and seq_len; returns its key."""

    require_version(settings, version_key)
    info = resolve_tokenizer(settings, tokenizer)
    config = shard_config_key(info.tokenizer_hash, seq_len)
    add_partitions(settings, dataset_versions, [version_key])
    add_partitions(settings, shard_configs, [config])
    materialize(settings, ["shard_set"], shard_set_partition(version_key, config), log)
    return shard_set_key(version_key, config)


def revoke(
    settings: Settings,
    criterion: str,
    value: str,
    reason: str,
    log: Log,
    *,
    revoked_by: str | None = None,
) -> RevocationReport:
    """Record a revocation and replace every version and shard set holding what it names, through
    Dagster: the `revocation` partition cuts the replacement versions, each replacement's
    `dataset_version` and `shard_set` partition is materialized (their blocking checks run), then
    the old sets are marked. A replacement failing its checks is not named by the markers, and
    raises ChecksFailed once every old set is marked."""
    record = record_revocation(settings, criterion, value, reason, revoked_by)
    log(f"recorded {record.revocation_id}: {record.describe()} ({reason})")
    add_partitions(settings, revocations, [record.revocation_id])
    materialize(settings, ["revocation"], record.revocation_id, log)
    plan = revocation_plan(settings, record)
    for outcome in plan.versions:
        log(
            f"{outcome.version_key}: {outcome.documents_removed} documents revoked; "
            f"replacement {outcome.replacement or 'none'}"
        )
    failures: dict[str, str] = {}  # version or shard set key -> why it failed
    for key in plan.replacement_versions:
        batches = list(require_version(settings, key).batches)
        run_config = {"ops": {"dataset_version": {"config": {"batches": batches}}}}
        try:
            materialize(settings, ["dataset_version"], key, log, run_config)
        except ChecksFailed as exc:
            failures[key] = str(exc)
        for item in plan.shard_sets:
            if item.version != key or item.key is None or not item.build:
                continue
            if key in failures:  # no shard set is built from a version failing its checks
                failures[item.key] = f"{key} failed its checks"
                continue
            partition = shard_set_partition(key, str(item.old["shard_config"]))
            try:
                materialize(settings, ["shard_set"], partition, log)
            except ChecksFailed as exc:
                failures[item.key] = str(exc)
    report = finish_revocation(settings, plan, failed=set(failures))
    if failures:
        raise ChecksFailed(
            f"{record.revocation_id} is recorded and the old sets are marked, but replacements "
            f"failed: {'; '.join(failures.values())}; fix them, then `fm revoke` again or "
            "`fm shards build`"
        )
    return report


def train_classifier(
    settings: Settings,
    positives: list[Any],
    negatives: list[Any],
    sources: dict[str, str],
    log: Log,
    *,
    make_default: bool = False,
) -> str:
    """Train a fastText quality classifier, register it by hash (and as the default when
    `make_default`), record it in Dagster."""

    with tempfile.TemporaryDirectory(prefix="fm-classifier-") as out:
        log(f"training on {len(positives)} positive and {len(negatives)} negative documents")
        report = train(positives, negatives, Path(out), sources=sources)
        log(
            f"held-out accuracy {report.holdout_accuracy:.3f} (precision "
            f"{report.holdout_precision:.3f}, recall {report.holdout_recall:.3f})"
        )
        info = register_classifier(settings, report, make_default=make_default)
    add_partitions(settings, quality_classifiers, [info.model_sha256])
    materialize(settings, ["quality_classifier_registry"], info.model_sha256, log)
    if make_default:
        log(f"quality classifier {info.model_sha256[:12]} is the default")
    return info.model_sha256


def register_benchmark(
    settings: Settings, benchmark: str, path: Path, fields: list[str], log: Log
) -> None:
    """Register an eval set as a partition of `contamination_registry`, through Dagster."""
    if not path.is_file():
        raise ValueError(f"eval-set file {path} does not exist")
    add_partitions(settings, benchmarks, [benchmark])
    config = {"path": str(path.resolve()), "fields": fields}
    materialize(
        settings,
        ["contamination_registry"],
        benchmark,
        log,
        run_config={"ops": {"contamination_registry": {"config": config}}},
    )
