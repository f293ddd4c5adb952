"""Project-level promises: the Dagster code location loads, the loader installs alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from fm_assets.execution import pipeline
from tests.paths import REPO


def test_definitions_hold_the_whole_graph() -> None:
    from fm_assets.definitions import defs

    dg.Definitions.validate_loadable(defs)
    keys = {a.key.to_user_string() for a in defs.assets}
    assert keys == {
        "landing_batch",
        *pipeline.STAGE_NAMES,
        "dataset_version",
        "shard_set",
        "quality_classifier_registry",
        "contamination_registry",
        "contamination_scan",
    }
    graph = defs.resolve_asset_graph()
    # Lineage: each stage reads the one before it, the version reads the last stage.
    upstream = "landing_batch"
    for stage in pipeline.STAGE_NAMES:
        assert graph.get(dg.AssetKey(stage)).parent_keys == {dg.AssetKey(upstream)}
        upstream = stage
    assert dg.AssetKey(upstream) in graph.get(dg.AssetKey("dataset_version")).parent_keys
    checks = {c.to_user_string() for c in graph.asset_check_keys}
    assert "tokenized_documents:token_counts_consistent" in checks
    assert "shard_set:shard_checksums_valid" in checks
    assert defs.resolve_job_def("process_landing_batch") is not None
    assert defs.resolve_sensor_def("new_landing_batch_sensor") is not None


@pytest.mark.slow
def test_near_dedup_batches_run_one_at_a_time(fm_settings: object) -> None:
    """Two batches must never both keep a near-duplicate pair: the stage's pool has limit 1."""
    from fm_assets.commands.operations import dagster_instance
    from fm_assets.definitions import defs

    assert defs.resolve_assets_def("near_deduplicated_documents").op.pool == "neardup"
    assert defs.resolve_assets_def("pii_redacted_documents").op.pool == "ray"
    instance = dagster_instance(fm_settings)  # type: ignore[arg-type]
    assert instance.event_log_storage.get_concurrency_info("neardup").slot_count == 1


def test_dagster_definitions_validate_cli(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "FM_HOME": str(tmp_path / "fm")}
    dagster = Path(sys.executable).with_name("dagster")
    result = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_loader_import_pulls_in_no_orchestration() -> None:
    code = (
        "import sys, fm_loader; "
        "heavy = ('dagster', 'ray', 'fm_assets.stages', 'fm_assets.defs'); "
        "bad = [m for m in heavy if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_loader_extra_installs_neither_dagster_nor_ray(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        str(report),
        f"{REPO}[loader]",
    ]
    subprocess.run(pip, check=True, capture_output=True, text=True, timeout=600)
    names = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "mosaicml-streaming" in names and "torch" in names
    assert not {n for n in names if n.startswith(("dagster", "ray"))}


def test_every_public_loader_name_resolves_without_loading_torch_first() -> None:
    code = (
        "import sys, fm_loader.settings, fm_loader.manifest; "
        "print('torch' in sys.modules); "
        "import fm_loader; print(all(getattr(fm_loader, n) is not None for n in fm_loader.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
