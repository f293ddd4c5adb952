"""Project-level promises: the Dagster code location loads, the loader installs alone, and the
README's diagram, box table and layout name what the code holds."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from fm_assets.execution import pipeline, pipelines
from tests.paths import REPO


def test_definitions_hold_the_whole_graph() -> None:
    from fm_assets.definitions import defs

    dg.Definitions.validate_loadable(defs)
    keys = {a.key.to_user_string() for a in defs.assets}
    assert keys == {
        "landing_batch",
        *pipelines.ALL_STAGE_NAMES,
        "dataset_version",
        "shard_set",
        "shard_set_cache",
        "text_set",
        "quality_classifier_registry",
        "contamination_registry",
        "contamination_scan",
        "revocation",
        "cost_report",
    }
    graph = defs.resolve_asset_graph()
    # Lineage: each stage reads the one before it, in its modality's pipeline; the version reads
    # the last stage of the text pipeline.
    for modality_pipeline in pipelines.PIPELINES.values():
        upstream = "landing_batch"
        for stage in modality_pipeline.names:
            assert graph.get(dg.AssetKey(stage)).parent_keys == {dg.AssetKey(upstream)}
            upstream = stage
    assert (
        dg.AssetKey("tokenized_documents") in graph.get(dg.AssetKey("dataset_version")).parent_keys
    )
    # A run's launch can depend on its shard sets being warm in the node's cache.
    assert graph.get(dg.AssetKey("shard_set_cache")).parent_keys == {dg.AssetKey("shard_set")}
    assert graph.get(dg.AssetKey("text_set")).parent_keys == {dg.AssetKey("dataset_version")}
    assert graph.get(dg.AssetKey("revocation")).parent_keys == {dg.AssetKey("dataset_version")}
    checks = {c.to_user_string() for c in graph.asset_check_keys}
    assert "tokenized_documents:token_counts_consistent" in checks
    assert "shard_set:shard_checksums_valid" in checks
    assert defs.resolve_job_def("process_landing_batch") is not None
    assert defs.resolve_job_def("process_image_text_batch") is not None
    assert "tokenized_pairs:token_counts_consistent" in checks
    assert defs.resolve_sensor_def("new_landing_batch_sensor") is not None
    assert defs.resolve_schedule_def("cost_report_job_schedule") is not None


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
        "import sys, fm_loader.settings, fm_loader.format.manifest; "
        "print('torch' in sys.modules); "
        "import fm_loader; print(all(getattr(fm_loader, n) is not None for n in fm_loader.__all__))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


# --- the README ---------------------------------------------------------------------------------

README = REPO / "README.md"


def _code_block(after: str) -> str:
    """The first ``` block of the README after the line `after`."""
    text = README.read_text(encoding="utf-8")
    start = text.index("```\n", text.index(after)) + 4
    return text[start : text.index("```", start)]


def _diagram() -> str:
    return _code_block("# fm platform")


@dataclass(frozen=True)
class BoxRow:
    """A row of the README's box table: what a box of the diagram is made of."""

    boxes: tuple[str, ...]
    modules: tuple[str, ...]
    checks: tuple[str, ...]
    tests: tuple[str, ...]


def _quoted(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"`([^`]+)`", cell))


def _box_rows() -> list[BoxRow]:
    lines = README.read_text(encoding="utf-8").splitlines()
    first = lines.index("| box | modules | data checks | tests |") + 2
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        box, modules, checks, tests = (cell.strip() for cell in line.strip("|").split("|"))
        rows.append(
            BoxRow(_quoted(box) or (box,), _quoted(modules), _quoted(checks), _quoted(tests))
        )
    return rows


