"""Every path that reads a dataset version's rows goes through `fm_assets.versions.reader`, the
one reader that drops the documents the version leaves out (revoked ones, copies kept in another
data namespace).

Read from the code (every module of the platform and of bench/): a module that touches a
version's pinned snapshots, its exclusions or its batches as a row filter, outside the reader
and the few modules listed below with the reason they may, fails this test. A new export,
card, scan or lineage path that reads a version by hand is a leak of revoked documents waiting
to happen: route it through `version_rows` / `version_documents` instead.

What a reader returns is checked by the end-to-end revocation test
(`tests/test_provenance_e2e.py::test_revocation_end_to_end`), which exports every table of a
replacement version and finds the revoked document in none.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import REPO

READER = "fm_assets/versions/reader.py"

# Modules that may touch a version's snapshot ids, and why none of them reads its documents.
MAY_TOUCH_SNAPSHOTS: dict[str, str] = {
    READER: "the reader",
    "fm_assets/versions/dataset_version.py": "cuts a version: records and tags its snapshots",
    "fm_assets/versions/revocation.py": "a replacement version shares its base's snapshots",
    "fm_assets/checks/integrity.py": "verifies the data files' checksums; reads no rows",
    "fm_assets/shards/trace.py": "walks snapshot ancestry for code versions; reads no rows",
    "fm_assets/defs/versions.py": "shows the snapshot ids as materialization metadata",
    "fm_assets/defs/openlineage.py": "names the tables a version tags in lineage events; no rows",
    "bench/reliability/corruption.py": "lists the files a version stands on to damage them",
}
# Modules that may select rows by batch outside the reader, and why none of them reads a version.
MAY_SELECT_BY_BATCH: dict[str, str] = {
    "fm_assets/shards/purge_plan.py": "every row of a revoked batch, excluded ones too, to purge",
}
# Modules that may read `version_exclusions` directly, and why.
MAY_READ_EXCLUSIONS: dict[str, str] = {
    READER: "the reader",
    "fm_assets/versions/membership.py": "owns the table",
    "fm_assets/versions/revocation.py": "copies a base's exclusions into its replacement",
    "fm_assets/shards/revision.py": "names the revoked documents whose shards it rewrites",
}
EXCLUSION_READERS = {"excluded_documents", "exclusions", "revoked_exclusions"}


def _sources() -> list[Path]:
    return sorted(
        p for package in ("fm_assets", "fm_loader", "bench") for p in (REPO / package).rglob("*.py")
    )


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _attribute_uses(tree: ast.AST, name: str) -> Iterator[int]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == name:
            yield node.lineno


def _batch_filters_over_versions(tree: ast.AST) -> Iterator[int]:
    """Lines of `where_in("batch_id", ... x.batches ...)`: selecting a version's rows by hand."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and len(node.args) >= 2):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        if name != "where_in" or not (
            isinstance(first, ast.Constant) and first.value == "batch_id"
        ):
            continue
        if any(
            isinstance(n, ast.Attribute) and n.attr == "batches" for n in ast.walk(node.args[1])
        ):
            yield node.lineno


def _exclusion_calls(tree: ast.AST) -> Iterator[int]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "fm_assets.versions.membership"
            and any(alias.name in EXCLUSION_READERS for alias in node.names)
        ):
            yield node.lineno


def test_the_scan_finds_what_it_looks_for() -> None:
    """The detectors catch the shapes a hand-made version read takes (else the test below
    could pass on a leak)."""
    leak = ast.parse(
        "from fm_assets.versions.membership import excluded_documents\n"
        "rows = catalog.read_table(s, t, catalog.where_in('batch_id', list(version.batches)),\n"
        "                          version.snapshot_ids[ns][t])\n"
    )
    assert list(_attribute_uses(leak, "snapshot_ids")) == [3]
    assert list(_batch_filters_over_versions(leak)) == [2]
    assert list(_exclusion_calls(leak)) == [1]


@pytest.mark.parametrize("path", _sources(), ids=_relative)
def test_versions_are_read_through_the_reader(path: Path) -> None:
    name = _relative(path)
    tree = ast.parse(path.read_text(), filename=name)
    found = []
    if name not in MAY_TOUCH_SNAPSHOTS:
        found += [
            f"line {n}: a version's snapshot_ids" for n in _attribute_uses(tree, "snapshot_ids")
        ]
    if name != READER and name not in MAY_SELECT_BY_BATCH:
        found += [
            f"line {n}: rows selected by a version's batches"
            for n in _batch_filters_over_versions(tree)
        ]
    if name not in MAY_READ_EXCLUSIONS:
        found += [f"line {n}: version exclusions read directly" for n in _exclusion_calls(tree)]
    assert not found, (
        f"{name} reads a dataset version by hand ({'; '.join(found)}): read it through "
        "fm_assets.versions.reader (version_rows, version_documents, version_text_documents), "
        "which leaves out the documents the version excludes"
    )
