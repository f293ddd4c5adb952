"""The curation policy each batch of a dataset version was curated under.

Every stage run records the batch's policy (resolved: the default classifier named by its
sha256). A version is cut only over batches whose curation matches the policy their source has
now, so a changed policy means rerun batches, new content keys and a new version; the version
then records each batch's policy in `version_policies`, which its dataset card shows.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pyarrow as pa

from fm_assets.execution.pipelines import pipeline_of_batch
from fm_assets.registries.classifiers import NoDefaultClassifier
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import latest_stage_run
from fm_assets.storage.tables import TableSpec, declare

VERSION_POLICIES = pa.schema(
    [
        pa.field("version_key", pa.string(), nullable=False),
        pa.field("batch_id", pa.string(), nullable=False),
        # The batch's source and DatasetPolicy.to_json(); null for a batch curated before runs
        # recorded their policy.
        pa.field("source", pa.string(), nullable=True),
        pa.field("policy_json", pa.string(), nullable=True),
    ]
)
declare(TableSpec("version_policies", VERSION_POLICIES, ("version_key",)))

# Fields that name a policy rather than decide anything: a change in them alone is no change.
_LABELS = ("name", "base")


def curated_policy(settings: Settings, batch_id: str) -> Any:
    """The policy (of the batch's modality) its latest curation ran under (its final stage's
    run), or None."""
    batch_pipeline = pipeline_of_batch(settings, batch_id)
    run = latest_stage_run(settings, batch_id, batch_pipeline.final)
    if run is None or not run.get("policy_json"):
        return None
    return batch_pipeline.policy_from_json(str(run["policy_json"]))


def policy_changes(curated: Any, current: Any) -> list[str]:
    """The deciding fields in which two policies differ."""
    old, new = json.loads(curated.to_json()), json.loads(current.to_json())
    return sorted(k for k in old if k not in _LABELS and old[k] != new.get(k))


def refuse_stale_batches(settings: Settings, version_key: str, batches: list[str]) -> None:
    """ValueError naming every batch curated under another policy than its source has now."""
    stale = []
    for batch_id in batches:
        curated = curated_policy(settings, batch_id)
        if curated is None:
            continue  # curated before policies were recorded: nothing to compare
        source = curated.name  # a policy is named by the source it is keyed by
        batch_pipeline = pipeline_of_batch(settings, batch_id)
        current = batch_pipeline.load_policy(settings, source)
        # No default classifier now: the policy names "default", which differs from any hash.
        with contextlib.suppress(NoDefaultClassifier):
            current = batch_pipeline.resolve(settings, current)
        changed = policy_changes(curated, current)
        if changed:
            stale.append(f"{batch_id} ({source}: {', '.join(changed)})")
    if stale:
        raise ValueError(
            f"{version_key}: batches {'; '.join(stale)} were curated under another policy than "
            "FM_POLICY_FILE now gives their source; rerun each with `fm run --batch ID` (only "
            "the stages the change affects rerun), then cut the version"
        )


def record_policies(settings: Settings, version_key: str, batches: list[str]) -> None:
    """Record the policy each batch was curated under (before the version's row)."""
    rows = []
    for batch_id in batches:
        policy = curated_policy(settings, batch_id)
        rows.append(
            {
                "version_key": version_key,
                "batch_id": batch_id,
                "source": policy.name if policy is not None else None,
                "policy_json": policy.to_json() if policy is not None else None,
            }
        )
    catalog.replace_rows(
        settings,
        "version_policies",
        pa.Table.from_pylist(rows, schema=VERSION_POLICIES),
        catalog.where_equal("version_key", version_key),
    )


def copy_policies(settings: Settings, from_key: str, to_key: str) -> None:
    """Give a version cut from another (a revocation's replacement) the same batch policies."""
    rows = catalog.read_table(
        settings, "version_policies", catalog.where_equal("version_key", from_key)
    )
    if rows.num_rows:
        rows = rows.set_column(0, "version_key", pa.array([to_key] * rows.num_rows))
        catalog.replace_rows(
            settings, "version_policies", rows, catalog.where_equal("version_key", to_key)
        )


def version_policies(settings: Settings, version_key: str) -> dict[str, tuple[str, Any]]:
    """batch id -> (source, policy) as the version recorded them ({} for older versions; source
    "" when not recorded). A text batch's policy is a DatasetPolicy, an image-text batch's an
    ImageTextPolicy."""
    rows = catalog.read_table(
        settings, "version_policies", catalog.where_equal("version_key", version_key)
    ).to_pylist()
    return {
        r["batch_id"]: (
            r["source"] or "",
            pipeline_of_batch(settings, r["batch_id"]).policy_from_json(r["policy_json"])
            if r["policy_json"]
            else None,
        )
        for r in sorted(rows, key=lambda r: r["batch_id"])
    }
