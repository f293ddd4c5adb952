"""The layering of docs/architecture.md, read from the code's imports (every import, also inside
functions): each package imports only packages of lower layers, and the loader stands alone."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO

# Lower number = lower layer. A module may import its own package and any lower layer.
LAYERS: dict[str, int] = {
    "fm_assets.settings": 0,
    "fm_assets.storage": 1,
    "fm_assets.formats": 1,
    "fm_assets.curation": 2,
    "fm_assets.contamination": 2,
    "fm_assets.registries": 3,
    "fm_assets.stages": 4,
    "fm_assets.execution": 5,
    "fm_assets.versions": 6,
    "fm_assets.shards": 7,
    "fm_assets.cards": 7,
    "fm_assets.costs": 7,
    "fm_assets.lineage_events": 7,
    "fm_assets.checks": 8,
    "fm_assets.defs": 9,
    "fm_assets.definitions": 10,
    "fm_assets.commands": 11,
}


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in `path`, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in ("fm_assets", "fm_loader"):
                for alias in node.names:
                    yield node.lineno, f"{node.module}.{alias.name}"
            else:
                yield node.lineno, node.module


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def test_every_platform_module_belongs_to_a_layer() -> None:
    unplaced = {
        _module_name(p)
        for p in _modules("fm_assets")
        if p.name != "__init__.py" or p.parent.name != "fm_assets"
    }
    unplaced = {m for m in unplaced if _package(m) not in LAYERS}
    assert not unplaced, f"add these to a layer in docs/architecture.md and LAYERS: {unplaced}"


def test_imports_point_down_the_layers() -> None:
    upward = []
    for path in _modules("fm_assets"):
        source = _module_name(path)
        if source == "fm_assets":
            continue
        for line, target in _imports(path):
            if not target.startswith("fm_assets."):
                continue
            src, dst = _package(source), _package(target)
            if src != dst and LAYERS[dst] >= LAYERS[src]:
                upward.append(f"{path.relative_to(REPO)}:{line} {src} -> {dst}")
    assert not upward, "imports that do not point down:\n" + "\n".join(upward)


def test_the_loader_imports_nothing_of_the_platform() -> None:
    reach_ins = [
        f"{path.relative_to(REPO)}:{line} imports {target}"
        for path in _modules("fm_loader")
        for line, target in _imports(path)
        if target.split(".")[0] in ("fm_assets", "dagster", "ray")
    ]
    assert not reach_ins, "\n".join(reach_ins)


def test_no_module_reaches_into_another_modules_private_names() -> None:
    private = []
    for package in ("fm_assets", "fm_loader", "tests", "bench"):
        for path in _modules(package):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    if not node.module.startswith(("fm_assets", "fm_loader")):
                        continue
                    for alias in node.names:
                        if alias.name.startswith("_"):
                            private.append(f"{path.relative_to(REPO)}:{node.lineno} {alias.name}")
    assert not private, "make these public where they live:\n" + "\n".join(private)


MAX_MODULE_LINES = 400  # past this a module mixes concerns: split it (docs/architecture.md)
MAX_TOP_MODULES = 10  # the top of the platform: settings, definitions; the rest lives in layers


@pytest.mark.parametrize("package", ["fm_assets", "fm_loader"])
def test_no_module_is_longer_than_400_lines(package: str) -> None:
    lines = {str(p.relative_to(REPO)): len(p.read_text().splitlines()) for p in _modules(package)}
    long = {path: n for path, n in lines.items() if n > MAX_MODULE_LINES}
    assert lines
    assert not long, f"split these by concern (at most {MAX_MODULE_LINES} lines): {long}"


def test_top_of_the_platform_holds_few_modules() -> None:
    modules = sorted(p.name for p in (REPO / "fm_assets").glob("*.py"))
    assert "settings.py" in modules and len(modules) <= MAX_TOP_MODULES, modules


# "issue" followed by a number: a tracker reference the reader of the code cannot follow.
TRACKER_REFERENCE = re.compile(r"\bissue\s+#?\d+", re.IGNORECASE)


def test_no_tracker_references_in_code_tests_or_docs() -> None:
    roots = ("fm_assets", "fm_loader", "tests", "bench", "docs", "deploy")
    files = [p for root in roots for p in (REPO / root).rglob("*") if p.suffix in (".py", ".md")]
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in [*files, REPO / "README.md"]
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if TRACKER_REFERENCE.search(line)
    ]
    assert files
    assert not found, "say what is meant instead:\n" + "\n".join(found)


def test_every_import_of_the_project_resolves() -> None:
    """mypy is told to ignore missing imports (for third-party stubs), so a module moved without
    its importers updated would pass it: every `fm_assets`/`fm_loader` module an import names
    must exist."""
    import importlib.util

    broken = []
    for package in ("fm_assets", "fm_loader", "tests", "bench"):
        for path in _modules(package):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    modules = [node.module]
                elif isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                else:
                    continue
                for module in modules:
                    ours = module.split(".")[0] in ("fm_assets", "fm_loader")
                    if ours and importlib.util.find_spec(module) is None:
                        broken.append(f"{path.relative_to(REPO)}:{node.lineno} {module}")
    assert not broken, "imports of modules that do not exist:\n" + "\n".join(broken)