def _names_in(text: str, name: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", text) is not None


def test_every_path_in_the_readme_box_table_exists() -> None:
    rows = _box_rows()
    missing = [p for row in rows for p in (*row.modules, *row.tests) if not (REPO / p).exists()]
    assert not missing, f"the README's box table names paths that do not exist: {missing}"
    not_code = [
        p for row in rows for p in row.modules if not p.startswith(("fm_assets/", "fm_loader/"))
    ]
    not_tests = [p for row in rows for p in row.tests if not re.fullmatch(r"tests/test_\w+\.py", p)]
    assert not not_code and not not_tests, (not_code, not_tests)
    incomplete = [row.boxes for row in rows if not row.modules or not row.tests]
    assert not incomplete, f"rows without modules or tests: {incomplete}"


def test_every_box_of_the_readme_diagram_has_a_row() -> None:
    from fm_assets.definitions import defs

    diagram = _diagram()
    boxes = {
        *(a.key.to_user_string() for a in defs.assets),
        *(s.name for s in defs.sensors),
        *re.findall(r"(?<![\w.])fm [a-z]+(?: [a-z]+)?", diagram),
        "fm_loader.make_dataset",
    }
    not_drawn = sorted(b for b in boxes if not b.startswith("fm ") and not _names_in(diagram, b))
    assert not not_drawn, f"assets and sensors the README diagram does not show: {not_drawn}"
    rows = _box_rows()
    without_row = sorted(boxes - {b for row in rows for b in row.boxes})
    assert not without_row, f"boxes of the README diagram without a row in its table: {without_row}"
    not_boxes = [row.boxes for row in rows if not all(_names_in(diagram, b) for b in row.boxes)]
    assert not not_boxes, f"rows naming what the diagram does not show: {not_boxes}"


def test_the_readme_box_table_names_each_boxs_checks() -> None:
    from fm_assets.checks.table import BATCH_CHECKS, SHARD_SET_CHECKS, VERSION_CHECKS, checks_for

    def checks_of(asset: str) -> set[str]:
        return {
            check.name
            for table in (BATCH_CHECKS, VERSION_CHECKS, SHARD_SET_CHECKS)
            for check in checks_for(asset, table)  # type: ignore[arg-type]
        }

    wrong, named = [], set()
    for row in _box_rows():
        if row.boxes == ("every stage",):
            expected = set.intersection(*(checks_of(s) for s in pipeline.STAGE_NAMES))
        else:
            expected = set().union(*(checks_of(box) for box in row.boxes))
        if set(row.checks) != expected:
            wrong.append(
                f"{row.boxes}: README {sorted(row.checks)}, checks table {sorted(expected)}"
            )
        named |= set(row.checks)
    assert not wrong, "\n".join(wrong)
    every_check = {c.name for t in (BATCH_CHECKS, VERSION_CHECKS, SHARD_SET_CHECKS) for c in t}
    assert named == every_check


def _layout_paths() -> list[str]:
    """Paths the README's Layout block lists: top-level entries, and entries two spaces in."""
    paths, top = [], ""
    for line in _code_block("## Layout").splitlines():
        indent = len(line) - len(line.lstrip(" "))
        name = line.split()[0] if line.strip() else ""
        if indent == 0 and name:
            top = name
            paths.append(name)
        elif indent == 2:
            paths.append(top + name)
    return paths


def test_the_readme_layout_lists_the_platform_as_it_is() -> None:
    listed = _layout_paths()
    missing = [p for p in listed if not (REPO / p).exists()]
    assert not missing, f"the README's Layout names paths that do not exist: {missing}"
    platform = REPO / "fm_assets"
    present = {
        f"fm_assets/{p.name}/" if p.is_dir() else f"fm_assets/{p.name}"
        for p in platform.iterdir()
        if p.name not in ("__init__.py", "__pycache__") and (p.is_dir() or p.suffix == ".py")
    }
    assert present - set(listed) == set(), "add these to the README's Layout"
    assert {"fm_loader/", "tests/", "bench/", "docs/", "deploy/"} <= set(listed)


def test_the_readme_names_every_table() -> None:
    import fm_assets.definitions  # noqa: F401  (imports every module that declares a table)
    from fm_assets.storage.tables import declared_tables

    text = README.read_text(encoding="utf-8")
    stages = set(pipeline.STAGE_NAMES)  # "one per stage"
    unnamed = sorted(t for t in declared_tables() if t not in stages and f"`{t}`" not in text)
    assert not unnamed, f"tables the README's 'Where state lives' does not name: {unnamed}"
