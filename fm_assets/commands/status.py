"""`fm status`: what is landed, how far each batch got, versions, shard sets, failing checks."""

from __future__ import annotations

from typing import Any

from fm_assets.execution.pipelines import pipeline_for
from fm_assets.settings import Settings
from fm_assets.storage import catalog
from fm_assets.storage.bookkeeping import latest_check_results, stage_runs
from fm_assets.storage.landing import TEXT_MODALITY, list_batches
from fm_assets.storage.objectstore import open_object_store


def render_status(settings: Settings) -> str:
    lines = [f"FM_HOME {settings.home}", "", "landing batches:"]
    runs = stage_runs(settings)
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for run in runs:
        key = (str(run["batch_id"]), str(run["stage"]))
        if key not in latest or run["committed_at"] >= latest[key]["committed_at"]:
            latest[key] = run
    batches = list_batches(open_object_store(settings))
    for manifest in batches:
        names = pipeline_for(manifest.modality).names
        done = [s for s in names if (manifest.batch_id, s) in latest]
        final = latest.get((manifest.batch_id, names[-1]))
        what = "documents" if manifest.modality == TEXT_MODALITY else "pairs"
        progress = (
            f"{final['records_kept']} {what} tokenized"
            if final
            else f"{len(done)}/{len(names)} stages"
        )
        lines.append(
            f"  {manifest.batch_id}  {manifest.source:<12} {manifest.modality:<10} "
            f"{len(manifest.files)} files {manifest.total_bytes:>12,} B  {progress}"
        )
    if not batches:
        lines.append("  (none: land files with `fm land PATH --source NAME --license SPDX`)")
    lines += ["", "dataset versions:"]
    versions = catalog.read_table(settings, "dataset_versions").to_pylist()
    for row in sorted(versions, key=lambda r: (r["dataset"], r["version"])):
        lines.append(
            f"  {row['version_key']:<16} {len(row['batches'])} batches "
            f"{row['num_documents']:>8} docs {row['num_tokens']:>12} tokens"
        )
    if not versions:
        lines.append("  (none)")
    lines += ["", "shard sets:"]
    shard_sets = catalog.read_table(settings, "shard_sets").to_pylist()
    for row in shard_sets:
        lines.append(
            f"  {row['shard_set_key']:<40} {row['num_samples']:>8} samples "
            f"{row['num_tokens']:>12} tokens  {row['uri']}"
        )
    if not shard_sets:
        lines.append("  (none)")
    failing = [r for r in latest_check_results(settings).values() if not r["passed"]]
    lines += ["", f"failing checks: {len(failing)}"]
    for row in failing:
        lines.append(
            f"  {row['asset']}[{row['partition']}].{row['check_name']}: {row['description']}"
        )
    return "\n".join(lines)
