"""Every data check, declared once: its name, what it promises, which assets it runs on, and
the function that evaluates it. Dagster's check specs and their evaluation both read this table.

A check runs on a *subject*: what one materialization of its asset produced.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from fm_assets.checks.documents import (
    document_expectations,
    records_accounted_for,
    token_counts_consistent,
)
from fm_assets.checks.landing import files_match_manifest
from fm_assets.checks.outcome import CheckOutcome
from fm_assets.checks.shard_sets import (
    no_contaminated_samples,
    samples_carry_provenance,
    shard_checksums_valid,
    token_counts_match_version,
)
from fm_assets.checks.versions import version_counts_match
from fm_assets.execution import pipelines
from fm_assets.execution.runner import up_to_date
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import latest_check_results
from fm_assets.storage.data_files import plan_files
from fm_assets.versions.dataset_version import DatasetVersion
from fm_loader.format.manifest import ShardSetManifest


@dataclass(frozen=True)
class BatchSubject:
    """One landing batch's output of one asset (the landing batch itself, or a stage table)."""

    settings: Settings
    asset: str
    batch_id: str


@dataclass(frozen=True)
class VersionSubject:
    settings: Settings
    version: DatasetVersion


@dataclass(frozen=True)
class ShardSetSubject:
    """A built shard set, its files in a local `directory` (a fresh copy when published on S3)."""

    settings: Settings
    directory: str
    manifest: ShardSetManifest
    version: DatasetVersion
    documents_tokens: int  # tokens of the version's documents under the set's tokenizer


Subject = TypeVar("Subject", BatchSubject, VersionSubject, ShardSetSubject)


@dataclass(frozen=True)
class DataCheck(Generic[Subject]):
    """A blocking data check of the assets named in `assets`."""

    name: str
    description: str
    assets: tuple[str, ...]
    run: Callable[[Subject], CheckOutcome]


EVERY_STAGE = pipelines.ALL_STAGE_NAMES
TOKENIZED_TABLES = tuple(p.final for p in pipelines.PIPELINES.values())

BATCH_CHECKS: tuple[DataCheck[BatchSubject], ...] = (
    DataCheck(
        "files_match_manifest",
        "Every file in the manifest is present with its recorded size and sha256.",
        ("landing_batch",),
        lambda s: files_match_manifest(s.settings, s.batch_id),
    ),
    DataCheck(
        "records_accounted_for",
        "records in = records kept + records quarantined, recounted from Iceberg.",
        EVERY_STAGE,
        lambda s: records_accounted_for(s.settings, s.asset, s.batch_id),
    ),
    DataCheck(
        "document_expectations",
        "great-expectations: schema, unique ids, hashes, non-empty text (or token counts).",
        EVERY_STAGE,
        lambda s: document_expectations(s.settings, s.asset, s.batch_id),
    ),
    DataCheck(
        "token_counts_consistent",
        "num_tokens matches the token lists; ids inside the vocabulary.",
        TOKENIZED_TABLES,
        lambda s: token_counts_consistent(s.settings, s.asset, s.batch_id),
    ),
)

VERSION_CHECKS: tuple[DataCheck[VersionSubject], ...] = (
    DataCheck(
        "version_counts_match",
        "Documents and tokens recounted at the version's tags match its record.",
        ("dataset_version",),
        lambda s: version_counts_match(s.settings, s.version),
    ),
)

SHARD_SET_CHECKS: tuple[DataCheck[ShardSetSubject], ...] = (
    DataCheck(
        "shard_checksums_valid",
        "Every shard's sha256 matches the manifest.",
        ("shard_set",),
        lambda s: shard_checksums_valid(s.directory, s.manifest),
    ),
    DataCheck(
        "token_counts_match_version",
        "Shards hold exactly the tokens of the version's documents.",
        ("shard_set",),
        lambda s: token_counts_match_version(s.manifest, s.documents_tokens),
    ),
    DataCheck(
        "samples_carry_provenance",
        "Every sample names documents of the version with valid spans.",
        ("shard_set",),
        lambda s: samples_carry_provenance(s.directory, s.manifest, s.settings, s.version),
    ),
    DataCheck(
        "no_contaminated_samples",
        "The gate: no sample holds a document matching the contamination registry as it stands "
        "when the shard set is built.",
        ("shard_set",),
        lambda s: no_contaminated_samples(s.settings, s.directory, s.manifest, s.version),
    ),
)


def stage_data_version(settings: Settings, stage: str, batch_id: str, stage_key: str) -> str:
    """What a stage's checks read: its content key and the data files of the batch's partition
    of its output and of its quarantine rows.

    Files, not table snapshots: every later stage commits to the quarantine table and every other
    batch to the stage's table, which must not make this batch's checks stale; any rewrite of the
    partition itself (a rerun, a repair behind the platform's back) changes its files.
    """
    this_batch = catalog.where_equal("batch_id", batch_id)
    partitions = (
        (stage, this_batch),
        ("quarantine", catalog.where_all(this_batch, catalog.where_equal("stage", stage))),
    )
    namespace = catalog.batch_namespace(settings, batch_id)
    digest = hashlib.sha256()
    for table, where in partitions:
        files = plan_files(settings, table, where, None, namespace)
        for path in sorted(t.file.file_path for t in files):
            digest.update(f"{table}\x1f{path}\x1e".encode())
    return f"{stage_key}:{digest.hexdigest()[:32]}"


def checks_still_pass(settings: Settings, stage: str, batch_id: str, stage_key: str) -> bool:
    """True when every check of `stage` passed on the data as it stands now."""
    version = stage_data_version(settings, stage, batch_id, stage_key)
    results = latest_check_results(settings, batch_id)
    return all(
        (found := results.get((stage, batch_id, check.name))) is not None
        and bool(found["passed"])
        and found["data_version"] == version
        for check in checks_for(stage, BATCH_CHECKS)
    )


def batch_up_to_date(settings: Settings, batch_id: str) -> bool:
    """True when every stage of `batch_id` is current and all its checks passed on that data."""
    for name in pipelines.pipeline_of_batch(settings, batch_id).names:
        key = up_to_date(settings, name, batch_id)
        if key is None or not checks_still_pass(settings, name, batch_id, key):
            return False
    return True


def checks_for(asset: str, table: tuple[DataCheck[Subject], ...]) -> tuple[DataCheck[Subject], ...]:
    """The checks of `table` that run on `asset`, in declaration order."""
    return tuple(check for check in table if asset in check.assets)


def evaluate(
    asset: str,
    table: tuple[DataCheck[Subject], ...],
    subject: Subject,
    data_version: str | None = None,
) -> list[CheckOutcome]:
    """Run every check of `table` on `asset` against `subject`.

    With a `data_version` (what the checks would read, e.g. snapshot ids), a check that already
    passed on exactly that data is not run again: its earlier evaluation stands, and says so.
    """
    partition = subject.batch_id if isinstance(subject, BatchSubject) else ""
    earlier = latest_check_results(subject.settings, partition) if data_version else {}
    outcomes = []
    for check in checks_for(asset, table):
        known = earlier.get((asset, partition, check.name))
        if known and known["passed"] and known["data_version"] == data_version:
            checked = f"{known['checked_at']:%Y-%m-%d %H:%M:%S}"
            outcome = CheckOutcome(
                check.name,
                True,
                f"{known['description']} (data unchanged since {checked})",
                {"reused_from_run": known["run_id"]},
            )
        else:
            outcome = check.run(subject)
        outcomes.append(dataclasses.replace(outcome, data_version=data_version))
    return outcomes
