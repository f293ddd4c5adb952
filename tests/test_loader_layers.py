"""The loader's layering (docs/loader.md), read from its imports, every one at any depth (also
those inside functions and under TYPE_CHECKING): each package imports only lower layers."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.paths import REPO

# Lower number = lower layer. A module may import its own package and any lower layer.
LAYERS: dict[str, int] = {
    "fm_loader.settings": 0,
    "fm_loader.options": 1,
    "fm_loader.format": 1,
    "fm_loader.order": 1,
    "fm_loader.storage": 2,
    "fm_loader.samples": 2,
    "fm_loader.sources": 3,
    "fm_loader.serving": 4,
    "fm_loader.make": 5,
    "fm_loader": 5,  # __init__: the public names
}
LOADER = REPO / "fm_loader"


def _layer_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else parts[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "fm_loader":  # `from fm_loader import name`: the name's module
                found += [(node.lineno, f"fm_loader.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def test_every_loader_module_belongs_to_a_layer() -> None:
    modules = {_module(p) for p in LOADER.rglob("*.py")}
    assert modules
    assert not {m for m in modules if _layer_of(m) not in LAYERS}, "add them to docs/loader.md"


def test_loader_imports_point_down_its_layers() -> None:
    wrong = []
    for path in sorted(LOADER.rglob("*.py")):
        source = _layer_of(_module(path))
        for line, target in _imports(path):
            if not target.startswith("fm_loader.") or source == "fm_loader":
                continue
            destination = _layer_of(target)
            if destination == "fm_loader.__init__":
                destination = "fm_loader"
            if destination != source and LAYERS[destination] >= LAYERS[source]:
                wrong.append(f"{path.relative_to(REPO)}:{line} {source} -> {destination}")
    assert not wrong, "imports that do not point down the loader's layers:\n" + "\n".join(wrong)
