"""Every speed ratio or rate the project cites outside its benchmark tables is listed in
`bench/CLAIMS.md` with the script and table that measure it, and no row there is stale."""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import REPO

CLAIMS = REPO / "bench" / "CLAIMS.md"
# A ratio ("7.3x", "2×", not "14 × 8" or a format spec like ":02x") or a rate ("25k samples/s").
FIGURE = re.compile(
    r"(?<![\w.:])\d+(?:,\d{3})*(?:\.\d+)?\s?"
    r"(?:[×x](?![\w{]|\s?\d)|k?\s?(?:docs|samples|pages|images|tokens|documents|rows|MB|GB)/s)"
)


def _cited_files() -> list[Path]:
    roots = [REPO / "docs", REPO / "fm_assets", REPO / "fm_loader"]
    files = [REPO / "README.md", REPO / "pyproject.toml"]
    for root in roots:
        files += sorted(p for p in root.rglob("*") if p.suffix in (".md", ".py"))
    return files


def _claims() -> set[tuple[str, str]]:
    """(figure, file) of every row of the claims table."""
    rows = set()
    for line in CLAIMS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[1].startswith("`"):
            rows.add((cells[0], cells[1].strip("`")))
    return rows


def test_every_cited_figure_is_a_listed_claim() -> None:
    listed = _claims()
    unlisted = [
        f"{path.relative_to(REPO)}:{n}: {match.group(0)!r}"
        for path in _cited_files()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for match in FIGURE.finditer(line)
        if (match.group(0), str(path.relative_to(REPO))) not in listed
    ]
    assert not unlisted, (
        "figures cited without a row in bench/CLAIMS.md (add the script, table and commit that "
        "measure each, or drop the figure):\n" + "\n".join(unlisted)
    )


def test_every_claim_is_still_cited_and_its_script_and_table_exist() -> None:
    rows = _claims()
    assert len(rows) >= 5, "the claims table did not parse"
    for line in CLAIMS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or not cells[1].startswith("`"):
            continue
        figure, cited, script, table = cells[0], cells[1].strip("`"), cells[2], cells[3]
        assert figure in (REPO / cited).read_text(), f"{cited} no longer cites {figure}"
        module = script.strip("`").removeprefix("python -m ").replace(".", "/")
        assert (REPO / f"{module}.py").exists() or (REPO / module).is_dir(), script
        assert (REPO / table.strip("`")).exists(), table
